"""The default target of `scan` and `check`: a fixed random projection of the model's outputs.

The target is the sum over every floating-point output o (k-th in output order) of
`reduce(o * R_k)`, where each number of R_k is standard normal and depends only on the seed,
k, the index of the sample in the data and the position of the number in the sample. Not on
the batch the sample arrives in: a data set streamed in batches of any size gets exactly the
target of one batch holding it all. A plain sum of the outputs would not do: a softmax sums to
1 for every sample, so the gradient of that sum is zero everywhere.

The numbers come from hashing (seed, k, sample, position) with `lowbias32` (a 32-bit integer
hash) into two uniform numbers, turned into one normal number by Box-Muller:

    h(x)   = lowbias32(x), all arithmetic modulo 2**32
    base   = h(h(h(seed) ^ k) ^ sample)
    u1     = ((h(base ^ h(2 * j)) >> 8) + 1) / 2**24          (in (0, 1])
    u2     =  (h(base ^ h(2 * j + 1)) >> 8)  / 2**24          (in [0, 1))
    R[j]   = sqrt(-2 ln u1) * cos(2 pi u2)                      (j: position in the sample)

Random labels (`scan --wrt weights` and `check` when the data has none) come from the same
numbers with seed + 1, per sample too, so a batch gets the same labels as `--input` and in a
data set, on any number of replicas: `u2` for a uniform label, `R` for a normal one, and
`floor(u2 * n)` for a class id or a bit (n = 2) at each position of the label.
"""

from __future__ import annotations

from collections.abc import Callable

from layergrad.core.tf_runtime import tf
from layergrad.core.tf_types import Tensor

MASK = 0xFFFFFFFF


def _hash(x: Tensor) -> Tensor:
    """lowbias32 on a uint32 tensor (wrapping arithmetic)."""
    u32 = tf.uint32
    x = tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, tf.constant(16, u32)))
    x = x * tf.constant(0x7FEB352D, u32)
    x = tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, tf.constant(15, u32)))
    x = x * tf.constant(0x846CA68B, u32)
    return tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, tf.constant(16, u32)))


def normals(seed: int, output: int, samples: Tensor, width: Tensor) -> Tensor:
    """R for `samples` (global sample indices, shape (b,)): float32 of shape (b, width)."""
    u1, u2 = uniforms(seed, output, samples, width)
    return tf.sqrt(-2.0 * tf.math.log(u1)) * tf.cos(2.0 * 3.141592653589793 * u2)


def uniforms(seed: int, output: int, samples: Tensor, width: Tensor) -> tuple[Tensor, Tensor]:
    """(u1, u2) for `samples`: float32 of shape (b, width), in (0, 1] and [0, 1)."""
    u32 = tf.uint32
    head = _hash(tf.constant(seed & MASK, u32))
    head = _hash(tf.bitwise.bitwise_xor(head, tf.constant(output & MASK, u32)))
    base = _hash(tf.bitwise.bitwise_xor(head, tf.cast(samples, u32)))[:, None]
    positions = tf.range(tf.cast(width, tf.int64), dtype=tf.int64)
    first = _hash(tf.cast(2 * positions, u32))[None, :]
    second = _hash(tf.cast(2 * positions + 1, u32))[None, :]
    scale = tf.constant(1.0 / (1 << 24), tf.float32)
    shift = tf.constant(8, u32)
    u1 = (tf.cast(tf.bitwise.right_shift(_hash(base ^ first), shift), tf.float32) + 1.0) * scale
    u2 = tf.cast(tf.bitwise.right_shift(_hash(base ^ second), shift), tf.float32) * scale
    return u1, u2


def project(
    outputs: Tensor, samples: Tensor, seed: int, reduce: Callable[[Tensor], Tensor]
) -> Tensor:
    """The projection target of the model's `outputs` for the samples with indices `samples`,
    as a float32 scalar; None when no output is floating-point."""
    terms = []
    for k, out in enumerate(tf.nest.flatten(outputs)):
        if not getattr(getattr(out, "dtype", None), "is_floating", False):
            continue
        flat = tf.reshape(out, [tf.shape(out)[0], -1])
        r = tf.cast(normals(seed, k, samples, tf.shape(flat)[1]), out.dtype)
        terms.append(tf.cast(reduce(tf.reshape(flat * r, tf.shape(out))), tf.float32))
    return tf.add_n(terms) if terms else None
