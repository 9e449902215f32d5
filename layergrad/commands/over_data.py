"""`--data`: `inspect`, `scan` and `check` over every sample of a data set.

The statistics are those of the whole data set as one batch; they are reduced inside the
compiled step (`data_step.run_stream`), so no gradient is kept. A result that is not ok gets its
causes from one batch where it shows: the first batch with a non-finite value for a
non-finite result, else the first batch. That batch is read again and diagnosed exactly as
`inspect` / `scan` diagnose their probe batch. Nothing here prints.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from layergrad.commands import over_data_jacobians
from layergrad.commands.data_meta import model_meta, probe_meta
from layergrad.core.errors import InputError
from layergrad.core.probe_options import PathLike, ProbeOptions, Progress, with_cluster
from layergrad.core.results import (
    DataStats,
    Endpoint,
    GradientStats,
    InspectReport,
    Result,
    ScanReport,
    ScanRow,
)
from layergrad.core.tf_types import KerasModel, Strategy
from layergrad.core.vocab import Finding, Status

if TYPE_CHECKING:
    from layergrad.core.results import Cause
    from layergrad.data.probe_input import InputSpec, ProbeBatch
    from layergrad.data.sources import DataStream
    from layergrad.data.stats.aggregates import ForwardTotals, GradientTotals
    from layergrad.diagnose.diagnoser import Diagnoser
    from layergrad.engine.data_step import Probed, StreamRun
    from layergrad.engine.jacobian import JacobianOptions
    from layergrad.engine.layer_calls import Activation
    from layergrad.engine.loader import LoadedModel
    from layergrad.engine.trace import Trace
    from layergrad.model.graph import ModelGraph
    from layergrad.model.layer_refs import Site


def open_stream(model: KerasModel, options: ProbeOptions, strategy: Strategy = None) -> DataStream:
    """The model's batches from `options.data` (a `sources.DataStream`): this worker's
    shard under `--distribute multi-worker`."""
    from layergrad.data import sources

    data = options.data_set
    assert data is not None
    shard = shard_of(options)
    replicas = 1 if strategy is None else int(strategy.num_replicas_in_sync)
    return sources.open_data(
        data.path, data_specs(model), options.rows, data.limit, shard, replicas,
        data.first_sample,
    )  # fmt: skip


def data_specs(model: KerasModel) -> tuple[InputSpec, ...]:
    """The model's inputs, for `--data` (refused when the model does not declare them)."""
    from layergrad.data import probe_input

    try:
        return probe_input.input_specs(model)
    except InputError:
        built = probe_input.built_input_specs(model)  # a subclassed model built on one shape
        if built is not None:
            return built
        raise InputError(
            f"model {model.name!r} ({type(model).__name__}) does not declare its inputs, so "
            "--data cannot be matched to them; save it as a Functional or Sequential model"
        ) from None


def shard_of(options: ProbeOptions) -> tuple[int, int] | None:
    """(this worker, workers) under `--distribute multi-worker`, else None."""
    data = with_cluster(options).data_set  # the cluster: read where the command started
    cluster = data.cluster if data else None
    return None if cluster is None else (cluster.index, cluster.workers)


def inspect_data(
    path: PathLike,
    source: str,
    targets: Sequence[str],
    options: ProbeOptions,
    *,
    imports: Sequence[str] = (),
    unsafe: bool = False,
    on_progress: Progress | None = None,
    jacobian: JacobianOptions | None = None,
    top: int = 10,
) -> InspectReport:
    """`api.inspect_model` over every sample of `options.data`; with `jacobian` (a
    `jacobian.JacobianOptions`) each result also gets its Jacobian norms over every sample."""
    from layergrad.commands import session
    from layergrad.commands.untrained_batchnorm import probe_in_training
    from layergrad.model import layer_refs

    loaded, warnings, strategy = session.load(
        path, options, refs=[source, *targets], imports=imports, unsafe=unsafe
    )
    model = loaded.model
    source_site = layer_refs.resolve(model, source)
    target_sites = [layer_refs.resolve(model, ref) for ref in targets]
    batches = open_stream(model, options, strategy)
    sites = (source_site, target_sites)
    run, results = _inspect_pass(loaded, batches, strategy, sites, options, on_progress)
    wrong = any(res.status != Status.OK for res in results)
    said = probe_in_training(model, options.training, wrong)
    if said:  # never-trained BatchNormalization: stream again as training runs it
        options = replace(options, training=True)
        run, results = _inspect_pass(loaded, batches, strategy, sites, options, on_progress)
        results = [replace(res, warnings=(*res.warnings, said)) for res in results]
    if jacobian is not None:
        results = over_data_jacobians.inspect_jacobians_over(
            model, batches, source_site, results, options, jacobian, top, on_progress, strategy
        )
    return InspectReport(
        model=model_meta(path, loaded, warnings),
        probe=probe_meta(batches.source, run, options),
        results=tuple(results),
    )


def _inspect_pass(
    loaded: LoadedModel,
    batches: DataStream,
    strategy: Strategy,
    sites: tuple[Site, Sequence[Site]],
    options: ProbeOptions,
    on_progress: Progress | None = None,
) -> tuple[StreamRun, list[Result]]:
    """One pass of `inspect_data` over the stream in `options`' mode: the run, and one result
    per target of `sites` (the source, the targets)."""
    from layergrad.diagnose import diagnoser
    from layergrad.engine import data_step

    model, (source_site, target_sites) = loaded.model, sites
    plan = data_step.Plan(
        sources=(source_site,),
        targets=tuple(target_sites),
        training=options.training,
        reduce=options.reduce,
        data=True,
        seed=options.seed,
    )
    run = data_step.run_stream(model, plan, batches, strategy, on_progress)
    diagnosis = _Diagnosis(model, batches, loaded.info.graph, options)
    results = []
    for t, site in enumerate(target_sites):
        result = _result(run, t, diagnosis)
        note = diagnoser.softmax_target_note(site, "take --to the layer before it")
        if note:
            result = replace(result, warnings=(note, *result.warnings))  # the strongest first
        results.append(result)
    return run, results


def scan_data(
    path: PathLike,
    options: ProbeOptions,
    *,
    target: str | None = None,
    layers: Sequence[str] = (),
    imports: Sequence[str] = (),
    unsafe: bool = False,
    on_progress: Progress | None = None,
    jacobian: JacobianOptions | None = None,
    top: int = 10,
) -> ScanReport:
    """`api.scan_model` over every sample of `options.data`: each row's statistics over all
    samples (and with `jacobian`, its Jacobian norms over every sample)."""
    from layergrad.commands import session
    from layergrad.commands.scan import target_notes
    from layergrad.commands.untrained_batchnorm import probe_in_training, scan_wrong
    from layergrad.model import layer_refs

    loaded, warnings, strategy = session.load(
        path,
        options,
        refs=[target] if target else [],
        globs=layers,
        imports=imports,
        unsafe=unsafe,
    )
    model = loaded.model
    site = None if target is None else layer_refs.resolve(model, target)
    batches = open_stream(model, options, strategy)
    run, rows = scan_over(loaded, strategy, batches, options, site, layers, on_progress)
    said = probe_in_training(model, options.training, scan_wrong(rows))
    if said:  # never-trained BatchNormalization: stream again as training runs it
        options = replace(options, training=True)
        run, rows = scan_over(loaded, strategy, batches, options, site, layers, on_progress)
    notes = (*target_notes(site), *((said,) if said else ()))
    if jacobian is not None:
        rows, found = over_data_jacobians.scan_jacobians_over(
            model, batches, site, rows, options, jacobian, top, on_progress, strategy
        )
        notes = (*notes, *found)
    return ScanReport(
        model=model_meta(path, loaded, warnings),
        probe=probe_meta(batches.source, run, options, seeded=site is None),
        target=site.ref if site else None,
        rows=rows,
        notes=notes,
    )


def scan_over(
    loaded: LoadedModel,
    strategy: Strategy,
    batches: DataStream,
    options: ProbeOptions,
    site: Site | None = None,
    layers: Sequence[str] = (),
    on_progress: Progress | None = None,
) -> tuple[StreamRun, tuple[ScanRow, ...]]:
    """The scan pass over a data stream: (the StreamRun, one row per layer call)."""
    from layergrad.commands import scan_rows
    from layergrad.engine import data_step
    from layergrad.engine import trace as trace_module
    from layergrad.model import layer_refs

    model, graph = loaded.model, loaded.info.graph
    plan = data_step.Plan(
        targets=(site,),
        every_leaf=True,
        training=options.training,
        reduce=options.reduce,
        data=True,
        seed=options.seed,
    )
    run = data_step.run_stream(model, plan, batches, strategy, on_progress)
    diagnosis = _Diagnosis(model, batches, graph, options)
    firsts = [
        g.first_nonfinite
        for g in run.gradients[0]
        if g is not None and g.status == "nonfinite" and g.first_nonfinite is not None
    ]
    index = min(firsts, default=0)

    def make() -> tuple[Trace, Diagnoser]:
        batch = diagnosis.batch(index)
        trace = trace_module.run_trace(
            model, batch, site, training=options.training, reduce=options.reduce, seed=options.seed
        )
        return trace, diagnosis.diagnoser(index)

    classes = {p: type(layer).__name__ for p, layer in layer_refs.iter_layers(model)}
    rows = scan_rows.summary_rows(run, graph, classes, layers, scan_rows.trace_causes(make, graph))
    return run, rows


def forward_check(run: StreamRun) -> tuple[str, tuple[Finding, ...]]:
    """`check`'s forward verdict over a data set: (message, findings)."""
    for act, fwd in zip(run.activations, run.forward, strict=True):
        if fwd is not None and fwd.nonfinite_batches:
            return (
                f"activations turn non-finite (NaN/Inf) at layer {act.site.ref!r} (first in "
                f"batch {fwd.first_nonfinite})",
                (Finding.NONFINITE,),
            )
    return f"finite over {run.samples:,} samples", ()


class _Diagnosis:
    """One batch of the data read again, and its diagnoser, for results that are not ok."""

    def __init__(
        self,
        model: KerasModel,
        batches: DataStream,
        graph: ModelGraph | None,
        options: ProbeOptions,
    ) -> None:
        self.model, self.batches, self.graph = model, batches, graph
        self.training, self.reduce = options.training, options.reduce
        self._batches: dict[int, ProbeBatch] = {}
        self._diagnosers: dict[int, Diagnoser] = {}

    def batch(self, index: int) -> ProbeBatch:
        if index not in self._batches:
            self._batches[index] = self.batches.batch(index)
        return self._batches[index]

    def diagnoser(self, index: int) -> Diagnoser:
        from layergrad.diagnose.diagnoser import Diagnoser

        if index not in self._diagnosers:
            self._diagnosers[index] = Diagnoser(
                self.model, self.batch(index), self.graph, self.training, self.reduce
            )
        return self._diagnosers[index]

    def activations(self, index: int, source: Site, target: Site) -> tuple[Activation, Activation]:
        """The source and target activations of batch `index` (for the causes)."""
        from layergrad.engine import probe

        run = probe.run_probe(
            self.model,
            self.batch(index),
            [source],
            [target],
            training=self.training,
            reduce=self.reduce,
        )
        return run.sources[0], run.targets[0]


def _result(run: StreamRun, t: int, diagnosis: _Diagnosis) -> Result:
    from layergrad.diagnose import causes as why
    from layergrad.diagnose import diagnoser

    source, target, grad = run.activations[0], run.targets[t], run.gradients[t][0]
    assert target is not None  # inspect names every target (only scan's may be the projection)
    status = Status.NONE if grad is None else Status(grad.status)
    stats = None if grad is None else grad.stats(source.shape)
    causes: tuple[Cause, ...] = ()
    if status != "ok":
        index = grad.first_nonfinite if grad is not None and grad.first_nonfinite else 0
        src, dst = diagnosis.activations(index, source.site, target.site)
        causes = diagnoser.static_causes(src, dst, diagnosis.graph)
        if not any(c.code == "not_downstream" for c in causes):
            found = diagnosis.diagnoser(index).causes(status, src, dst)
            causes = diagnoser.dedupe([*causes, *found])
        causes = causes or (why.unknown(),)
    return Result(
        source=Endpoint(source.site.ref, source.shape, source.dtype),
        target=Endpoint(target.site.ref, target.shape, target.dtype),
        status=status,
        gradient=stats,
        causes=causes,
        warnings=_warnings(stats, run.forward[0], source, target, grad, diagnosis)
        if status == "ok" and stats is not None and grad is not None
        else (),
        data=DataStats((), None, None)
        if grad is None
        else DataStats(grad.dead_units(), grad.per_sample(), grad.first_nonfinite),
    )


def _warnings(
    stats: GradientStats,
    forward: ForwardTotals | None,
    source: Probed,
    target: Probed,
    grad: GradientTotals,
    diagnosis: _Diagnosis,
) -> tuple[str, ...]:
    """`diagnoser.warnings_for`, from statistics over all samples instead of arrays: exact
    zeros by design named, units with no gradient for any sample called dead."""
    from layergrad.diagnose.diagnoser import gradient_warnings, structural_zeros
    from layergrad.model.layer_refs import iter_layers

    size = forward.mean_abs if forward is not None else 0.0
    width = source.shape[-1] if source.shape else 1
    dead = len(grad.dead_units()) / width if width else None
    structural: tuple[str, ...] = ()
    if stats.zero_fraction > 0.5:  # only then is there anything to explain
        layers = dict(iter_layers(diagnosis.model))
        structural = structural_zeros(
            source.site, target.site, diagnosis.graph, layers, diagnosis.training
        )
    src, dst = source.site.ref, target.site.ref
    return gradient_warnings(stats.zero_fraction, stats.max_abs, size, src, dst, structural, dead)
