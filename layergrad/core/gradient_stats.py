"""Numbers from gradient arrays (numpy only)."""

from __future__ import annotations

import numpy as np

from layergrad.core.results import GradientStats
from layergrad.core.vocab import Finding, Status

DEAD_FRACTION = 0.5  # more than this share of a layer's units exactly zero everywhere: dead


def dead_fraction(value: np.ndarray) -> float:
    """Fraction of units (last axis) that are exactly zero for every sample of the batch.

    Example:
        >>> dead_fraction(np.array([[0.0, 1.0], [0.0, 2.0]]))
        0.5
    """
    if value.ndim == 0 or value.size == 0:
        return float(not np.any(value))
    return float(np.mean(np.all(value.reshape(-1, value.shape[-1]) == 0, axis=0)))


def mean_abs(value: np.ndarray) -> float:
    """The mean |x| of an array, in float64; 0 when it is empty."""
    return float(np.mean(np.abs(np.asarray(value, dtype=np.float64)))) if np.size(value) else 0.0


def status_flags(status: Status, dead: float | None) -> tuple[Finding, ...]:
    """The flag a row's status gives: `blocked` (no gradient), `nonfinite`, or `dead` when more
    than DEAD_FRACTION of its units (`dead`, None when unknown) get exactly zero everywhere.

    Example:
        >>> status_flags(Status.OK, 0.75)
        (<Finding.DEAD: 'dead'>,)
    """
    if status in (Status.NONE, Status.NONFINITE):
        return (Finding.BLOCKED if status == Status.NONE else Finding.NONFINITE,)
    return (Finding.DEAD,) if dead is not None and dead > DEAD_FRACTION else ()


def status_of(grad: np.ndarray | None) -> Status:
    """Classify a gradient: `none` (no gradient), `nonfinite`, `zero` (all exactly 0) or `ok`."""
    if grad is None:
        return Status.NONE
    if not np.all(np.isfinite(grad)):
        return Status.NONFINITE
    if not np.any(grad):
        return Status.ZERO
    return Status.OK


def gradient_stats(grad: np.ndarray, top: int = 10) -> GradientStats:
    """Summarise a gradient. Norms use finite values only; `nonfinite` counts the rest.

    Example:
        >>> gradient_stats(np.array([[3.0, 0.0], [0.0, -4.0]])).l2
        5.0
    """
    g = np.asarray(grad, dtype=np.float64)
    finite = np.isfinite(g)
    clean = np.where(finite, g, 0.0)
    absg = np.abs(clean)
    size = g.size
    return GradientStats(
        shape=tuple(int(d) for d in g.shape),
        l2=float(np.sqrt(np.sum(clean * clean))),
        mean_abs=float(absg.mean()) if size else 0.0,
        max_abs=float(absg.max()) if size else 0.0,
        zero_fraction=float(np.mean(g == 0.0)) if size else 0.0,
        nonfinite=int(size - np.count_nonzero(finite)),
        top_units=top_units(absg, top),
    )


def top_units(absg: np.ndarray, top: int = 10) -> tuple[tuple[int, float], ...]:
    """The units of the last axis with the largest mean |g|, as (unit, mean |g|), largest first."""
    if absg.ndim == 0 or absg.size == 0:
        return ()
    per_unit = absg.reshape(-1, absg.shape[-1]).mean(axis=0)
    order = np.argsort(-per_unit, kind="stable")[:top]
    return tuple((int(i), float(per_unit[i])) for i in order)
