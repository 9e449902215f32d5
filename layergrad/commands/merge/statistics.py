"""The rules by which the statistics of shards combine, for `layergrad merge` (`reports.py`):
the gradients' and the per-sample L2's (`merge_gradients`, `merge_samples`), and the Jacobian
norms of `--measure jacobian --data` reports. A per-sample norm's report over a data set is
mergeable but for its percentiles:

- `samples` add, `mean` weights by samples, `std` from each shard's mean, std and samples,
  `min` / `max` combine;
- the histogram adds bin by bin (every run's bins lie on one grid anchored at powers of ten);
- `top` is the k largest of the shards' k largest (k: the longest shard list), with each
  shard's sample indices renumbered as the whole data set numbers them;
- `mean_rel_stderr` (an estimate's) from each shard's: the variances of the shard means add;
  `rel_stderr` (the largest of any sample) is the largest;
- `unit_sensitivity` (root-mean-square over samples) from the shards' mean squares;
- p50 and p95 do not combine: null (the merged histogram holds the distribution at its
  resolution of 10 bins per decade).

Shards must have measured alike (method and probes); nothing here imports TensorFlow.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from layergrad.core.errors import UsageError
from layergrad.core.results import (
    FrobeniusNorms,
    GradientStats,
    Histogram,
    JacobianStats,
    NormDistribution,
    RankedSample,
    SampleStats,
    ScanJacobian,
    SpectralNorms,
)


def merged_shape(shapes: Sequence[tuple[int, ...]], samples: int) -> tuple[int, ...]:
    """The shape over every shard: the samples, then the largest size seen of each axis."""
    if not shapes[0]:
        return ()
    rest = tuple(max(s[j] for s in shapes) for j in range(1, len(shapes[0])))
    return (samples, *rest)


def merge_gradients(
    stats: Sequence[GradientStats], weights: Sequence[float], shape: tuple[int, ...]
) -> GradientStats:
    """The statistics of the shards' gradients as one array of `shape` (each shard's scaled
    by its weight: 1, or its share of the samples under --reduce mean)."""
    elements = [math.prod(g.shape) for g in stats]  # a scalar's () is one element
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


def merge_jacobians(
    items: Sequence[JacobianStats | None], offsets: Sequence[int], names: Sequence[str]
) -> JacobianStats | None:
    """The Jacobian of one inspect result over every shard (None unless every shard has
    one). `offsets[k]` renumbers shard k's samples; `names` name the shards in errors."""
    if any(j is None for j in items):
        return None
    js = [j for j in items if j is not None]
    first = js[0]
    _measured_alike(
        ["exactly" if j.probes is None else f"with {j.probes} probes" for j in js], names
    )
    frobenius = merge_frobenius([j.frobenius for j in js], offsets)
    specs = [j.spectral for j in js if j.spectral is not None]
    spectral = None
    if len(specs) == len(js):  # every shard has its spectral norms
        d = merge_distributions([s.distribution for s in specs], offsets)
        steps = max((s.iterations for s in specs if s.iterations is not None), default=None)
        spectral = SpectralNorms((), d.mean, d.max, steps, all(s.converged for s in specs), d)
    counts = [j.frobenius.distribution.count if j.frobenius.distribution else 0 for j in js]
    total = sum(counts)
    units = tuple(
        math.sqrt(sum(n * j.unit_sensitivity[u] ** 2 for n, j in zip(counts, js, strict=True))
                  / total) if total else 0.0
        for u in range(len(first.unit_sensitivity))
    )  # fmt: skip
    independent = all(j.batch_independent for j in js)
    return JacobianStats(first.method, first.probes, independent, frobenius, spectral, units)


def merge_scan_jacobians(
    items: Sequence[ScanJacobian | None], offsets: Sequence[int], names: Sequence[str]
) -> ScanJacobian | None:
    """A scan row's Jacobian over every shard (None unless every shard has one)."""
    if any(j is None for j in items):
        return None
    norms = [j.frobenius for j in items if j is not None]
    _measured_alike(["exactly" if f.rel_stderr is None else "by an estimate" for f in norms], names)
    return ScanJacobian(merge_frobenius(norms, offsets))


def merge_frobenius(items: Sequence[FrobeniusNorms], offsets: Sequence[int]) -> FrobeniusNorms:
    d = merge_distributions([f.distribution for f in items], offsets)
    rels = [f.rel_stderr for f in items if f.rel_stderr is not None]
    return FrobeniusNorms((), d.mean, d.max, max(rels) if rels else None, (), d)


def merge_distributions(
    items: Sequence[NormDistribution | None], offsets: Sequence[int]
) -> NormDistribution:
    """One distribution over every shard's samples (see the module docstring)."""
    ds = [d for d in items if d is not None]
    if len(ds) != len(items) or not ds:
        raise UsageError("merge: a Jacobian without its distribution over --data")
    none = SampleStats(0, 0.0, 0.0, 0.0, None, None, 0.0)  # no samples in any shard
    moments = merge_samples(ds, [d.count for d in ds], [1.0] * len(ds)) or none
    count, mean = moments.count, moments.mean
    kept = [d for d in ds if d.count]
    mean_rel = None
    if any(d.mean_rel_stderr is not None for d in kept):
        se = math.sqrt(sum((d.count * d.mean * (d.mean_rel_stderr or 0.0)) ** 2 for d in kept))
        mean_rel = se / count / mean if mean > 0 else 0.0
    k = max(len(d.top) for d in ds)
    ranked = [
        RankedSample(r.sample + offset, r.value, r.rel_stderr)
        for d, offset in zip(ds, offsets, strict=True)
        for r in d.top
    ]
    ranked.sort(key=lambda r: (-r.value, r.sample))  # largest first, ties by index
    return NormDistribution(
        count=count,
        mean=mean,
        std=moments.std,
        min=moments.min,
        p50=ds[0].p50 if len(ds) == 1 else None,
        p95=ds[0].p95 if len(ds) == 1 else None,
        max=moments.max,
        histogram=merge_histograms([d.histogram for d in ds]),
        top=tuple(ranked[:k]),
        mean_rel_stderr=mean_rel,
    )


def merge_histograms(items: Sequence[Histogram]) -> Histogram:
    """Histograms on one log grid added bin by bin, from the first filled bin to the last."""
    per_decade = items[0].bins_per_decade
    if any(h.bins_per_decade != per_decade for h in items):
        raise UsageError("merge: Jacobian histograms with different bins per decade")
    counts: dict[int, int] = {}
    edges: dict[int, float] = {}
    for h in items:
        grid = [round(math.log10(e) * per_decade) for e in h.edges]
        edges.update(zip(grid, h.edges, strict=True))
        for g, c in zip(grid, h.counts, strict=False):
            counts[g] = counts.get(g, 0) + c
    zeros = sum(h.zeros for h in items)
    filled = sorted(g for g, c in counts.items() if c)
    if not filled:
        return Histogram((), (), zeros, per_decade)
    lo, hi = filled[0], filled[-1] + 1
    return Histogram(
        tuple(edges.get(g, float(f"{10.0 ** (g / per_decade):.6g}")) for g in range(lo, hi + 1)),
        tuple(counts.get(g, 0) for g in range(lo, hi)),
        zeros,
        per_decade,
    )


def _measured_alike(hows: Sequence[str], names: Sequence[str]) -> None:
    """Raise UsageError naming the first shard measured otherwise than the first."""
    for how, name in zip(hows, names, strict=True):
        if how != hows[0]:
            raise UsageError(
                f"{name} does not fit {names[0]}: the Jacobian was measured {how} vs "
                f"{hows[0]}; merge shards measured with the same --probes / --exact"
            )
