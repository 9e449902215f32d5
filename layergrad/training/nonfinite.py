"""Where a monitored run's first NaN/Inf came from (the `nonfinite` finding of
`rules.RULES`): its weights, its batch, the forward or the backward pass. Pure functions of a
checkpoint; no TensorFlow.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from layergrad.core.fit_results import Checkpoint
from layergrad.core.results import Reason
from layergrad.training.finding_words import said


def all_finite(checkpoint: Checkpoint) -> bool:
    """Whether a checkpoint's loss and every layer's numbers are finite."""
    loss = checkpoint.loss
    return (loss is None or math.isfinite(loss)) and not any(
        r.nonfinite_gradient or r.nonfinite_activation or r.nonfinite_weight
        for r in checkpoint.layers
    )


@dataclass(frozen=True)
class BadBatch:
    """A step whose batch held NaN/Inf (its loss finite): the step (from 1), its epoch and
    batch (from 0), and the input's name (None: the model has several float inputs)."""

    step: int
    epoch: int
    batch: int
    input: str | None


def nonfinite_finding(
    checkpoint: Checkpoint,
    order: Sequence[str],
    epoch: int,
    batch: int,
    since: int | None = None,
    bad_batch: BadBatch | None = None,
    partial: Collection[str] = (),
) -> Reason:
    """Where the first NaN/Inf came from: the layer nearest the loss whose weights hold one at
    the step's start (an update left it: a NaN/Inf only in that update's gradients), else an
    input of the step's batch that holds one (the data), else the first layer whose output
    has one, else (the forward pass being finite) the layer nearest the loss whose gradient
    has one. `since`: the step of the checkpoint before, whose weights were finite.

    NaN/Inf weights come from a batch that held NaN/Inf since then (`bad_batch`: the data,
    `nonfinite/batch`), else from the step before (`nonfinite/update`) when that is certain:
    the checkpoint before is that step, or the layer's output holds NaN/Inf and a batch reads
    all of its weights (then the losses of the steps before would have, had its weights held
    them; not so for the layers in `partial`, an Embedding's rows). Else the steps they may
    come from are given (`nonfinite/updates`: a ReLU after the layer can hide them from the
    loss), or, at the first step, the fit began with them (`nonfinite/weights`)."""
    step, where = checkpoint.step, {"epoch": epoch, "batch": batch}
    rows = {r.layer: r for r in checkpoint.layers}
    ordered = [rows[p] for p in order if p in rows]
    held = [r for r in ordered if r.nonfinite_weight]
    if held:
        updated, first = held[-1], since or 1
        facts = {"held": ", ".join(f"{r.layer} ({r.nonfinite_weight} values)" for r in held)}
        if step == 1:
            return said("nonfinite/weights", updated.layer, step, **where, **facts)
        if bad_batch is not None and first <= bad_batch.step < step:
            return said("nonfinite/batch", bad_batch.input, bad_batch.step,
                        epoch=bad_batch.epoch, batch=bad_batch.batch, found=step, **facts,
                        input="one of its inputs" if bad_batch.input is None
                        else f"input {bad_batch.input!r}")  # fmt: skip
        exact = updated.nonfinite_activation and updated.layer not in partial
        if first >= step - 1 or exact:
            return said("nonfinite/update", updated.layer, step, **where, **facts)
        return said("nonfinite/updates", updated.layer, step, **where, **facts, since=first,
                    before=step - 1)  # fmt: skip
    if checkpoint.nonfinite_inputs:  # the data, before any layer
        name, count, row = checkpoint.nonfinite_inputs[0]
        return said("nonfinite/data", name, step, **where, count=count, row=row)
    forward = next((r for r in ordered if r.nonfinite_activation), None)
    if forward is not None:
        count = forward.nonfinite_activation
        return said("nonfinite/forward", forward.layer, step, **where, count=count)
    backward = next((r for r in reversed(ordered) if r.nonfinite_gradient), None)
    if backward is not None:
        count = backward.nonfinite_gradient
        return said("nonfinite/backward", backward.layer, step, **where, count=count)
    return said("nonfinite/loss", ordered[-1].layer if ordered else None, step, **where)
