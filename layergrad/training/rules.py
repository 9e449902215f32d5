"""The findings of a monitored training run, each a rule over the record (docs/training.md).

Pure functions of the per-step losses and the checkpoints; no TensorFlow. Every finding
names a layer (None only when the model as a whole is meant) and the step, counted from 1,
where the problem starts.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from layergrad.core.fit_results import Checkpoint, LayerStats, TrainingFinding
from layergrad.core.vocab import Finding

MIN_STEPS = 20  # fewer steps than this: no rule over the loss curve runs
DIVERGE_FACTOR = 2.0  # the smoothed loss grows to this times its lowest value so far...
RATIO_HIGH = 1e-1  # ...while some layer's update ratio reaches this: diverging
FLAT_CHANGE = 0.01  # the smoothed loss moves less than this share from start to end...
RATIO_TINY = 1e-5  # ...and no layer's update ratio ever reaches this: not_learning
DEAD_THRESHOLD = 0.5  # a layer's dead fraction ends at or above this...
DEAD_GROWTH = 0.2  # ...having grown at least this much since the first checkpoint: dying_units
STALL_DECADES = 3.0  # a layer's update ratio this many decades below the others' median...
STALL_CHECKPOINTS = 3  # ...at each of at least this many final checkpoints: stalled_layer
CHANCE_BAND = 0.05  # the loss's last quarter sits within this share of the chance loss...
PLATEAU_STEPS = 100  # ...after at least this many steps (every run starts at chance)...
PLATEAU_SLOPE = 0.01  # ...no longer falling by this share of it over the last quarter


def findings(
    losses: Sequence[float | None],
    checkpoints: Sequence[Checkpoint],
    nonfinite: TrainingFinding | None,
    *,
    chance_loss: float | None = None,
) -> list[TrainingFinding]:
    """Every finding of a run, in the order of the rules (nonfinite first)."""
    out = [nonfinite] if nonfinite is not None else []
    stuck = not_learning(losses, checkpoints)
    for found in (
        diverging(losses, checkpoints, nonfinite is not None),
        stuck,
        # a loss that cannot move sits at chance for that reason: one finding, not two
        None if stuck else plateau_at_chance(losses, checkpoints, chance_loss),
    ):
        if found is not None:
            out.append(found)
    out += dying_units(checkpoints)
    out += stalled_layers(checkpoints)
    return out


def nonfinite_finding(
    checkpoint: Checkpoint, order: Sequence[str], epoch: int, batch: int
) -> TrainingFinding:
    """Where the first NaN/Inf came from: the first layer whose output has one, else (the
    forward pass being finite) the layer nearest the loss whose gradient has one."""
    where = f"step {checkpoint.step} (epoch {epoch}, batch {batch})"
    rows = {r.layer: r for r in checkpoint.layers}
    ordered = [rows[p] for p in order if p in rows]
    forward = next((r for r in ordered if r.nonfinite_activation), None)
    if forward is not None:
        return TrainingFinding(
            Finding.NONFINITE,
            forward.layer,
            checkpoint.step,
            f"{where}: the first NaN/Inf of the forward pass is in the output of "
            f"{forward.layer} ({forward.nonfinite_activation} values)",
        )
    backward = next((r for r in reversed(ordered) if r.nonfinite_gradient), None)
    if backward is not None:
        return TrainingFinding(
            Finding.NONFINITE,
            backward.layer,
            checkpoint.step,
            f"{where}: the forward pass is finite; the backward pass first gives NaN/Inf in "
            f"the gradient of {backward.layer} ({backward.nonfinite_gradient} values)",
        )
    last = ordered[-1].layer if ordered else None
    return TrainingFinding(
        Finding.NONFINITE,
        last,
        checkpoint.step,
        f"{where}: the loss is NaN/Inf although every layer's output is finite: the loss "
        "itself (e.g. log of 0) does not fit the outputs",
    )


def chance_loss(loss_name: str, output_units: Sequence[int]) -> float | None:
    """The cross-entropy of predicting a uniform class prior: log C, or log 2 for binary."""
    name = loss_name.lower().replace(" ", "_")
    if len(output_units) != 1 or "crossentropy" not in name.replace("_", ""):
        return None
    if "binary" in name:
        return math.log(2.0)
    classes = output_units[0]
    return math.log(classes) if classes > 1 else None


def smoothed(losses: Sequence[float | None]) -> list[float]:
    """The finite losses up to the first non-finite one, as a running median."""
    values: list[float] = []
    for loss in losses:
        if loss is None or not math.isfinite(loss):
            break
        values.append(loss)
    width = max(1, min(25, len(values) // 10))
    return [float(np.median(values[max(0, i - width + 1) : i + 1])) for i in range(len(values))]


def _ratios(checkpoint: Checkpoint) -> list[LayerStats]:
    return [
        r for r in checkpoint.layers if r.update_ratio is not None and math.isfinite(r.update_ratio)
    ]


def diverging(
    losses: Sequence[float | None], checkpoints: Sequence[Checkpoint], blew_up: bool
) -> TrainingFinding | None:
    """The loss grows (to twice its lowest, above where it started, or to NaN/Inf) while
    a layer's update ratio reaches `RATIO_HIGH`: the learning rate is too high."""
    curve = smoothed(losses)
    high = [(c, r) for c in checkpoints for r in _ratios(c) if r.update_ratio >= RATIO_HIGH]  # type: ignore[operator]
    if not high or not curve:
        return None
    lowest, start = curve[0], curve[0]
    grew_at = None
    for i, value in enumerate(curve):
        lowest = min(lowest, value)
        if value > DIVERGE_FACTOR * lowest and value > start:
            grew_at = i + 1
            break
    if grew_at is None and not blew_up:
        return None
    checkpoint, row = max(high, key=lambda cr: cr[1].update_ratio or 0.0)
    step = grew_at if grew_at is not None else len(curve) + 1
    end = "NaN/Inf" if grew_at is None else f"{curve[grew_at - 1]:.4g}"
    return TrainingFinding(
        Finding.DIVERGING,
        row.layer,
        step,
        f"the loss grows from {min(curve):.4g} to {end} by step {step} while {row.layer}'s "
        f"update ratio reaches {row.update_ratio:.3g} per step (step {checkpoint.step}; "
        "healthy is about 1e-3): the learning rate is too high",
    )


def not_learning(
    losses: Sequence[float | None], checkpoints: Sequence[Checkpoint]
) -> TrainingFinding | None:
    """The smoothed loss moves less than `FLAT_CHANGE` from start to end and every layer's
    update ratio stays below `RATIO_TINY`: the learning rate is too low, or the net is dead."""
    curve = smoothed(losses)
    if len(curve) < MIN_STEPS or not checkpoints:
        return None
    first, last = curve[len(curve) // 10], curve[-1]
    if abs(last - first) > FLAT_CHANGE * max(abs(first), 1e-12):
        return None
    rows = [r for c in checkpoints for r in _ratios(c)]
    if not rows:
        return None
    ratios = [r.update_ratio or 0.0 for r in rows]
    if max(ratios) >= RATIO_TINY:
        return None
    top = max(rows, key=lambda r: r.update_ratio or 0.0)
    return TrainingFinding(
        Finding.NOT_LEARNING,
        top.layer,
        checkpoints[0].step,
        f"the loss stays at {last:.4g} (moved {abs(last - first):.3g} over {len(curve)} steps) "
        f"and no layer's update ratio exceeds {top.update_ratio or 0.0:.3g} per step "
        f"({top.layer}; healthy is about 1e-3): raise the learning rate, or look for a dead "
        "network (layergrad scan --wrt weights)",
    )


def plateau_at_chance(
    losses: Sequence[float | None], checkpoints: Sequence[Checkpoint], chance: float | None
) -> TrainingFinding | None:
    """After `PLATEAU_STEPS` steps, the last quarter of the smoothed loss sits within
    `CHANCE_BAND` of the loss of predicting the class prior and no longer falls: the labels
    or the loss do not fit the task."""
    curve = smoothed(losses)
    if chance is None or chance <= 0 or len(curve) < PLATEAU_STEPS or not checkpoints:
        return None
    tail = curve[-max(2, len(curve) // 4) :]
    if abs(float(np.median(tail)) - chance) > CHANCE_BAND * chance:
        return None
    half = len(tail) // 2
    if float(np.median(tail[:half])) - float(np.median(tail[half:])) > PLATEAU_SLOPE * chance:
        return None  # still falling: not settled yet
    start = len(curve)
    while start > 0 and abs(curve[start - 1] - chance) <= 2 * CHANCE_BAND * chance:
        start -= 1
    layer = checkpoints[-1].layers[-1].layer if checkpoints[-1].layers else None
    return TrainingFinding(
        Finding.PLATEAU_AT_CHANCE,
        layer,
        start + 1,
        f"from step {start + 1} the loss sits at {float(np.median(tail)):.4g}, the loss of "
        f"predicting the class prior ({chance:.4g}): the model learns nothing from the "
        "inputs; check that the labels match the inputs and the loss fits the outputs",
    )


def dying_units(checkpoints: Sequence[Checkpoint]) -> list[TrainingFinding]:
    """A layer's dead fraction ends at `DEAD_THRESHOLD` or more, up `DEAD_GROWTH` since the
    first checkpoint; the step is where it crossed the threshold for good."""
    out = []
    for layer in _layer_names(checkpoints):
        series = [(c.step, _row(c, layer)) for c in checkpoints]
        fractions = [(s, r.dead_fraction) for s, r in series if r and r.dead_fraction is not None]
        if len(fractions) < 2:
            continue
        first, last = fractions[0][1], fractions[-1][1]
        if last is None or first is None:
            continue
        if last < DEAD_THRESHOLD or last - first < DEAD_GROWTH:
            continue
        index = len(fractions)
        while index > 0 and (fractions[index - 1][1] or 0.0) >= DEAD_THRESHOLD:
            index -= 1
        step = fractions[index][0]
        out.append(
            TrainingFinding(
                Finding.DYING_UNITS,
                layer,
                step,
                f"{layer}: {last:.0%} of its units get no gradient for a whole batch (was "
                f"{first:.0%} at step {fractions[0][0]}), dead from step {step}: lower the "
                "learning rate, or use LeakyReLU / better initialisation",
            )
        )
    return out


def stalled_layers(checkpoints: Sequence[Checkpoint]) -> list[TrainingFinding]:
    """A layer's update ratio stays `STALL_DECADES` decades below the median of the other
    layers' at each of the last `STALL_CHECKPOINTS` checkpoints (or more, back to its start)."""
    if len(checkpoints) < STALL_CHECKPOINTS:
        return []
    stalled: dict[str, list[tuple[int, bool]]] = {}
    for checkpoint in checkpoints:
        rows = _ratios(checkpoint)
        for row in rows:
            others = [r.update_ratio or 0.0 for r in rows if r.layer != row.layer]
            low = False
            if len(others) >= 2:
                median = float(np.median(others))
                low = median > 0 and (row.update_ratio or 0.0) < median / 10**STALL_DECADES
            stalled.setdefault(row.layer, []).append((checkpoint.step, low))
    out = []
    for layer, marks in stalled.items():
        run = 0
        while run < len(marks) and marks[len(marks) - 1 - run][1]:
            run += 1
        if run < STALL_CHECKPOINTS:
            continue
        step = marks[len(marks) - run][0]
        out.append(
            TrainingFinding(
                Finding.STALLED_LAYER,
                layer,
                step,
                f"{layer}: from step {step} its update ratio stays more than "
                f"{STALL_DECADES:g} decades below the other layers' median: it has stopped "
                "learning (a saturated or dead layer, or a learning rate too small for it)",
            )
        )
    return out


def _layer_names(checkpoints: Sequence[Checkpoint]) -> list[str]:
    names: dict[str, None] = {}
    for checkpoint in checkpoints:
        for row in checkpoint.layers:
            names.setdefault(row.layer, None)
    return list(names)


def _row(checkpoint: Checkpoint, layer: str) -> LayerStats | None:
    return next((r for r in checkpoint.layers if r.layer == layer), None)
