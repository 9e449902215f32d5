"""`layergrad merge SHARD.json...`: one report from the reports of runs over shards of a data set.

A scheduler without collectives (a job array) runs `inspect` / `scan --data` once per shard;
this combines their JSON reports into the report of one run over every shard, in the order
given, by the rules the statistics obey (docs/distributed.md):

- sums add: L2 is the root of the sum of squares, `nonfinite` adds up;
- extrema combine: max |g|, the per-sample min and max;
- means weight by elements or samples: mean |g| and `zeros` by elements, the per-sample mean
  by samples; the per-sample std from each shard's mean, std and samples;
- `dead_units` is the intersection; the first non-finite batch is the first shard's that has
  one, counted in batches of `--batch-size` across the shards before it;
- p50 and p95 do not combine: they are null, and `probe.shards` says how many were merged;
- the Jacobian norms of `--measure jacobian` alike: their histograms add bin by bin (every
  run's bins lie on one grid anchored at powers of ten); `top` is the k largest of the
  shards' k largest (k: the longest shard list), each shard's sample indices renumbered as
  the whole data set numbers them; `mean_rel_stderr` (an estimate's) from each shard's, the
  variances of the shard means adding up; `rel_stderr` (the largest of any sample) is the
  largest; `unit_sensitivity` (root-mean-square over samples) from the shards' mean squares.

With `--reduce mean` each shard's gradient is the mean over its own samples, so its numbers
are first weighted by its share of the samples. Shards of different models, probes (seed,
batch size, mode, reduction, target, the Jacobian's method and probes) or schemas are refused.
Nothing here imports TensorFlow.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from layergrad.core.errors import LayergradError, UsageError
from layergrad.core.gradient_stats import status_flags
from layergrad.core.results import (
    DataStats,
    FrobeniusNorms,
    GradientStats,
    Histogram,
    InspectReport,
    JacobianStats,
    NormDistribution,
    RankedSample,
    SampleStats,
    ScanJacobian,
    ScanReport,
    SpectralNorms,
)
from layergrad.core.vocab import NOT_DIFFERENTIABLE, Finding, Status
from layergrad.files.report_json import read_report

if TYPE_CHECKING:
    from layergrad.core.results import ProbeMeta, Reason, Result, ScanRow

Report = InspectReport | ScanReport
SCALE_FLAGS = (Finding.VANISHING, Finding.EXPLODING)


def merge_reports(paths: Sequence[str | os.PathLike[str]]) -> Report:
    """Read the shard reports at `paths` and combine them into one.

    Args:
        paths: `layergrad inspect --json` or `scan --json` reports made with `--data` over
            shards of one data set, with the same model and options.

    Returns:
        An InspectReport or ScanReport of the same schema, over every shard's samples.

    Raises:
        InputError: a file that is not such a report.
        UsageError: shards that do not fit together.

    Example (not run)::

        merged = merge_reports(["shard0.json", "shard1.json"])
        merged.probe.samples  # the samples of both
    """
    if not paths:
        raise UsageError("merge needs at least one SHARD.json")
    names = [os.fspath(p) for p in paths]
    _not_twice(names)
    reports = [read_report(p) for p in names]
    return merge(reports, names)


def _not_twice(names: Sequence[str]) -> None:
    """Refuse one file given twice (also by another name or through a link)."""
    seen: dict[tuple[int, int] | str, str] = {}
    for name in names:
        try:
            stat = os.stat(name)
            key: tuple[int, int] | str = (stat.st_dev, stat.st_ino)
        except OSError:  # missing or unreadable: read_report says so
            key = os.path.realpath(name)
        if key in seen:
            raise _twice(name, "is the same file as", seen[key])
        seen[key] = name


def _not_repeated(reports: Sequence[Report], names: Sequence[str]) -> None:
    """Refuse two shards of the same data (a copy of one report, or two runs over one file)."""
    for j, report in enumerate(reports):
        for i in range(j):
            sha = report.probe.data_sha256
            if sha is not None and sha == reports[i].probe.data_sha256:
                why = f"was made over the same data (data_sha256 {sha[:12]}...) as"
                raise _twice(names[j], why, names[i])
            if report == reports[i]:
                raise _twice(names[j], "is a copy of", names[i])


def _twice(name: str, why: str, other: str) -> UsageError:
    return UsageError(
        f"{name} {why} {other}: a shard given twice would count its samples twice; give each "
        "shard once"
    )


def merge(reports: Sequence[Report], names: Sequence[str]) -> Report:
    """Combine reports already read (`names` say which file each came from, for errors)."""
    first = reports[0]
    for report, name in zip(reports, names, strict=True):
        if type(report) is not type(first):
            raise UsageError(
                f"{name} is {_kind(report)} report but {names[0]} is {_kind(first)} one; merge "
                "shards of one command"
            )
        if report.probe.samples is None:
            raise UsageError(
                f"{name} is a report of one probe batch, not of --data; merge combines runs "
                "over shards of a data set (`--data SHARD`)"
            )
        _same_run(report, first, name, names[0])
    _not_repeated(reports, names)
    shares = _Shares(reports, names)
    if isinstance(first, ScanReport) and first.target is None:
        _numbered_in_order(reports, names, shares.samples)
    if isinstance(first, InspectReport):
        inspects = [r for r in reports if isinstance(r, InspectReport)]
        per_result = zip(*(r.results for r in inspects), strict=True)
        results = tuple(_result(items, shares) for items in per_result)
        return InspectReport(model=first.model, probe=shares.probe(), results=results)
    scans = [r for r in reports if isinstance(r, ScanReport)]
    rows = [_row(items, shares) for items in zip(*(s.rows for s in scans), strict=True)]
    rows = _scale_flags(rows, scans)
    notes = tuple(dict.fromkeys(n for s in scans for n in s.notes))
    return ScanReport(
        model=first.model,
        probe=shares.probe(),
        target=first.target,
        rows=tuple(rows),
        notes=notes,
    )


def _kind(report: Report) -> str:
    return "an inspect" if isinstance(report, InspectReport) else "a scan"


def _same_run(report: Report, first: Report, name: str, first_name: str) -> None:
    """Refuse a shard of another model, probe or layer structure (one line naming it)."""
    a, b = report, first
    differences = [
        ("model file", os.path.basename(a.model.path), os.path.basename(b.model.path)),
        ("model class", a.model.class_name, b.model.class_name),
        ("model name", a.model.name, b.model.name),
        ("model format", a.model.format, b.model.format),
        ("--to", getattr(a, "target", None), getattr(b, "target", None)),
        ("probe seed", a.probe.seed, b.probe.seed),
        ("--batch-size", a.probe.batch_size, b.probe.batch_size),
        ("--training", a.probe.training, b.probe.training),
        ("--reduce", str(a.probe.reduce), str(b.probe.reduce)),  # as written
        ("layers", _structure(a), _structure(b)),
        ("--measure", _measure(a), _measure(b)),
    ]
    for what, mine, theirs in differences:
        if mine != theirs:
            shown = "differ" if what == "layers" else f"{mine!r} vs {theirs!r}"
            raise UsageError(
                f"{name} does not fit {first_name}: {what} {shown}; merge reports of one model "
                "made with the same options over shards of its data"
            )


def _numbered_in_order(reports: Sequence[Report], names: Sequence[str], samples: list[int]) -> None:
    """A scan of the default target projects each sample's outputs with a seed of its index:
    the shards must number their samples as the whole data set does (`--first-sample`)."""
    expected = reports[0].probe.first_sample or 0
    for report, name, n in zip(reports, names, samples, strict=True):
        got = report.probe.first_sample or 0
        if got != expected:
            raise UsageError(
                f"{name} numbers its samples from {got}, but the shards before it hold samples "
                f"up to {expected}: a scan without --to projects each sample with a seed of its "
                f"index, so scan each shard with --first-sample N (its first sample's index in "
                "the whole data set), or with --to"
            )
        expected += n


def _measure(report: Report) -> str:
    items = report.results if isinstance(report, InspectReport) else report.rows
    return "jacobian" if any(item.jacobian is not None for item in items) else "gradient"


def _structure(report: Report) -> list[tuple[object, ...]]:
    """What must be the same in every shard: each result's or row's layers, shapes after the
    batch axis and dtypes, and whether it has a gradient at all."""
    if isinstance(report, InspectReport):
        return [
            (r.source.layer, r.source.shape[1:], r.source.dtype, r.target.layer, r.target.dtype,
             r.gradient is None)
            for r in report.results
        ]  # fmt: skip
    absent = (Status.NONE, *NOT_DIFFERENTIABLE)  # rows without a gradient
    return [(r.layer, r.class_name, r.shape[1:], r.dtype, r.status in absent) for r in report.rows]


class _Shares:
    """Each shard's name, samples, weight under --reduce mean and first batch's index."""

    def __init__(self, reports: Sequence[Report], names: Sequence[str]) -> None:
        self.names = names  # the shards' files, for errors
        self.samples = [int(r.probe.samples or 0) for r in reports]
        self.total = sum(self.samples)
        mean = reports[0].probe.reduce == "mean"
        self.weights = [n / self.total if mean and self.total else 1.0 for n in self.samples]
        size = reports[0].probe.batch_size
        batches = [math.ceil(n / size) for n in self.samples]
        self.first_batches = [sum(batches[:k]) for k in range(len(reports))]
        self.reports = reports
        # a sample's index in shard k (from its --first-sample) plus offsets[k]: its index in
        # the whole data, the shards following one another from the first one's first sample
        first = reports[0].probe.first_sample or 0
        self.offsets = [
            first + sum(self.samples[:k]) - (r.probe.first_sample or 0)
            for k, r in enumerate(reports)
        ]

    def probe(self) -> ProbeMeta:
        """The first shard's probe, over every shard."""
        probe = self.reports[0].probe
        sources = list(dict.fromkeys(r.probe.source for r in self.reports))
        return replace(
            probe,
            source=" + ".join(sources),
            samples=self.total,
            replicas=sum(r.probe.replicas or 1 for r in self.reports),
            shards=sum(r.probe.shards or 1 for r in self.reports),
            # the content hash of one file: a merge over several has none
            data_sha256=probe.data_sha256 if len(self.reports) == 1 else None,
        )


def _status(statuses: Sequence[Status], gradient: GradientStats | None) -> Status:
    if gradient is None or statuses[0] in (Status.NONE, *NOT_DIFFERENTIABLE):
        return statuses[0]
    if gradient.nonfinite:
        return Status.NONFINITE
    return Status.ZERO if all(s == Status.ZERO for s in statuses) else Status.OK


def _data(
    items: Sequence[DataStats | None], shares: _Shares, has_gradient: bool
) -> DataStats | None:
    if all(d is None for d in items):
        return None
    dead = set.intersection(*(set(d.dead_units if d is not None else ()) for d in items))
    first = None
    for d, start in zip(items, shares.first_batches, strict=True):
        if first is None and d is not None and d.first_nonfinite_batch is not None:
            first = start + d.first_nonfinite_batch
    per_sample = merge_samples(
        [d.per_sample_l2 if d is not None else None for d in items], shares.samples,
        shares.weights,
    )  # fmt: skip
    return DataStats(tuple(sorted(dead)) if has_gradient else (), per_sample, first)


def _causes(
    statuses: Sequence[Status],
    causes: Sequence[tuple[Reason, ...]],
    merged: Status,
    data: Sequence[DataStats | None],
) -> tuple[Reason, ...]:
    """The causes of the shard that shows the merged status first (for a non-finite result,
    the shard with the first non-finite batch); none for an ok result."""
    if merged == Status.OK:
        return ()
    order = list(range(len(statuses)))
    if merged == Status.NONFINITE:
        shown = [i for i, d in enumerate(data) if d and d.first_nonfinite_batch is not None]
        order = shown[:1] + order
    for i in order:
        if statuses[i] == merged and causes[i]:
            return causes[i]
    return next((c for c in causes if c), ())


def _combined(
    items: Sequence[Result] | Sequence[ScanRow], shares: _Shares, shape: tuple[int, ...]
) -> tuple[GradientStats | None, Status, tuple[Reason, ...], DataStats | None]:
    """What a result and a scan row combine alike: the gradient (of `shape`), the status, the
    causes and the statistics over the data."""
    grads = [r.gradient for r in items if r.gradient is not None]
    gradient = merge_gradients(grads, shares.weights, shape) if len(grads) == len(items) else None
    statuses = [r.status for r in items]
    status = _status(statuses, gradient)
    data = [r.data for r in items]
    causes = _causes(statuses, [r.causes for r in items], status, data)
    return gradient, status, causes, _data(data, shares, gradient is not None)


def _result(items: Sequence[Result], shares: _Shares) -> Result:
    first = items[0]
    shapes = [r.gradient.shape for r in items if r.gradient is not None]
    total = shares.total
    gradient, status, causes, data = _combined(
        items, shares, merged_shape(shapes, total) if shapes else ()
    )
    source, target = (merged_shape([r.source.shape for r in items], total),
                      merged_shape([r.target.shape for r in items], total))  # fmt: skip
    return replace(first, source=replace(first.source, shape=source),
                   target=replace(first.target, shape=target), gradient=gradient, status=status,
                   causes=causes, data=data, jacobian=merge_jacobians(
                       [r.jacobian for r in items], shares.offsets, shares.names))  # fmt: skip


def _row(items: Sequence[ScanRow], shares: _Shares) -> ScanRow:
    shape = merged_shape([r.shape for r in items], shares.total)
    gradient, status, causes, data = _combined(items, shares, shape)
    dead = None
    if data is not None and gradient is not None:
        units = shape[-1] if len(shape) >= 2 else 1
        dead = len(data.dead_units) / units if units else None
    jacobian = merge_scan_jacobians([r.jacobian for r in items], shares.offsets, shares.names)
    return replace(items[0], shape=shape, gradient=gradient, status=status, causes=causes,
                   data=data, flags=status_flags(status, dead), jacobian=jacobian)  # fmt: skip


def _scale_flags(rows: list[ScanRow], scans: Sequence[ScanReport]) -> list[ScanRow]:
    """Vanishing / exploding again, from the merged L2s, on the rows of the model's trunk
    (from the model file's graph, read without TensorFlow; when the file cannot be read, the
    rows some shard flagged)."""
    from layergrad.commands.scan import flag_against_target_end

    trunk = _trunk(scans[0].model.path, scans[0].target)
    if trunk is None:
        trunk = {r.layer for s in scans for r in s.rows if set(r.flags) & set(SCALE_FLAGS)}
    return flag_against_target_end(rows, trunk)


def _trunk(model_path: str, target: str | None) -> set[str] | None:
    from layergrad.diagnose.locate import sinks, trunk
    from layergrad.files.file_info import read_file_info
    from layergrad.model.layer_refs import ref_of

    try:
        graph = read_file_info(model_path, read_weights=False).graph
    except (LayergradError, OSError):
        return None
    if not graph.known:
        return None
    path, _, call = (target or "").partition("@")
    ends = sinks(graph) if target is None else [(path, int(call) if call.isdigit() else 0)]
    on_trunk = trunk(graph, ends)
    return None if on_trunk is None else {ref_of(k) for k in on_trunk}


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
