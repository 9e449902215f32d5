"""The findings read off the loss curve, each a test against the curve's own noise.

`trends.py` gives the batch-to-batch spread; a change counts when it is `SIGNIFICANT`
standard errors or more (a window mean's, or a fitted slope's), and "flat" means no change
reaches `FLAT` of them. The trivial loss is the loss of predicting the labels' prior: the
class frequencies for a cross-entropy, the targets' mean for squared error, their median for
absolute error (None when unknown). Pure functions of the recorded losses and checkpoints.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from layergrad.core.fit_results import Checkpoint, LayerStats
from layergrad.core.results import Reason
from layergrad.training import trends
from layergrad.training.finding_words import said

MIN_STEPS = 20  # fewer steps than this: no rule over the loss curve runs
SIGNIFICANT = 4.0  # a change of this many standard errors is real
FLAT = 3.0  # no change of this many standard errors: the loss does not move
RATIO_TINY = 1e-5  # not_learning: no layer's update ratio ever reaches this
RATIO_HIGH = 1e-1  # diverging: some layer's update ratio reaches this...
DIVERGE_FACTOR = 2.0  # ...or the loss grows to this times its lowest (and above its start)
START_STEPS = 3  # the loss the run starts at: the mean of its first steps
DIVERGE_SHARE = 0.1  # and the growth is at least this share of the lowest window mean
EARLY_SHARE = 0.1  # a blow-up at the start: within this share of the run (at least...
EARLY_STEPS = 10  # ...this many steps) a step's loss reaches DIVERGE_FACTOR times the first's
PLATEAU_STEPS = 100  # plateau_at_chance: at least this many steps (every run starts there)
CHANCE_ALLOWANCE = 0.03  # the fitted prior costs a little more than the prior itself
FALL_SHARE = 0.02  # a last half that falls less than this share of the trivial loss settled
OSCILLATION_STEPS = 50  # oscillating, slow_convergence: at least this many steps
SWINGS = 4  # oscillating: this many significant reversals of the windows' means...
SWING_SHARE = 0.1  # ...by at least this share of the trivial loss (or the starting loss)...
NOISE_SHARE = 0.5  # ...or a batch-to-batch spread of this share of the trivial loss
MARGIN = 0.5  # slow_convergence: a learning run gets this share below the trivial loss
LEVELLING = 0.5  # slow_convergence: a last quarter falling at under this share of the last
# half's rate is levelling off
STUCK_FACTOR = 1.5  # not_learning too: the loss stays this many times the trivial loss...
STUCK_SHARE = 0.1  # ...covering less than this share of the way down to it


def ratios(checkpoint: Checkpoint) -> list[LayerStats]:
    return [
        r for r in checkpoint.layers if r.update_ratio is not None and math.isfinite(r.update_ratio)
    ]


def _top_layer(checkpoints: Sequence[Checkpoint]) -> tuple[LayerStats | None, int]:
    """The layer row with the largest update ratio over the run, and its step."""
    found = [(r, c.step) for c in checkpoints for r in ratios(c)]
    return max(found, key=lambda rs: rs[0].update_ratio or 0.0, default=(None, 0))


def _head(checkpoints: Sequence[Checkpoint]) -> str | None:
    return checkpoints[-1].layers[-1].layer if checkpoints and checkpoints[-1].layers else None


def diverging(
    losses: Sequence[float | None], checkpoints: Sequence[Checkpoint], blew_up: bool
) -> Reason | None:
    """The loss grows (the `diverging` entry of `rules.RULES` says when; `blew_up_early`)."""
    curve = trends.finite_prefix(losses)
    top, top_step = _top_layer(checkpoints)
    if not len(curve):
        return None
    spread = trends.noise(curve)
    first = min(START_STEPS, len(curve))
    start = trends.Window(0, first, float(np.mean(curve[:first])), spread / math.sqrt(first))
    later = trends.windows(curve[first:], max(1, min(40, len(curve) // 5)), spread)
    parts = [start, *(replace(w, start=w.start + first, stop=w.stop + first) for w in later)]
    grew: trends.Window | None = None
    lowest = start
    for window in parts[1:]:
        if (
            trends.differ(lowest, window, SIGNIFICANT) >= SIGNIFICANT
            and trends.differ(start, window, SIGNIFICANT) >= SIGNIFICANT
            and window.mean - lowest.mean >= DIVERGE_SHARE * abs(lowest.mean)
        ):
            grew = window
            break
        if window.mean < lowest.mean:
            lowest = window
    high = top is not None and (top.update_ratio or 0.0) >= RATIO_HIGH
    early = blew_up_early(curve, spread, high)
    if early is not None:  # the first steps blew up: that is where the rate did its harm
        return _diverged(early[0], curve[0], early[1], top, top_step, high, checkpoints)
    if grew is not None:
        doubled = grew.mean >= DIVERGE_FACTOR * lowest.mean > 0
        if not (high or doubled):
            return None
    elif not (blew_up and high):
        return None
    step = grew.start + 1 if grew is not None else len(curve) + 1
    # said as the run's own losses (the windows' means are the test's): its lowest before
    # the step, and the step's
    low = float(np.min(curve[: step - 1]))
    end = math.nan if grew is None else float(curve[grew.start])
    return _diverged(step, low, end, top, top_step, high, checkpoints)


def _diverged(
    step: int,
    low: float,
    end: float,
    top: LayerStats | None,
    top_step: int,
    high: bool,
    checkpoints: Sequence[Checkpoint],
) -> Reason:
    """The `diverging` finding: the loss grew from `low` to `end` (NaN: to NaN/Inf) by `step`."""
    layer = top.layer if top is not None else _head(checkpoints)
    if top is None or not high:
        return said("diverging/grows", layer, step, low=low, end=end)
    ratio = top.update_ratio
    if math.isnan(end):
        return said("diverging/nonfinite", layer, step, low=low, ratio=ratio, top_step=top_step)
    return said("diverging/ratio", layer, step, low=low, end=end, ratio=ratio, top_step=top_step)


def blew_up_early(curve: np.ndarray, spread: float, high: bool) -> tuple[int, float] | None:
    """(step, loss) of a blow-up in the run's first steps: within `EARLY_SHARE` of the run (at
    least `EARLY_STEPS`) a step's loss reaches `DIVERGE_FACTOR` times the first step's, by
    more than `SIGNIFICANT` times the batch-to-batch spread, and then either some layer's
    update ratio reached `RATIO_HIGH` (`high`) or the run never gets back clearly below where
    it started (its last half's mean not `FLAT` standard errors under the first step). The
    peak must stand out where no update ratio is high: the run stays up there (its last
    half's mean `DIVERGE_FACTOR` times the first step's), or it is `SIGNIFICANT` spreads
    above every loss of the last half; a loss about as high later, with small steps, is the
    run's own spread (a batch of one sample, a flat run's large batches), not a blow-up. A
    rate too high wrecks a run in its first steps and leaves it at the trivial loss, which
    the windows of `diverging` (whose first is those steps) never see grow."""
    if len(curve) < MIN_STEPS or curve[0] <= 0:
        return None
    early = curve[: max(EARLY_STEPS, int(EARLY_SHARE * len(curve)))]
    peak = int(np.argmax(early))
    grown = float(early[peak]) - float(curve[0])
    if early[peak] < DIVERGE_FACTOR * curve[0] or grown <= SIGNIFICANT * spread:
        return None
    half = curve[len(curve) // 2 :]
    stays = float(np.mean(half)) >= DIVERGE_FACTOR * curve[0]
    if not (stays or high) and early[peak] <= float(np.max(half)) + SIGNIFICANT * spread:
        return None
    recovered = float(np.mean(half)) < curve[0] - FLAT * spread / math.sqrt(len(half))
    if recovered and not high:
        return None
    return peak + 1, float(early[peak])


def not_learning(
    losses: Sequence[float | None], checkpoints: Sequence[Checkpoint], chance: float | None = None
) -> Reason | None:
    """The loss does not move while the update ratios stay tiny, or it stays far above the
    trivial loss (`stuck_above`): the `not_learning` entry of `rules.RULES`."""
    curve = trends.finite_prefix(losses)
    if len(curve) < MIN_STEPS or not checkpoints:
        return None
    spread = trends.noise(curve)
    parts = trends.windows(curve, 4, spread)
    moved = trends.differ(parts[0], parts[-1], FLAT)
    line = trends.slope(curve, spread)
    top, _ = _top_layer(checkpoints)
    if top is None:
        return None
    change = parts[-1].mean - parts[0].mean
    if abs(moved) >= FLAT or abs(line.z()) >= FLAT or (top.update_ratio or 0.0) >= RATIO_TINY:
        return stuck_above(curve, parts, chance, top, checkpoints[0].step)
    return said("not_learning/flat", top.layer, checkpoints[0].step, level=parts[-1].mean,
                steps=len(curve), change=change, moved=abs(moved), spread=spread,
                ratio=top.update_ratio or 0.0, top=top.layer)  # fmt: skip


def stuck_above(
    curve: np.ndarray,
    parts: Sequence[trends.Window],
    chance: float | None,
    top: LayerStats,
    step: int,
) -> Reason | None:
    """`not_learning` of a loss that stays `STUCK_FACTOR` times above the trivial loss: over
    the run it covers less than `STUCK_SHARE` of the way down to it, with a noise small enough
    to tell (`FLAT` standard errors of the difference are under `STUCK_SHARE` of that way too),
    whether or not that small fall is beyond the noise. A model stuck there learns next to
    nothing of the inputs: its steps are too small for the targets' scale (an MAE with SGD
    moves each weight by at most the learning rate a step), or the net is dead."""
    if chance is None or chance <= 0:
        return None
    first, last = parts[0], parts[-1]
    gap = first.mean - chance
    if last.mean < STUCK_FACTOR * chance or gap <= 0:
        return None
    travelled = (first.mean - last.mean) / gap
    sure = FLAT * math.hypot(first.error, last.error) / gap
    if travelled >= STUCK_SHARE or sure >= STUCK_SHARE:
        return None
    return said("not_learning/stuck", top.layer, step, level=last.mean, steps=len(curve),
                times=last.mean / chance, chance=chance, travelled=max(travelled, 0.0),
                top=top.layer, ratio=top.update_ratio or 0.0)  # fmt: skip


def plateau_at_chance(
    losses: Sequence[float | None], checkpoints: Sequence[Checkpoint], chance: float | None
) -> Reason | None:
    """The loss settles at the trivial loss: the `plateau_at_chance` entry of `rules.RULES`."""
    curve = trends.finite_prefix(losses)
    if chance is None or chance <= 0 or len(curve) < PLATEAU_STEPS or not checkpoints:
        return None
    spread = trends.noise(curve)
    tail = curve[-max(2, len(curve) // 4) :]
    level = float(np.mean(tail))
    band = FLAT * spread / math.sqrt(len(tail)) + CHANCE_ALLOWANCE * chance
    if abs(level - chance) > band:
        return None
    half = curve[len(curve) // 2 :]  # (a half has the power a quarter lacks)
    line = trends.slope(half, spread)
    if line.z() <= -FLAT and -line.per_step * len(half) >= FALL_SHARE * chance:
        return None  # still falling: not settled yet (slow, perhaps)
    parts = trends.windows(curve, max(2, min(20, len(curve) // 10)), spread)
    start = len(parts)
    while start > 0 and abs(parts[start - 1].mean - chance) <= band + FLAT * parts[0].error:
        start -= 1
    step = parts[min(start, len(parts) - 1)].start + 1
    return said("plateau_at_chance", _head(checkpoints), step, level=level, chance=chance)


def oscillating(
    losses: Sequence[float | None], checkpoints: Sequence[Checkpoint], chance: float | None
) -> Reason | None:
    """The loss swings without a trend, or jumps from batch to batch: the `oscillating` entry
    of `rules.RULES`."""
    curve = trends.finite_prefix(losses)
    if len(curve) < OSCILLATION_STEPS or not checkpoints:
        return None
    spread = trends.noise(curve)
    parts = trends.windows(curve, max(10, min(25, len(curve) // 10)), spread)
    gap = SIGNIFICANT * math.sqrt(2.0) * parts[0].error
    reversals, amplitude = _reversals([w.mean for w in parts], gap)
    net = parts[0].mean - parts[-1].mean
    # heavy-tailed batch losses (a batch of one sample) hide from the robust spread: the
    # plain standard deviation of the differences here, against the trivial loss (or the
    # loss the run starts at), over the second half of the run: a loss that starts far above
    # the trivial loss jumps by as much while it falls, and settles
    jumps = float(np.std(np.diff(curve[len(curve) // 2 :]))) / math.sqrt(2.0)
    reference = chance if chance is not None and chance > 0 else abs(parts[0].mean)
    noisy = reference > 0 and jumps >= NOISE_SHARE * reference
    swinging = (
        reversals >= SWINGS
        and amplitude > abs(net)
        and amplitude >= SWING_SHARE * reference  # not the spikes of a converged loss
    )
    if not (noisy or swinging):
        return None
    top, _ = _top_layer(checkpoints)
    layer = top.layer if top is not None else _head(checkpoints)
    step = parts[0].start + 1
    if swinging:
        return said("oscillating/swings", layer, step, reversals=reversals,
                    amplitude=amplitude, steps=len(curve))  # fmt: skip
    return said("oscillating/jumps", layer, step, jumps=jumps, reference=reference,
                steps=len(curve))  # fmt: skip


def _reversals(means: Sequence[float], gap: float) -> tuple[int, float]:
    """How often a sequence changes direction by more than `gap` (a zig-zag with that
    hysteresis), and the largest such swing."""
    if gap <= 0 or len(means) < 3:
        return 0, 0.0
    direction, pivot, extreme = 0, means[0], means[0]
    count, largest = 0, 0.0
    for value in means[1:]:
        if direction == 0:
            if abs(value - pivot) > gap:
                direction, extreme = (1 if value > pivot else -1), value
        elif direction * (value - extreme) > 0:
            extreme = value  # further the same way
        elif abs(extreme - value) > gap:  # turned round by more than the gap
            count, largest = count + 1, max(largest, abs(extreme - pivot))
            direction, pivot, extreme = -direction, extreme, value
    return count, largest


def slow_convergence(
    losses: Sequence[float | None], checkpoints: Sequence[Checkpoint], chance: float | None
) -> Reason | None:
    """The loss falls too slowly to get below the trivial loss in the run, and says how many
    steps it needs: the `slow_convergence` entry of `rules.RULES`."""
    curve = trends.finite_prefix(losses)
    if chance is None or chance <= 0 or len(curve) < OSCILLATION_STEPS or not checkpoints:
        return None
    spread = trends.noise(curve)
    half = curve[len(curve) // 2 :]
    line = trends.slope(half, spread)
    end = float(np.mean(curve[-max(2, len(curve) // 10) :]))
    target = (1.0 - MARGIN) * chance
    if line.z() > -FLAT or end <= target:
        return None
    # a loss levelling off above the target converges where it converges (more steps would
    # not take it there): its last quarter falls at under `LEVELLING` of the last half's
    # rate, shallower than that rate by `FLAT` standard errors of the quarter's slope (with
    # the last half's own noise: the steep start of a curve inflates the whole run's)
    quarter = trends.slope(curve[-max(3, len(curve) // 4) :], trends.noise(half))
    shallower = quarter.per_step - line.per_step
    if quarter.per_step > LEVELLING * line.per_step and shallower >= FLAT * quarter.error:
        return None
    needed = math.ceil((end - target) / -line.per_step)
    if needed <= len(curve):
        return None
    return said("slow_convergence", _head(checkpoints), len(curve) // 2 + 1,
                fall=-line.per_step, end=end, needed=needed, margin=MARGIN, chance=chance,
                times=needed / len(curve))  # fmt: skip
