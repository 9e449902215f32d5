"""The rules by which the statistics of shards combine into those of one run (`merge`): sums
add, extrema combine, means weight by elements or samples, standard deviations come from
each shard's mean, std and count, and percentiles do not combine.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from layergrad.core.results import GradientStats, SampleStats


def merged_shape(shapes: Sequence[tuple[int, ...]], samples: int) -> tuple[int, ...]:
    """The shape over every shard: the samples, then the largest size seen of each axis."""
    if not shapes[0]:
        return ()
    rest = tuple(max(s[j] for s in shapes) for j in range(1, len(shapes[0])))
    return (samples, *rest)


def elements_of(shape: tuple[int, ...]) -> int:
    return math.prod(shape) if shape else 1


def merge_gradients(
    stats: Sequence[GradientStats], weights: Sequence[float], shape: tuple[int, ...]
) -> GradientStats:
    """The statistics of the shards' gradients as one array of `shape` (each shard's scaled
    by its weight: 1, or its share of the samples under --reduce mean)."""
    elements = [elements_of(g.shape) for g in stats]
    total = sum(elements)

    def byelements_of(values: Sequence[float]) -> float:
        return sum(v * e for v, e in zip(values, elements, strict=True)) / total if total else 0.0

    return GradientStats(
        shape=shape,
        l2=math.sqrt(sum((w * g.l2) ** 2 for g, w in zip(stats, weights, strict=True))),
        mean_abs=byelements_of([w * g.mean_abs for g, w in zip(stats, weights, strict=True)]),
        max_abs=max(w * g.max_abs for g, w in zip(stats, weights, strict=True)),
        zero_fraction=byelements_of([g.zero_fraction for g in stats]),
        nonfinite=sum(g.nonfinite for g in stats),
    )


def merge_samples(
    stats: Sequence[SampleStats | None], samples: Sequence[int], weights: Sequence[float]
) -> SampleStats | None:
    """A per-sample distribution over every shard: exact moments and extrema, no percentiles
    (kept only when there is one shard)."""
    kept = [
        (s, n, w) for s, n, w in zip(stats, samples, weights, strict=True) if s is not None and n
    ]
    if not kept:
        return None
    count = sum(n for _, n, _ in kept)
    mean = sum(n * w * s.mean for s, n, w in kept) / count
    square = sum(n * ((w * s.std) ** 2 + (w * s.mean) ** 2) for s, n, w in kept) / count
    one = kept[0][0] if len(kept) == 1 and len(stats) == 1 else None
    return SampleStats(
        count=count,
        mean=mean,
        std=math.sqrt(max(square - mean * mean, 0.0)),
        min=min(w * s.min for s, _, w in kept),
        p50=None if one is None else one.p50,
        p95=None if one is None else one.p95,
        max=max(w * s.max for s, _, w in kept),
    )
