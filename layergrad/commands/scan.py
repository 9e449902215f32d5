"""Whole-model gradient flow: one target, every layer's output, one forward and backward pass
per batch, over a stream of batches (the probe batch: a stream of one batch; or `--data`).

The rows of a scan are built once whichever pass measured them: each row's numbers (from the
trace's gradient arrays or the statistics reduced inside the compiled step), its flags along
the trunk to the target end, and the causes of a row whose gradient is lost; the report of a
traced batch (`scan_report`) is read by `scan` and the weight scan alike.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial

import numpy as np

from layergrad.commands.session import Diagnosis, Session
from layergrad.commands.untrained_batchnorm import in_right_mode, scan_wrong
from layergrad.core.errors import LayerNotFound
from layergrad.core.gradient_stats import dead_fraction, gradient_stats, status_flags, status_of
from layergrad.core.probe_options import Progress
from layergrad.core.results import (
    DataStats,
    FrobeniusNorms,
    GradientStats,
    ProbeMeta,
    ScanJacobian,
    ScanReport,
    ScanRow,
)
from layergrad.core.vocab import NOT_DIFFERENTIABLE, Finding, Status
from layergrad.data.stats.aggregates import GradientTotals
from layergrad.diagnose import causes as why
from layergrad.diagnose.diagnoser import Diagnoser, softmax_target_note
from layergrad.diagnose.forward_findings import (
    CONSTANT_RTOL,
    MIN_BATCH,
    UNSCALED,
    constant_outputs,
    first_nonfinite,
    unscaled_input,
)
from layergrad.diagnose.locate import sinks, trunk
from layergrad.engine.data_step import Plan, Probed, StreamRun, run_stream
from layergrad.engine.jacobian import JacobianOptions
from layergrad.engine.jacobian_data import scan_jacobians
from layergrad.engine.layer_calls import Activation
from layergrad.engine.trace import Trace
from layergrad.model.graph import ModelGraph
from layergrad.model.layer_refs import Site, iter_layers, no_glob_match_message, ref_of, resolve

# Vanishing (exploding): on the trunk, ||g|| at least DECADES below (above) the target end's
# and falling (rising) by more than RATE decades per layer on average on the way, or EXTREME
# decades whatever the rate. A layer with more than DEAD_FRACTION of its units (last axis)
# getting exactly zero is dead. Calibrated on keras.applications models, deep ReLU / tanh
# MLPs (healthy: at most 0.25 decades per layer) and sigmoid stacks (0.5 and more).
DECADES, RATE, EXTREME = 3.0, 0.4, 8.0


def traced_row(act: Activation, grad: np.ndarray | None) -> ScanRow:
    """A row from the trace's gradient array (its class name set by `build_rows`)."""
    if grad is None:
        return _row(act, Status.NONE)
    return _row(act, status_of(grad), gradient_stats(grad, top=0), dead_fraction(grad))


def step_row(act: Probed, grad: GradientTotals | None, data: bool) -> ScanRow:
    """A row from the statistics reduced inside the compiled step; `data` keeps the
    over-the-data statistics."""
    if grad is None:
        return _row(act, Status.NONE)
    over = DataStats(grad.dead_units(), grad.per_sample(), grad.first_nonfinite) if data else None
    return _row(act, Status(grad.status), grad.stats(act.shape, top=0), grad.dead_fraction(), over)


def _row(
    act: Probed,
    status: Status,
    gradient: GradientStats | None = None,
    dead: float = 0.0,
    data: DataStats | None = None,
) -> ScanRow:
    """`status` of the gradient, unless the activation has none by its dtype (text, or
    integers); `dead`: the fraction of units getting exactly zero; `data`: over a data set,
    dead units and per-sample L2."""
    if not act.is_float:
        status = Status.STRING if act.dtype == "string" else Status.INTEGER
    flags = status_flags(status, dead if gradient is not None else None)
    return ScanRow(act.site.ref, "", act.shape, act.dtype, status, gradient, flags, data=data)


def build_rows(
    measured: Sequence[tuple[Probed, ScanRow]],
    target: Probed | None,
    ends: Sequence[tuple[str, int]],
    graph: ModelGraph | None,
    classes: dict[str, str],
    patterns: Sequence[str],
    causes: Callable[[ScanRow], ScanRow],
) -> tuple[ScanRow, ...]:
    """The scan rows of the activations the target depends on, in order, with their flags:
    blocked, non-finite, dead from each row's numbers, then vanishing / exploding along the
    trunk to `ends`; `patterns` keep only matching rows (after the flags, which compare each
    row with the target end); `causes(row)` adds causes to a none / zero / non-finite row."""
    rows: list[ScanRow] = []
    for act, row in measured:
        if target is not None and not _upstream(graph, act, target):
            continue
        class_name = classes.get(act.site.path, "InputLayer")
        if act.output:  # a multi-output layer whose output 0 the target does not use
            class_name += f" (output {act.output})"
        rows.append(replace(row, class_name=class_name))
    on_trunk = trunk(graph, ends)
    rows = flag_against_target_end(
        rows, None if on_trunk is None else {ref_of(k) for k in on_trunk}
    )
    if patterns:
        rows = [r for r in rows if any(fnmatch.fnmatchcase(r.layer, p) for p in patterns)]
        if not rows:
            raise LayerNotFound(no_glob_match_message(patterns))
    broken = (Status.NONE, Status.NONFINITE, Status.ZERO)
    return tuple(causes(r) if r.status in broken else r for r in rows)


def _upstream(graph: ModelGraph | None, act: Probed, target: Probed) -> bool:
    a, t = act.site, target.site
    if t.logits and (a.path, a.call) == (t.path, t.call):
        return a.logits  # the output after the activation comes after `LAYER:logits`
    if (a.path, a.call) == (t.path, t.call) or graph is None:
        return True
    return graph.depends(t.path, a.path, to_call=t.call, frm_call=a.call) is not False


def flag_against_target_end(rows: list[ScanRow], on_trunk: set[str] | None) -> list[ScanRow]:
    """Vanishing / exploding: trunk rows whose gradient L2 is DECADES (and falling by RATE per
    layer) or EXTREME decades below / above the target end's (the last row). A row is judged
    vanishing on the largest gradient of the trunk from the input up to it: a gradient that
    recovers upstream (the input of a residual network gets 100x what its last block gets)
    reaches the layers before it, so it did not vanish there."""
    end = rows[-1].gradient if rows else None
    if end is None or end.l2 <= 0:
        return rows
    out = []
    upstream: tuple[float, int] | None = None  # the largest L2 so far, and its depth
    for i, row in enumerate(rows):
        g, depth = row.gradient, len(rows) - 1 - i
        trunk_row = on_trunk is None or row.layer in on_trunk
        if row.status == Status.OK and g is not None and g.l2 > 0 and depth and trunk_row:
            if upstream is None or g.l2 >= upstream[0]:
                upstream = (g.l2, depth)
            if _beyond(*upstream, end.l2, below=True):
                row = replace(row, flags=(*row.flags, Finding.VANISHING))
            elif _beyond(g.l2, depth, end.l2, below=False):
                row = replace(row, flags=(*row.flags, Finding.EXPLODING))
        out.append(row)
    return out


def _beyond(l2: float, depth: int, end: float, below: bool) -> bool:
    """Whether `l2`, `depth` layers before the end, is EXTREME decades below (above) `end`, or
    DECADES and falling (rising) more than RATE decades per layer."""
    decades = math.log10(l2 / end) * (-1 if below else 1)
    return decades >= EXTREME or (decades >= DECADES and decades / depth > RATE)


def _with_causes(
    row: ScanRow, graph: ModelGraph | None, trace: Trace, diagnoser: Diagnoser
) -> ScanRow:
    i = next(i for i, a in enumerate(trace.activations) if a.site.ref == row.layer)
    source = trace.activations[i]
    target = trace.target or _reached_output(trace, graph, i)
    if target is None and trace.gradients[i] is not None:
        target = source  # a model output: its own gradient comes straight from the target
    if target is None:  # no output got a gradient from it: an operation at the end, or none
        blocker = diagnoser.output_blocker(source.site.key)
        return replace(row, causes=(blocker or why.cause("feeds_no_output", row.layer),))
    diagnoser.adopt(target.site, trace)
    return replace(row, causes=tuple(diagnoser.causes(row.status, source, target)))


def _reached_output(trace: Trace, graph: ModelGraph | None, i: int) -> Activation | None:
    """The last activation after `i` that depends on it and has a gradient (an output end)."""
    source = trace.activations[i].site
    for act, grad in reversed(list(zip(trace.activations, trace.gradients, strict=True))):
        if act.site == source:
            return None
        depends = (
            graph.depends(act.site.path, source.path, act.site.call, source.call) if graph else None
        )
        if grad is not None and depends:
            return act
    return None


def scan_report(
    session: Session, trace: Trace, site: Site | None, patterns: Sequence[str] = ()
) -> ScanReport:
    """The scan rows (one per activation of the trace the target depends on: inputs, then layer
    calls in execution order), flags, causes and notes of a trace of the session's model."""
    graph, layers, target = session.info.graph, dict(iter_layers(session.model)), trace.target
    classes = {p: type(layer).__name__ for p, layer in layers.items()}
    measured = [
        (act, traced_row(act, grad))
        for act, grad in zip(trace.activations, trace.gradients, strict=True)
    ]
    ends = (
        [target.site.key]
        if target
        else [trace.activations[o].site.key for o in trace.outputs if o is not None]
    )
    options = session.options
    diagnoser = Diagnoser(session.model, session.batch, graph, options.training, options.reduce)
    causes = partial(_with_causes, trace=trace, graph=graph, diagnoser=diagnoser)
    rows = build_rows(measured, target, ends, graph, classes, patterns, causes)
    report = rows_report(session, session.probe_meta_of(seeded=site is None), site, rows)
    constant = tuple(constant_outputs(trace, graph, layers))
    notes = list(report.notes)
    bad = first_nonfinite(trace)
    if bad is not None:
        notes.append(
            f"the forward pass turns non-finite (NaN/Inf) at layer {bad.site.ref!r}, and so "
            "is every activation computed from it"
        )
    notes += [why.constant_output(c).message for c in constant]
    scale = unscaled_input(trace, graph, layers)
    if scale is not None:
        cause = why.input_range(scale)
        notes.append(f"{cause.message}; {cause.hint}")
    return replace(
        report,
        notes=tuple(notes),
        first_nonfinite=None if bad is None else bad.site.ref,
        constant=constant,
        input_range=scale,
    )


def rows_report(
    session: Session, probe: ProbeMeta, site: Site | None, rows: tuple[ScanRow, ...]
) -> ScanReport:
    """The report of `rows`, with the note a softmax target needs (its outputs sum to one;
    `scan_report` adds the trace's)."""
    note = site and softmax_target_note(
        site, "scan with {before}, or without --to (a projection of the outputs)"
    )
    return ScanReport(
        model=session.model_meta,
        probe=probe,
        target=site.ref if site else None,
        rows=rows,
        notes=(note,) if note else (),
    )


def scan_session(
    session: Session,
    target: str | None = None,
    patterns: Sequence[str] = (),
    jacobian: JacobianOptions | None = None,
    top: int = 10,
    on_progress: Progress | None = None,
) -> ScanReport:
    """Gradient of one target (a layer reference, or None: a seeded random projection of the
    outputs) with respect to every layer's output, one backward pass per batch of the session
    (see `api.scan_model`). A model whose BatchNormalization was never trained is scanned again
    in training mode when the scan in inference finds what it makes (`untrained_batchnorm`).
    """
    site = None if target is None else resolve(session.model, target)
    probe = partial(_scan, site=site, patterns=patterns, on_progress=on_progress)
    session, report, said = in_right_mode(session, probe, lambda r: scan_wrong(r.rows, r.constant))
    if said:  # never-trained BatchNormalization: probed again as training runs it
        report = replace(report, notes=(*report.notes, said))
    if jacobian is not None:
        rows, found = _jacobians(session, site, report.rows, jacobian, top, on_progress)
        report = replace(report, rows=rows, notes=(*report.notes, *found))
    return report


def _scan(
    session: Session,
    site: Site | None,
    patterns: Sequence[str],
    on_progress: Progress | None,
) -> ScanReport:
    """One pass over the session's batches (`scan_over`), in its mode: its rows are the report,
    unless the probe batch shows what needs the whole arrays (a row not ok, an output the same
    for every sample, a non-finite activation, unscaled inputs); then the batch's trace, read
    again, gives the rows, causes and notes (`scan_report`)."""
    run, rows, diagnosis = scan_over(session, site, patterns, on_progress)
    probe = session.probe_meta_of(run, seeded=site is None)
    if not session.stream.probe:
        return rows_report(session, probe, site, rows)
    batch = session.batch
    floats = [a for a in batch.arrays if a.dtype.kind == "f" and a.size]
    plain = (
        not any(f is not None and f.nonfinite_batches for f in run.forward)
        and not (
            batch.batch_size >= MIN_BATCH
            and any(spread <= CONSTANT_RTOL * max(1.0, top) for spread, top in run.output_spread)
        )
        and not any(float(np.mean(np.abs(a.astype(np.float64)))) > UNSCALED for a in floats)
        and all(r.status in (Status.OK, *NOT_DIFFERENTIABLE) for r in rows)
    )
    if plain:
        return rows_report(session, probe, site, rows)
    return scan_report(session, diagnosis.trace(0, site), site, patterns)


def scan_over(
    session: Session,
    site: Site | None = None,
    layers: Sequence[str] = (),
    on_progress: Progress | None = None,
) -> tuple[StreamRun, tuple[ScanRow, ...], Diagnosis]:
    """The scan pass over the session's batches (the probe batch: a stream of one batch), in
    its mode: the StreamRun, one row per layer call (a row that is not ok with its causes, from
    a trace of the batch it shows on, read again), and that `Diagnosis`."""
    model, batches, options = session.model, session.stream, session.options
    plan = Plan(
        targets=(site,),
        every_leaf=True,
        training=options.training,
        reduce=options.reduce,
        data=not batches.probe,
        seed=options.seed,
    )
    run = run_stream(model, plan, batches, session.strategy, on_progress)
    diagnosis, graph = Diagnosis(session), session.info.graph
    firsts = [
        g.first_nonfinite
        for g in run.gradients[0]
        if g is not None and g.status == "nonfinite" and g.first_nonfinite is not None
    ]
    index = min(firsts, default=0)

    def causes(row: ScanRow) -> ScanRow:
        """The row with its causes, from a full trace and diagnoser of the batch (made once, by
        `Diagnosis`, for the first row that needs them: the one pass that keeps arrays runs
        only when something is wrong)."""
        return _with_causes(row, graph, diagnosis.trace(index, site), diagnosis.diagnoser(index))

    classes = {p: type(layer).__name__ for p, layer in iter_layers(model)}
    target = run.targets[0]
    measured = [
        (act, step_row(act, grad, run.data))
        for act, grad in zip(run.activations, run.gradients[0], strict=True)
    ]
    ends = [target.site.key] if target is not None else sinks(graph)
    return run, build_rows(measured, target, ends, graph, classes, layers, causes), diagnosis


def _jacobians(
    session: Session,
    site: Site | None,
    rows: tuple[ScanRow, ...],
    how: JacobianOptions,
    top: int,
    on_progress: Progress | None,
) -> tuple[tuple[ScanRow, ...], tuple[str, ...]]:
    """Each row whose gradient is ok or zero with its per-sample Jacobian norms over the
    session's batches (`jacobian_data.scan_jacobians`: of the probe batch, each sample's;
    over the data, every worker's shard), and how they were measured."""
    options = session.options
    norms, notes = scan_jacobians(
        session.model, session.stream, site, how, training=options.training,
        reduce=options.reduce, top=top, on_progress=on_progress, strategy=session.strategy,
    )  # fmt: skip
    by_ref: dict[str, FrobeniusNorms] = {}
    for (path, call, _), found in norms.items():
        by_ref.setdefault(f"{path}@{call}" if call else path, found)
    out = []
    for row in rows:
        norm = by_ref.get(row.layer)
        if norm is not None and row.status in (Status.OK, Status.ZERO):
            row = replace(row, jacobian=ScanJacobian(frobenius=norm))
        out.append(row)
    return tuple(out), notes
