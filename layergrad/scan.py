"""Whole-model gradient flow: one target, every layer's output, one forward and backward pass."""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, cast

import numpy as np

from layergrad.errors import LayerNotFound
from layergrad.explain import Explainer
from layergrad.graph import ModelGraph
from layergrad.probe import Activation, Trace
from layergrad.results import Cause, DataStats, ScanRow
from layergrad.stats import gradient_stats, status_of
from layergrad.stream import Probed, StreamRun
from layergrad.totals import GradientTotals

# A layer whose mean |g| is this far below (above) the target end's is vanishing (exploding);
# a layer with more than DEAD_FRACTION of its units (last axis) getting exactly zero is dead.
VANISHING_RATIO, EXPLODING_RATIO, DEAD_FRACTION = 1e-6, 1e6, 0.5


def scan_rows(
    trace: Trace,
    graph: ModelGraph | None,
    explainer: Explainer,
    classes: dict[str, str],
    patterns: Sequence[str] = (),
) -> tuple[ScanRow, ...]:
    """One row per activation of the trace (inputs, then layer calls in execution order).

    Rows the target does not depend on are left out. `patterns` (shell globs) keep only
    matching layer references. Blocked and non-finite rows get causes from the explainer.
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
        raise LayerNotFound(
            f"--layers {' '.join(patterns)} matches no layer the target depends on; "
            "run `layergrad layers MODEL` to list the layer names"
        )
    rows = _flag_scale(rows)
    return tuple(_with_causes(row, trace, graph, explainer) for row in rows)


def summary_rows(
    run: StreamRun,
    graph: ModelGraph | None,
    classes: dict[str, str],
    patterns: Sequence[str] = (),
    causes: Callable[[ScanRow], ScanRow] | None = None,
) -> tuple[ScanRow, ...]:
    """`scan_rows` from statistics reduced inside the step (`stream.run_batch` / `run_stream`),
    without any gradient array. `causes(row)` adds causes to a none / zero / non-finite row
    (see `trace_causes`). Rows carry `data` when the run went over a data set."""
    target = run.targets[0]
    rows: list[ScanRow] = []
    for act, grad in zip(run.activations, run.gradients[0], strict=True):
        ref = act.site.ref
        if patterns and not any(fnmatch.fnmatchcase(ref, p) for p in patterns):
            continue
        if target is not None and not _upstream(graph, cast(Any, act), cast(Any, target)):
            continue
        class_name = classes.get(act.site.path, "InputLayer")
        if act.output:
            class_name += f" (output {act.output})"
        rows.append(_summary_row(act, grad, class_name, run.data))
    if patterns and not rows:
        raise LayerNotFound(
            f"--layers {' '.join(patterns)} matches no layer the target depends on; "
            "run `layergrad layers MODEL` to list the layer names"
        )
    rows = _flag_scale(rows)
    if causes is None:
        return tuple(rows)
    return tuple(causes(r) if r.status in ("none", "nonfinite", "zero") else r for r in rows)


def _summary_row(
    act: Probed, grad: GradientTotals | None, class_name: str, data: bool
) -> ScanRow:
    status = (grad.status if grad is not None else "none") if act.is_float else "integer"
    flags: tuple[str, ...] = {"none": ("blocked",), "nonfinite": ("nonfinite",)}.get(status, ())
    if grad is not None and status != "nonfinite" and grad.dead_fraction() > DEAD_FRACTION:
        flags += ("dead",)
    return ScanRow(
        layer=act.site.ref,
        class_name=class_name,
        shape=act.shape,
        dtype=act.dtype,
        status=status,
        gradient=None if grad is None else grad.stats(act.shape, top=0),
        flags=flags,
        data=None
        if grad is None or not data
        else DataStats(grad.dead_units(), grad.per_sample(), grad.first_nonfinite),
    )


def trace_causes(
    make: Callable[[], tuple[Trace, Explainer]], graph: ModelGraph | None
) -> Callable[[ScanRow], ScanRow]:
    """Causes for rows of `summary_rows`, from a full trace and explainer made for the first
    row that needs them (the one pass that keeps arrays runs only when something is wrong)."""
    made: list[tuple[Trace, Explainer]] = []

    def add(row: ScanRow) -> ScanRow:
        if not made:
            made.append(make())
        trace, explainer = made[0]
        return _with_causes(row, trace, graph, explainer)

    return add


def _upstream(graph: ModelGraph | None, act: Activation, target: Activation) -> bool:
    a, t = act.site, target.site
    if (a.path, a.call) == (t.path, t.call) or graph is None:
        return True
    return graph.depends(t.path, a.path, to_call=t.call, frm_call=a.call) is not False


def _row(act: Activation, grad: np.ndarray | None, class_name: str) -> ScanRow:
    status = status_of(grad) if act.is_float else "integer"
    stats = None if grad is None else gradient_stats(grad, top=0)
    flags: tuple[str, ...] = {"none": ("blocked",), "nonfinite": ("nonfinite",)}.get(status, ())
    if grad is not None and status != "nonfinite" and dead_units(grad) > DEAD_FRACTION:
        flags += ("dead",)
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
        if row.status == "ok" and g is not None:
            if g.mean_abs < VANISHING_RATIO * end.mean_abs:
                row = _replace(row, flags=(*row.flags, "vanishing"))
            elif g.mean_abs > EXPLODING_RATIO * end.mean_abs:
                row = _replace(row, flags=(*row.flags, "exploding"))
        out.append(row)
    return out


def softmax_note(model: Any, target: Any) -> str | None:
    """A note when the target is a softmax, whose sum is 1 per sample (gradient ~0 everywhere)."""
    from layergrad.explain import activation_name

    layers = [target] if target is not None else _output_layers(model)
    names = [getattr(layer, "name", "?") for layer in layers if activation_name(layer) == "softmax"]
    if not names:
        return None
    return (
        f"{', '.join(names)} ends in softmax: the sum of its outputs is 1 for every sample, so "
        "the gradient of that sum is zero up to rounding; scan with --to a layer before it, "
        "or a model saved with classifier_activation=None"
    )


def _output_layers(model: Any) -> list[Any]:
    try:
        return [t._keras_history.operation for t in model.outputs]
    except (AttributeError, ValueError):
        return list(model.layers[-1:])


def _with_causes(
    row: ScanRow, trace: Trace, graph: ModelGraph | None, explainer: Explainer
) -> ScanRow:
    if row.status not in ("none", "nonfinite", "zero"):
        return row
    i = next(i for i, a in enumerate(trace.activations) if a.site.ref == row.layer)
    source = trace.activations[i]
    target = trace.target or _reached_output(trace, graph, i)
    if target is None:
        cause = Cause(
            "not_downstream",
            row.layer,
            f"{row.layer!r} feeds none of the model's outputs",
            "remove the unused branch, or add it to the model's outputs",
        )
        return _replace(row, causes=(cause,))
    explainer.adopt(target.site, trace)
    return _replace(row, causes=tuple(explainer.causes(row.status, source, target)))


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


def _replace(row: ScanRow, **changes: Any) -> ScanRow:
    return replace(row, **changes)
