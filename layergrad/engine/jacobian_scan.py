"""Per-sample Jacobian Frobenius norms of one target with respect to every layer (`scan`).

For each watched activation a of a live trace and each sample i, ||d target[i] / d a[i]||_F.
One backward pass from the target with cotangent v gives J_a^T v at every layer at once, so
K random-sign cotangents (Hutchinson: E ||J^T v||^2 = ||J||_F^2) cost K backward passes in all,
vectorized, not K per layer. When the target has at most as many entries per sample as there
would be probes (a classifier's logits), its m one-hot rows give the norms exactly, for fewer
passes than the estimate.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from layergrad.core.errors import InputError
from layergrad.core.results import FrobeniusNorms
from layergrad.core.tf_runtime import tf
from layergrad.core.tf_types import GradientTape, Tensor
from layergrad.engine.jacobian import (
    CHUNK_ENTRIES,
    DEFAULT_PROBES,
    JacobianOptions,
    estimated_frobenius,
    frobenius,
)
from layergrad.engine.trace import Replay
from layergrad.model.layer_refs import ref_of

SCAN_EXACT_ROWS = 4096  # --exact: at most this many target entries per sample (backward passes)

Key = tuple[str, int, int]  # (layer path, call, output)


def scan_frobenius(
    live: Replay, options: JacobianOptions
) -> tuple[dict[Key, FrobeniusNorms], tuple[str, ...]]:
    """Per-sample Frobenius norms of d target / d each watched activation, and notes.

    Raises:
        InputError: `--exact` with a target of more than SCAN_EXACT_ROWS entries per sample.
    """
    ends = live.ends
    if not ends:
        return {}, ()
    batch = int(ends[0].shape[0]) if ends[0].shape.rank else 0
    if not batch or any(e.shape.rank == 0 or int(e.shape[0]) != batch for e in ends):
        return {}, ("no per-sample Jacobian norms: the target has no batch axis",)
    m = sum(math.prod(int(d) for d in e.shape[1:]) for e in ends)
    watched = [
        ((site.path, site.call, k), t)
        for site, flat, _ in live.records
        for k, t in enumerate(flat)
        if _batched(t, batch)
    ]
    exact = _is_exact(m, options)
    count = m if exact else (options.probes or DEFAULT_PROBES)
    products = _Products(live.tape, ends, [t for _, t in watched], batch, m)
    flags = products.mixing(options.seed)
    mixing = [key for (key, _), mixes in zip(watched, flags, strict=True) if mixes]
    products.per_sample = bool(mixing)
    squared = products.run(exact, count, options.seed)  # (count, B) per watched tensor
    norms = {
        key: frobenius(np.sqrt(sq.sum(axis=0))) if exact else estimated_frobenius(sq)
        for (key, _), sq in zip(watched, squared, strict=True)
    }
    if exact:
        entries = f"{m} entr{'y' if m == 1 else 'ies'}"
        how = f"exact (one backward pass per target entry: {entries} per sample)"
    else:
        how = (
            f"estimated from {count} random projections of the target (rel_stderr: the "
            "largest relative standard error of a sample)"
        )
    target = "outputs" if live.target_sites[0] is None else live.target_sites[0].ref
    notes = [f"Jacobian norms ‖d {target}[i] / d layer[i]‖F per sample: {how}"]
    if mixing:
        refs = (ref_of((path, call)) for path, call, _ in mixing)
        names = ", ".join(dict.fromkeys(refs))
        notes.append(
            f"the target mixes samples across the batch (e.g. BatchNorm in training mode): "
            f"target[i] depends on other samples' outputs of {names}, whose norms are of the "
            "diagonal blocks d target[i] / d layer[i], other samples' influence left out"
        )
    return norms, tuple(notes)


def _batched(tensor: Tensor, batch: int) -> bool:
    dtype = getattr(tensor, "dtype", None)
    shape = getattr(tensor, "shape", None)
    return (
        bool(getattr(dtype, "is_floating", False))
        and shape is not None
        and shape.rank is not None
        and shape.rank > 0
        and shape[0] == batch
    )


def _is_exact(m: int, options: JacobianOptions) -> bool:
    if options.exact:
        if m > SCAN_EXACT_ROWS:
            raise InputError(
                f"--exact: the target has {m} entries per sample, one backward pass each; "
                f"layergrad does at most {SCAN_EXACT_ROWS}: drop --exact to estimate the norms, "
                "or pick a smaller --to"
            )
        return True
    return options.probes is None and m <= DEFAULT_PROBES


class _Products:
    """Backward passes from the target's ends to every watched tensor, reduced per sample.

    With `per_sample` (the target mixes the batch) each cotangent is applied to one sample
    at a time (vectorized over the batch) and only that sample's gradient is kept: the
    diagonal blocks, for B times the work.
    """

    def __init__(
        self, tape: GradientTape, ends: Sequence[Tensor], watched: list[Tensor], batch: int, m: int
    ):
        self.tape, self.ends, self.watched = tape, list(ends), watched
        self.batch, self.m = batch, m
        self.per_sample = False
        self.total = sum(math.prod(int(d) for d in t.shape) for t in watched) + batch * m

    def _split(self, cotangent: Tensor) -> list[Tensor]:
        """(B, m) rows -> one cotangent per end, in its shape and dtype."""
        parts, start = [], 0
        for end in self.ends:
            size = math.prod(int(d) for d in end.shape[1:])
            piece = tf.reshape(cotangent[:, start : start + size], tf.shape(end))
            parts.append(tf.cast(piece, end.dtype))
            start += size
        return parts

    def _gradients(self, cotangent: Tensor) -> list[Tensor]:
        grads: list[Tensor] = self.tape.gradient(
            self.ends,
            self.watched,
            output_gradients=self._split(cotangent),
            unconnected_gradients=tf.UnconnectedGradients.ZERO,
        )
        return grads

    def squared_norms(self, cotangent: Tensor) -> list[Tensor]:
        """(B, m) -> per watched tensor, ||J_i^T v_i||^2 for each sample i, shape (B,)."""

        def norms(cot: Tensor) -> list[Tensor]:
            return [
                tf.reduce_sum(tf.square(tf.reshape(tf.cast(g, tf.float32), [self.batch, -1])), 1)
                for g in self._gradients(cot)
            ]

        if not self.per_sample:
            return norms(cotangent)

        def one(i: Tensor) -> list[Tensor]:
            mask = tf.one_hot(i, self.batch, dtype=cotangent.dtype)[:, None]
            return [tf.gather(n, i) for n in norms(cotangent * mask)]

        return list(tf.vectorized_map(one, tf.range(self.batch), warn=False))

    def run(self, exact: bool, count: int, seed: int) -> list[np.ndarray]:
        """Squared norms for `count` cotangents: one-hot rows (exact) or random signs."""
        per_product = self.total * (self.batch if self.per_sample else 1)
        size = max(1, min(count, CHUNK_ENTRIES // per_product))

        def make(index: Tensor, signs: Tensor) -> Tensor:
            if exact:
                return tf.broadcast_to(tf.one_hot(index, self.m)[None], [self.batch, self.m])
            return signs

        @tf.function
        def chunk(index: Tensor, signs: Tensor) -> Tensor:
            if size == 1:  # a plain backward pass: nothing to vectorize
                return [x[None] for x in self.squared_norms(make(index[0], signs[0]))]
            return tf.vectorized_map(
                lambda pair: self.squared_norms(make(*pair)), (index, signs), warn=False
            )

        rng = np.random.default_rng([seed, 3])
        outs: list[list[np.ndarray]] = [[] for _ in self.watched]
        for start in range(0, count, size):
            index = np.minimum(np.arange(start, start + size), count - 1).astype(np.int32)
            if exact:
                signs = np.zeros((size, 1, 1), np.float32)  # unused
            else:
                signs = rng.integers(0, 2, (size, self.batch, self.m)).astype(np.float32) * 2 - 1
            keep = min(size, count - start)
            for out, got in zip(outs, chunk(tf.constant(index), tf.constant(signs)), strict=True):
                out.append(got.numpy()[:keep].astype(np.float64))
        return [np.concatenate(parts) for parts in outs]

    def mixing(self, seed: int, tolerance: float = 1e-6) -> list[bool]:
        """Per watched tensor: does a backward pass from sample 0 of the target reach other
        samples? (Exactly zero there in a batch-independent model.)"""
        if self.batch < 2:
            return [False] * len(self.watched)
        u = np.zeros((self.batch, self.m), np.float32)
        u[0] = np.random.default_rng([seed, 4]).standard_normal(self.m)
        flags = []
        for g in self._gradients(u):
            a = np.abs(np.asarray(g, np.float64)).reshape(self.batch, -1)
            own, others = float(a[0].max(initial=0.0)), float(a[1:].max(initial=0.0))
            flags.append(others > tolerance * own if own > 0 else others > 0)
        return flags
