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
GRAD_FIELDS = ("sum_sq", "sum_abs", "zeros", "nonfinite", "elements")  # max |g| apart
DIST_FIELDS = ("count", "sum", "sum_sq")  # min and max apart
FWD_FIELDS = ("nonfinite", "sum_abs", "elements")
BINS_PER_DECADE = 100
LOG_LO, LOG_HI = -30, 30
HIST_BINS = (LOG_HI - LOG_LO) * BINS_PER_DECADE + 3  # [0] zero, [1] below, [-1] above
# how each summary (by the suffix of its key) adds up; "first" is the first batch index
KINDS = {
    "grad": SUM,
    "gmax": MAX,
    "units": SUM,
    "dist": SUM,
    "dmin": MIN,
    "dmax": MAX,
    "hist": SUM,
    "fwd": SUM,
    "dims": MAX,
    "samples": SUM,
    "first": MIN,
}
# the summaries whose first batch with a non-finite value is tracked, and which field counts
NONFINITE_FIELD = {"grad": GRAD_FIELDS.index("nonfinite"), "fwd": FWD_FIELDS.index("nonfinite")}


def gradient_summary(dy: Any, one_unit: bool) -> tuple[Any, Any, Any, Any]:
    """Reduce a batch-first gradient to (fields [5], max |g| [1], per-unit [2, units],
    per-sample L2 [batch]).

    Per unit (the last axis; a gradient with no axis but the batch has one unit when
    `one_unit`, else one per element, as a single batch reports): whether any value was
    non-zero (1/0), and the sum of |g|. Non-finite values are left out of the sums and
    counted. The common case takes a short path of a few reductions in the gradient's own
    precision (float32 at least; the totals add up in float64); the sums say whether there
    is any NaN/Inf (or an overflow), and only then a float64 pass masks them out.
    """
    from layergrad._tf import quiet_import

    tf, _ = quiet_import()
    g = dy if dy.dtype in (tf.float32, tf.float64) else tf.cast(dy, tf.float32)
    width = unit_width(g, one_unit)
    rows = [tf.shape(g)[0], -1] if g.shape.rank else [1, 1]
    elements = tf.cast(tf.size(g), tf.float64)
    zero = tf.constant(0.0, tf.float64)
    absg = tf.abs(g)
    unit_abs = tf.cast(tf.reduce_sum(tf.reshape(absg, [-1, width]), axis=0), tf.float64)
    norms = tf.cast(tf.math.reduce_euclidean_norm(tf.reshape(g, rows), axis=1), tf.float64)
    max_abs = tf.maximum(tf.cast(tf.reduce_max(absg), tf.float64), zero)  # 0 for no rows
    nonzero = tf.cast(tf.math.count_nonzero(g, dtype=tf.int64), tf.float64)
    finite = tf.math.is_finite(tf.reduce_sum(unit_abs)) & tf.math.is_finite(tf.reduce_sum(norms))

    def fast() -> tuple[Any, ...]:
        return norms, unit_abs, tf.cast(unit_abs > 0, tf.float64), max_abs, zero

    def masked() -> tuple[Any, ...]:  # NaN/Inf (or float32 overflow): float64, masked
        wide = tf.cast(g, tf.float64)
        ok = tf.math.is_finite(wide)
        clean = tf.abs(tf.where(ok, wide, tf.zeros_like(wide)))
        units = tf.reshape(clean, [-1, width])
        alive = tf.math.count_nonzero(tf.reshape(g, [-1, width]), axis=0) > 0  # NaN is alive
        return (
            tf.sqrt(tf.reduce_sum(tf.square(tf.reshape(clean, rows)), axis=1)),
            tf.reduce_sum(units, axis=0),
            tf.cast(alive, tf.float64),
            tf.maximum(tf.reduce_max(clean), zero),
            elements - tf.reduce_sum(tf.cast(ok, tf.float64)),
        )

    norms, unit_abs, alive, max_abs, nonfinite = tf.cond(finite, fast, masked)
    fields = tf.stack(
        [tf.reduce_sum(tf.square(norms)), tf.reduce_sum(unit_abs), elements - nonzero, nonfinite,
         elements]
    )  # fmt: skip
    return fields, tf.reshape(max_abs, [1]), tf.stack([alive, unit_abs]), norms


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


def distribution_summary(values: Any) -> dict[str, Any]:
    """Summarise non-negative per-sample values: `dist` (count, sum, sum of squares), `dmin`,
    `dmax` and `hist`, the keys' suffixes in the step's summaries."""
    from layergrad._tf import quiet_import

    tf, _ = quiet_import()
    v = tf.cast(tf.reshape(values, [-1]), tf.float64)
    fields = tf.stack([tf.cast(tf.size(v), tf.float64), tf.reduce_sum(v), tf.reduce_sum(v * v)])
    logv = tf.math.log(tf.maximum(v, 1e-300)) / math.log(10.0)
    inside = tf.cast(tf.floor((logv - LOG_LO) * BINS_PER_DECADE), tf.int32) + 2
    index = tf.where(
        v <= 0,
        0,
        tf.where(logv < LOG_LO, 1, tf.where(logv >= LOG_HI, HIST_BINS - 1, inside)),
    )
    hist = tf.math.bincount(index, minlength=HIST_BINS, maxlength=HIST_BINS, dtype=tf.float64)
    return {
        "dist": fields,
        "dmin": tf.reshape(tf.reduce_min(v), [1]),  # +inf for an empty share of a batch
        "dmax": tf.reshape(tf.reduce_max(v), [1]),
        "hist": hist,
    }


def forward_summary(x: Any) -> tuple[Any, Any]:
    """(non-finite count, sum of finite |x|, elements) of an activation, and its sizes after
    the batch axis (the largest seen adds up, for dimensions the model leaves open). One
    reduction when every value is finite (its sum says so)."""
    from layergrad._tf import quiet_import

    tf, _ = quiet_import()
    v = x if x.dtype in (tf.float32, tf.float64) else tf.cast(x, tf.float32)
    total = tf.cast(tf.reduce_sum(tf.abs(v)), tf.float64)
    elements = tf.cast(tf.size(v), tf.float64)

    def masked() -> tuple[Any, Any]:
        wide = tf.cast(v, tf.float64)
        ok = tf.math.is_finite(wide)
        clean = tf.reduce_sum(tf.abs(tf.where(ok, wide, tf.zeros_like(wide))))
        return elements - tf.reduce_sum(tf.cast(ok, tf.float64)), clean

    nonfinite, total = tf.cond(
        tf.math.is_finite(total), lambda: (tf.constant(0.0, tf.float64), total), masked
    )
    dims = tf.cast(tf.shape(v)[1:], tf.float64) if v.shape.rank else tf.zeros([0], tf.float64)
    return tf.stack([nonfinite, total, elements]), dims


def kind_of(key: str) -> int:
    """How the summary `key` adds up: SUM, MAX or MIN (by the suffix of the key)."""
    return KINDS[key.rsplit("/", 1)[-1]]


def initial(kind: int, shape: tuple[int, ...]) -> np.ndarray:
    """The identity of the reduction: 0, -inf or +inf."""
    return np.full(shape, {SUM: 0.0, MAX: -np.inf, MIN: np.inf}[kind])


def combine(values: list[np.ndarray], kind: int) -> np.ndarray:
    """Add up the same summary from several replicas."""
    stack = np.stack(values)
    if kind == MAX:
        return stack.max(axis=0)
    return stack.min(axis=0) if kind == MIN else stack.sum(axis=0)


@dataclass(frozen=True)
class GradientTotals:
    """The summaries of one gradient added up over every batch (see `gradient_summary`).

    `scale` multiplies the gradient (1, or 1/samples for `--reduce mean` over a data set).
    `dist` and `hist` are None when the per-sample distribution was not collected.
    """

    fields: np.ndarray
    max_abs: float
    units: np.ndarray
    first_nonfinite: int | None
    dist: np.ndarray | None = None  # count, sum, sum of squares, min, max
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
        """Units of the last axis whose gradient is exactly zero for every sample.

        `units[0]` counts the batches where a unit had a non-zero (or NaN) gradient."""
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
