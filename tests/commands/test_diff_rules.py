"""The regression rules of `diff`, one by one, on profiles written by hand; and a scan JSON
read back is the same profile as the report it was printed from."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
from helpers import sample

from layergrad.core.errors import InputError, UsageError
from layergrad.core.results import ModelMeta, ProbeMeta
from layergrad.core.vocab import Change, Status
from layergrad.diagnose.regressions import compare, compare_row, merged_order
from layergrad.files.gradient_profile import Profile, ProfileRow
from layergrad.files.report_json import profile_from_json, profile_of

MODEL = ModelMeta("m.keras", "keras", "Functional", "m")
PROBE = ProbeMeta("random", 0, 8, False, "sum")


def row(name="a", status=Status.OK, mean=1.0, flags=(), cause=None, shape=None) -> ProfileRow:
    return ProfileRow(name, Status(status), mean, tuple(flags), cause, shape)


def profile(*rows, probe=PROBE, target=None) -> Profile:
    return Profile(MODEL, probe, target, tuple(rows))


def judged(base, new, tolerance=2.0):
    return compare_row(base.name if base else new.name, base, new, tolerance)


@pytest.mark.parametrize(
    ("new_mean", "regression", "why"),
    [
        (1e-3, True, "mean |g| fell 3.0 decades (tolerance 2)"),
        (1e3, True, "mean |g| rose 3.0 decades (tolerance 2)"),  # either direction
        (1e-2, False, "mean |g| fell 2.0 decades (within tolerance 2)"),  # 2 is not beyond 2
        (10**-2.004, True, "mean |g| fell 2.004 decades (tolerance 2)"),  # never "2.0 (tol. 2)"
        (0.5, False, "mean |g| fell 0.3 decades (within tolerance 2)"),
        (1.0 + 1e-9, False, "unchanged"),  # float rounding is no change
    ],
)
def test_the_decades_rule(new_mean, regression, why):
    r = judged(row(mean=1.0), row(mean=new_mean))
    assert r.decades == pytest.approx(math.log10(new_mean))
    assert (r.regression, r.why) == (regression, why)


def test_tolerance_is_the_option():
    assert judged(row(mean=1.0), row(mean=1e-3), tolerance=3.5).regression is False
    assert judged(row(mean=1.0), row(mean=0.5), tolerance=0.25).regression is True


@pytest.mark.parametrize("broken", ["none", "zero", "nonfinite"])
def test_ok_that_breaks_is_a_regression(broken):
    new = row(status=broken, mean=None if broken == "none" else 0.0, cause="stop_gradient at s")
    r = judged(row(), new)
    assert r.regression and r.decades is None and r.change == Change.CHANGED
    assert r.why == f"was ok, now {broken} (stop_gradient at s)"


@pytest.mark.parametrize(
    ("before", "after"),
    [("none", "ok"), ("zero", "ok"), ("nonfinite", "none"), ("none", "none"), ("ok", "integer")],
)
def test_other_status_changes_are_not_regressions(before, after):
    r = judged(row(status=before, mean=None), row(status=after, mean=None))
    assert not r.regression
    assert r.change == (Change.SAME if before == after else Change.CHANGED)


def test_newly_dead_on_an_ok_row_is_a_regression():
    r = judged(row(mean=1.0), row(mean=0.9, flags=["dead"]))
    assert r.regression and r.why.startswith("newly flagged dead")
    assert not judged(row(flags=["dead"]), row(flags=["dead"])).regression  # not newly
    assert not judged(row(mean=1.0, flags=["dead"]), row(mean=1.0)).regression  # healed
    vanishing = judged(row(mean=1.0), row(mean=1.0, flags=["vanishing"]))
    assert not vanishing.regression and vanishing.why == "newly flagged vanishing"


def test_rows_in_one_scan_only_are_reported_not_regressions():
    report = compare(profile(row("a"), row("gone")), profile(row("a"), row("new", "none", None)))
    rows = {r.name: r for r in report.rows}
    assert rows["gone"].change == Change.REMOVED and rows["gone"].new is None
    assert rows["new"].change == Change.ADDED and rows["new"].base is None
    assert not report.regressions


def test_removed_rows_stay_where_they_were():
    assert merged_order(["a", "b", "c", "d"], ["a", "c", "e"]) == ["a", "b", "c", "d", "e"]
    assert merged_order(["z", "a"], ["a"]) == ["z", "a"]
    assert merged_order([], ["a"]) == ["a"] and merged_order(["a"], []) == ["a"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"probe": replace(PROBE, seed=1)},
            "probe batch random \\(seed 0\\), the new one with random \\(seed 1\\)",
        ),
        ({"probe": replace(PROBE, batch_size=2)}, "batch size 8, the new one with 2"),
        ({"probe": replace(PROBE, reduce="mean")}, "reduction"),
        ({"probe": replace(PROBE, training=True)}, "mode inference, the new one with training"),
        ({"probe": replace(PROBE, source="x.npy", seed=None)}, "--input x.npy"),
        ({"target": "head"}, "--to head"),
    ],
)
def test_profiles_from_different_probes_do_not_compare(change, message):
    base = profile(row())
    new = replace(base, **change)
    with pytest.raises(UsageError, match=message):
        compare(base, new)


def test_the_same_input_file_by_another_spelling_compares():
    a = profile(row(), probe=replace(PROBE, source="data/x.npy", seed=None))
    b = profile(row(), probe=replace(PROBE, source="./data/x.npy", seed=None))
    assert compare(a, b).rows[0].change == Change.SAME


def test_a_changed_input_shape_does_not_compare():
    with pytest.raises(UsageError, match="model input 'x' was probed with shape"):
        compare(profile(row("x", shape=(8, 4))), profile(row("x", shape=(8, 5))))


@pytest.mark.parametrize("tolerance", [0, -1, float("nan"), float("inf")])
def test_the_tolerance_must_be_a_positive_number(tolerance):
    with pytest.raises(UsageError, match="--tolerance"):
        compare(profile(row()), profile(row()), tolerance)


def expected_rows(report) -> tuple[ProfileRow, ...]:
    """What a comparison needs of each row, taken from the report by hand."""
    return tuple(
        ProfileRow(
            r.layer,
            r.status,
            None if r.gradient is None else r.gradient.mean_abs,
            tuple(str(f) for f in r.flags),
            f"{r.causes[0].code} at {r.causes[0].layer}" if r.causes else None,
            r.shape if r.class_name == "InputLayer" else None,
        )
        for r in report.rows
    )


def test_a_scan_json_reads_back_as_the_report_it_was_printed_from():
    from layergrad.commands.api import scan_model
    from layergrad.core.vocab import OutputFormat
    from layergrad.render import render

    for name, args in [
        ("residual.keras", {}),
        ("cause_dead_relu.keras", {}),
        ("embedding.keras", {}),
        ("cause_stop_gradient.keras", {"imports": [sample("custom_layers.py")]}),
    ]:
        report = scan_model(sample(name), **args)
        read = profile_from_json(json.loads(render("scan", OutputFormat.JSON, report)))
        assert read.rows == expected_rows(report) == profile_of(report).rows
        assert (read.model, read.probe, read.target) == (report.model, report.probe, report.target)
        assert profile_of(report).model is report.model  # with its audit warnings
    assert any(r.cause and r.cause.startswith("stop_gradient at") for r in read.rows)


def test_a_scan_json_beyond_the_budget_is_refused_unread(tmp_path, monkeypatch):
    from layergrad.files import report_json as profiles

    path = tmp_path / "big.json"
    path.write_text('{"schema": "layergrad.scan/1", "pad": "' + "x" * 2000 + '"}')
    monkeypatch.setattr(profiles, "MAX_PROFILE_BYTES", 1024)
    with pytest.raises(InputError, match=r"big\.json is larger than 0\.000976562 MiB"):
        profiles.load_profile(path)


@pytest.mark.parametrize("wrt", [[], {}, 3, "biases"])
def test_a_scan_json_of_an_unknown_kind_is_one_line(wrt):
    """`wrt` names what the rows differentiate with respect to; any other value, even one that
    is not a string, is refused in one line naming it."""
    doc = {"schema": "layergrad.scan/1", "wrt": wrt, "layers": []}
    with pytest.raises(InputError, match=r"scan JSON: wrt is .*, expected 'activations' or"):
        profile_from_json(doc)
