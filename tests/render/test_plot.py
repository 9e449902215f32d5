"""Charts: the bars stand at the values worked out by hand, files are valid, labels never
overlap, and nothing imports matplotlib unless it draws.

Truth: hand_set.keras (b = (x @ [[1, 2], [3, 4]]) @ [[5], [6]]) gives mean |g| 28, 5.5, 1 for
x, a, b and per-unit sensitivities 6 (unit 1) and 5 (unit 0) for d sum(b) / d a. Files are
read back with Pillow (PNG), ElementTree (SVG) and their magic bytes (PDF).
"""

from __future__ import annotations

import itertools
import json
import math
import shutil
import xml.etree.ElementTree as ET
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest
from click.testing import CliRunner
from helpers import CUSTOM_LAYERS, fresh_python, sample
from pagecheck import read_page

from layergrad.cli.app import main
from layergrad.commands.api import inspect_model, scan_model
from layergrad.core.errors import LayergradError
from layergrad.core.results import GradientStats, ModelMeta, ProbeMeta, ScanReport, ScanRow
from layergrad.render import chart_files, plot
from layergrad.render import scan as scan_page

PROBE = ProbeMeta("random", 0, 8, False, "sum")


def run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def by_gid(fig, prefix: str) -> dict[str, Any]:
    """Artists of a figure whose gid starts with `prefix`, by gid."""
    found = fig.findobj(lambda a: (a.get_gid() or "").startswith(prefix))
    return {a.get_gid(): a for a in found}


def svg_ids(path) -> list[str]:
    return [
        e.get("id") for e in ET.parse(path).getroot().iter() if e.get("id", "").startswith("lg-")
    ]


def long_scan(n: int = 180) -> ScanReport:
    """A ResNet-sized scan with long names, every kind of row, and means over 12 decades."""
    rows = []
    for i in range(n):
        flags = {7: ("blocked",), 8: ("nonfinite",), 50: ("dead",), 90: ("vanishing",)}.get(i, ())
        status = {7: "none", 8: "nonfinite", 3: "integer"}.get(i, "ok")
        mean = 10.0 ** (-(i % 13)) if status == "ok" else 0.0
        g = (
            None
            if status in ("none", "integer")
            else GradientStats((8, 4), mean, mean, mean, 0.0, 0)
        )
        rows.append(ScanRow(f"conv{i // 10}_block{i % 10}_{'x' * (i % 25)}", "Conv2D", (8, 4), "float32", status, g, flags))  # fmt: skip
    return ScanReport(ModelMeta("long.keras", "keras", "Functional", "long"), PROBE, None, tuple(rows))  # fmt: skip


def test_scan_bars_stand_at_the_hand_worked_values():
    report = scan_model(sample("hand_set.keras"), target="b")
    fig = plot.scan_figure(report)
    bars = by_gid(fig, "lg-bar-")
    assert sorted(bars) == ["lg-bar-0", "lg-bar-1", "lg-bar-2"]
    ends = [bars[f"lg-bar-{i}"].get_x() + bars[f"lg-bar-{i}"].get_width() for i in range(3)]
    assert ends == pytest.approx([28.0, 5.5, 1.0])
    (ax,) = fig.axes
    assert ax.get_xscale() == "log"
    assert [t.get_text() for t in ax.get_yticklabels()] == ["x", "a", "b"]
    assert "mean |g|" in ax.get_xlabel() and "log" in ax.get_xlabel()
    assert "Gradient flow" in fig.get_suptitle()


def test_blocked_rows_get_a_coloured_word_and_the_legend_names_them():
    report = scan_model(sample("cause_round.keras"), imports=[CUSTOM_LAYERS])
    fig = plot.scan_figure(report)
    words = by_gid(fig, "lg-mark-")
    assert sorted(words) == ["lg-mark-0", "lg-mark-1"] and len(by_gid(fig, "lg-bar-")) == 2
    from matplotlib.colors import to_hex

    assert {to_hex(w.get_color()) for w in words.values()} == {plot.MARKS["blocked"].color.lower()}
    assert [w.get_text() for w in words.values()] == ["None", "None"]
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == ["blocked (None)", "ok"]


def test_every_kind_of_row_has_its_own_mark():
    fig = plot.scan_figure(long_scan())
    (legend,) = fig.legends
    labels = [t.get_text() for t in legend.get_texts()]
    assert labels == ["blocked (None)", "non-finite", "dead", "vanishing", "not differentiable", "ok"]  # fmt: skip
    assert by_gid(fig, "lg-mark-3")["lg-mark-3"].get_text() == "integer"


def labels_overlap(boxes, axis: str) -> bool:
    """Whether any two of the tick-label boxes overlap along `axis` (x or y)."""
    lo, hi = f"{axis}0", f"{axis}1"
    boxes = sorted(boxes, key=lambda b: getattr(b, lo))
    return any(getattr(a, hi) > getattr(b, lo) for a, b in itertools.pairwise(boxes))


@pytest.mark.parametrize("means", [[1.0], [1.0, 0.5], [1e-30, 1e5], [3e-4, 2e-3]])
def test_the_log_axis_labels_never_crowd_whatever_the_range(means):
    rows = tuple(ScanRow(f"l{i}", "Dense", (8, 2), "float32", "ok", GradientStats((8, 2), m, m, m, 0, 0)) for i, m in enumerate(means))  # fmt: skip
    fig = plot.scan_figure(ScanReport(ModelMeta("m.keras", "keras", "Functional", "m"), PROBE, None, rows))  # fmt: skip
    renderer = fig.canvas.get_renderer()
    fig.draw(renderer)
    (ax,) = fig.axes
    shown = [t for t in ax.get_xticklabels(minor=False) + ax.get_xticklabels(minor=True) if t.get_visible() and t.get_text()]  # fmt: skip
    lo, hi = ax.get_xlim()
    assert math.log10(hi) - math.log10(lo) >= 3 and lo < min(means) and hi > max(means)
    assert len(shown) >= 2
    assert not labels_overlap([t.get_window_extent(renderer) for t in shown], "x")


def test_a_long_scan_wraps_and_no_label_overlaps_another():
    report = long_scan(180)
    fig = plot.scan_figure(report)
    assert len(fig.axes) == 3  # 180 rows: three columns of 60
    assert len(by_gid(fig, "lg-bar-")) + len(by_gid(fig, "lg-mark-")) == 180
    renderer = fig.canvas.get_renderer()
    fig.draw(renderer)
    labels = []
    for left, ax in zip([None, *fig.axes], fig.axes, strict=False):
        ticks = [t for t in ax.get_yticklabels() if t.get_text()]
        labels += [t.get_text() for t in ticks]
        boxes = [t.get_window_extent(renderer) for t in ticks]
        assert not labels_overlap(boxes, "y"), "two layer names overlap"
        for box in boxes:
            assert fig.bbox.x0 <= box.x0 and box.x1 <= fig.bbox.x1  # inside the figure
            if left is not None:
                assert box.x0 >= left.get_window_extent(renderer).x1  # clear of the column before
    assert all(len(r.layer) <= 40 for r in report.rows)  # short enough to be shown whole
    assert labels == [r.layer for r in report.rows]  # execution order, all rows


def test_a_long_layer_name_is_shortened_in_the_middle_on_its_axis():
    name = "encoder_" + "a" * 30 + "_tail_end_of_the_name"  # 59 characters
    g = GradientStats((8, 4), 1.0, 1.0, 1.0, 0.0, 0)
    rows = (ScanRow(name, "Dense", (8, 4), "float32", "ok", g, ()),
            ScanRow("out", "Dense", (8, 4), "float32", "ok", g, ()))  # fmt: skip
    fig = plot.scan_figure(ScanReport(ModelMeta("m.keras", "keras", "Functional", "m"), PROBE, None, rows))  # fmt: skip
    shown = [t.get_text() for t in fig.axes[0].get_yticklabels() if t.get_text()]
    # 40 characters at most: the first 19, an ellipsis, the last 19 (the table has it whole)
    assert shown == ["encoder_aaaaaaaaaaa…ail_end_of_the_name", "out"]


def test_png_svg_and_pdf_files_are_valid_with_one_bar_per_row(tmp_path):
    from PIL import Image

    report = scan_model(sample("hand_set.keras"), target="b")
    fig = plot.scan_figure(report)
    assert chart_files.save_figure(fig, tmp_path / "flow.png") == "png"
    with Image.open(tmp_path / "flow.png") as image:
        assert image.format == "PNG"
        assert image.size == (round(fig.get_figwidth() * 150), round(fig.get_figheight() * 150))
        assert len(image.convert("RGB").getcolors(1 << 20)) > 10
    chart_files.save_figure(fig, tmp_path / "flow.svg")
    assert svg_ids(tmp_path / "flow.svg") == ["lg-bar-0", "lg-bar-1", "lg-bar-2"]
    chart_files.save_figure(fig, tmp_path / "flow.pdf")
    data = (tmp_path / "flow.pdf").read_bytes()
    assert data.startswith(b"%PDF-") and b"%%EOF" in data[-32:]
    # Reproducible: the same figure saves to the same bytes (no date, no version).
    chart_files.save_figure(fig, tmp_path / "again.png")
    assert (tmp_path / "again.png").read_bytes() == (tmp_path / "flow.png").read_bytes()


def test_unit_sensitivity_bars_are_the_hand_worked_kernel():
    report = inspect_model(sample("hand_set.keras"), "a", ["b"])
    fig = plot.inspect_figure(report)
    bars = by_gid(fig, "lg-unit-0-")
    assert [bars[f"lg-unit-0-{r}"].get_width() for r in range(2)] == pytest.approx([6.0, 5.0])
    (ax,) = fig.axes
    assert [t.get_text() for t in ax.get_yticklabels()] == ["unit 1", "unit 0"]
    assert ax.get_title() == "-> b"


def test_inspect_without_a_finite_gradient_says_so_in_words():
    report = inspect_model(sample("residual.keras"), "side", ["head"])
    fig = plot.inspect_figure(report)
    assert fig.axes == [] and "nothing to chart" in " ".join(t.get_text() for t in fig.texts)


def test_the_jacobian_profile_is_drawn_when_rows_carry_one(tmp_path):
    base = scan_model(sample("hand_set.keras"), target="b")
    forms = [SimpleNamespace(frobenius=SimpleNamespace(mean=m)) for m in (3.0, 40.0)] + [None]
    rows = tuple(replace(r, jacobian=j) for r, j in zip(base.rows, forms, strict=True))
    report = ScanReport(base.model, base.probe, None, rows)
    fig = plot.scan_figure(report)
    points = by_gid(fig, "lg-jac-")
    assert sorted(points) == ["lg-jac-0", "lg-jac-1"]
    assert [points[f"lg-jac-{i}"].get_xdata()[0] for i in range(2)] == [3.0, 40.0]
    assert fig.axes[0].get_xlim()[1] > 40.0
    assert "Jacobian" in fig.legends[0].get_texts()[-1].get_text()
    chart_files.save_figure(fig, tmp_path / "jac.svg")
    assert sum(i.startswith("lg-jac-") for i in svg_ids(tmp_path / "jac.svg")) == 2
    assert plot.scan_figure(base).findobj(lambda a: (a.get_gid() or "").startswith("lg-jac")) == []
    page = read_page(scan_page.html(report))  # the page gets a column and the markers
    assert [r[10] for r in page.tables[0]] == ["3", "40", "-"] and len(page.ids("lg-jac-")) == 2


def test_names_with_mathtext_and_markup_are_drawn_literally():
    names = ["a$\\alpha$b", "<img src=x onerror=alert(1)>", "$\\notacommand{"]
    rows = tuple(ScanRow(n, "Dense", (8, 2), "float32", "ok", GradientStats((8, 2), 1, 1, 1, 0, 0)) for n in names)  # fmt: skip
    report = ScanReport(ModelMeta("$x$.keras", "keras", "Functional", "$m$"), PROBE, names[2], rows)
    fig = plot.scan_figure(report)
    fig.canvas.draw()  # mathtext would fail on the last name
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == names
    svg = chart_files.figure_svg(fig)
    assert "&lt;img src=x onerror=alert(1)&gt;" in svg and "<img" not in svg


def test_check_plot_path_refuses_unknown_formats_and_input_files(tmp_path):
    model = tmp_path / "model.png"  # a model file may have any name
    model.write_bytes(b"model")
    link = tmp_path / "link.svg"
    link.symlink_to(model)
    for path, protected, message in [
        (tmp_path / "x.gif", [], "unknown chart format '.gif'"),
        (tmp_path / "x", [], "(no extension)"),
        (model, [str(model), None], "which this run reads; refusing to write over it"),
        (link, [None, model], "which this run reads; refusing to write over it"),
    ]:
        with pytest.raises(LayergradError, match=message.replace("(", r"\(").replace(")", r"\)")):
            chart_files.check_plot_path(path, protected)
    assert chart_files.check_plot_path(tmp_path / "ok.PDF", [model]) == str(tmp_path / "ok.PDF")
    # a folder that does not exist yet is made, as for --junit and --save-gradient
    assert chart_files.check_plot_path(tmp_path / "new" / "x.png") == str(
        tmp_path / "new" / "x.png"
    )


def test_cli_plot_writes_the_file_and_says_so(tmp_path):
    target = tmp_path / "flow.png"
    result = run("scan", sample("hand_set.keras"), "--plot", str(target), "--json")
    assert result.exit_code == 0
    assert json.loads(result.stdout)["schema"] == "layergrad.scan/1"  # stdout stays JSON
    assert result.stderr == f"wrote gradient-flow chart to {target} (png)\n"
    assert target.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")

    target = tmp_path / "units.svg"
    result = run("inspect", sample("hand_set.keras"), "--from", "a", "--to", "b", "--plot", str(target))  # fmt: skip
    assert result.exit_code == 0 and "unit-sensitivity chart" in result.stderr
    assert svg_ids(target) == ["lg-unit-0-0", "lg-unit-0-1"]


def test_cli_plot_usage_errors_exit_2_before_any_work(tmp_path):
    result = run("scan", sample("hand_set.keras"), "--plot", str(tmp_path / "x.jpg"))
    assert result.exit_code == 2 and result.stderr.startswith("error: --plot")
    assert "Traceback" not in result.output and not (tmp_path / "x.jpg").exists()

    model = tmp_path / "model.png"  # the model file itself as the chart: never written over
    shutil.copy(sample("hand_set.keras"), model)
    before = model.read_bytes()
    result = run("inspect", str(model), "--from", "a", "--to", "b", "--plot", str(model))
    assert result.exit_code == 2 and "refusing to write over it" in result.stderr
    assert result.stdout == "" and model.read_bytes() == before


def test_commands_that_do_not_plot_never_import_matplotlib():
    code = f"""
import sys
from click.testing import CliRunner
import layergrad.render.plot, layergrad.render.inspect, layergrad.render.scan
from layergrad.cli.app import main
model = {sample("hand_set.keras")!r}
codes = [CliRunner().invoke(main, args).exit_code for args in (
    ["--help"], ["scan", "--help"], ["layers", model], ["layers", model, "--json"],
    ["check", model, "--static-only"], ["check", model, "--static-only", "--format", "html"],
)]
print(codes, sorted(m for m in ("matplotlib", "tensorflow") if m in sys.modules))
"""
    assert fresh_python("-c", code).strip() == "[0, 0, 0, 0, 0, 0] []"


def test_log_limits_leave_a_decade_below_the_smallest_bar():
    ax = plot.scan_figure(long_scan(40)).axes[0]
    assert ax.get_xscale() == "log"
    lo, hi = ax.get_xlim()
    smallest = min(r.gradient.mean_abs for r in long_scan(40).rows if r.gradient and r.gradient.mean_abs > 0)  # fmt: skip
    assert lo < smallest / 9 and math.isclose(math.log10(lo) % 1, 0, abs_tol=1e-9) and hi > 1.0
