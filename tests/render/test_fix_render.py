"""The `fix` report rendered from a hand-made report (no TensorFlow): golden table and markdown,
strict JSON, an escaped page, and the exit rule (`ok`) worked out by hand."""

from __future__ import annotations

import json
import math

from layergrad.core.fix_results import FixReport, Repair, Run, Verdict
from layergrad.core.results import Reason
from layergrad.core.vocab import Finding
from layergrad.render import render

ORIGINAL = Run("binary_crossentropy", (0.9, math.nan, 0.8), 0.6931, 7.9, ("loss_mismatch",))
REPAIRED = Run("binary_crossentropy", (0.7, 0.6, 0.5), 0.6931, 0.48, ())
REPORT = FixReport(
    path="m.keras",
    model_class="Functional",
    repairs=(
        Repair("loss_mismatch", "head", "the activation changes: one unit holds one answer",
               ('Dense(1, activation="softmax") -> Dense(1, activation="sigmoid") at "head"',),
               Verdict.VERIFIED, "", REPAIRED, ("loss_mismatch", "constant_output")),
    ),
    unrepaired=(Reason(Finding.DEAD, "dense <b>x</b> is dead", "a smaller learning rate"),),
    before=("loss_mismatch", "constant_output", "dead"),
    after=("dead",),
    output="m.fixed.keras",
    data="train.npz",
    steps=3,
    original=ORIGINAL,
    together=REPAIRED,
)  # fmt: skip


def test_the_exit_rule_by_hand():
    # loss_mismatch and constant_output fail a file: both are covered by the verified repair;
    # dead only warns
    assert REPORT.failing == ("loss_mismatch", "constant_output")
    assert REPORT.ok
    assert REPORT.gone == ("loss_mismatch", "constant_output") and REPORT.remaining == ("dead",)
    from dataclasses import replace

    assert not replace(REPORT, repairs=()).ok  # no repair for the failing findings
    not_verified = replace(REPORT.repairs[0], verdict=Verdict.NOT_VERIFIED, why="slower")
    assert not replace(REPORT, repairs=(not_verified,)).ok
    assert replace(REPORT, before=(), after=(), repairs=()).ok  # nothing to fix


def test_table_and_markdown_golden(golden):
    table = render("fix", "table", REPORT, width=100)
    assert table.index("changes:") < table.index("verdicts:")
    assert "ends at 7.9 (trivial 0.6931)" in table and "ends at 0.48" in table
    golden("fix.txt", table)
    markdown = render("fix", "markdown", REPORT)
    assert '```suggestion\nDense(1, activation="sigmoid")  # "head"\n```' in markdown
    assert "<b>" not in markdown  # a name from the file never becomes markup
    golden("fix.md", markdown)


def test_json_is_strict_and_has_the_contract_members():
    doc = json.loads(render("fix", "json", REPORT))
    assert doc["schema"] == "layergrad.fix/1"
    (repair,) = doc["repairs"]
    assert set(repair) >= {"finding", "layer", "change", "code", "verdict", "original", "repaired"}
    assert repair["original"]["losses"] == [0.9, None, 0.8]  # NaN is null
    assert doc["output"] == "m.fixed.keras" and doc["passed"] is True


def test_the_page_draws_both_curves_and_escapes():
    page = render("fix", "html", REPORT)
    assert page.count("<polyline") == 2
    assert "<b>x</b>" not in page and "&lt;b&gt;x&lt;/b&gt;" in page


def test_each_outputs_loss_is_in_the_run():
    from dataclasses import replace

    from layergrad.core.fix_results import OutputLoss

    two = replace(ORIGINAL, outputs=(OutputLoss("kind", "sparse_categorical_crossentropy", 0.4,
                                                1.1, 0.9), OutputLoss("price", "mse", math.inf)))  # fmt: skip
    doc = json.loads(render("fix", "json", replace(REPORT, original=two)))
    (repair,) = doc["repairs"]
    assert repair["original"]["outputs"] == [
        {"name": "kind", "loss": "sparse_categorical_crossentropy", "final_loss": 0.4,
         "trivial_loss": 1.1, "baseline_loss": 0.9},
        {"name": "price", "loss": "mse", "final_loss": None, "trivial_loss": None,
         "baseline_loss": None},
    ]  # fmt: skip
    assert repair["repaired"]["outputs"] == []  # one output: none listed
