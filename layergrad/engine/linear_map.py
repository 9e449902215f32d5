"""The linear map between two activations on a live tape: J v and J^T u, batched and vectorized.

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

from layergrad.core.tf_runtime import tf
from layergrad.core.tf_types import GradientTape, Tensor

MIXING = 3  # the stream of the random cotangent of the batch-independence check


class LinearMap:
    """J = d target / d source between two tensors of one persistent tape, flattened per sample.

    Attributes:
        batch: B, the batch size (axis 0 of both tensors).
        m, n: entries per sample of the target and of the source.
        units: size of the source's last axis (1 for a source with only the batch axis).
        independent: whether to[i] depends on from[i] alone; the `*_blocks` methods use it.
    """

    def __init__(self, tape: GradientTape, source: Tensor, target: Tensor) -> None:
        self.tape, self.source, self.target = tape, source, target
        self.batch = int(source.shape[0])
        self.n = math.prod(int(d) for d in source.shape[1:])
        self.m = math.prod(int(d) for d in target.shape[1:])
        self.units = int(source.shape[-1]) if source.shape.rank > 1 else 1
        self.independent = True

    def vjp(self, u: Tensor) -> Tensor:
        """(B, m) -> (B, n): J^T u over the whole batch (all blocks, float32)."""
        cotangent = tf.reshape(tf.cast(u, self.target.dtype), tf.shape(self.target))
        grad = self.tape.gradient(
            self.target,
            self.source,
            output_gradients=cotangent,
            unconnected_gradients=tf.UnconnectedGradients.ZERO,
        )
        return tf.reshape(tf.cast(grad, tf.float32), [self.batch, self.n])

    def jvp(self, v: Tensor) -> Tensor:
        """(B, n) -> (B, m): J v over the whole batch, as the transpose of `vjp`."""
        dummy = tf.zeros([self.batch, self.m], tf.float32)  # vjp is linear: any value will do
        with tf.GradientTape() as inner:
            inner.watch(dummy)
            back = self.vjp(dummy)
        out = inner.gradient(back, dummy, output_gradients=tf.cast(v, tf.float32))
        return tf.zeros_like(dummy) if out is None else out

    def vjp_blocks(self, u: Tensor) -> Tensor:
        """(B, m) -> (B, n): row i is J_ii^T u_i (the diagonal blocks)."""
        return self.vjp(u) if self.independent else self._per_sample(self.vjp, u)

    def jvp_blocks(self, v: Tensor) -> Tensor:
        """(B, n) -> (B, m): row i is J_ii v_i (the diagonal blocks)."""
        return self.jvp(v) if self.independent else self._per_sample(self.jvp, v)

    def _per_sample(self, product: Tensor, rows: Tensor) -> Tensor:
        """Apply `product` to `rows` masked to one sample at a time; keep that sample's row."""

        def one(i: Tensor) -> Tensor:
            mask = tf.one_hot(i, self.batch, dtype=tf.float32)[:, None]
            return tf.gather(product(rows * mask), i)

        return tf.vectorized_map(one, tf.range(self.batch), warn=False)

    def mixing(self, seed: Tensor | int, tolerance: float = 1e-6) -> Tensor:
        """True when a VJP from sample 0's output lands on other samples' inputs, as a boolean
        tensor (so a tf.function can run it).

        One backward pass with a random normal cotangent (drawn from `seed`) on sample 0 only;
        in a batch-independent model every other sample's gradient is exactly zero
        (`tolerance` is relative to the largest entry of sample 0's).
        """
        if self.batch < 2:
            return tf.constant(False)
        first = tf.random.stateless_normal([1, self.m], seed_pair(seed, MIXING))
        grad = tf.cast(tf.abs(self.vjp(tf.pad(first, [[0, self.batch - 1], [0, 0]]))), tf.float64)
        own, others = tf.reduce_max(grad[0]), tf.reduce_max(grad[1:])
        return tf.where(own > 0, others > tolerance * own, others > 0)


def seed_pair(seed: Tensor | int, stream: int) -> Tensor:
    """The stateless seed of one stream of draws from a batch's (int64) seed."""
    return tf.stack([tf.cast(seed, tf.int64), tf.constant(stream, tf.int64)])
