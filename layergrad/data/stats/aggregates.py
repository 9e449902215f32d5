"""What the step's summaries add up to over every batch, and the report's numbers from them.

Every summary has a fixed way of adding up across batches and replicas (`SUM`, `MAX` or
`MIN`, by the name of its key), so the totals are exactly those of one big batch, in any
order. `GradientTotals` and `ForwardTotals` read one layer's share of the packed totals
(numpy only).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from layergrad.core.results import GradientStats, SampleStats
from layergrad.data.stats.reductions import (
    BINS_PER_DECADE,
    FWD_FIELDS,
    GRAD_FIELDS,
    HIST_BINS,
    LOG_HI,
    LOG_LO,
)

SUM, MAX, MIN = 0, 1, 2
# "spread": one batch's largest spread of an output across it and its largest |value|; "sum":
# a plain sum (`scan --wrt weights`); "first": the first batch where a non-finite value was counted
KINDS = {
    **dict.fromkeys(("grad", "units", "dist", "hist", "fwd", "samples", "sum"), SUM),
    **dict.fromkeys(("gmax", "usizes", "dmax", "dims", "spread"), MAX),
    **dict.fromkeys(("dmin", "first"), MIN),
}
# the packed summaries whose first non-finite batch is tracked, and the field that counts
NONFINITE_FIELD = {"grad": GRAD_FIELDS.index("nonfinite"), "fwd": FWD_FIELDS.index("nonfinite")}


def kind_of(key: str) -> int:
    """How the summary `key` adds up: SUM, MAX or MIN (by the last part of the key)."""
    return KINDS[key.rsplit("/", 1)[-1]]


def initial(kind: int, shape: tuple[int, ...]) -> np.ndarray:
    """The identity of the reduction: 0, -inf or +inf."""
    return np.full(shape, {SUM: 0.0, MAX: -np.inf, MIN: np.inf}[kind])


def combine(values: list[np.ndarray], kind: int) -> np.ndarray:
    """Add up the same summary from several replicas."""
    return {SUM: np.add, MAX: np.maximum, MIN: np.minimum}[kind].reduce(np.stack(values), axis=0)


def first_batch(value: float) -> int | None:
    """A `first` total as a batch index (None: never)."""
    return None if math.isinf(value) else int(value)


@dataclass(frozen=True)
class GradientTotals:
    """One gradient's summaries added up over every batch (see `reductions.gradient_summary`).

    `fields` follow GRAD_FIELDS; `units` is [2, units]: the number of batches in which each
    unit was alive (non-zero or NaN somewhere), and its sum of |g|. `scale` multiplies the
    gradient (1, or 1/samples for `--reduce mean` over a data set). `dist` (count, sum, sum
    of squares, min, max) and `hist` are None when the per-sample distribution was not kept.
    """

    fields: np.ndarray
    max_abs: float
    units: np.ndarray
    first_nonfinite: int | None
    dist: np.ndarray | None = None
    hist: np.ndarray | None = None
    scale: float = 1.0

    def _field(self, name: str) -> float:
        return float(self.fields[GRAD_FIELDS.index(name)])

    @property
    def status(self) -> str:
        """`nonfinite`, `zero` (every value exactly 0) or `ok`."""
        if self._field("nonfinite"):
            return "nonfinite"
        return "zero" if self._field("zeros") == self._field("elements") else "ok"

    def stats(self, shape: tuple[int, ...], top: int = 10) -> GradientStats:
        """The numbers `stats.gradient_stats` gives for the whole gradient as one array."""
        elements = self._field("elements")
        s = abs(self.scale)
        per_unit = self.units[1] * s / max(elements / max(self.units.shape[1], 1), 1.0)
        order = np.argsort(-per_unit, kind="stable")[:top] if top else np.array([], int)
        return GradientStats(
            shape=shape,
            l2=math.sqrt(self._field("sum_sq")) * s,
            mean_abs=self._field("sum_abs") * s / elements if elements else 0.0,
            max_abs=self.max_abs * s,
            zero_fraction=self._field("zeros") / elements if elements else 0.0,
            nonfinite=int(self._field("nonfinite")),
            top_units=tuple((int(i), float(per_unit[i])) for i in order),
        )

    def dead_units(self) -> tuple[int, ...]:
        """Units of the last axis whose gradient is exactly zero for every sample."""
        return tuple(int(i) for i in np.flatnonzero(self.units[0] == 0))

    def dead_fraction(self) -> float:
        """The fraction of units that are dead."""
        return float(np.mean(self.units[0] == 0)) if self.units.size else 0.0

    def per_sample(self) -> SampleStats | None:
        """The distribution of per-sample L2 norms, or None when not kept."""
        if self.dist is None or self.hist is None:
            return None
        return distribution_stats(self.dist, self.hist, abs(self.scale))


def distribution_stats(dist: np.ndarray, hist: np.ndarray, scale: float = 1.0) -> SampleStats:
    """Mean, std, min, p50, p95, max of a per-sample quantity from its summed summaries
    (`dist`: count, sum, sum of squares, min, max; `hist`: the log histogram)."""
    count, total, total_sq, low, high = (float(v) for v in dist)
    if count == 0:
        return SampleStats(0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    mean = total / count
    std = math.sqrt(max(total_sq / count - mean * mean, 0.0))
    return SampleStats(
        count=int(count),
        mean=mean * scale,
        std=std * scale,
        min=low * scale,
        p50=_rank_value(hist, 0.50, count, low, high) * scale,
        p95=_rank_value(hist, 0.95, count, low, high) * scale,
        max=high * scale,
    )


def _rank_value(hist: np.ndarray, q: float, count: float, low: float, high: float) -> float:
    """The smallest value with at least a fraction q of the samples at or below it (its bin's
    geometric centre, kept within [min, max])."""
    rank = max(math.ceil(q * count - 1e-9), 1)
    b = int(np.searchsorted(np.cumsum(hist), rank))
    if b == 0:
        return 0.0
    if b == 1:
        return low
    if b >= HIST_BINS - 1:
        return high
    centre = 10.0 ** (LOG_LO + (b - 2 + 0.5) / BINS_PER_DECADE)
    return min(max(centre, low), high)


class SampleTotals:
    """A per-sample quantity added up batch by batch in numpy, with the same exact moments
    and log histogram as the compiled step keeps: for a measure computed outside it (per-
    sample Jacobian norms, say) to aggregate over a data set the same way.

    Example (not run)::

        totals = SampleTotals()
        for batch in batches:
            totals.add(norms_of(batch))
        totals.stats().p95
    """

    def __init__(self) -> None:
        self.dist = np.array([0.0, 0.0, 0.0, np.inf, -np.inf])  # count, sum, sum sq, min, max
        self.hist = np.zeros(HIST_BINS)

    def add(self, values: np.ndarray) -> None:
        """Add one batch of non-negative per-sample values."""
        v = np.asarray(values, dtype=np.float64).reshape(-1)
        if not v.size:
            return
        self.dist[:3] += (v.size, v.sum(), (v * v).sum())
        self.dist[3], self.dist[4] = min(self.dist[3], v.min()), max(self.dist[4], v.max())
        with np.errstate(divide="ignore"):
            logv = np.log10(np.maximum(v, 1e-300))
        inside = np.floor((logv - LOG_LO) * BINS_PER_DECADE).astype(np.int64) + 2
        index = np.where(
            v <= 0, 0, np.where(logv < LOG_LO, 1, np.where(logv >= LOG_HI, HIST_BINS - 1, inside))
        )
        self.hist += np.bincount(index, minlength=HIST_BINS)

    def merge(self, other: SampleTotals) -> None:
        """Add the totals of other samples."""
        self.dist[:3] += other.dist[:3]
        self.dist[3] = min(self.dist[3], other.dist[3])
        self.dist[4] = max(self.dist[4], other.dist[4])
        self.hist += other.hist

    def stats(self, scale: float = 1.0) -> SampleStats:
        """Mean, std, min, p50, p95, max of everything added (p50 and p95 within 1.2%)."""
        return distribution_stats(self.dist, self.hist, scale)


@dataclass(frozen=True)
class ForwardTotals:
    """Forward values of one activation over every batch: batches with a NaN/Inf in it (and
    the first of them), and the mean |x| over the other batches."""

    nonfinite_batches: int
    mean_abs: float
    first_nonfinite: int | None
