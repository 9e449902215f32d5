"""The estimate method's products for one batch, as TensorFlow ops to run inside a tf.function.

- Frobenius: K random sign vectors v_k (Hutchinson: E ||J_i^T v||^2 = ||J_i||_F^2), the K
  products J^T v_k vectorized; per sample and unit of the source's last axis, the squared
  norms of the products' entries for that unit.
- Spectral: a fixed number of Lanczos steps (STEPS, at most n; each one J v and one J^T u)
  on every J_i^T J_i at once, from a random start. The largest Ritz value of a sample's
  tridiagonal matrix is the largest ||J_i q||^2 over the unit vectors q of its Krylov
  subspace, so its square root is a lower bound of ||J_i||_2 (up to float32 rounding)
  whatever the spectrum, close to it when the largest singular value stands apart from the
  next. Each sample's residual bound, relative to the Ritz value, says whether it has
  settled (below SETTLED).

Random draws are stateless, from the batch's seed, so they are the same in every
tf.function that runs these ops (one batch of `inspect`, or the compiled step over `--data`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from layergrad.core.tf_runtime import tf
from layergrad.core.tf_types import Tensor
from layergrad.engine.linear_map import LinearMap, seed_pair

STEPS = 16  # Lanczos steps of the estimated spectral norm: 2 * STEPS products with J or J^T
SETTLED = 1e-3  # relative residual bound of the largest Ritz value under which it has settled
BREAKDOWN = 1e-5  # a new direction this small, relative to the map's scale, ends the Krylov space
SIGNS, START = 1, 2  # the streams of the random draws


class SpectralEstimate(NamedTuple):
    """Per sample: the estimated ||J_i||_2 (a lower bound) and the relative residual bound of
    the Ritz value it comes from (a tf.function may return it)."""

    sigma: Tensor
    residual: Tensor


def steps_for(n: int, steps: int = STEPS) -> int:
    """The Lanczos steps for J_i with n columns (past n, nothing is left)."""
    return min(steps, n)


class ProbeNorms(NamedTuple):
    """What the K probes give: `squared[k, i]` = ||J_i^T v_ik||^2, and `units[i, u]` the mean
    over k of the squared norm of J_i^T v_ik's entries for unit u (float64)."""

    squared: Tensor
    units: Tensor


def probe_norms(lin: LinearMap, probes: int, seed: Tensor, chunk: int) -> ProbeNorms:
    """The products J_i^T v_ik for K random sign vectors v_ik, `chunk` probes vectorized at a
    time, reduced to their squared norms (per probe) and per-unit squared norms (mean)."""

    def one(v: Tensor) -> Tensor:
        back = tf.reshape(lin.vjp_blocks(v), [lin.batch, -1, lin.units])
        return tf.reduce_sum(tf.square(back), axis=1)  # (B, units)

    parts = []
    for start in range(0, probes, chunk):
        size = min(chunk, probes - start)
        key = tf.random.experimental.stateless_fold_in(seed_pair(seed, SIGNS), start)
        parts.append(tf.vectorized_map(one, signs([size, lin.batch, lin.m], key), warn=False))
    per_unit = tf.cast(parts[0] if len(parts) == 1 else tf.concat(parts, axis=0), tf.float64)
    return ProbeNorms(tf.reduce_sum(per_unit, axis=2), tf.reduce_mean(per_unit, axis=0))


def signs(shape: list[int], key: Tensor) -> Tensor:
    """Random +-1.0 (float32) of `shape`: 32 signs from the bits of each random int32."""
    *outer, last = shape
    words = tf.random.stateless_uniform(
        [*outer, -(-last // 32)], key, minval=None, maxval=None, dtype=tf.int32
    )
    bits = tf.bitwise.bitwise_and(tf.bitwise.right_shift(words[..., None], tf.range(32)), 1)
    flat = tf.reshape(bits, [*outer, -1])[..., :last]
    return tf.cast(2 * flat - 1, tf.float32)


def spectral_estimate(lin: LinearMap, seed: Tensor, steps: int = STEPS) -> SpectralEstimate:
    """`steps_for(n, steps)` Lanczos steps on every J_i^T J_i through the model (J v by a JVP,
    J^T u by a VJP), from random normal start vectors."""
    start = tf.random.stateless_normal([lin.batch, lin.n], seed_pair(seed, START))

    def gram(v: Tensor) -> Tensor:
        return lin.vjp_blocks(lin.jvp_blocks(v))

    return lanczos_steps(gram, start, steps_for(lin.n, steps))


def lanczos_steps(gram: Callable[[Tensor], Tensor], start: Tensor, steps: int) -> SpectralEstimate:
    """`steps` Lanczos steps of a batch of symmetric positive semi-definite maps from the
    (B, n) `start` rows; the square root of each largest Ritz value, and its residual bound.

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
        >>> found = lanczos_steps(step, tf.ones([1, 3]), 3)
        >>> round(float(found.sigma[0]), 5), bool(found.residual[0] < 1e-5)
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
    return SpectralEstimate(tf.sqrt(top), residual)
