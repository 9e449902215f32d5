"""`inspect`: the gradient of each target layer's activation with respect to a source layer's,
over a stream of batches: the probe batch (a stream of one batch, run eagerly, its whole
gradients kept for `--save-gradient`) or every sample of `--data` (reduced in the compiled
step). One pass (`_inspect`) serves both; a result that is not ok gets its causes from the
batch it shows on, read again. Both get the same notes and the same BatchNormalization rule.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from functools import partial

from layergrad.commands.session import Diagnosis, Session
from layergrad.commands.untrained_batchnorm import in_right_mode, results_wrong
from layergrad.core.probe_options import Progress
from layergrad.core.results import (
    DataStats,
    Endpoint,
    GradientStats,
    InspectReport,
    Reason,
    Result,
)
from layergrad.core.vocab import Finding, Status
from layergrad.data.stats.aggregates import ForwardTotals, GradientTotals
from layergrad.diagnose import causes as why
from layergrad.diagnose.diagnoser import (
    ZERO_SHARE,
    dedupe,
    gradient_warnings,
    softmax_before,
    softmax_target_note,
    static_causes,
    structural_zeros,
)
from layergrad.engine.data_step import Plan, Probed, StreamRun, run_stream
from layergrad.engine.jacobian import JacobianOptions
from layergrad.engine.jacobian_data import inspect_jacobians
from layergrad.model.graph import ModelGraph
from layergrad.model.layer_refs import Site, iter_layers, resolve


def inspect_session(
    session: Session,
    source: str,
    targets: Sequence[str],
    how: JacobianOptions | None = None,
    top: int = 10,
    on_progress: Progress | None = None,
) -> InspectReport:
    """One result per target (in order): see `api.inspect_model`. With `how`, each result
    also gets its Jacobian norms (`jacobian_data.inspect_jacobians`, over the same batches;
    over the data it names the `top` samples)."""
    model = session.model
    sites = (resolve(model, source), [resolve(model, ref) for ref in targets])
    probe = partial(_inspect, source=source, targets=targets, sites=sites, on_progress=on_progress)
    session, (results, run), said = in_right_mode(session, probe, lambda f: results_wrong(f[0]))
    if said:  # never-trained BatchNormalization: probed again as training runs it
        results = tuple(replace(res, warnings=(*res.warnings, said)) for res in results)
    if how is not None:
        results = _jacobians(session, sites[0], results, how, top, on_progress)
    meta = session.probe_meta_of(run, seeded=how is not None)  # projections, Lanczos starts
    return InspectReport(model=session.model_meta, probe=meta, results=results)


def _inspect(
    session: Session,
    source: str,
    targets: Sequence[str],
    sites: tuple[Site, list[Site]],
    on_progress: Progress | None,
) -> tuple[tuple[Result, ...], StreamRun]:
    """One pass of `inspect` over the session's batches (the probe batch: a stream of one
    batch, whose whole gradients are kept) in its mode: one result per target, with its
    notes, and the run."""
    model, options, batches = session.model, session.options, session.stream
    plan = Plan(
        sources=(sites[0],),
        targets=tuple(sites[1]),
        training=options.training,
        reduce=options.reduce,
        data=not batches.probe,
        seed=options.seed,
        keep=batches.probe,
    )
    run = run_stream(model, plan, batches, session.strategy, on_progress)
    diagnosis = Diagnosis(session)
    found = [_result(run, t, diagnosis) for t in range(len(targets))]
    return _noted(found, session.info.graph, source, targets, sites), run


def _noted(
    results: Sequence[Result],
    graph: ModelGraph,
    source: str,
    targets: Sequence[str],
    sites: tuple[Site, list[Site]],
) -> tuple[Result, ...]:
    """The results with what their references do not say: a softmax target first (the
    strongest), a shared layer named without `@K` last. A softmax target's sum is 1 for every
    sample: that is the cause of its zero gradient, and of its exact zeros (whole samples
    whose sum rounds to exactly 1), whatever layers lie between."""
    first = _first_call_note(graph, source, sites[0], "--from")
    out = []
    for res, ref, site in zip(results, targets, sites[1], strict=True):
        note = softmax_target_note(
            site,
            "take {before}, or --measure jacobian (d each output / d --from, per sample: what "
            "the sum cancels out)",
        )
        after = (n for n in (first, _first_call_note(graph, ref, site, "--to")) if n)
        warnings, causes = res.warnings, res.causes
        if note:
            warnings = (note, *(w for w in warnings if ZERO_SHARE not in w))
        constant = any(c.code == Finding.CONSTANT_OUTPUT for c in causes)
        if note and res.status == Status.ZERO and not constant:  # the cause, said once
            # (an output constant for every sample keeps its own cause: its logits are too)
            before = softmax_before(site)
            causes = (why.cause("constant_output/softmax_sum", site.ref, before=before),)
            warnings = warnings[1:]
        out.append(replace(res, warnings=(*warnings, *after), causes=causes))
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


def _jacobians(
    session: Session,
    source: Site,
    results: tuple[Result, ...],
    how: JacobianOptions,
    top: int,
    on_progress: Progress | None,
) -> tuple[Result, ...]:
    """Each result whose gradient is ok or zero with its Jacobian norms over the session's
    batches (`jacobian_data`: of the probe batch its per-sample norms; over the data, every
    worker's shard)."""
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
    source, target, grad = run.activations[0], run.targets[t], run.gradients[t][0]
    assert target is not None  # inspect names every target (only scan's may be the projection)
    status = Status.NONE if grad is None else Status(grad.status)
    stats = None if grad is None else grad.stats(source.shape)
    causes: tuple[Reason, ...] = ()
    if status != "ok":
        index = grad.first_nonfinite if grad is not None and grad.first_nonfinite else 0
        src, dst = diagnosis.activations(index, source.site, target.site)
        causes = static_causes(src, dst, diagnosis.graph)
        if not any(c.code == "not_downstream" for c in causes):
            found = diagnosis.diagnoser(index).causes(status, src, dst)
            causes = dedupe([*causes, *found])
        causes = causes or (why.cause("unknown"),)
    return Result(
        source=Endpoint(source.site.ref, source.shape, source.dtype),
        target=Endpoint(target.site.ref, target.shape, target.dtype),
        status=status,
        gradient=stats,
        causes=causes,
        warnings=(
            *_warnings(stats, run.forward[0], source, target, grad, diagnosis),
            *_nonfinite_values(run),
        )
        if status == "ok" and stats is not None and grad is not None
        else (),
        array=run.arrays[t][0] if run.arrays else None,
        data=None
        if not run.data
        else DataStats((), None, None)
        if grad is None
        else DataStats(grad.dead_units(), grad.per_sample(), grad.first_nonfinite),
    )


def _nonfinite_values(run: StreamRun) -> tuple[str, ...]:
    """A warning when an activation held NaN/Inf while the gradient stayed finite (a path
    linear in it, a ReLU that zeroes it): the first activation, in execution order, that did,
    in how many batches, and the first of them."""
    for probed, forward in zip(run.activations, run.forward, strict=False):
        if forward is not None and forward.nonfinite_batches:
            where = "the batch" if run.batches == 1 else (
                f"{forward.nonfinite_batches} of {run.batches} batches (the first: batch "
                f"{forward.first_nonfinite})"
            )  # fmt: skip
            made = (
                "the data holds them"
                if probed.site.input_index is not None
                else "from the data or a layer before it"
            )
            return (
                f"{probed.site.ref!r} holds NaN/Inf in {where}: {made}, and the outputs of "
                "those samples are NaN/Inf too, though this gradient is finite; "
                "`layergrad scan` names where they start",
            )
    return ()


def _warnings(
    stats: GradientStats,
    forward: ForwardTotals | None,
    source: Probed,
    target: Probed,
    grad: GradientTotals,
    diagnosis: Diagnosis,
) -> tuple[str, ...]:
    """The warnings of an ok gradient (`diagnoser.gradient_warnings`), from its statistics
    over every sample: exact zeros by design named, units with no gradient for any sample
    called dead."""
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
    float16 = source.dtype == "float16"
    return gradient_warnings(
        stats.zero_fraction, stats.max_abs, size, src, dst, structural, dead, float16
    )
