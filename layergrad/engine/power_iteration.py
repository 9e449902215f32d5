"""Largest singular value of each sample's Jacobian by power iteration on J^T J."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from layergrad.core.tf_types import Tensor

TOLERANCE = 1e-4  # stop when every sample's estimate changes by less than this, relatively
MAX_ITERATIONS = 200

# step(v) -> (||J_i v_i||^2 per sample, the next unit vectors J^T J v): v has unit rows
Step = Callable[[Tensor], tuple[Tensor, Tensor]]


@dataclass(frozen=True)
class PowerResult:
    """Per-sample largest singular values, the iterations run, and whether they converged."""

    sigma: np.ndarray
    iterations: int
    converged: bool


def power_iteration(
    step: Step, start: Tensor, *, tol: float = TOLERANCE, max_iterations: int = MAX_ITERATIONS
) -> PowerResult:
    """Run `step` from the unit vectors `start` until every estimate settles.

    The estimate after each step is ||J v|| for the current unit vector v (the Rayleigh
    quotient of J^T J, which never decreases); iteration stops when its relative change is
    below `tol` for every sample at once, or after `max_iterations` steps.

    Args:
        step: one multiplication by J^T J of a batch of unit vectors (see `Step`).
        start: unit vectors, one row per sample (a tensor or array `step` accepts).
        tol, max_iterations: the stopping rule.

    Returns:
        A PowerResult; `converged` is False when the limit was reached first.

    Example:
        >>> a = np.diag([3.0, 1.0])
        >>> step = lambda v: (((v @ a) ** 2).sum(1), _unit(v @ a @ a))
        >>> round(float(power_iteration(step, np.ones((1, 2)) / np.sqrt(2)).sigma[0]), 3)
        3.0
    """
    if max_iterations < 1:
        raise ValueError(f"max_iterations must be at least 1: max_iterations={max_iterations}")
    v = start
    previous = np.zeros(0)
    for iteration in range(1, max_iterations + 1):
        squared, v = step(v)
        sigma = np.sqrt(np.maximum(np.asarray(squared, dtype=np.float64), 0.0))
        if iteration > 1:
            change = np.abs(sigma - previous) / np.maximum(sigma, np.finfo(np.float64).tiny)
            if bool(np.all(change < tol)):
                return PowerResult(sigma, iteration, True)
        previous = sigma
    return PowerResult(previous, max_iterations, False)


def _unit(rows: np.ndarray) -> np.ndarray:
    """Each row scaled to length 1 (zero rows stay zero)."""
    norm = np.linalg.norm(rows, axis=1, keepdims=True)
    return np.where(norm > 0, rows / np.where(norm > 0, norm, 1.0), rows)
