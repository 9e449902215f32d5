"""Whole-model gradient flow: one target, every layer's output, one forward and backward pass."""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from layergrad import causes as why
from layergrad.diagnose import Diagnoser, softmax_target_note
from layergrad.errors import LayerNotFound
from layergrad.graph import ModelGraph
from layergrad.jacobian import JacobianOptions
from layergrad.jacobian_scan import with_jacobians
from layergrad.layer_refs import iter_layers, no_glob_match_message, resolve
from layergrad.locate import first_nonfinite
from layergrad.pipeline import Session
from layergrad.probe import Activation, Trace, live_trace, run_trace, trace_gradients
from layergrad.results import ScanReport, ScanRow
from layergrad.stats import gradient_stats, status_of
from layergrad.vocab import Flag, Status

# A layer whose mean |g| is this far below (above) the target end's is vanishing (exploding);
# a layer with more than DEAD_FRACTION of its units (last axis) getting exactly zero is dead.
VANISHING_RATIO, EXPLODING_RATIO, DEAD_FRACTION = 1e-6, 1e6, 0.5


def scan_session(
    session: Session,
    target: str | None = None,
    patterns: Sequence[str] = (),
    jacobian: JacobianOptions | None = None,
) -> ScanReport:
    """Gradient of one target with respect to every layer's output, in one backward pass.

    `target` is a layer reference, or None for a seeded random projection of the model's
    outputs (see `probe.run_trace`); `patterns` (shell globs) keep only matching rows.
    With `jacobian`, rows also get per-sample Jacobian norms (`jacobian_scan`), from the same
    forward pass.
    """
    model, options = session.model, session.options
    site = None if target is None else resolve(model, target)
    live = None
    if jacobian is not None:
        live = live_trace(
            model,
            session.batch,
            site,
            training=options.training,
            reduce=options.reduce,
            seed=options.seed,
        )
        trace = trace_gradients(live)
    else:
        trace = run_trace(
            model,
            session.batch,
            site,
            training=options.training,
            reduce=options.reduce,
            seed=options.seed,
        )
    classes = {p: type(layer).__name__ for p, layer in iter_layers(model)}
    rows = scan_rows(trace, session.info.graph, session.diagnoser, classes, patterns)
    notes: list[str] = []
    if live is not None and jacobian is not None:
        rows, jacobian_notes = with_jacobians(rows, trace, live, jacobian)
        notes += jacobian_notes
    note = site and softmax_target_note(
        site, "scan with --to the layer before it, or without --to (a projection of the outputs)"
    )
    if note:
        notes.append(note)
    bad = first_nonfinite(trace)
    if bad is not None:
        notes.append(
            f"the forward pass turns non-finite (NaN/Inf) at layer {bad.site.ref!r}, and so "
            "is every activation computed from it"
        )
    return ScanReport(
        model=session.model_meta,
        probe=session.probe_meta,
        target=site.ref if site else None,
        rows=rows,
        notes=tuple(notes),
        first_nonfinite=None if bad is None else bad.site.ref,
    )


def scan_rows(
    trace: Trace,
    graph: ModelGraph | None,
    diagnoser: Diagnoser,
    classes: dict[str, str],
    patterns: Sequence[str] = (),
) -> tuple[ScanRow, ...]:
    """One row per activation of the trace (inputs, then layer calls in execution order).

    Rows the target does not depend on are left out. `patterns` (shell globs) keep only
    matching layer references. Blocked and non-finite rows get causes from the diagnoser.
    """
    target = trace.target
    rows: list[ScanRow] = []
    for act, grad in zip(trace.activations, trace.gradients, strict=True):
        ref = act.site.ref
        if patterns and not any(fnmatch.fnmatchcase(ref, p) for p in patterns):
            continue
        if target is not None and not _upstream(graph, act, target):
            continue
        class_name = classes.get(act.site.path, "InputLayer")
        if act.output:  # a multi-output layer whose output 0 the target does not use
            class_name += f" (output {act.output})"
        rows.append(_row(act, grad, class_name))
    if patterns and not rows:
        raise LayerNotFound(no_glob_match_message(patterns))
    rows = _flag_scale(rows)
    return tuple(_with_causes(row, trace, graph, diagnoser) for row in rows)


def _upstream(graph: ModelGraph | None, act: Activation, target: Activation) -> bool:
    a, t = act.site, target.site
    if (a.path, a.call) == (t.path, t.call) or graph is None:
        return True
    return graph.depends(t.path, a.path, to_call=t.call, frm_call=a.call) is not False


def _row(act: Activation, grad: np.ndarray | None, class_name: str) -> ScanRow:
    status = status_of(grad) if act.is_float else Status.INTEGER
    stats = None if grad is None else gradient_stats(grad, top=0)
    flags: tuple[Flag, ...] = ()
    if status == Status.NONE:
        flags = (Flag.BLOCKED,)
    elif status == Status.NONFINITE:
        flags = (Flag.NONFINITE,)
    elif grad is not None and dead_units(grad) > DEAD_FRACTION:
        flags = (Flag.DEAD,)
    return ScanRow(
        layer=act.site.ref,
        class_name=class_name,
        shape=act.shape,
        dtype=act.dtype,
        status=status,
        gradient=stats,
        flags=flags,
    )


def dead_units(grad: np.ndarray) -> float:
    """Fraction of units (last axis) whose gradient is exactly zero everywhere in the batch."""
    if grad.ndim == 0 or grad.size == 0:
        return float(not np.any(grad))
    return float(np.mean(np.all(grad.reshape(-1, grad.shape[-1]) == 0, axis=0)))


def _flag_scale(rows: list[ScanRow]) -> list[ScanRow]:
    """Flag vanishing / exploding rows against the target end (the last row, d t / d t)."""
    end = rows[-1].gradient if rows else None
    if end is None or end.mean_abs <= 0:
        return rows
    out = []
    for row in rows:
        g = row.gradient
        if row.status == Status.OK and g is not None:
            if g.mean_abs < VANISHING_RATIO * end.mean_abs:
                row = replace(row, flags=(*row.flags, Flag.VANISHING))
            elif g.mean_abs > EXPLODING_RATIO * end.mean_abs:
                row = replace(row, flags=(*row.flags, Flag.EXPLODING))
        out.append(row)
    return out


def _with_causes(
    row: ScanRow, trace: Trace, graph: ModelGraph | None, diagnoser: Diagnoser
) -> ScanRow:
    if row.status not in (Status.NONE, Status.NONFINITE, Status.ZERO):
        return row
    i = next(i for i, a in enumerate(trace.activations) if a.site.ref == row.layer)
    source = trace.activations[i]
    target = trace.target or _reached_output(trace, graph, i)
    if target is None:
        return replace(row, causes=(why.feeds_no_output(row.layer),))
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
