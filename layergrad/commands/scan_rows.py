"""The rows of a scan, built once whichever pass measured them: each row's numbers (from the
trace's gradient arrays or the statistics reduced inside the compiled step), its flags along
the trunk to the target end, and the causes of a row whose gradient is lost; and the report
of a traced batch (`scan_report`), which `scan` and the weight scan both read.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial

import numpy as np

from layergrad.commands.session import Session
from layergrad.core.errors import LayerNotFound
from layergrad.core.gradient_stats import dead_fraction, gradient_stats, status_flags, status_of
from layergrad.core.results import DataStats, GradientStats, ProbeMeta, ScanReport, ScanRow
from layergrad.core.vocab import Finding, Status
from layergrad.data.stats.aggregates import GradientTotals
from layergrad.diagnose import causes as why
from layergrad.diagnose.diagnoser import Diagnoser, softmax_target_note
from layergrad.diagnose.forward_findings import constant_outputs, first_nonfinite, unscaled_input
from layergrad.diagnose.locate import sinks, trunk
from layergrad.engine.data_step import Probed, StreamRun
from layergrad.engine.layer_calls import Activation
from layergrad.engine.trace import Trace
from layergrad.model.graph import ModelGraph
from layergrad.model.layer_refs import Site, iter_layers, no_glob_match_message, ref_of

# Vanishing (exploding): on the trunk, ||g|| at least DECADES below (above) the target end's
# and falling (rising) by more than RATE decades per layer on average on the way, or EXTREME
# decades whatever the rate. A layer with more than DEAD_FRACTION of its units (last axis)
# getting exactly zero is dead. Calibrated on keras.applications models, deep ReLU / tanh
# MLPs (healthy: at most 0.25 decades per layer) and sigmoid stacks (0.5 and more).
DECADES, RATE, EXTREME = 3.0, 0.4, 8.0


@dataclass(frozen=True)
class RowNumbers:
    """What one scan row says about its gradient, whichever pass measured it: the trace's
    gradient array (`traced_numbers`) or the statistics reduced inside the compiled step
    (`step_numbers`)."""

    status: Status
    gradient: GradientStats | None = None
    dead: float = 0.0  # the fraction of units getting exactly zero
    data: DataStats | None = None  # over a data set: dead units and per-sample L2


def not_differentiable(act: Probed) -> Status:
    """The status of a row that has no gradient by its dtype: text, or integers."""
    return Status.STRING if act.dtype == "string" else Status.INTEGER


def traced_numbers(act: Activation, grad: np.ndarray | None) -> RowNumbers:
    """The numbers of a row from the trace's gradient array."""
    status = status_of(grad) if act.is_float else not_differentiable(act)
    if grad is None:
        return RowNumbers(status)
    return RowNumbers(status, gradient_stats(grad, top=0), dead_fraction(grad))


def step_numbers(act: Probed, grad: GradientTotals | None, data: bool) -> RowNumbers:
    """The numbers of a row from the statistics reduced inside the compiled step; `data`
    keeps the over-the-data statistics."""
    status = (
        Status(grad.status if grad is not None else "none")
        if act.is_float
        else not_differentiable(act)
    )
    if grad is None:
        return RowNumbers(status)
    return RowNumbers(
        status,
        grad.stats(act.shape, top=0),
        grad.dead_fraction(),
        DataStats(grad.dead_units(), grad.per_sample(), grad.first_nonfinite) if data else None,
    )


def summary_rows(
    run: StreamRun,
    graph: ModelGraph | None,
    classes: dict[str, str],
    patterns: Sequence[str],
    causes: Callable[[ScanRow], ScanRow],
) -> tuple[ScanRow, ...]:
    """The scan rows from statistics reduced inside the step (`data_step.run_stream`), without any
    gradient array; rows carry `data`; their causes from `causes` (see `trace_causes`)."""
    target = run.targets[0]
    measured = [
        (act, step_numbers(act, grad, run.data))
        for act, grad in zip(run.activations, run.gradients[0], strict=True)
    ]
    ends = [target.site.key] if target is not None else sinks(graph)
    return build_rows(measured, target, ends, graph, classes, patterns, causes)


def build_rows(
    measured: Sequence[tuple[Probed, RowNumbers]],
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
    for act, numbers in measured:
        if target is not None and not _upstream(graph, act, target):
            continue
        class_name = classes.get(act.site.path, "InputLayer")
        if act.output:  # a multi-output layer whose output 0 the target does not use
            class_name += f" (output {act.output})"
        rows.append(_row(act, numbers, class_name))
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


def _row(act: Probed, numbers: RowNumbers, class_name: str) -> ScanRow:
    flags = status_flags(numbers.status, numbers.dead if numbers.gradient is not None else None)
    return ScanRow(
        layer=act.site.ref,
        class_name=class_name,
        shape=act.shape,
        dtype=act.dtype,
        status=numbers.status,
        gradient=numbers.gradient,
        flags=flags,
        data=numbers.data,
    )


def trace_causes(
    make: Callable[[], tuple[Trace, Diagnoser]], graph: ModelGraph | None
) -> Callable[[ScanRow], ScanRow]:
    """Causes for rows of `summary_rows`, from a full trace and diagnoser made for the first
    row that needs them (the one pass that keeps arrays runs only when something is wrong)."""
    made: list[tuple[Trace, Diagnoser]] = []

    def add(row: ScanRow) -> ScanRow:
        if not made:
            made.append(make())
        trace, diagnoser = made[0]
        return _with_causes(row, trace, graph, diagnoser)

    return add


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
    row: ScanRow, trace: Trace, graph: ModelGraph | None, diagnoser: Diagnoser
) -> ScanRow:
    i = next(i for i, a in enumerate(trace.activations) if a.site.ref == row.layer)
    source = trace.activations[i]
    target = trace.target or _reached_output(trace, graph, i)
    if target is None and trace.gradients[i] is not None:
        target = source  # a model output: its own gradient comes straight from the target
    if target is None:
        return replace(row, causes=(why.cause("feeds_no_output", row.layer),))
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
        (act, traced_numbers(act, grad))
        for act, grad in zip(trace.activations, trace.gradients, strict=True)
    ]
    ends = (
        [target.site.key]
        if target
        else [trace.activations[o].site.key for o in trace.outputs if o is not None]
    )
    causes = partial(_with_causes, trace=trace, graph=graph, diagnoser=session.diagnoser)
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
