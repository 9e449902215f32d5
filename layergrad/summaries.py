"""Gradient statistics reduced inside the step, and what they add up to over many batches.

Inside the step (TensorFlow, traced once), each gradient is reduced to a few small tensors:
elementwise sums, per-unit sums over its last axis, and its per-sample L2 norms, summarised
as a distribution. Only these cross back to Python. Every field has a fixed way of adding up
across batches and replicas (`SUM`, `MAX` or `MIN`), so the totals are exactly those of one
big batch, in any order. `GradientTotals` turns the totals into the report's numbers (numpy).

Per-sample distributions keep count, sum, sum of squares, min and max exactly, and a
histogram in log space (`BINS_PER_DECADE` bins per decade over [1e-30, 1e30), plus bins for
0, below and above): p50 and p95 are the value at that rank (the smallest value with at least
p% of the samples at or below it) to within 1.2%. Memory is fixed whatever the sample count.
Any per-sample quantity (another measure's norms) can be summarised with
`distribution_summary` and read back with `SampleStats`-building `distribution_stats`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from layergrad.results import GradientStats, SampleStats

SUM, MAX, MIN = 0, 1, 2
GRAD_FIELDS = ("sum_sq", "sum_abs", "max_abs", "zeros", "nonfinite", "elements")
GRAD_KINDS = (SUM, SUM, MAX, SUM, SUM, SUM)
DIST_FIELDS = ("count", "sum", "sum_sq", "min", "max")
DIST_KINDS = (SUM, SUM, SUM, MIN, MAX)
FWD_FIELDS = ("nonfinite", "sum_abs", "elements")
BINS_PER_DECADE = 100
LOG_LO, LOG_HI = -30, 30
HIST_BINS = (LOG_HI - LOG_LO) * BINS_PER_DECADE + 3  # [0] zero, [1] below, [-1] above
# how each summary (by the suffix of its key) adds up; "first" is the first batch index
KINDS: dict[str, tuple[int, ...] | int] = {
    "grad": GRAD_KINDS,
    "units": SUM,
    "dist": DIST_KINDS,
    "hist": SUM,
    "fwd": SUM,
    "dims": MAX,
    "samples": SUM,
    "first": MIN,
}
# the summaries whose first batch with a non-finite value is tracked, and which field counts
NONFINITE_FIELD = {"grad": GRAD_FIELDS.index("nonfinite"), "fwd": FWD_FIELDS.index("nonfinite")}


def gradient_summary(dy: Any, one_unit: bool) -> tuple[Any, Any, Any]:
    """Reduce a batch-first gradient to (fields [6], per-unit [2, units], per-sample L2 [batch]).

    Non-finite values are left out of the sums and counted. Units are the last axis; a
    gradient with no axis but the batch has one unit when `one_unit`, else one per element
    (what a single batch reports). Float64, so sums over millions of samples stay exact.
    """
    from layergrad._tf import quiet_import

    tf, _ = quiet_import()
    g = tf.cast(dy, tf.float64)
    finite = tf.math.is_finite(g)
    absg = tf.abs(tf.where(finite, g, tf.zeros_like(g)))
    rows = tf.reshape(absg, [tf.shape(g)[0], -1]) if g.shape.rank else tf.reshape(absg, [1, 1])
    per_sample_sq = tf.reduce_sum(tf.square(rows), axis=1)
    width = unit_width(g, one_unit)
    unit_abs = tf.reduce_sum(tf.reshape(absg, [-1, width]), axis=0)
    nonzero = tf.cast(tf.not_equal(g, 0), tf.float64)  # NaN is not zero: a NaN unit is alive
    unit_nonzero = tf.reduce_sum(tf.reshape(nonzero, [-1, width]), axis=0)
    elements = tf.cast(tf.size(g), tf.float64)
    fields = tf.stack(
        [
            tf.reduce_sum(per_sample_sq),
            tf.reduce_sum(unit_abs),
            tf.maximum(tf.reduce_max(absg), tf.constant(0.0, tf.float64)),  # 0 for no rows
            elements - tf.reduce_sum(unit_nonzero),
            elements - tf.reduce_sum(tf.cast(finite, tf.float64)),
            elements,
        ]
    )
    return fields, tf.stack([unit_nonzero, unit_abs]), tf.sqrt(per_sample_sq)


def unit_width(x: Any, one_unit: bool) -> Any:
    """Units of a batch-first activation: its last axis (one unit, or one per element, when
    it has no axis but the batch). An int when known while tracing, else a scalar tensor."""
    from layergrad._tf import quiet_import

    tf, _ = quiet_import()
    rank = x.shape.rank
    if rank is not None and rank >= 2:
        return x.shape[-1] if x.shape[-1] is not None else tf.shape(x)[-1]
    if rank == 1 and not one_unit:
        return x.shape[0] if x.shape[0] is not None else tf.shape(x)[0]
    return 1


def samples_in(x: Any) -> Any:
    """Rows of a batch-first activation (1 for a scalar)."""
    from layergrad._tf import quiet_import

    tf, _ = quiet_import()
    if not x.shape.rank:
        return 1
    return x.shape[0] if x.shape[0] is not None else tf.shape(x)[0]


def distribution_summary(values: Any) -> tuple[Any, Any]:
    """Summarise non-negative per-sample values: (count, sum, sum sq, min, max) and histogram."""
    from layergrad._tf import quiet_import

    tf, _ = quiet_import()
    v = tf.cast(tf.reshape(values, [-1]), tf.float64)
    fields = tf.stack(
        [
            tf.cast(tf.size(v), tf.float64),
            tf.reduce_sum(v),
            tf.reduce_sum(tf.square(v)),
            tf.reduce_min(v),  # +inf for an empty batch (a replica's share can be empty)
            tf.reduce_max(v),
        ]
    )
    logv = tf.math.log(tf.maximum(v, 1e-300)) / math.log(10.0)
    inside = tf.cast(tf.floor((logv - LOG_LO) * BINS_PER_DECADE), tf.int32) + 2
    index = tf.where(
        v <= 0,
        0,
        tf.where(logv < LOG_LO, 1, tf.where(logv >= LOG_HI, HIST_BINS - 1, inside)),
    )
    hist = tf.math.bincount(index, minlength=HIST_BINS, maxlength=HIST_BINS, dtype=tf.float64)
    return fields, hist


def forward_summary(x: Any) -> tuple[Any, Any]:
    """(non-finite count, sum of finite |x|, elements) of an activation, and its sizes after
    the batch axis (the largest seen adds up, for dimensions the model leaves open)."""
    from layergrad._tf import quiet_import

    tf, _ = quiet_import()
    v = tf.cast(x, tf.float64)
    finite = tf.math.is_finite(v)
    elements = tf.cast(tf.size(v), tf.float64)
    fields = tf.stack(
        [
            elements - tf.reduce_sum(tf.cast(finite, tf.float64)),
            tf.reduce_sum(tf.abs(tf.where(finite, v, tf.zeros_like(v)))),
            elements,
        ]
    )
    dims = tf.cast(tf.shape(v)[1:], tf.float64) if v.shape.rank else tf.zeros([0], tf.float64)
    return fields, dims


def kinds_of(key: str, shape: tuple[int, ...]) -> np.ndarray:
    """How each element of the summary `key` adds up (SUM / MAX / MIN), shaped like it."""
    kind = KINDS[key.rsplit("/", 1)[-1]]
    if isinstance(kind, tuple):
        return np.array(kind, dtype=np.int8).reshape(shape)
    return np.full(shape, kind, dtype=np.int8)


def initial(kinds: np.ndarray) -> np.ndarray:
    """The identity of each element's reduction: 0, -inf or +inf."""
    return np.select([kinds == MAX, kinds == MIN], [-np.inf, np.inf], 0.0)


def combine(values: list[np.ndarray], kinds: np.ndarray) -> np.ndarray:
    """Add up the same summary from several replicas."""
    stack = np.stack(values)
    return np.select(
        [kinds == MAX, kinds == MIN], [stack.max(axis=0), stack.min(axis=0)], stack.sum(axis=0)
    )


@dataclass(frozen=True)
class GradientTotals:
    """The summaries of one gradient added up over every batch (see `gradient_summary`).

    `scale` multiplies the gradient (1, or 1/samples for `--reduce mean` over a data set).
    `dist` and `hist` are None when the per-sample distribution was not collected.
    """

    fields: np.ndarray
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
            max_abs=self._field("max_abs") * s,
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
        """The distribution of per-sample L2 norms, or None when not collected."""
        if self.dist is None or self.hist is None:
            return None
        return distribution_stats(self.dist, self.hist, abs(self.scale))


def distribution_stats(dist: np.ndarray, hist: np.ndarray, scale: float = 1.0) -> SampleStats:
    """Mean, std, min, p50, p95, max of a per-sample quantity from its summed summaries."""
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


@dataclass(frozen=True)
class ForwardTotals:
    """Forward values of one activation over every batch: non-finite count, mean |x|, sizes."""

    nonfinite: int
    mean_abs: float
    dims: tuple[int, ...]
    first_nonfinite: int | None

    @classmethod
    def from_totals(cls, fields: np.ndarray, dims: np.ndarray, first: float) -> ForwardTotals:
        nonfinite, sum_abs, elements = (float(v) for v in fields)
        return cls(
            nonfinite=int(nonfinite),
            mean_abs=sum_abs / elements if elements else 0.0,
            dims=tuple(int(d) for d in dims),
            first_nonfinite=None if math.isinf(first) else int(first),
        )
