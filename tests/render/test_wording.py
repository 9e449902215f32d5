"""What a new user reads: sentences that read as English, fix lines that stay indented when
they wrap, a cause said once per layer, bars that compare magnitudes, the strongest warning
first, a chart whose labels stay readable on a long model, notes for shared layers."""

from __future__ import annotations

import json
import math
import re

import numpy as np
from click.testing import CliRunner
from helpers import CUSTOM_LAYERS, keras, normal, sample

from layergrad.cli.app import main
from layergrad.commands.api import inspect_model, scan_model
from layergrad.render import inspect as inspect_render
from layergrad.render import scan as scan_render

BAR_DECADES = 6  # the bars span at least six decades (docs/scan.md)


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


def test_check_fixes_read_as_sentences():
    """The loss check said "Use move 'drop' before ..." and "Use for one yes/no output: ..."."""
    _, out = run("check", sample("bug_dropout_logits.keras"),
                 sample("bug_softmax_one_unit.keras"), "--json")  # fmt: skip
    messages = [c["message"] for f in json.loads(out)["files"] for c in f["checks"]]
    assert any("Fix: move '" in m for m in messages), messages
    assert not [m for m in messages if ". Use " in m], messages


def test_wrapped_fix_lines_stay_indented():
    report = inspect_model(sample("cause_round.keras"), "dense", ["head"], imports=[CUSTOM_LAYERS])
    text = inspect_render.table(report, width=64)
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if "fix:" in line]
    assert starts, text
    for i in starts:
        indent = lines[i].index("fix:")
        follow = lines[i + 1]
        assert follow.strip("│ ") and not re.match(r"^│ \d+\. ", follow), text
        # the continuation of a wrapped fix starts under the fix text, not at the margin
        body = follow.lstrip("│")
        assert len(body) - len(body.lstrip(" ")) >= indent - 1, (lines[i], follow)


def test_a_cause_of_a_layer_is_said_once_for_all_its_variables():
    code, out = run("scan", sample("train_unused_input.keras"), "--wrt", "weights", "--import",
                    CUSTOM_LAYERS)  # fmt: skip
    assert code in (0, 1), out
    assert out.count("1. unused_input") == 1, out
    assert "none: b/kernel, b/bias" in out
    for fmt, code_text in (("markdown", "**unused_input**"), ("html", ">unused_input<")):
        code, out = run("scan", sample("train_unused_input.keras"), "--wrt", "weights",
                        "--import", CUSTOM_LAYERS, "--format", fmt)  # fmt: skip
        assert out.count(code_text) == 1, (fmt, out)


def _bars(text: str) -> dict[str, tuple[int, float]]:
    """layer -> (blocks, log10 value) of a scan table's bar column."""
    found = {}
    for line in text.splitlines():
        m = re.match(r"^\s*(\S+)\s.*?\s(█+) ([+-]\d+\.\d)", line)
        if m:
            found[m.group(1)] = (len(m.group(2)), float(m.group(3)))
    return found


def test_log_bars_are_on_fixed_decades_so_close_values_get_close_bars():
    """seed.keras's rows lie within 0.6 decades: min-to-max scaling gave them 1 to 16 blocks."""
    report = scan_model(sample("seed.keras"))
    bars = _bars(scan_render.table(report, width=120))
    assert len(bars) == len(report.rows) >= 3, bars
    logs = {r.layer: math.log10(r.gradient.mean_abs) for r in report.rows if r.gradient}
    for a in bars:
        for b in bars:
            allowed = 16 * abs(logs[a] - logs[b]) / BAR_DECADES + 1
            assert abs(bars[a][0] - bars[b][0]) <= allowed, bars


def test_equal_values_get_equal_bars(tmp_path):
    """A linear Activation passes the gradient unchanged: its row and its input's are equal."""
    x = keras.Input((5,), name="x")
    h = keras.layers.Dense(4, name="dense")(x)
    same = keras.layers.Activation("linear", name="same")(h)
    keras.Model(x, keras.layers.Dense(2, name="head")(same)).save(tmp_path / "m.keras")
    report = scan_model(str(tmp_path / "m.keras"))
    rows = {r.layer: r.gradient.mean_abs for r in report.rows if r.gradient}
    assert math.isclose(rows["dense"], rows["same"], rel_tol=1e-6)
    bars = _bars(scan_render.table(report, width=120))
    assert bars["dense"][0] == bars["same"][0], bars


def test_scan_table_says_integer_as_the_json_does():
    code, out = run("scan", sample("embedding.keras"))
    assert code in (0, 1), out
    assert "not differentiable" not in out
    assert re.search(r"^\s*ids\s.*\binteger\b", out, re.M), out


def test_the_softmax_target_note_comes_first():
    """inspect --to a softmax: the sum of its outputs is 1, which explains the vanishing and
    the zeros that the weaker warnings also report."""
    report = inspect_model(sample("fixed_softmax_head.keras"), "x", ["head"])
    (res,) = report.results
    assert len(res.warnings) >= 2, res.warnings
    assert "ends in softmax" in res.warnings[0], res.warnings


def test_a_shared_layer_without_a_call_index_is_said_to_mean_call_0():
    (res,) = inspect_model(sample("shared.keras"), "shared", ["head"]).results
    said = [w for w in res.warnings if "shared@0" in w]
    assert said and "called 2 times" in said[0] and "shared@1" in said[0], res.warnings
    (res,) = inspect_model(sample("shared.keras"), "shared@1", ["head"]).results
    assert not [w for w in res.warnings if "shared@0" in w], res.warnings
    (res,) = inspect_model(sample("shared.keras"), "pre", ["head"]).results
    assert not [w for w in res.warnings if "called" in w], res.warnings


def test_inspect_over_the_data_notes_a_shared_layer_in_the_same_words(tmp_path):
    path = sample("shared.keras")
    data = tmp_path / "x.npy"
    np.save(data, normal(12, *keras.saving.load_model(path).input_shape[1:]))
    said = (
        "--from shared: 'shared' is called 2 times (a shared layer) and shared means its first "
        "call, shared@0; name the other calls shared@1"
    )
    for how in ({}, {"data": str(data), "batch_size": 5}):
        (res,) = inspect_model(path, "shared", ["head"], **how).results
        assert said in res.warnings, (how, res.warnings)


def test_a_long_scan_chart_grows_in_height_with_readable_labels(tmp_path):
    """164 layers: the page's chart is one tall column (not three that a browser shrinks to
    its width, making 8 pt labels about 3 pt)."""
    from layergrad.render import scan as scan_page

    x = keras.Input((3,), name="x")
    h = x
    for i in range(163):
        h = keras.layers.Dense(3, name=f"d{i}")(h)
    keras.Model(x, h).save(tmp_path / "long.keras")
    report = scan_model(str(tmp_path / "long.keras"))
    assert len(report.rows) == 164
    page = scan_page.html(report)
    width = int(re.search(r'class="chart"[^>]*max-width:(\d+)px', page).group(1))
    svg = re.search(r'<svg[^>]*height="([\d.]+)pt"[^>]*width="([\d.]+)pt"|'
                    r'<svg[^>]*width="([\d.]+)pt"[^>]*height="([\d.]+)pt"', page)  # fmt: skip
    assert svg, page[:2000]
    w, h_ = (float(svg.group(2)), float(svg.group(1))) if svg.group(1) else (
        float(svg.group(3)), float(svg.group(4)))  # fmt: skip
    assert width <= 1000 and h_ > 3 * w, (width, w, h_)
    # every layer keeps its label
    assert all(f">d{i}<" in page or f"d{i}" in page for i in (0, 81, 162))
