"""The findings read off the per-layer numbers of the checkpoints: dead units (dead from the
start, or dying in training), stalled,
vanishing and exploding gradients, a head whose output does not vary across the batch.

Each is a run of checkpoints ending at the last one (a state the run ends in, not a moment
of it); the step is where that run starts. Pure functions of the checkpoints.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from layergrad.core.fit_results import Checkpoint, LayerStats
from layergrad.core.results import Reason
from layergrad.training.curve_rules import ratios
from layergrad.training.finding_words import said

DEAD_THRESHOLD = 0.5  # a layer's dead fraction ends at or above this...
DEAD_GROWTH = 0.2  # ...having grown at least this much since the first checkpoint: dying_units
DECADES = 3.0  # a layer's update ratio this far below the others' median (stalled_layer); the
# relative gradient of the first layers this far below the head's (vanishing), or above it
# (exploding)...
LASTING = 3  # ...at each of this many final checkpoints (dying_units and stalled_layer too)
DEPTH_LAYERS = 2  # ...for at least this many layers from the input...
FINAL_CHECKPOINTS = 2  # ...at each of this many final ones (vanishing, exploding,
# constant_predictions)
EXPLODE_RATIO = 1.0  # exploding too: one step moves a layer's weights by their own size


@dataclass(frozen=True)
class LayerFacts:
    """What a hint may rest on: a layer's activation ('relu', 'sigmoid', 'tanh', 'softmax' or
    None) and its units (a Dense-like layer's, else None). A hint is given only where its
    premise holds: no "use sigmoid for one unit" on a head of four, no "ReLU instead of
    sigmoid" on a net of ReLU layers."""

    activation: str | None
    units: int | None


Facts = Mapping[str, LayerFacts]  # by layer path; empty: not known (every hint, as a choice)


def _final_run(marks: Sequence[tuple[int, bool]]) -> tuple[int, int]:
    """(length of the run of True marks ending at the last one, step where it starts)."""
    run = 0
    while run < len(marks) and marks[len(marks) - 1 - run][1]:
        run += 1
    return run, (marks[len(marks) - run][0] if run else 0)


def constant_predictions(
    checkpoints: Sequence[Checkpoint],
    heads: Sequence[str] = (),
    facts: Facts | None = None,
    unstable: bool = False,
    dead: bool = False,
    born_dead: bool = False,
) -> list[Reason]:
    """An output layer (`heads`; default the last layer called) whose every unit has the same
    value for every sample of the batch at each of the last `FINAL_CHECKPOINTS`
    checkpoints or more: its predictions ignore the inputs. The hint follows the head's facts
    (`constant_hint`); `unstable`: the loss blew up first; `dead`: ReLU units died in training
    (`dying_units`); `born_dead`: a layer's units were dead from the start (`dead`)."""
    if not checkpoints:
        return []
    names = list(heads) or ([checkpoints[-1].layers[-1].layer] if checkpoints[-1].layers else [])
    out = []
    for head in names:
        rows = [(c.step, _row(c, head)) for c in checkpoints]
        run, step = _final_run([(s, r is not None and r.constant_fraction == 1.0) for s, r in rows])
        if run < min(FINAL_CHECKPOINTS, len(checkpoints)) or run < 2:
            continue
        known = (facts or {}).get(head)
        name = f"constant_predictions/{constant_hint(known, unstable, dead, born_dead)}"
        activation = known.activation if known is not None else None
        out.append(said(name, head, step, run=run, activation=activation,
                        units=known.units if known is not None else None))  # fmt: skip
    return out


def constant_hint(
    head: LayerFacts | None, unstable: bool, dead: bool = False, born_dead: bool = False
) -> str:
    """Which hint a constant head gets (a `constant_predictions/` variant of
    `finding_words.SAYS`), from what is known of it and of the run."""
    if head is not None and head.activation == "softmax" and head.units == 1:
        return "one_unit"
    if unstable:
        return "blew_up"
    if dead:
        return "died"
    if born_dead:  # the layers before it are dead: not its own saturation
        return "other"
    if head is None:
        return "unknown"
    if head.activation in ("sigmoid", "tanh"):
        return "saturated"
    return "relu" if head.activation == "relu" else "other"


def relative_gradients(checkpoint: Checkpoint) -> list[tuple[str, float]]:
    """(layer, |grad| / |weights|) of each layer with weights, in forward order."""
    return [
        (row.layer, row.grad_l2 / row.weight_l2)
        for row in checkpoint.layers
        if row.grad_l2 is not None and row.weight_l2 and math.isfinite(row.grad_l2)
    ]


def _depth_marks(
    checkpoints: Sequence[Checkpoint], below: bool
) -> dict[str, list[tuple[int, bool]]]:
    """Per layer, per checkpoint: whether it is one of the first layers (from the input, at
    least `DEPTH_LAYERS` and half of those up to the deepest) whose relative gradient is
    `DECADES` below (or above) the head's."""
    marks: dict[str, list[tuple[int, bool]]] = {}
    for c in checkpoints:
        rows = relative_gradients(c)
        if len(rows) < DEPTH_LAYERS + 1:
            continue
        head = rows[-1][1]
        if head <= 0:
            continue
        line = head / 10**DECADES if below else head * 10**DECADES
        beyond = [(v < line) if below else (v > line) for _, v in rows[:-1]]
        # the first layers: those beyond the line up to the deepest one, at least
        # DEPTH_LAYERS of them and at least half the layers before it (a first layer that
        # recovers while its successors stay down is still a vanished stack)
        last = max((i for i, b in enumerate(beyond) if b), default=-1)
        count = sum(beyond[: last + 1])
        deep = last >= 0 and count >= DEPTH_LAYERS and 2 * count >= last + 1
        for i, (layer, _) in enumerate(rows):
            marks.setdefault(layer, []).append((c.step, deep and i <= last and beyond[i]))
    return marks


def _depth_layers(checkpoints: Sequence[Checkpoint], below: bool) -> list[tuple[str, int]]:
    """(layer, step) of the first layers whose relative gradient stays `DECADES` below (or
    above) the head's at the last `FINAL_CHECKPOINTS` or more, from the input."""
    runs = {layer: _final_run(series) for layer, series in _depth_marks(checkpoints, below).items()}
    return [(layer, step) for layer, (run, step) in runs.items() if run >= FINAL_CHECKPOINTS]


def vanishing(
    checkpoints: Sequence[Checkpoint],
    facts: Facts | None = None,
    dead: Sequence[str] = (),
    born_dead: Sequence[str] = (),
) -> Reason | None:
    """The first layers' relative gradient far below the head's: the `vanishing` entry of
    `rules.RULES`. Its hint names sigmoid / tanh, or dead ReLU units (`dead`: the layers
    `dying_units` found), only where the layers have them. None when one of those layers is
    dead from the start (`born_dead`: `dead_from_start`'s, whose finding explains it)."""
    found = _depth_layers(checkpoints, below=True)
    layers = [layer for layer, _ in found]
    if not found or set(layers) & set(born_dead):
        return None
    known = [(facts or {}).get(layer) for layer in layers]
    kinds = {f.activation for f in known if f is not None}
    hint = ("unknown" if not facts else "squashing" if kinds & {"sigmoid", "tanh"}
            else "dead" if set(layers) & set(dead) else "other")  # fmt: skip
    top, step = found[-1]  # the layer nearest the output of the first layers
    return said(f"vanishing/{hint}", top, step, count=len(found), decades=DECADES)


def exploding(checkpoints: Sequence[Checkpoint], unstable: bool = False) -> Reason | None:
    """The first layers' relative gradient `DECADES` above the head's at the last
    `FINAL_CHECKPOINTS` or more; or one step that moves a layer's weights by `EXPLODE_RATIO`
    of their own size (healthy steps move them by about 1e-3) at `FINAL_CHECKPOINTS`
    checkpoints in a row, or at one when the loss blew up (`unstable`: it diverged or turned
    NaN/Inf). (An adaptive optimizer's real step is bounded by its learning rate: a large
    gradient alone, with a loss that trains well, is no explosion.)"""
    found = _depth_layers(checkpoints, below=False)
    if found:
        top, step = found[-1]
        return said("exploding/depth", top, step, count=len(found), decades=DECADES)
    need = 1 if unstable else FINAL_CHECKPOINTS
    run: list[tuple[Checkpoint, LayerStats]] = []
    for c in checkpoints:
        huge = [r for r in ratios(c) if (r.update_ratio or 0.0) >= EXPLODE_RATIO]
        run = [*run, (c, max(huge, key=lambda r: r.update_ratio or 0.0))] if huge else []
        if len(run) < need:
            continue
        first, row = run[0]
        return said("exploding/steps", row.layer, first.step, ratio=row.update_ratio)
    return None


def dying_units(checkpoints: Sequence[Checkpoint]) -> list[Reason]:
    """Layers whose dead fraction grew past the threshold and stayed there: the `dying_units`
    entry of `rules.RULES`; the step is where it crossed the threshold for good."""
    out = []
    for layer in dict.fromkeys(row.layer for c in checkpoints for row in c.layers):
        series = [(c.step, _row(c, layer)) for c in checkpoints]
        fractions = [(s, r.dead_fraction) for s, r in series if r and r.dead_fraction is not None]
        if len(fractions) < 2:
            continue
        first, last = fractions[0][1], fractions[-1][1]
        if last < DEAD_THRESHOLD or last - first < DEAD_GROWTH:
            continue
        run, step = _final_run([(s, f >= DEAD_THRESHOLD) for s, f in fractions])
        if run < min(LASTING, len(fractions) - 1):
            continue  # dead on the last batch or two only: a small batch's chance, not a state
        out.append(said("dying_units", layer, step, fraction=last, first=first,
                        first_step=fractions[0][0]))  # fmt: skip
    return out


def dead_from_start(checkpoints: Sequence[Checkpoint], facts: Facts | None = None) -> list[Reason]:
    """Layers whose dead fraction is at the threshold or above at every checkpoint from the
    run's first (measured there, and at least 2) without growing by `DEAD_GROWTH` (units that
    die in training are `dying_units`'): their units were dead before training could kill
    them (a bias or an initialisation that holds them at 0 for every sample), so lowering the
    learning rate would not help: the `dead` entry of `rules.RULES`. Only the first such layer
    (in the order the model calls them: the layers after it are dead because their inputs
    are), and, where `facts` are known, only one whose activation is ReLU (a Dropout or a
    pooling layer after it passes its zeros on)."""
    for layer in dict.fromkeys(row.layer for c in checkpoints for row in c.layers):
        series = [(c.step, _row(c, layer)) for c in checkpoints]
        fractions = [(s, r.dead_fraction) for s, r in series if r and r.dead_fraction is not None]
        if len(fractions) < 2 or fractions[0][0] != series[0][0]:
            continue  # one batch says little; unmeasured at the first: not known from the start
        values = [f for _, f in fractions]
        if min(values) < DEAD_THRESHOLD or values[-1] - values[0] >= DEAD_GROWTH:
            continue
        known = (facts or {}).get(layer)
        if facts and (known is None or known.activation != "relu"):
            continue
        name = "dead/all" if min(values) >= 1.0 else "dead/from_start"
        return [said(name, layer, fractions[0][0], fraction=min(values), last=fractions[-1][0])]
    return []


def stalled_layers(checkpoints: Sequence[Checkpoint], skip: Sequence[str] = ()) -> list[Reason]:
    """Layers whose update ratio stays far below the others': the `stalled_layer` entry of
    `rules.RULES`; the layers in `skip` (named by another finding) are left out."""
    if len(checkpoints) < LASTING:
        return []
    stalled: dict[str, list[tuple[int, bool]]] = {}
    for checkpoint in checkpoints:
        rows = ratios(checkpoint)
        for row in rows:
            others = [r.update_ratio or 0.0 for r in rows if r.layer != row.layer]
            low = False
            if len(others) >= 2:
                median = statistics.median(others)  # (finite: `ratios`; numpy's is 30x slower)
                low = median > 0 and (row.update_ratio or 0.0) < median / 10**DECADES
            stalled.setdefault(row.layer, []).append((checkpoint.step, low))
    runs = {layer: _final_run(marks) for layer, marks in stalled.items() if layer not in skip}
    return [
        said("stalled_layer", layer, step, decades=DECADES)
        for layer, (run, step) in runs.items()
        if run >= LASTING
    ]


def _row(checkpoint: Checkpoint, layer: str) -> LayerStats | None:
    return next((r for r in checkpoint.layers if r.layer == layer), None)
