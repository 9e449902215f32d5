"""The fit report's formats on a record made by hand: escaping, strict JSON, the pictures."""

from __future__ import annotations

import json
import math
import re

from pagecheck import read_page

from layergrad.core.fit_results import (
    Checkpoint,
    FitReport,
    LayerStats,
    Reason,
    VariableStats,
)
from layergrad.core.vocab import Finding, OutputFormat
from layergrad.render import render

HOSTILE = "<img src=x onerror=alert(1)>"


def report() -> FitReport:
    rows = (
        LayerStats(HOSTILE, 2.0, 4.0, 0.05, 0.25, 0, 0),
        LayerStats("head", math.nan, 1.0, None, None, 3, 1),
    )
    variables = (VariableStats(f"{HOSTILE}/kernel", HOSTILE, (3, 4), 2.0, 4.0, 0, 0.25),)
    checkpoints = tuple(
        Checkpoint(step, 0, step - 1, loss, 0.1, rows, variables)
        for step, loss in ((1, 1.5), (2, math.inf))
    )
    finding = Reason(Finding.NONFINITE, f"in {HOSTILE} at step 2", layer=HOSTILE, step=2)
    return FitReport(
        model="m",
        model_class="Sequential",
        every=1,
        steps=2,
        epochs=1,
        loss_name="mse",
        optimizer="SGD",
        learning_rate=0.1,
        losses=(1.5, math.inf),
        checkpoints=checkpoints,
        findings=(finding,),
        stopped="nonfinite",
    )


def test_json_is_strict_with_null_for_nonfinite_values():
    text = render("fit", OutputFormat.JSON, report())
    doc = json.loads(text, parse_constant=lambda c: (_ for _ in ()).throw(AssertionError(c)))
    assert doc["losses"] == [1.5, None]
    assert doc["checkpoints"][1]["loss"] is None
    assert doc["checkpoints"][0]["layers"][1]["grad_l2"] is None
    # the fit/1 fields, then the rest of the one finding record (DESIGN, fifth round)
    assert doc["findings"] == [
        {"finding": "nonfinite", "layer": HOSTILE, "step": 2, "message": f"in {HOSTILE} at step 2",
         "code": "nonfinite", "hint": "", "facts": {}, "severity": "failure"}
    ]  # fmt: skip
    assert doc["training"]["stopped"] == "nonfinite"


def test_html_escapes_layer_names_and_draws_both_pictures():
    text = render("fit", OutputFormat.HTML, report())
    assert HOSTILE not in text
    page = read_page(text)
    assert not page.errors and page.count("img") == 0
    assert page.count("svg") == 2 and page.count("rect") == 2 * 2
    assert HOSTILE in page.text  # shown as text
    assert "Content-Security-Policy" in text and "http://" not in text.replace(
        "http://www.w3.org/2000/svg", ""
    )


def test_markdown_escapes_and_table_shows_the_finding():
    md = render("fit", OutputFormat.MARKDOWN, report())
    assert "\\<img" in md  # in text: escaped
    assert not re.search(r"(?<![\\`])<img", md)  # elsewhere only inside code spans
    table = render("fit", OutputFormat.TABLE, report(), width=120)
    assert "nonfinite" in table and "stopped: early, on nonfinite" in table


def test_a_fit_report_shows_as_html_in_a_notebook():
    import layergrad  # noqa: F401  (installs the notebook renderer)

    frame = report()._repr_html_()
    assert frame.startswith("<iframe") and "layergrad fit" in frame


def test_table_and_markdown_match_their_golden_files(golden):
    # the hand-made record: update ratio 0.05 = lr 0.1 x |g| 2 / |w| 4; dead 25%
    golden("fit_hand_made.txt", render("fit", OutputFormat.TABLE, report(), width=100))
    golden("fit_hand_made.md", render("fit", OutputFormat.MARKDOWN, report()))


def test_the_tables_nan_inf_column_adds_a_layers_gradients_outputs_and_weights():
    row = LayerStats("dense", None, math.nan, None, 0.0, 2, 3, nonfinite_weight=32)
    last = Checkpoint(3, 0, 2, 1.0, 0.1, (row,), ())
    md = render("fit", OutputFormat.MARKDOWN, replace_checkpoints(report(), last))
    (line,) = [row for row in md.splitlines() if row.startswith("| `dense` ")]
    assert line.rstrip(" |").endswith("37")  # 2 + 3 + 32


def replace_checkpoints(record: FitReport, last: Checkpoint) -> FitReport:
    from dataclasses import replace

    return replace(record, checkpoints=(*record.checkpoints, last))
