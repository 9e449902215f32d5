"""Reports are their schema: any report written as JSON and read back is the same object.

The reports are drawn by hypothesis from the result types (not from layergrad's own runs),
with only what JSON carries (a cause's op, a gradient's top units, a scan's notes on inputs
are not written) and numbers as layergrad reports them: finite, l2 >= max |g| >= mean |g|,
a per-sample mean between its min and max. A bound broken by one member is refused, naming
that member.
"""

from __future__ import annotations

import json
import math
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from layergrad.core.errors import InputError
from layergrad.core.results import (
    DataStats,
    Endpoint,
    FrobeniusNorms,
    GradientStats,
    Histogram,
    InspectReport,
    JacobianStats,
    ModelMeta,
    NormDistribution,
    ProbeMeta,
    RankedSample,
    Reason,
    Result,
    SampleStats,
    ScanJacobian,
    ScanReport,
    ScanRow,
    SpectralNorms,
)
from layergrad.core.vocab import CAUSE_CODES, SCAN_FLAGS, JacobianMethod, Reduce, Status
from layergrad.files.report_json import from_json, report_from_json, to_json

text = st.text(max_size=12)
count = st.integers(0, 10**6)
measure = st.floats(0, 1e30, allow_nan=False, allow_infinity=False)
shape = st.lists(st.integers(1, 6), min_size=1, max_size=3).map(tuple)


def maybe(values: st.SearchStrategy) -> st.SearchStrategy:
    return st.none() | values


@st.composite
def gradients(draw: st.DrawFn, shape: tuple[int, ...]) -> GradientStats:
    mean, top, l2 = sorted(draw(st.lists(measure, min_size=3, max_size=3)))
    return GradientStats(shape, l2, mean, top, draw(st.floats(0, 1)),
                         draw(st.integers(0, math.prod(shape))))  # fmt: skip


reasons = st.builds(
    Reason,
    code=st.sampled_from(CAUSE_CODES),
    message=text,
    hint=text,
    layer=maybe(text),
    facts=st.lists(
        st.tuples(text, st.none() | st.booleans() | st.integers(-5, 5) | measure | text),
        max_size=3,
        unique_by=lambda kv: kv[0],
    ).map(tuple),
)


@st.composite
def sample_stats(draw: st.DrawFn, n: int) -> SampleStats:
    low, mean, high = sorted(draw(st.lists(measure, min_size=3, max_size=3)))
    return SampleStats(n, mean, draw(measure), low, draw(maybe(measure)), draw(maybe(measure)),
                       high)  # fmt: skip


@st.composite
def data_stats(draw: st.DrawFn, n: int, has_gradient: bool) -> DataStats:
    units = draw(st.lists(count, max_size=4).map(tuple)) if has_gradient else ()
    return DataStats(units, draw(maybe(sample_stats(n))), draw(maybe(count)))


@st.composite
def distributions(draw: st.DrawFn) -> NormDistribution:
    s = draw(sample_stats(draw(count)))
    bins = draw(st.integers(0, 4))
    edges = tuple(10.0 ** (k / 10) for k in range(bins + 1)) if bins else ()
    top = draw(st.lists(st.builds(RankedSample, count, measure, maybe(measure)), max_size=3))
    return NormDistribution(
        s.count, s.mean, s.std, s.min, s.p50, s.p95, s.max,
        Histogram(edges, tuple(draw(count) for _ in range(bins)), draw(count), 10),
        tuple(top), draw(maybe(measure)),
    )  # fmt: skip


@st.composite
def frobenius(draw: st.DrawFn) -> FrobeniusNorms:
    d = draw(distributions())
    return FrobeniusNorms((), d.mean, d.max, draw(maybe(measure)), (), d)


@st.composite
def jacobians(draw: st.DrawFn) -> JacobianStats:
    d = draw(distributions())
    spectral = draw(maybe(st.just(SpectralNorms((), d.mean, d.max, draw(maybe(count)),
                                                distribution=d))))  # fmt: skip
    return JacobianStats(draw(st.sampled_from(JacobianMethod)), draw(maybe(count)),
                         draw(st.booleans()), draw(frobenius()), spectral,
                         tuple(draw(st.lists(measure, max_size=3))))  # fmt: skip


models = st.builds(ModelMeta, text, text, text, text)
probes = st.builds(
    ProbeMeta, text, maybe(st.integers(0, 2**32 - 1)), st.integers(1, 1024), st.booleans(),
    st.sampled_from(Reduce), maybe(count), maybe(count), maybe(st.text("0123456789abcdef",
    min_size=64, max_size=64)), maybe(count), maybe(count), maybe(text),
)  # fmt: skip


@st.composite
def results(draw: st.DrawFn) -> Result:
    source = Endpoint(draw(text), draw(shape), draw(text))
    gradient = draw(maybe(gradients(draw(shape))))
    return Result(
        source, Endpoint(draw(text), draw(shape), draw(text)),
        draw(st.sampled_from(Status)), gradient, tuple(draw(st.lists(reasons, max_size=2))),
        jacobian=draw(maybe(jacobians())),
        data=draw(maybe(data_stats(source.shape[0], gradient is not None))),
    )  # fmt: skip


@st.composite
def rows(draw: st.DrawFn) -> ScanRow:
    size = draw(shape)
    gradient = draw(maybe(gradients(size)))
    return ScanRow(
        draw(text), draw(text), size, draw(text), draw(st.sampled_from(Status)), gradient,
        tuple(draw(st.lists(st.sampled_from(SCAN_FLAGS), max_size=2))),
        tuple(draw(st.lists(reasons, max_size=2))),
        draw(maybe(frobenius().map(ScanJacobian))),
        draw(maybe(data_stats(size[0], gradient is not None))),
    )  # fmt: skip


inspects = st.builds(InspectReport, models, probes, st.lists(results(), max_size=3).map(tuple))
scans = st.builds(ScanReport, models, probes, maybe(text), st.lists(rows(), max_size=3).map(tuple),
                  st.lists(text, max_size=2).map(tuple))  # fmt: skip


def written(report: object) -> object:
    """The report as the CLI prints it, parsed again (strict JSON)."""
    return json.loads(json.dumps(to_json(report), allow_nan=False))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(inspects, scans))
def test_any_report_written_then_read_is_the_same_report(report):
    assert report_from_json(written(report)) == report
    assert from_json(type(report), written(report)) == report


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scans.filter(lambda s: any(r.gradient for r in s.rows)), st.data())
def test_a_member_out_of_its_bounds_is_refused_by_name(report, data):
    doc = written(report)
    i = next(i for i, r in enumerate(report.rows) if r.gradient)
    member, value = data.draw(st.sampled_from([("l2", -1.0), ("l2", 1e101), ("nonfinite", -1),
                                               ("zero_fraction", 1.5), ("mean_abs", "x")]))  # fmt: skip
    doc["layers"][i]["gradient"][member] = value
    with pytest.raises(InputError, match=rf"layers\[{i}\]\.gradient\.{member} is "):
        report_from_json(doc)


@pytest.mark.parametrize(
    ("bound", "edit", "said"),
    [
        ("MAX_TEXT", lambda d: d["model"].update(name="x" * 9), "model.name is"),
        ("MAX_ITEMS", lambda d: d.update(notes=["a"] * 9), "notes is"),
        ("MAX_COUNT", lambda d: d["probe"].update(seed=9), "probe.seed is 9"),
    ],
)
def test_strings_lists_and_counts_past_their_bounds_are_refused(bound, edit, said, monkeypatch):
    from layergrad.files import report_json

    doc = written(ScanReport(ModelMeta("m", "keras", "Model", "m"),
                             ProbeMeta("random", 0, 8, False, Reduce.SUM), None, ()))  # fmt: skip
    assert report_from_json(doc).probe.seed == 0
    monkeypatch.setattr(report_json, bound, 8)
    edit(doc)
    with pytest.raises(InputError, match=f"^report: {re.escape(said)}"):
        report_from_json(doc)
