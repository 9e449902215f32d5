"""The linear map between activations on a live tape: J v and J^T u, batched and vectorized.

For a watched source x of shape (B, *S) and a target y of shape (B, *T) recorded on one
persistent tape, J is d y / d x. `vjp(u) = J^T u` is one backward pass (`tape.gradient` with
`output_gradients=u`); `jvp(v) = J v` is the transpose of that linear function, taken by
differentiating it once more with respect to u (the double-VJP trick), so no second forward
pass is needed. Everything works on flattened rows, (B, m) and (B, n), with m = prod(T) and
n = prod(S).

When to[i] depends on other samples' from[j] (BatchNorm in training mode), the per-sample
Jacobian is the diagonal block J_ii: the `blocks` products then mask the cotangent to one
sample at a time (vectorized over the batch) and keep that sample's part of the result.

The products through the map, as TensorFlow ops (one batch of `inspect`, or the compiled step
over `--data`), with random draws stateless from the batch's seed:

- Frobenius: K random sign vectors v_k (Hutchinson: E ||J_i^T v||^2 = ||J_i||_F^2), the K
  products J^T v_k vectorized, reduced per sample and unit of the source's last axis.
- Spectral: Lanczos steps (STEPS for the estimate, at most n; each one J v and one J^T u) on
  every J_i^T J_i at once, from a random start. The largest Ritz value is the largest
  ||J_i q||^2 over the unit vectors q of the Krylov subspace, so its square root is a lower
  bound of ||J_i||_2 (up to float32 rounding) whatever the spectrum, close to it when the
  largest singular value stands apart from the next; the residual bound, relative to the
  Ritz value, says whether it has settled (below SETTLED).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from layergrad.core.tf_runtime import tf
from layergrad.core.tf_types import GradientTape, Tensor, TensorTree

STEPS = 16  # Lanczos steps of the estimated spectral norm: 2 * STEPS products with J or J^T
SETTLED = 1e-3  # relative residual bound of the largest Ritz value under which it has settled
BREAKDOWN = 1e-5  # a new direction this small, relative to the map's scale, ends the Krylov space
SIGNS, START, MIXING = 1, 2, 3  # the streams of the random draws


class LinearMap:
    """J = d targets / d sources between tensors of one persistent tape, flattened per sample
    (several targets: their entries side by side; several sources: `vjps` keeps them apart).

    Attributes:
        batch: B, the batch size (axis 0 of every tensor).
        m, n: entries per sample of the targets and of the sources.
        units: size of the first source's last axis (1 for a source with only the batch axis).
        independent: whether to[i] depends on from[i] alone; `blocks` uses it.
    """

    def __init__(
        self, tape: GradientTape, source: Tensor | list[Tensor], target: Tensor | list[Tensor]
    ) -> None:
        self.tape = tape
        self.sources, self.targets = tf.nest.flatten(source), tf.nest.flatten(target)
        self.batch = int(self.targets[0].shape[0])
        self.n = sum(_width(s) for s in self.sources)
        self.m = sum(_width(t) for t in self.targets)
        rank = self.sources[0].shape.rank if self.sources else 0
        self.units = int(self.sources[0].shape[-1]) if rank > 1 else 1
        self.independent = True

    def vjps(self, u: Tensor) -> list[Tensor]:
        """(B, m) -> per source (B, n_k): J^T u over the whole batch (all blocks, float32)."""
        cotangents, start = [], 0
        for target in self.targets:
            piece = u[:, start : start + _width(target)]
            cotangents.append(tf.reshape(tf.cast(piece, target.dtype), tf.shape(target)))
            start += _width(target)
        grads = self.tape.gradient(
            self.targets,
            self.sources,
            output_gradients=cotangents,
            unconnected_gradients=tf.UnconnectedGradients.ZERO,
        )
        return [tf.reshape(tf.cast(g, tf.float32), [self.batch, -1]) for g in grads]

    def vjp(self, u: Tensor) -> Tensor:
        """(B, m) -> (B, n): J^T u over the whole batch (all blocks, float32)."""
        parts = self.vjps(u)
        return parts[0] if len(parts) == 1 else tf.concat(parts, axis=1)

    def jvp(self, v: Tensor) -> Tensor:
        """(B, n) -> (B, m): J v over the whole batch, as the transpose of `vjp`."""
        dummy = tf.zeros([self.batch, self.m], tf.float32)  # vjp is linear: any value will do
        with tf.GradientTape() as inner:
            inner.watch(dummy)
            back = self.vjp(dummy)
        out = inner.gradient(back, dummy, output_gradients=tf.cast(v, tf.float32))
        return tf.zeros_like(dummy) if out is None else out

    def blocks(self, product: Callable[[Tensor], TensorTree], rows: Tensor) -> TensorTree:
        """`product` (`vjps`, `vjp` or `jvp`) of the diagonal blocks: row i (of each tensor it
        returns) is J_ii^T u_i or J_ii v_i, from `rows` masked to one sample at a time."""
        if self.independent:
            return product(rows)

        def one(i: Tensor) -> TensorTree:
            mask = tf.one_hot(i, self.batch, dtype=rows.dtype)[:, None]
            return tf.nest.map_structure(lambda out: tf.gather(out, i), product(rows * mask))

        return tf.vectorized_map(one, tf.range(self.batch), warn=False)

    def mixing(self, seed: Tensor | int, tolerance: float = 1e-6) -> Tensor:
        """Per source, whether a VJP from sample 0's outputs lands on other samples' inputs,
        as a boolean tensor (so a tf.function can run it).

        One backward pass with a random normal cotangent (drawn from `seed`) on sample 0 only;
        in a batch-independent model every other sample's gradient is exactly zero
        (`tolerance` is relative to the largest entry of sample 0's).
        """
        if self.batch < 2:
            return tf.zeros([len(self.sources)], tf.bool)
        first = tf.random.stateless_normal([1, self.m], seed_pair(seed, MIXING))
        flags = []
        for grad in self.vjps(tf.pad(first, [[0, self.batch - 1], [0, 0]])):
            size = tf.cast(tf.abs(grad), tf.float64)
            own, others = tf.reduce_max(size[0]), tf.reduce_max(size[1:])
            flags.append(tf.where(own > 0, others > tolerance * own, others > 0))
        return tf.stack(flags)


def seed_pair(seed: Tensor | int, stream: int) -> Tensor:
    """The stateless seed of one stream of draws from a batch's (int64) seed."""
    return tf.stack([tf.cast(seed, tf.int64), tf.constant(stream, tf.int64)])


def _width(tensor: Tensor) -> int:
    """Entries per sample."""
    return math.prod(int(d) for d in tensor.shape[1:])


def probe_norms(lin: LinearMap, probes: int, seed: Tensor, chunk: int) -> tuple[Tensor, Tensor]:
    """The products J_i^T v_ik for K random sign vectors v_ik, `chunk` probes vectorized at a
    time, reduced to `squared[k, i]` = ||J_i^T v_ik||^2 and `units[i, u]`, the mean over k of
    the squared norm of J_i^T v_ik's entries for unit u (float64)."""

    def one(v: Tensor) -> Tensor:
        back = tf.reshape(lin.blocks(lin.vjp, v), [lin.batch, -1, lin.units])
        return tf.reduce_sum(tf.square(back), axis=1)  # (B, units)

    parts = []
    for start in range(0, probes, chunk):
        size = min(chunk, probes - start)
        key = tf.random.experimental.stateless_fold_in(seed_pair(seed, SIGNS), start)
        parts.append(tf.vectorized_map(one, signs([size, lin.batch, lin.m], key), warn=False))
    per_unit = tf.cast(parts[0] if len(parts) == 1 else tf.concat(parts, axis=0), tf.float64)
    return tf.reduce_sum(per_unit, axis=2), tf.reduce_mean(per_unit, axis=0)


def signs(shape: list[int], key: Tensor) -> Tensor:
    """Random +-1.0 (float32) of `shape`: 32 signs from the bits of each random int32."""
    *outer, last = shape
    words = tf.random.stateless_uniform(
        [*outer, -(-last // 32)], key, minval=None, maxval=None, dtype=tf.int32
    )
    bits = tf.bitwise.bitwise_and(tf.bitwise.right_shift(words[..., None], tf.range(32)), 1)
    flat = tf.reshape(bits, [*outer, -1])[..., :last]
    return tf.cast(2 * flat - 1, tf.float32)


def spectral_estimate(lin: LinearMap, seed: Tensor, steps: int = STEPS) -> tuple[Tensor, Tensor]:
    """`steps` Lanczos steps (at most n) on every J_i^T J_i through the model (J v by a JVP,
    J^T u by a VJP), from random normal start vectors."""
    start = tf.random.stateless_normal([lin.batch, lin.n], seed_pair(seed, START))

    def gram(v: Tensor) -> Tensor:
        return lin.blocks(lin.vjp, lin.blocks(lin.jvp, v))

    return lanczos_steps(gram, start, min(steps, lin.n))  # past n, nothing is left


def lanczos_steps(
    gram: Callable[[Tensor], Tensor], start: Tensor, steps: int
) -> tuple[Tensor, Tensor]:
    """`steps` Lanczos steps of a batch of symmetric positive semi-definite maps from the
    (B, n) `start` rows; per sample, the square root of the largest Ritz value (a lower bound
    of ||J_i||_2) and the residual bound relative to that Ritz value.

    The three-term recurrence, each new direction orthogonalized (twice) against the two
    before it only: no basis is kept, so a step costs one `gram` and a few (B, n) operations.
    Orthogonality to older directions fades once a Ritz value has converged, which delays
    the others but not the largest (Paige: in floating point the Ritz values stay within a
    small multiple of the rounding error of the spectrum's interval). A direction whose norm
    falls below BREAKDOWN of the largest diagonal entry so far ends the Krylov space of that
    sample (an invariant subspace: its Ritz values are then exact); its later steps add zeros.

    Example:
        >>> import tensorflow as tf
        >>> a = tf.constant([[[3.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 0.5]]])
        >>> step = lambda v: tf.linalg.matvec(a, tf.linalg.matvec(a, v), transpose_a=True)
        >>> sigma, residual = lanczos_steps(step, tf.ones([1, 3]), 3)
        >>> round(float(sigma[0]), 5), bool(residual[0] < 1e-5)
        (3.0, True)
    """
    batch = int(start.shape[0])

    def unit(w: Tensor, norm: Tensor) -> Tensor:
        return tf.where(norm[:, None] > 0, w / tf.where(norm > 0, norm, 1.0)[:, None], 0.0)

    def dot(a: Tensor, b: Tensor) -> Tensor:
        return tf.reduce_sum(a * b, axis=1, keepdims=True)

    def step(k: Tensor, *state: Tensor) -> tuple[Tensor, ...]:
        before, v, beta, scale, alphas, betas = state
        w = tf.convert_to_tensor(gram(v)) - beta[:, None] * before
        alpha = dot(w, v)[:, 0]
        w -= alpha[:, None] * v
        for _ in range(2):  # against the last two directions again (rounding)
            w -= dot(w, v) * v + dot(w, before) * before
        scale = tf.maximum(scale, tf.abs(alpha))
        norm = tf.norm(w, axis=1)
        norm = tf.where(norm > BREAKDOWN * scale, norm, 0.0)
        alphas = tf.tensor_scatter_nd_update(alphas, [[k]], alpha[None])
        betas = tf.tensor_scatter_nd_update(betas, [[k]], norm[None])
        return k + 1, v, unit(w, norm), norm, scale, alphas, betas

    first = unit(start, tf.norm(start, axis=1))
    zeros = tf.zeros([steps, batch], first.dtype)
    none = tf.zeros([batch], first.dtype)
    state = (tf.constant(0), tf.zeros_like(first), first, none, none, zeros, zeros)
    *_, alphas, betas = tf.while_loop(lambda k, *_: k < steps, step, state)
    diag = tf.cast(tf.transpose(alphas), tf.float64)  # (B, steps)
    off = tf.cast(tf.transpose(betas[:-1]), tf.float64)
    tri = tf.linalg.diag(diag) + tf.linalg.diag(off, k=1) + tf.linalg.diag(off, k=-1)
    values, vectors = tf.linalg.eigh(tri)
    top = tf.maximum(values[:, -1], 0.0)
    bound = tf.abs(tf.cast(betas[-1], tf.float64) * vectors[:, -1, -1])
    residual = tf.where(top > 0, bound / tf.where(top > 0, top, 1.0), 0.0)
    return tf.sqrt(top), residual
