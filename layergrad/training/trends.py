"""The statistics the training rules judge a loss curve by: its trend against its own noise.

A mini-batch loss jumps from batch to batch; a rule that compares two values of the curve
by a fixed share fires on that noise or never. Here every change is measured in units of
the curve's own spread: `noise` is the batch-to-batch standard deviation (from the
differences of neighbouring steps, so a trend does not inflate it), a window's mean has
standard error noise / sqrt(steps in it), and a fitted slope has its standard error. Pure
NumPy on the recorded losses; nothing runs during training.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

MAD_TO_SD = 1.4826  # the median absolute deviation of a normal sample times this is its SD


def finite_prefix(losses: Sequence[float | None]) -> np.ndarray:
    """The losses up to the first missing or non-finite one."""
    values = itertools.takewhile(lambda v: v is not None and math.isfinite(v), losses)
    return np.asarray(list(values), np.float64)


def noise(curve: np.ndarray) -> float:
    """The batch-to-batch standard deviation of the loss: a robust spread of the differences
    of neighbouring steps over sqrt(2) (a slow trend adds almost nothing to them)."""
    if len(curve) < 3:
        return 0.0
    diffs = np.diff(curve)
    mad = float(np.median(np.abs(diffs - np.median(diffs))))
    spread = MAD_TO_SD * mad / math.sqrt(2.0)
    if spread == 0.0:  # more than half the differences are exactly equal: use them all
        spread = float(np.std(diffs)) / math.sqrt(2.0)
    return spread


@dataclass(frozen=True)
class Window:
    """A stretch of steps [start, stop) of the curve: its mean and that mean's standard error."""

    start: int
    stop: int
    mean: float
    error: float


def windows(curve: np.ndarray, count: int, spread: float | None = None) -> list[Window]:
    """The curve cut into `count` windows of (nearly) equal length."""
    spread = noise(curve) if spread is None else spread
    edges = np.linspace(0, len(curve), min(count, len(curve)) + 1).astype(int)
    return [
        Window(int(a), int(b), float(np.mean(curve[a:b])), spread / math.sqrt(b - a))
        for a, b in itertools.pairwise(edges)
        if b > a
    ]


def differ(a: Window, b: Window, k: float) -> float:
    """b's mean minus a's in standard errors of the difference (positive: b is higher)."""
    error = math.hypot(a.error, b.error)
    delta = b.mean - a.mean
    if error == 0.0:
        return 0.0 if delta == 0.0 else math.copysign(math.inf, delta)
    return delta / error


@dataclass(frozen=True)
class Slope:
    """A straight line fitted to a stretch of the curve: change per step and its standard error."""

    per_step: float
    error: float

    def z(self) -> float:
        """The slope in standard errors (0 for a line through noise-free flat values)."""
        if self.error == 0.0:
            return 0.0 if self.per_step == 0.0 else math.copysign(math.inf, self.per_step)
        return self.per_step / self.error


def slope(curve: np.ndarray, spread: float | None = None) -> Slope:
    """The least-squares slope of the curve against the step, with the standard error the
    batch-to-batch noise gives it."""
    n = len(curve)
    if n < 3:
        return Slope(0.0, math.inf)
    t = np.arange(n, dtype=np.float64)
    t -= t.mean()
    sxx = float(np.sum(t * t))
    per_step = float(np.sum(t * (curve - curve.mean())) / sxx)
    spread = noise(curve) if spread is None else spread
    return Slope(per_step, spread / math.sqrt(sxx))
