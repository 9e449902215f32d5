"""The linear map between activations on a live tape: J v and J^T u, batched and vectorized.

For a watched source x of shape (B, *S) and a target y of shape (B, *T) recorded on one
persistent tape, J is d y / d x. `vjp(u) = J^T u` is one backward pass (`tape.gradient` with
`output_gradients=u`); `jvp(v) = J v` is the transpose of that linear function, taken by
differentiating it once more with respect to u (the double-VJP trick), so no second forward
pass is needed. Everything works on flattened rows, (B, m) and (B, n), with m = prod(T) and
n = prod(S).

When to[i] depends on other samples' from[j] (BatchNorm in training mode), the per-sample
Jacobian is the diagonal block J_ii: the `*_blocks` products then mask the cotangent to one
sample at a time (vectorized over the batch) and keep that sample's part of the result.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from layergrad.core.tf_runtime import tf
from layergrad.core.tf_types import GradientTape, Tensor, TensorTree

MIXING = 3  # the stream of the random cotangent of the batch-independence check


class LinearMap:
    """J = d targets / d sources between tensors of one persistent tape, flattened per sample
    (several targets: their entries side by side; several sources: `vjps` keeps them apart).

    Attributes:
        batch: B, the batch size (axis 0 of every tensor).
        m, n: entries per sample of the targets and of the sources.
        units: size of the first source's last axis (1 for a source with only the batch axis).
        independent: whether to[i] depends on from[i] alone; the `*_blocks` methods use it.
    """

    def __init__(
        self, tape: GradientTape, source: Tensor | list[Tensor], target: Tensor | list[Tensor]
    ) -> None:
        self.tape = tape
        self.sources, self.targets = tf.nest.flatten(source), tf.nest.flatten(target)
        self.batch = int(self.sources[0].shape[0])
        self.n = sum(_width(s) for s in self.sources)
        self.m = sum(_width(t) for t in self.targets)
        first = self.sources[0]
        self.units = int(first.shape[-1]) if first.shape.rank > 1 else 1
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

    def vjps_blocks(self, u: Tensor) -> list[Tensor]:
        """`vjps` of the diagonal blocks: row i of each is J_ii^T u_i."""
        return self.vjps(u) if self.independent else self._per_sample(self.vjps, u)

    def vjp_blocks(self, u: Tensor) -> Tensor:
        """(B, m) -> (B, n): row i is J_ii^T u_i (the diagonal blocks)."""
        return self.vjp(u) if self.independent else self._per_sample(self.vjp, u)

    def jvp_blocks(self, v: Tensor) -> Tensor:
        """(B, n) -> (B, m): row i is J_ii v_i (the diagonal blocks)."""
        return self.jvp(v) if self.independent else self._per_sample(self.jvp, v)

    def _per_sample(self, product: Callable[[Tensor], TensorTree], rows: Tensor) -> TensorTree:
        """Apply `product` to `rows` masked to one sample at a time; keep that sample's row
        (of each tensor `product` returns)."""

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
