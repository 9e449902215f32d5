"""A per-sample norm over a data set in fixed memory: its distribution and its k largest.

`NormTotals` adds batches of per-sample values (and, for estimates, their relative standard
errors) to the exact moments and log histogram of `data.aggregates.SampleTotals` and to a `TopK` of
the largest values with their sample indices. Everything in it is reducible: sums add,
minima and maxima combine, histograms add bin by bin, and the top k of a union is the top k
of the parts' top k, so totals from replicas, workers or shards `merge` into exactly the
totals of one run over all their samples.
"""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import TypedDict

import numpy as np

from layergrad.core.results import Histogram, NormDistribution, RankedSample
from layergrad.data.stats.aggregates import SampleTotals
from layergrad.data.stats.reductions import BINS_PER_DECADE, LOG_LO

REPORT_BINS_PER_DECADE = 10  # the reported histogram: the kept one, 10 bins merged into 1


class NormPayload(TypedDict):
    """`NormTotals` as JSON, the histogram by its filled bins only."""

    dist: list[float]
    bins: list[int]  # the filled histogram bins, and their counts
    counts: list[float]
    size: int
    top: list[list[float]]
    extra: list[float]


class TopK:
    """The k largest values seen, with their sample indices (ties: the smaller index)."""

    def __init__(self, k: int) -> None:
        self.k = k
        self.values = np.zeros(0, np.float64)
        self.samples = np.zeros(0, np.int64)
        self.errors = np.zeros(0, np.float64)  # relative standard errors (NaN: exact)

    def add(
        self, values: np.ndarray, samples: np.ndarray, errors: np.ndarray | None = None
    ) -> None:
        """Add one batch: values, their sample indices, their relative standard errors."""
        v = np.asarray(values, np.float64).reshape(-1)
        e = np.full(v.shape, np.nan) if errors is None else np.asarray(errors, np.float64)
        v = np.concatenate([self.values, v])
        s = np.concatenate([self.samples, np.asarray(samples, np.int64).reshape(-1)])
        e = np.concatenate([self.errors, e.reshape(-1)])
        order = np.lexsort((s, -v))[: self.k]  # largest first, then by index
        self.values, self.samples, self.errors = v[order], s[order], e[order]

    def ranked(self) -> tuple[RankedSample, ...]:
        """The kept samples, most sensitive first."""
        return tuple(
            RankedSample(int(s), float(v), None if math.isnan(e) else float(e))
            for v, s, e in zip(self.values, self.samples, self.errors, strict=True)
        )


class NormTotals:
    """A per-sample norm added up batch by batch (see the module docstring).

    Example:
        >>> t = NormTotals(top=2)
        >>> t.add(np.array([1.0, 3.0]), np.array([0, 1]))
        >>> t.add(np.array([2.0]), np.array([2]))
        >>> d = t.distribution()
        >>> d.count, d.mean, [(r.sample, r.value) for r in d.top]
        (3, 2.0, [(1, 3.0), (2, 2.0)])
    """

    def __init__(self, top: int = 10) -> None:
        self.totals = SampleTotals()
        self.top = TopK(top)
        self.nonfinite = 0  # values left out because they were NaN or Inf
        self.variance = 0.0  # sum over samples of (standard error of the value)^2
        self.largest_rel: float | None = None  # the largest relative standard error

    def add(
        self, values: np.ndarray, samples: np.ndarray, rel_stderr: np.ndarray | None = None
    ) -> None:
        """Add one batch of values, their sample indices and (estimates) relative errors."""
        v = np.asarray(values, np.float64).reshape(-1)
        s = np.asarray(samples, np.int64).reshape(-1)
        ok = np.isfinite(v)
        self.nonfinite += int(v.size - ok.sum())
        v, s = v[ok], s[ok]
        rel = None
        if rel_stderr is not None:
            rel = np.asarray(rel_stderr, np.float64).reshape(-1)[ok]
            self.variance += float(np.sum((rel * v) ** 2))
            self._largest(float(rel.max()) if rel.size else None)
        self.totals.add(v)
        self.top.add(v, s, rel)

    def _largest(self, rel: float | None) -> None:
        if rel is not None:
            self.largest_rel = rel if self.largest_rel is None else max(self.largest_rel, rel)

    def merge(self, other: NormTotals) -> None:
        """Add the totals of other samples (another replica, worker or shard)."""
        self.totals.merge(other.totals)
        self.top.add(other.top.values, other.top.samples, other.top.errors)
        self.nonfinite += other.nonfinite
        self.variance += other.variance
        self._largest(other.largest_rel)

    @property
    def count(self) -> int:
        return int(self.totals.dist[0])

    def payload(self) -> NormPayload:
        """Everything kept, as JSON (for `accumulators.gather_workers` between workers:
        `from_payload` of each worker's, then `merge`)."""
        top = np.full((3, self.top.k), np.nan)
        top[:, : len(self.top.values)] = np.stack(
            [self.top.values, self.top.samples, self.top.errors]
        )
        hist = self.totals.hist
        filled = np.flatnonzero(hist)
        rel = np.nan if self.largest_rel is None else self.largest_rel
        return {
            "dist": self.totals.dist.tolist(),
            "bins": filled.tolist(),
            "counts": hist[filled].tolist(),
            "size": int(hist.size),
            "top": top.tolist(),
            "extra": [float(self.nonfinite), self.variance, rel],
        }

    @classmethod
    def from_payload(cls, payload: NormPayload) -> NormTotals:
        """The NormTotals that `payload` wrote."""
        top = np.asarray(payload["top"], np.float64)
        out = cls(top.shape[1])
        out.totals.dist = np.asarray(payload["dist"], np.float64)
        out.totals.hist = np.zeros(int(payload["size"]))
        out.totals.hist[np.asarray(payload["bins"], np.int64)] = payload["counts"]
        kept = ~np.isnan(top[0])
        out.top.add(top[0][kept], top[1][kept], top[2][kept])
        nonfinite, variance, rel = payload["extra"]
        out.nonfinite, out.variance = int(nonfinite), float(variance)
        out.largest_rel = None if math.isnan(rel) else float(rel)
        return out

    def distribution(self) -> NormDistribution:
        """The distribution of everything added."""
        stats = self.totals.stats()
        assert stats.p50 is not None and stats.p95 is not None  # one run's totals: never merged
        mean_rel = None
        if self.largest_rel is not None:
            se_mean = math.sqrt(self.variance) / max(stats.count, 1)
            mean_rel = se_mean / stats.mean if stats.mean > 0 else 0.0
        return NormDistribution(
            **asdict(stats),
            histogram=report_histogram(self.totals.hist),
            top=self.top.ranked(),
            mean_rel_stderr=mean_rel,
        )


def report_histogram(hist: np.ndarray) -> Histogram:
    """The kept log histogram (`data.reductions.HIST_BINS`) as REPORT_BINS_PER_DECADE bins per
    decade, from the first bin with a value to the last (values below 1e-30 count as 0,
    above 1e30 in the last bin)."""
    merge = BINS_PER_DECADE // REPORT_BINS_PER_DECADE
    inside = np.asarray(hist[2:-1], np.float64).copy()
    inside[-1] += hist[-1]
    coarse = inside.reshape(-1, merge).sum(axis=1)
    zeros = int(hist[0] + hist[1])
    filled = np.flatnonzero(coarse)
    if not filled.size:
        return Histogram((), (), zeros, REPORT_BINS_PER_DECADE)
    lo, hi = int(filled[0]), int(filled[-1]) + 1
    edges = tuple(
        float(f"{10.0 ** (LOG_LO + b / REPORT_BINS_PER_DECADE):.6g}") for b in range(lo, hi + 1)
    )
    return Histogram(edges, tuple(int(c) for c in coarse[lo:hi]), zeros, REPORT_BINS_PER_DECADE)
