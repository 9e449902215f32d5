"""`inspect`: the gradient of each target layer's activation with respect to a source layer's,
of the probe batch (a `Session`: eager, the gradient arrays kept for the causes and
`--save-gradient`) or of every sample of `--data` (a `DataSession`: reduced in the compiled
step, the causes of a result that is not ok from one batch read again). Both get the same
notes and the same BatchNormalization rule.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from layergrad.commands.session import DataSession, Session
from layergrad.commands.untrained_batchnorm import in_training, probe_in_training, results_wrong
from layergrad.core.probe_options import Progress
from layergrad.core.results import (
    DataStats,
    Endpoint,
    GradientStats,
    InspectReport,
    ProbeMeta,
    Reason,
    Result,
)
from layergrad.core.vocab import Status
from layergrad.model.layer_refs import Site, iter_layers, resolve

if TYPE_CHECKING:  # the modules of the pass over the data are imported by that pass
    from layergrad.commands.over_data import Diagnosis
    from layergrad.data.stats.aggregates import ForwardTotals, GradientTotals
    from layergrad.engine.data_step import Probed, StreamRun
    from layergrad.engine.jacobian import JacobianOptions
    from layergrad.model.graph import ModelGraph


def inspect_session(
    session: Session | DataSession,
    source: str,
    targets: Sequence[str],
    how: JacobianOptions | None = None,
    top: int = 10,
    on_progress: Progress | None = None,
) -> InspectReport:
    """One result per target (in order): see `api.inspect_model`. With `how`, each result
    also gets its Jacobian norms (over the data: a second pass, naming the `top` samples)."""
    model = session.model
    sites = (resolve(model, source), [resolve(model, ref) for ref in targets])
    results, probe = _inspect(session, source, targets, sites, how, on_progress)
    said = probe_in_training(model, session.options.training, results_wrong(results))
    if said:  # never-trained BatchNormalization: probe again as training runs it
        session = in_training(session)
        results, probe = _inspect(session, source, targets, sites, how, on_progress)
        results = tuple(replace(res, warnings=(*res.warnings, said)) for res in results)
    if how is not None and isinstance(session, DataSession):
        results = _jacobians_over(session, sites[0], results, how, top, on_progress)
    if how is not None and probe.seed is None:  # the projections and Lanczos starts are drawn
        probe = replace(probe, seed=session.options.seed)
    return InspectReport(model=session.model_meta, probe=probe, results=results)


def _inspect(
    session: Session | DataSession,
    source: str,
    targets: Sequence[str],
    sites: tuple[Site, list[Site]],
    how: JacobianOptions | None,
    on_progress: Progress | None,
) -> tuple[tuple[Result, ...], ProbeMeta]:
    """One probe in the session's mode: the results (with their notes, and from the probe
    batch their Jacobian norms when `how` says how to measure them) and the probe's meta."""
    from layergrad.diagnose import diagnoser
    from layergrad.engine import jacobian
    from layergrad.engine import probe as probing

    source_site, target_sites = sites
    graph = session.info.graph
    if isinstance(session, DataSession):
        over, found = _over_data(session, source_site, target_sites, on_progress)
        return _noted(found, graph, source, targets, sites), session.probe_meta_of(over)
    model, batch, live = session.model, session.batch, None
    training, reduce = session.options.training, session.options.reduce
    if how is not None:  # one forward pass serves the gradient and the Jacobians
        live = probing.live_probe(
            model, batch, [source_site], target_sites, training=training, reduce=reduce
        )
        run = probing.probe_gradients(live)
    else:
        run = probing.run_probe(
            model, batch, [source_site], target_sites, training=training, reduce=reduce
        )
    results = _noted(diagnoser.build_results(run, graph, session.diagnoser), graph, source,
                     targets, sites)  # fmt: skip
    if live is not None and how is not None:
        results = jacobian.with_jacobians(results, live, how)
    return results, session.probe_meta


def _over_data(
    session: DataSession,
    source_site: Site,
    target_sites: Sequence[Site],
    on_progress: Progress | None = None,
) -> tuple[StreamRun, list[Result]]:
    """One pass of `inspect` over the data in the session's mode: the run, and one result
    per target."""
    from layergrad.commands.over_data import Diagnosis
    from layergrad.engine.data_step import Plan, run_stream

    model, options, batches = session.model, session.options, session.stream
    plan = Plan(
        sources=(source_site,),
        targets=tuple(target_sites),
        training=options.training,
        reduce=options.reduce,
        data=True,
        seed=options.seed,
    )
    run = run_stream(model, plan, batches, session.strategy, on_progress)
    diagnosis = Diagnosis(model, batches, session.info.graph, options)
    return run, [_result(run, t, diagnosis) for t in range(len(target_sites))]


def _noted(
    results: Sequence[Result],
    graph: ModelGraph,
    source: str,
    targets: Sequence[str],
    sites: tuple[Site, list[Site]],
) -> tuple[Result, ...]:
    """The results with what their references do not say: a softmax target first (the
    strongest), a shared layer named without `@K` last."""
    from layergrad.diagnose.diagnoser import softmax_target_note

    source_site, target_sites = sites
    first = _first_call_note(graph, source, source_site, "--from")
    out = []
    for res, ref, site in zip(results, targets, target_sites, strict=True):
        note = softmax_target_note(
            site,
            "take {before}, or --measure jacobian (d each output / d --from, per sample: what "
            "the sum cancels out)",
        )
        after = (n for n in (first, _first_call_note(graph, ref, site, "--to")) if n)
        out.append(replace(res, warnings=(*((note,) if note else ()), *res.warnings, *after)))
    return tuple(out)


def _first_call_note(graph: ModelGraph, ref: str, site: Site, option: str) -> str | None:
    """A note when `ref` names a layer called several times without `@K`: it means call 0."""
    entry = graph.get(site.path) if site.input_index is None else None
    if entry is None or entry.num_calls < 2 or "@" in ref:
        return None
    last = entry.num_calls - 1
    others = f"{site.path}@1" if last == 1 else f"{site.path}@1 to {site.path}@{last}"
    return (
        f"{option} {ref}: '{site.path}' is called {entry.num_calls} times (a shared layer) and "
        f"{ref} means its first call, {site.path}@0; name the other calls {others}"
    )


def _jacobians_over(
    session: DataSession,
    source: Site,
    results: tuple[Result, ...],
    how: JacobianOptions,
    top: int,
    on_progress: Progress | None,
) -> tuple[Result, ...]:
    """Each result whose gradient is ok or zero with its Jacobian norms over every sample of
    the data (a second pass, `jacobian_data`, over every worker's shard)."""
    from layergrad.engine.jacobian_data import inspect_jacobians

    chosen = [i for i, r in enumerate(results) if r.status in (Status.OK, Status.ZERO)]
    if not chosen:
        return results
    sites = [resolve(session.model, results[i].target.layer) for i in chosen]
    options = session.options
    found = inspect_jacobians(
        session.model, session.stream, source, sites, how, training=options.training,
        reduce=options.reduce, top=top, on_progress=on_progress, strategy=session.strategy,
    )  # fmt: skip
    out = list(results)
    for i, (stats, warnings) in zip(chosen, found, strict=True):
        out[i] = replace(out[i], jacobian=stats, warnings=(*out[i].warnings, *warnings))
    return tuple(out)


def _result(run: StreamRun, t: int, diagnosis: Diagnosis) -> Result:
    from layergrad.diagnose import causes as why
    from layergrad.diagnose import diagnoser

    source, target, grad = run.activations[0], run.targets[t], run.gradients[t][0]
    assert target is not None  # inspect names every target (only scan's may be the projection)
    status = Status.NONE if grad is None else Status(grad.status)
    stats = None if grad is None else grad.stats(source.shape)
    causes: tuple[Reason, ...] = ()
    if status != "ok":
        index = grad.first_nonfinite if grad is not None and grad.first_nonfinite else 0
        src, dst = diagnosis.activations(index, source.site, target.site)
        causes = diagnoser.static_causes(src, dst, diagnosis.graph)
        if not any(c.code == "not_downstream" for c in causes):
            found = diagnosis.diagnoser(index).causes(status, src, dst)
            causes = diagnoser.dedupe([*causes, *found])
        causes = causes or (why.cause("unknown"),)
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
    diagnosis: Diagnosis,
) -> tuple[str, ...]:
    """`diagnoser.warnings_for`, from statistics over all samples instead of arrays: exact
    zeros by design named, units with no gradient for any sample called dead."""
    from layergrad.diagnose.diagnoser import gradient_warnings, structural_zeros

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
