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

import numpy as np

from layergrad.core.errors import InputError
from layergrad.core.results import FrobeniusNorms
from layergrad.core.tf_runtime import tf
from layergrad.core.tf_types import Tensor
from layergrad.engine.jacobian import (
    DEFAULT_PROBES,
    JacobianOptions,
    estimated_frobenius,
    frobenius,
    in_chunks,
    one_hot_products,
)
from layergrad.engine.linear_map import LinearMap
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
        ((r.site.path, r.site.call, k), t)
        for r in live.records
        for k, t in enumerate(r.tensors)
        if _batched(t, batch)
    ]
    exact = _is_exact(m, options)
    count = m if exact else (options.probes or DEFAULT_PROBES)
    lin = LinearMap(live.tape, [t for _, t in watched], list(ends))
    flags = lin.mixing(options.seed).numpy() if watched else []
    mixing = [key for (key, _), mixes in zip(watched, flags, strict=True) if mixes]
    lin.independent = not mixing
    squared = _squared_norms(lin, exact, count, options.seed) if watched else []  # (count, B) each
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
    shape = getattr(tensor, "shape", None)
    floating = getattr(getattr(tensor, "dtype", None), "is_floating", False)
    return bool(floating and shape is not None and shape.rank and shape[0] == batch)


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


def _squared_norms(lin: LinearMap, exact: bool, count: int, seed: int) -> list[np.ndarray]:
    """Per source, ||J_i^T v||^2 for `count` cotangents v (count, B): the target's one-hot
    rows (exact) or random signs; one backward pass to every source at once for each v."""

    def norms(cotangent: Tensor) -> list[Tensor]:
        return [tf.reduce_sum(tf.square(g), axis=1) for g in lin.blocks(lin.vjps, cotangent)]

    if exact:
        found = one_hot_products(lin, norms, lin.m, count)
    else:
        rng = np.random.default_rng([seed, 3])

        def signs(start: int, stop: int) -> np.ndarray:
            return rng.integers(0, 2, (stop - start, lin.batch, lin.m)).astype(np.float32) * 2 - 1

        found = in_chunks(lin, norms, count, signs)
    return [f.numpy().astype(np.float64) for f in found]
