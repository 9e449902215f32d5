"""`--data`: `inspect`, `scan` and `check` over every sample of a data set.

The statistics are those of the whole data set as one batch; they are reduced inside the
compiled step (`stream.run_stream`), so no gradient is kept. A result that is not ok gets its
causes from one batch where it shows: the first batch with a non-finite value for a
non-finite result, else the first batch. That batch is read again and diagnosed exactly as
`inspect` / `scan` diagnose their probe batch. Nothing here prints.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from layergrad.errors import InputError
from layergrad.results import (
    DataStats,
    Endpoint,
    GradientStats,
    InspectReport,
    ProbeMeta,
    Result,
    ScanReport,
    ScanRow,
)

DEFAULT_BATCH_SIZE = 32
PathLike = str | os.PathLike[str]
Progress = Callable[[int, "int | None"], None]


@dataclass(frozen=True)
class DataOptions:
    """Where the data is and how to run over it.

    `path`: `.npy`, `.npz`, an image folder, or `FILE.py:function` / `module:function`;
    `limit`: at most this many samples; `distribute`: None or "mirrored"; `cpu_replicas`:
    split the CPU into this many devices and mirror over them; `on_progress(done, total)` is
    called after each batch (total is None when the source does not say).
    """

    path: PathLike
    limit: int | None = None
    distribute: str | None = None
    cpu_replicas: int | None = None
    on_progress: Progress | None = None


def open_model(
    path: PathLike,
    data: DataOptions,
    imports: Sequence[str] = (),
    unsafe: bool = False,
    info: Any = None,
) -> tuple[Any, Any]:
    """Choose the devices (before TensorFlow starts them), then load the model under that
    strategy so its variables live on every replica. Returns (LoadedModel, strategy)."""
    from layergrad import devices, loader

    strategy = devices.strategy_for(data.distribute, data.cpu_replicas)
    with strategy.scope():
        loaded, _ = loader.load_model(path, imports, unsafe, info=info)
    return loaded, strategy


def open_stream(model: Any, data: DataOptions, batch_size: int) -> Any:
    """The model's batches from `data.path` (a `datasets.DataStream`)."""
    from layergrad import datasets, inputs

    try:
        specs = inputs.input_specs(model)
    except InputError:
        raise InputError(
            f"model {model.name!r} ({type(model).__name__}) does not declare its inputs, so "
            "--data cannot be matched to them; save it as a Functional or Sequential model"
        ) from None
    return datasets.open_data(data.path, specs, batch_size, data.limit)


def inspect_data(
    path: PathLike,
    source: str,
    targets: Sequence[str],
    data: DataOptions,
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    reduce: str = "sum",
    training: bool = False,
    imports: Sequence[str] = (),
    unsafe: bool = False,
) -> InspectReport:
    """`inspect_model` over every sample of `data` (see `api.inspect_model` for the rest).

    Example:
        >>> report = inspect_data("m.keras", "conv", ["head"], DataOptions("x.npy"))
        >>> report.probe.samples, report.results[0].data.dead_units
        (20000, (3, 17))
    """
    from layergrad import api, layer_refs, scan, stream

    loaded, strategy = open_model(path, data, imports, unsafe)
    model = loaded.model
    source_site = layer_refs.resolve(model, source)
    target_sites = [layer_refs.resolve(model, ref) for ref in targets]
    batches = open_stream(model, data, batch_size)
    plan = stream.Plan(
        sources=(source_site,),
        targets=tuple(target_sites),
        training=training,
        reduce=reduce,
        data=True,
    )
    run = stream.run_stream(model, plan, batches, strategy, data.on_progress)
    diagnosis = _Diagnosis(model, batches, loaded.info.graph, training, reduce)
    results = []
    for t, site in enumerate(target_sites):
        result = _result(run, t, diagnosis)
        note = None if site.layer is None else scan.softmax_note(model, site.layer)
        if note:
            result = replace(result, warnings=(*result.warnings, note))
        results.append(result)
    return InspectReport(
        model=api.model_meta(path, loaded),
        probe=_probe_meta(batches.source, run, batch_size, training, reduce),
        results=tuple(results),
    )


def scan_data(
    path: PathLike,
    data: DataOptions,
    *,
    target: str | None = None,
    layers: Sequence[str] = (),
    batch_size: int = DEFAULT_BATCH_SIZE,
    reduce: str = "sum",
    training: bool = False,
    imports: Sequence[str] = (),
    unsafe: bool = False,
) -> ScanReport:
    """`scan_model` over every sample of `data`: each row's statistics over all samples."""
    from layergrad import api, layer_refs, scan

    loaded, strategy = open_model(path, data, imports, unsafe)
    model = loaded.model
    site = None if target is None else layer_refs.resolve(model, target)
    batches = open_stream(model, data, batch_size)
    run, rows = scan_over(loaded, strategy, batches, data, site, training, reduce, layers)
    note = scan.softmax_note(model, site.layer if site else None)
    return ScanReport(
        model=api.model_meta(path, loaded),
        probe=_probe_meta(batches.source, run, batch_size, training, reduce),
        target=site.ref if site else None,
        rows=rows,
        notes=(note,) if note else (),
    )


def scan_over(
    loaded: Any,
    strategy: Any,
    batches: Any,
    data: DataOptions,
    site: Any = None,
    training: bool = False,
    reduce: str = "sum",
    layers: Sequence[str] = (),
) -> tuple[Any, tuple[ScanRow, ...]]:
    """The scan pass over a data stream: (the StreamRun, one row per layer call)."""
    from layergrad import layer_refs, probe, scan, stream

    model, graph = loaded.model, loaded.info.graph
    plan = stream.Plan(
        targets=(site,), every_leaf=True, training=training, reduce=reduce, data=True
    )
    run = stream.run_stream(model, plan, batches, strategy, data.on_progress)
    diagnosis = _Diagnosis(model, batches, graph, training, reduce)
    firsts = [
        g.first_nonfinite
        for g in run.gradients[0]
        if g is not None and g.status == "nonfinite" and g.first_nonfinite is not None
    ]
    index = min(firsts, default=0)

    def make() -> tuple[Any, Any]:
        batch = diagnosis.batch(index)
        trace = probe.run_trace(model, batch, site, training=training, reduce=reduce)
        return trace, diagnosis.explainer(index)

    classes = {p: type(layer).__name__ for p, layer in layer_refs.iter_layers(model)}
    rows = scan.summary_rows(run, graph, classes, layers, scan.trace_causes(make, graph))
    return run, rows


def forward_check(run: Any) -> tuple[str, tuple[str, ...]]:
    """`check`'s forward verdict over a data set: (message, findings)."""
    for act, fwd in zip(run.activations, run.forward, strict=True):
        if fwd is not None and fwd.nonfinite_batches:
            return (
                f"non-finite activations from layer {act.site.ref!r} on (first at batch "
                f"{fwd.first_nonfinite})",
                ("nonfinite",),
            )
    return f"finite over {run.samples:,} samples", ()


class _Diagnosis:
    """One batch of the data read again, and its explainer, for results that are not ok."""

    def __init__(self, model: Any, batches: Any, graph: Any, training: bool, reduce: str):
        self.model, self.batches, self.graph = model, batches, graph
        self.training, self.reduce = training, reduce
        self._batches: dict[int, Any] = {}
        self._explainers: dict[int, Any] = {}

    def batch(self, index: int) -> Any:
        if index not in self._batches:
            self._batches[index] = self.batches.batch(index)
        return self._batches[index]

    def explainer(self, index: int) -> Any:
        from layergrad import explain

        if index not in self._explainers:
            self._explainers[index] = explain.Explainer(
                self.model, self.batch(index), self.graph, self.training, self.reduce
            )
        return self._explainers[index]

    def activations(self, index: int, source: Any, target: Any) -> tuple[Any, Any]:
        """The source and target activations of batch `index` (for the causes)."""
        from layergrad import probe

        run = probe.run_probe(
            self.model,
            self.batch(index),
            [source],
            [target],
            training=self.training,
            reduce=self.reduce,
        )
        return run.sources[0], run.targets[0]


def _result(run: Any, t: int, diagnosis: _Diagnosis) -> Result:
    from layergrad import diagnose

    source, target, grad = run.activations[0], run.targets[t], run.gradients[t][0]
    status = "none" if grad is None else grad.status
    stats = None if grad is None else grad.stats(source.shape)
    causes: tuple[Any, ...] = ()
    if status != "ok":
        index = grad.first_nonfinite if grad is not None and grad.first_nonfinite else 0
        src, dst = diagnosis.activations(index, source.site, target.site)
        causes = diagnose.static_causes(src, dst, diagnosis.graph)
        if not any(c.code == "not_downstream" for c in causes):
            found = diagnosis.explainer(index).causes(status, src, dst)
            causes = diagnose._dedupe([*causes, *found])
        causes = causes or (diagnose.unknown_cause(diagnose.CHECKED),)
    return Result(
        source=Endpoint(source.site.ref, source.shape, source.dtype),
        target=Endpoint(target.site.ref, target.shape, target.dtype),
        status=status,
        gradient=stats,
        causes=causes,
        warnings=_warnings(stats, run.forward[0], source.site.ref, target.site.ref)
        if status == "ok" and stats is not None
        else (),
        data=DataStats((), None, None)
        if grad is None
        else DataStats(grad.dead_units(), grad.per_sample(), grad.first_nonfinite),
    )


def _warnings(stats: GradientStats, forward: Any, src: str, dst: str) -> tuple[str, ...]:
    """`diagnose.warnings_for`, from statistics over all samples instead of arrays."""
    from layergrad.diagnose import EXPLODING, MOSTLY_ZERO, VANISHING

    out = []
    if stats.zero_fraction > MOSTLY_ZERO:
        out.append(
            f"{stats.zero_fraction:.0%} of the gradient is exactly zero: dead units or inactive "
            "paths between the two layers"
        )
    size = forward.mean_abs if forward is not None else 0.0
    gain = stats.max_abs * (size if size > 0 else 1.0)
    if gain < VANISHING:
        out.append(
            f"vanishing: max |g| x mean |{src}| = {gain:.1e}; moving {src} barely moves {dst}"
        )
    elif gain > EXPLODING:
        out.append(
            f"exploding: max |g| x mean |{src}| = {gain:.1e}; a small change of {src} moves "
            f"{dst} enormously"
        )
    return tuple(out)


def _probe_meta(source: str, run: Any, batch_size: int, training: bool, reduce: str) -> ProbeMeta:
    return ProbeMeta(
        source=source,
        seed=None,
        batch_size=batch_size,
        training=training,
        reduce=reduce,
        samples=run.samples,
        replicas=run.replicas,
    )
