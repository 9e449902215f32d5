"""`--format html`: well-formed, self-contained pages with every row, names kept as text.

Pages are read back with the standard library's HTMLParser (tests/pagecheck.py), not with the
code that wrote them. Expected rows come from the result objects and from values worked out
by hand (hand_set.keras: mean |g| of x, a, b is 28, 5.5, 1).
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from helpers import CUSTOM_LAYERS, keras, sample
from pagecheck import external_references, read_page

from layergrad.cli.app import main
from layergrad.commands.api import inspect_model, scan_model
from layergrad.core.results import (
    CheckItem,
    Endpoint,
    FileVerdict,
    GradientStats,
    InspectReport,
    ModelMeta,
    ProbeMeta,
    Reason,
    Result,
    ScanReport,
    ScanRow,
)
from layergrad.core.vocab import Finding
from layergrad.render import inspect as inspect_page
from layergrad.render import scan as scan_page
from layergrad.render.check import html as check_html

IMG = "<img src=x onerror=alert(1)>"
END_SCRIPT = "</script><script>alert(2)</script>"
MIXED = 'a$\\alpha$ & "q" \'s <b>'  # mathtext, quotes, an ampersand, a tag
PROBE = ProbeMeta("random", 0, 8, False, "sum")


def run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def stats(mean: float) -> GradientStats:
    return GradientStats((8, 4), 2 * mean, mean, 3 * mean, 0.0, 0, ((1, mean), (0, mean / 2)))


def assert_well_formed_and_self_contained(document: str):
    page = read_page(document)
    assert page.doctype.lower() == "doctype html"
    assert page.errors == []
    assert [page.count(t) for t in ("html", "head", "body", "title")] == [1, 1, 1, 1]
    assert external_references(page) == []
    scripts = [attrs for tag, attrs in page.tags if tag == "script"]
    assert scripts == [{}]  # one script, ours, inline
    return page


def hostile_scan() -> ScanReport:
    cause = Reason(Finding.NON_DIFFERENTIABLE_OP, f"the gradient stops at {IMG!r}", f"remove {END_SCRIPT}", IMG, op="Round")  # fmt: skip
    rows = (
        ScanRow(IMG, "Dense", (8, 4), "float32", "none", None, ("blocked",), (cause,)),
        ScanRow(END_SCRIPT, "Custom", (8, 4), "float32", "ok", stats(0.5)),
        ScanRow(MIXED, "Dense", (8, 2), "float32", "ok", stats(1.0)),
    )
    model = ModelMeta(f"{END_SCRIPT}.keras", "keras", "Functional", IMG)
    return ScanReport(model, PROBE, MIXED, rows, notes=(f"{IMG} ends in softmax",))


def test_names_from_the_model_stay_text_in_a_scan_page():
    page = assert_well_formed_and_self_contained(scan_page.html(hostile_scan()))
    assert page.count("img") == 0 and page.count("b") == 0
    layers = [row[1] for row in page.tables[0]]
    assert layers == [IMG, END_SCRIPT, MIXED]  # unescaped by the parser: exactly the names
    for text in (f"{END_SCRIPT}.keras", f"{IMG} ends in softmax", f"remove {END_SCRIPT}"):
        assert text in page.text
    assert f"d sum({MIXED}) / d each layer" in page.text


def test_names_from_the_model_stay_text_in_inspect_and_check_pages():
    ok = Result(Endpoint(IMG, (8, 4), "float32"), Endpoint(MIXED, (8, 2), "float32"), "ok", stats(1.0))  # fmt: skip
    cause = Reason(Finding.NOT_DOWNSTREAM, f"{MIXED} does not depend on {IMG}", "pick another", END_SCRIPT)  # fmt: skip
    broken = Result(ok.source, Endpoint(END_SCRIPT, (8, 2), "float32"), "none", None, (cause,), (f"warn {IMG}",))  # fmt: skip
    report = InspectReport(ModelMeta(IMG, "h5", "Sequential", MIXED), PROBE, (ok, broken))
    page = assert_well_formed_and_self_contained(inspect_page.html(report))
    assert page.count("img") == 0 and page.count("b") == 0
    assert [row[:2] for row in page.tables[0]] == [[IMG, MIXED], [IMG, END_SCRIPT]]
    assert f"{MIXED} does not depend on {IMG}" in page.text and f"warn {IMG}" in page.text

    verdict = FileVerdict(IMG, False, (CheckItem("loads", False, f"cannot load {END_SCRIPT}", ("error",)),))  # fmt: skip
    page = assert_well_formed_and_self_contained(check_html([verdict]))
    assert page.count("img") == 0
    assert page.tables[0][0][0] == IMG and f"cannot load {END_SCRIPT}" in page.text


def test_a_real_model_with_a_hostile_layer_name(tmp_path):
    x = keras.Input((3,), name="x")
    out = keras.layers.Dense(2, name=IMG)(x)
    side = keras.layers.Dense(2, name="side")(x)
    path = tmp_path / "hostile.keras"
    keras.Model(x, [out, side]).save(path)

    scan = run("scan", str(path), "--format", "html")
    assert scan.exit_code == 0, scan.stderr
    page = assert_well_formed_and_self_contained(scan.stdout)
    assert page.count("img") == 0
    assert sorted(row[1] for row in page.tables[0]) == sorted(["x", IMG, "side"])

    inspect = run("inspect", str(path), "--from", "side", "--to", IMG, "--format", "html")
    page = assert_well_formed_and_self_contained(inspect.stdout)
    assert page.count("img") == 0
    assert "not_downstream" in page.text and IMG in page.text  # the cause panel names it


def test_scan_page_has_every_row_of_the_table_in_order():
    report = scan_model(sample("cause_round.keras"), imports=[CUSTOM_LAYERS])
    page = assert_well_formed_and_self_contained(scan_page.html(report))
    rows = page.tables[0]
    assert [r[1] for r in rows] == [r.layer for r in report.rows] == ["x", "dense", "round", "head"]
    assert [r[4] for r in rows] == ["none", "none", "ok", "ok"]
    assert [r[9] for r in rows] == ["blocked", "blocked", "", ""]
    assert page.text.index("2 blocked") < page.text.index("Gradient flow")  # verdict first
    for text in ("model", "format", "probe", "random (seed 0), batch 8", "target",
                 "d sum(model outputs) / d each layer", "mode", "inference"):  # fmt: skip
        assert text in page.text
    # One cause panel for the two blocked rows, with the code, layer, op, evidence and fix.
    assert "none at x, dense" in page.text
    assert "non_differentiable_op at round (op Round)" in page.text and "fix:" in page.text
    assert len(page.ids("lg-bar-")) == 2 and len(page.ids("lg-mark-")) == 2  # inline chart


def test_scan_page_numbers_worked_out_by_hand():
    page = read_page(scan_page.html(scan_model(sample("hand_set.keras"), target="b")))
    assert [(r[1], r[6]) for r in page.tables[0]] == [("x", "28"), ("a", "5.5"), ("b", "1")]


def test_inspect_page_results_chart_units_and_cause_panels():
    report = inspect_model(sample("residual.keras"), "stem", ["head", "side"])
    page = assert_well_formed_and_self_contained(inspect_page.html(report))
    assert [r[:2] for r in page.tables[0]] == [["stem", "head"], ["stem", "side"]]
    assert "d sum(to) / d stem, for to in head, side" in page.text
    assert len(page.ids("lg-unit-")) == 16  # two panels of 8 units (stem is Dense(8))
    assert page.tables[1][0][0] == "1" and len(page.tables[1]) == 8  # the units table

    report = inspect_model(sample("residual.keras"), "side", ["head"])
    page = read_page(inspect_page.html(report))
    assert page.tables[0][0][4] == "none"
    assert "none: d head / d side" in page.text and "not_downstream" in page.text
    assert "fix:" in page.text and "no unit sensitivity to show" in page.text


def test_inspect_page_for_hand_set_shows_the_paper_values():
    page = read_page(inspect_page.html(inspect_model(sample("hand_set.keras"), "a", ["b"])))
    assert page.tables[0][0][5:8] == ["22.09", "5.5", "6"]  # L2 sqrt(8*(25+36)), mean, max
    assert "target d sum(b) / d a mode inference" in page.text
    assert page.tables[1] == [["1", "unit 1", "6"], ["2", "unit 0", "5"]]


def test_check_page_verdict_first_failed_files_and_checks_first():
    good = FileVerdict("good.keras", True, (CheckItem("readable", True, "keras file"),))
    bad = FileVerdict("bad.keras", False, (
        CheckItem("readable", True, "keras file"),
        CheckItem("weights", False, "1 NaN", ("nonfinite",)),
        CheckItem("loads", True, "loaded"),
    ))  # fmt: skip
    page = assert_well_formed_and_self_contained(check_html([good, bad]))
    assert page.text.startswith("layergrad check FAIL: 1 of 2 files failed")
    assert [r[:2] for r in page.tables[0]] == [["good.keras", "PASS"], ["bad.keras", "FAIL"]]
    # Sections: the failed file first; in it the failed check first.
    assert [r[0] for r in page.tables[1]] == ["weights", "readable", "loads"]
    assert [r[0] for r in page.tables[2]] == ["readable"]
    assert page.text.index("FAIL bad.keras") < page.text.index("PASS good.keras")
    links = [a["href"] for t, a in page.tags if t == "a"]
    assert links == ["#file-0", "#file-1"] and page.ids("file-") == ["file-1", "file-0"]


def test_cli_format_html_for_every_rendering_command():
    check = ["check", sample("hand_set.keras"), sample("cause_round.keras"), "--import", CUSTOM_LAYERS]  # fmt: skip
    cases = [
        ["inspect", sample("seed.keras"), "--from", "dense", "--to", "dense_1"],
        ["scan", sample("seed.keras")],
        check,
    ]
    for args in cases:
        result = run(*args, "--format", "html")
        assert result.exit_code == (1 if args[0] == "check" else 0)
        page = assert_well_formed_and_self_contained(result.stdout)
    assert "FAIL: 1 of 2 files failed" in page.text
    # The failed file's section comes first, its failed check (gradient: blocked) on top.
    assert page.tables[1][0][:2] == ["gradient", "fail"] and "blocked" in page.tables[1][0][2]
    assert [r[0] for r in page.tables[2]] == ["readable", "safe", "weights", "loss", "loads", "forward", "gradient", "trainable"]  # fmt: skip


def test_fail_on_still_sets_the_exit_code_with_html():
    result = run("scan", sample("cause_round.keras"), "--import", CUSTOM_LAYERS,
                 "--format", "html", "--fail-on", "blocked")  # fmt: skip
    assert result.exit_code == 1 and result.stdout.startswith("<!DOCTYPE html>")


@pytest.mark.parametrize("command", ["inspect", "scan", "check"])
def test_help_lists_html(command):
    assert "html" in run(command, "--help").stdout


@pytest.mark.slow
def test_resnet50_page_is_small_and_keeps_every_row(tmp_path):
    path = tmp_path / "resnet50.keras"
    keras.applications.ResNet50(weights=None, input_shape=(64, 64, 3)).save(path)
    report = scan_model(path, target="avg_pool")
    document = scan_page.html(report)
    assert len(document.encode()) < 3_000_000
    page = assert_well_formed_and_self_contained(document)
    assert len(report.rows) > 170
    assert [r[1] for r in page.tables[0]] == [r.layer for r in report.rows]
    assert len(page.ids("lg-bar-")) + len(page.ids("lg-mark-")) == len(report.rows)
