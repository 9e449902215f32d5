"""Reports are their schema: any report written as JSON and read back is the same object
(inspect, scan, check and diff reports; a diff as `diff --json` prints it, one row a line).

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
    CheckItem,
    CheckReport,
    DataStats,
    Endpoint,
    FileVerdict,
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
from layergrad.core.vocab import (
    CAUSE_CODES,
    SCAN_FLAGS,
    Change,
    Finding,
    JacobianMethod,
    Reduce,
    Status,
    Wrt,
)
from layergrad.diagnose.regressions import DiffReport, RowDiff
from layergrad.files.gradient_profile import ProfileRow
from layergrad.files.report_json import from_json, report_from_json, to_json
from layergrad.render import diff

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


findings = st.lists(st.sampled_from(Finding), max_size=3).map(tuple)
checks = st.builds(CheckItem, text, st.booleans(), text, findings, findings)
verdicts = st.builds(FileVerdict, text, st.booleans(), st.lists(checks, max_size=3).map(tuple))
check_reports = st.lists(verdicts, max_size=3).map(tuple).map(CheckReport)


@st.composite
def row_diffs(draw: st.DrawFn) -> RowDiff:
    name = draw(text)
    side = st.builds(ProfileRow, st.just(name), st.sampled_from(Status), maybe(measure),
                     st.lists(text, max_size=2).map(tuple))  # fmt: skip
    decades = st.floats(-300, 300, allow_nan=False)
    return RowDiff(name, draw(st.sampled_from(Change)), draw(maybe(side)), draw(maybe(side)),
                   draw(maybe(decades)), draw(st.booleans()), draw(text))  # fmt: skip


@st.composite
def diffs(draw: st.DrawFn) -> DiffReport:
    weights = draw(st.booleans())  # rows of variables, differentiating a loss; else of layers
    return DiffReport(
        draw(models), draw(models), draw(probes), None if weights else draw(maybe(text)),
        draw(st.floats(1e-3, 1e3)), tuple(draw(st.lists(row_diffs(), max_size=3))),
        (Wrt.WEIGHTS if weights else Wrt.ACTIVATIONS).value, draw(text) if weights else None,
    )  # fmt: skip


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
        ("MAX_COUNT", lambda d: d["probe"].update(samples=9), "probe.samples is 9"),
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


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(check_reports, diffs()))
def test_any_check_or_diff_report_written_then_read_is_the_same_report(report):
    assert from_json(type(report), written(report)) == report


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(diffs())
def test_a_diff_printed_one_row_a_line_is_its_json(report):
    printed = diff.as_json(report)
    assert json.loads(printed) == written(report)
    rows, name = ("variables", "variable") if report.loss is not None else ("layers", "layer")
    doc = json.loads(printed)
    assert [r[name] for r in doc[rows]] == [r.name for r in report.rows]
    assert doc["regressions"] == sum(r.regression for r in report.rows)
    assert ("target" in doc) == (report.loss is None) != ("wrt" in doc)
    lines = printed.splitlines()
    assert sum(line.startswith('    {"') for line in lines) == len(report.rows)


def test_a_check_report_says_what_each_file_got():
    item = CheckItem("gradient", True, "reaches every layer", (Finding.VANISHING,),
                     (Finding.VANISHING,))  # fmt: skip
    failed = FileVerdict(
        "b.keras", False, (CheckItem("safe", False, "a Lambda", (Finding.UNSAFE,)),)
    )
    doc = written(CheckReport((FileVerdict("a.keras", True, (item,)), failed)))
    assert doc["schema"] == "layergrad.check/1" and doc["passed"] is False
    assert doc["summary"] == "1 passed, 1 failed, 1 warning"
    assert [(f["verdict"], f["failures"], f["warnings"]) for f in doc["files"]] == [
        ("PASS, 1 warning", [], ["vanishing"]),
        ("FAIL", ["unsafe"], []),
    ]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(diffs().filter(lambda d: any(r.decades is not None for r in d.rows)), st.data())
def test_a_diff_member_out_of_its_bounds_is_refused_by_name(report, data):
    doc = written(report)
    rows = doc["variables" if report.loss is not None else "layers"]
    i = next(i for i, r in enumerate(report.rows) if r.decades is not None)
    value = data.draw(st.sampled_from([1e101, -1e101, "x"]))
    rows[i]["decades"] = value
    with pytest.raises(InputError, match=rf"rows\[{i}\]\.decades is "):
        from_json(DiffReport, doc)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(diffs(), st.sampled_from([[], {}, 3, None, "bias"]))
def test_a_diff_with_an_unknown_wrt_is_refused_in_one_line(report, wrt):
    doc = written(report)
    doc["wrt"] = wrt
    with pytest.raises(InputError, match=r": wrt is "):  # the field's name, as the doc spells it
        from_json(DiffReport, doc)


@pytest.mark.parametrize(
    ("member", "value", "expected"),
    [
        ("batch_size", -4, "expected 1 to 1,048,576"),
        ("batch_size", 0, "expected 1 to 1,048,576"),
        ("batch_size", 2**21, "expected 1 to 1,048,576"),
        ("seed", -1, "expected a seed from 0 to 4,294,967,295"),
        ("seed", 2**40, "expected a seed from 0 to 4,294,967,295"),
    ],
)
def test_a_probe_number_out_of_range_is_refused_with_the_range_layergrad_takes(
    member, value, expected
):
    """One range in the message, the one the option takes: a value that follows it is read
    (a negative batch size was told 0 and up, and then 0 was refused with another range)."""
    doc = written(ScanReport(ModelMeta("m", "keras", "Model", "m"),
                             ProbeMeta("random", 0, 8, False, Reduce.SUM), None, ()))  # fmt: skip
    doc["probe"][member] = value
    with pytest.raises(InputError, match=f"probe.{member} is {value}, {expected}"):
        report_from_json(doc)
