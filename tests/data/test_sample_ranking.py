"""NormTotals: per-sample norms added in batches, or in parts merged, equal numpy over all
values; the reported histogram is the kept one, 10 log bins per decade."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import assert_stats_match

from layergrad.data.stats.sample_ranking import NormTotals, report_histogram


def test_batches_and_merged_parts_equal_numpy_over_every_value():
    rng = np.random.default_rng(0)
    values = np.exp(rng.normal(0, 1, 1000))
    values[[3, 500]] = 0.0
    rel = rng.uniform(0, 0.1, 1000)
    index = np.arange(1000)
    whole, left, right = NormTotals(top=7), NormTotals(top=7), NormTotals(top=7)
    for start in range(0, 1000, 64):  # batches of 64, the last partial
        part = slice(start, start + 64)
        whole.add(values[part], index[part], rel[part])
        (left if start < 500 else right).add(values[part], index[part], rel[part])
    left.merge(right)
    for totals in (whole, left):
        d = totals.distribution()
        assert_stats_match(d, values)
        order = np.lexsort((index, -values))[:7]
        assert [r.sample for r in d.top] == list(order)
        assert [r.rel_stderr for r in d.top] == pytest.approx(rel[order])
        se = np.sqrt(np.sum((rel * values) ** 2)) / 1000
        assert d.mean_rel_stderr == pytest.approx(se / values.mean(), rel=1e-9)
        assert totals.largest_rel == pytest.approx(rel.max())
        assert d.histogram.zeros == 2 and sum(d.histogram.counts) == 998


def test_ties_rank_the_earlier_sample_first_and_non_finite_values_are_left_out():
    t = NormTotals(top=3)
    t.add(np.array([2.0, 5.0, np.nan]), np.array([10, 11, 12]))
    t.add(np.array([5.0, np.inf, 1.0]), np.array([4, 13, 14]))
    d = t.distribution()
    assert [(r.sample, r.value) for r in d.top] == [(4, 5.0), (11, 5.0), (10, 2.0)]
    assert d.count == 4 and t.nonfinite == 2


def test_the_reported_histogram_has_bins_of_a_tenth_of_a_decade_on_one_grid():
    t = NormTotals()
    t.add(np.array([1.0, 1.1, 1.3, 12.0]), np.arange(4))
    h = report_histogram(t.totals.hist)
    assert h.bins_per_decade == 10
    assert h.edges[0] == 1.0 and h.edges[-1] == pytest.approx(10**1.1, rel=1e-5)  # 6 digits
    assert len(h.edges) == len(h.counts) + 1 == 12
    assert h.counts[0] == 2 and h.counts[1] == 1 and h.counts[-1] == 1 and sum(h.counts) == 4


def test_the_json_of_each_part_merges_into_the_totals_of_the_whole():
    rng = np.random.default_rng(1)
    values, rel = np.exp(rng.normal(0, 1, 300)), rng.uniform(0, 0.2, 300)
    whole, parts = NormTotals(top=5), [NormTotals(top=5) for _ in range(3)]
    whole.add(values, np.arange(300), rel)
    for i, part in enumerate(parts):  # three workers, each its own shard
        part.add(values[i::3], np.arange(300)[i::3], rel[i::3])
    sent = [json.loads(json.dumps(part.payload())) for part in parts]  # as between workers
    merged = NormTotals.from_payload(sent[0])
    for payload in sent[1:]:
        merged.merge(NormTotals.from_payload(payload))
    a, b = merged.distribution(), whole.distribution()
    assert (a.count, a.min, a.max, a.p50, a.p95, a.top) == (
        b.count,
        b.min,
        b.max,
        b.p50,
        b.p95,
        b.top,
    )
    assert (a.mean, a.std, a.mean_rel_stderr) == pytest.approx((b.mean, b.std, b.mean_rel_stderr))
    assert a.histogram == b.histogram
