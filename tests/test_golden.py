"""Rendered output, fixed width and no colour, against reviewed golden files.

The numbers come from `hand_set.keras`, whose weights were set by hand: b = (x @ [[1, 2],
[3, 4]]) @ [[5], [6]], so d sum(b)/d a = [5, 6] and d sum(b)/d x = [17, 39] in every row,
whatever the probe input. For 8 rows: L2 = sqrt(8 * (25 + 36)) = 22.09, mean |g| = 5.5.
Regenerate with `pytest tests/test_golden.py --overwrite` and review the diff.
"""

from __future__ import annotations

import pytest
from conftest import ROOT

from layergrad import check_report, report, scan_report
from layergrad.api import inspect_model, scan_model
from layergrad.check import check_files

WIDTH = 100


@pytest.fixture(autouse=True)
def relative_paths(monkeypatch):
    monkeypatch.chdir(ROOT)  # reports show the path as given: keep it machine-independent


def test_inspect_table(golden):
    result = inspect_model("sample_models/hand_set.keras", "a", ["b"])
    text = report.inspect_text(result, width=WIDTH)
    assert "22.09" in text and "5.5" in text
    golden("inspect_hand_set.txt", text)


def test_inspect_markdown_with_a_cause(golden):
    result = inspect_model("sample_models/residual.keras", "side", ["head", "block"])
    golden("inspect_residual.md", report.inspect_markdown(result))


def test_scan_table(golden):
    result = scan_model("sample_models/hand_set.keras")
    text = scan_report.scan_text(result, width=WIDTH)
    assert [r.gradient.mean_abs for r in result.rows] == [28.0, 5.5, 1.0]  # (17 + 39) / 2
    golden("scan_hand_set.txt", text)


def test_check_table(golden):
    verdicts = check_files(["sample_models/hand_set.keras", "sample_models/cause_round.keras"])
    golden("check.txt", check_report.check_text(verdicts, width=WIDTH))
