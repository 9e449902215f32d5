"""The findings of a monitored training run, each a rule over the record (docs/training.md).

Pure functions of the per-step losses and the checkpoints; no TensorFlow. Every finding
names a layer (None only when the model as a whole is meant) and the step, counted from 1,
where the problem starts.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from layergrad.core.fit_results import Checkpoint
from layergrad.core.results import Reason
from layergrad.core.vocab import Finding
from layergrad.model.loss_forms import read_loss
from layergrad.training.curve_rules import (
    MIN_STEPS,
    PLATEAU_STEPS,
    diverging,
    not_learning,
    oscillating,
    plateau_at_chance,
    slow_convergence,
)
from layergrad.training.layer_rules import (
    Facts,
    constant_predictions,
    dying_units,
    exploding,
    stalled_layers,
    vanishing,
)

BLOWN_UP = 10.0  # a loss this many times the trivial loss has blown up

__all__ = [
    "MIN_STEPS",
    "PLATEAU_STEPS",
    "chance_loss",
    "constant_predictions",
    "diverging",
    "dying_units",
    "exploding",
    "findings",
    "nonfinite_finding",
    "not_learning",
    "oscillating",
    "plateau_at_chance",
    "slow_convergence",
    "stalled_layers",
    "vanishing",
]


def findings(
    losses: Sequence[float | None],
    checkpoints: Sequence[Checkpoint],
    nonfinite: Reason | None,
    *,
    chance_loss: float | None = None,
    heads: Sequence[str] = (),
    facts: Facts | None = None,
) -> list[Reason]:
    """Every finding of a run, in the order of the rules (nonfinite first, then the learning
    rate when the loss grew or blew up in its first steps).

    One cause, one finding: a head whose predictions are constant explains a loss that does
    not move or sits at the trivial loss; a loss that grows, or cannot move, explains one
    that sits at the trivial loss or converges slowly (a growing loss may swing as well);
    layers whose gradient has vanished are not also stalled. `facts` (each layer's activation
    and units) decide which hint each finding gives.
    """
    out = [nonfinite] if nonfinite is not None else []
    grows = diverging(losses, checkpoints, nonfinite is not None)
    # the loss blew up: it grew, turned NaN/Inf, or reached BLOWN_UP times the trivial loss
    # (unscaled inputs or a scaled-up initialisation start there)
    seen = [v for v in losses if v is not None and math.isfinite(v)]
    blown = chance_loss is not None and bool(seen) and max(seen) >= BLOWN_UP * chance_loss
    unstable = grows is not None or nonfinite is not None or blown
    # the per-layer numbers of a step with NaN/Inf (and after it) say nothing of the layers
    finite = [c for c in checkpoints if _finite(c)]
    dying = dying_units(finite)
    constant = constant_predictions(finite, heads, facts, grows is not None, bool(dying))
    curve: list[Reason] = []
    if grows is not None:
        curve.append(grows)
        # a loss that also jumps from batch to batch: the batch is too small for the rate
        swings = oscillating(losses, checkpoints, chance_loss)
        curve += [swings] if swings is not None else []
    elif not constant:
        for rule in (
            lambda: not_learning(losses, checkpoints, chance_loss),
            lambda: plateau_at_chance(losses, checkpoints, chance_loss),
            lambda: oscillating(losses, checkpoints, chance_loss),
            lambda: slow_convergence(losses, checkpoints, chance_loss),
        ):
            found = rule()
            if found is not None:
                curve.append(found)
                break
    out += curve + constant
    out += dying
    gone = vanishing(finite, facts, [str(f.layer) for f in dying])
    skip: list[str] = []
    if gone is not None:
        order = [r.layer for r in finite[-1].layers]
        skip = order[: order.index(gone.layer) + 1] if gone.layer in order else [str(gone.layer)]
    out += stalled_layers(finite, skip)
    out += [f for f in (gone, exploding(finite, unstable)) if f is not None]
    return out


def _finite(checkpoint: Checkpoint) -> bool:
    loss = checkpoint.loss
    return (loss is None or math.isfinite(loss)) and not any(
        r.nonfinite_gradient or r.nonfinite_activation for r in checkpoint.layers
    )


def nonfinite_finding(
    checkpoint: Checkpoint, order: Sequence[str], epoch: int, batch: int
) -> Reason:
    """Where the first NaN/Inf came from: an input of the step's batch that holds one (the
    data), else the first layer whose output has one, else (the forward pass being finite)
    the layer nearest the loss whose gradient has one."""
    layer, text = _nonfinite_source(checkpoint, order)
    where = f"step {checkpoint.step} (epoch {epoch}, batch {batch})"
    return Reason(Finding.NONFINITE, f"{where}: {text}", layer=layer, step=checkpoint.step)


def _nonfinite_source(checkpoint: Checkpoint, order: Sequence[str]) -> tuple[str | None, str]:
    """(the input or layer, what it shows) for `nonfinite_finding`."""
    if checkpoint.nonfinite_inputs:  # the data, before any layer
        name, count, row = checkpoint.nonfinite_inputs[0]
        return name, (
            f"the training data holds NaN/Inf: input {name!r} of the step's batch has "
            f"{count} NaN/Inf values, the first in sample {row} of the batch; clean the data "
            "(the model is not at fault)"
        )
    rows = {r.layer: r for r in checkpoint.layers}
    ordered = [rows[p] for p in order if p in rows]
    forward = next((r for r in ordered if r.nonfinite_activation), None)
    if forward is not None:
        return forward.layer, (
            "the first NaN/Inf of the forward pass is in the output of "
            f"{forward.layer} ({forward.nonfinite_activation} values)"
        )
    backward = next((r for r in reversed(ordered) if r.nonfinite_gradient), None)
    if backward is not None:
        return backward.layer, (
            "the forward pass is finite; the backward pass first gives NaN/Inf in "
            f"the gradient of {backward.layer} ({backward.nonfinite_gradient} values)"
        )
    return ordered[-1].layer if ordered else None, (
        "the loss is NaN/Inf although every layer's output is finite: the loss "
        "itself (e.g. log of 0) does not fit the outputs"
    )


def chance_loss(loss_name: str, output_units: Sequence[int]) -> float | None:
    """The cross-entropy of predicting a uniform class prior: log C, or log 2 for binary.
    The name may be any alias Keras accepts (`"bce"`, `"BinaryCrossentropy"`)."""
    read = read_loss(loss_name.strip())
    name = (read.name if read is not None and read.known else loss_name).lower()
    name = name.replace(" ", "_")
    if len(output_units) != 1 or "crossentropy" not in name.replace("_", ""):
        return None
    if "binary" in name:
        return math.log(2.0)
    classes = output_units[0]
    return math.log(classes) if classes > 1 else None
