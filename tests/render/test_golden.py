"""Rendered output, fixed width and no colour, against reviewed golden files.

Each golden comparison is anchored by assertions computed independently of the renderer, so a
golden file rewritten with `--overwrite` cannot silently bless a wrong number. The numbers come
from `hand_set.keras`, whose weights were set by hand: b = (x @ [[1, 2], [3, 4]]) @ [[5], [6]],
so d sum(b)/d a = [5, 6] and d sum(b)/d x = [17, 39] in every row, whatever the probe input.
For 8 rows: L2 = sqrt(8 * (25 + 36)) = 22.09, mean |g| = 5.5.
Regenerate with `pytest tests/test_golden.py --overwrite` and review the diff.
"""

from __future__ import annotations

import math
import re

import pytest
from helpers import ROOT

from layergrad.commands.api import inspect_model, scan_model
from layergrad.commands.check.check_files import check_files
from layergrad.render import check, inspect, scan

WIDTH = 100


@pytest.fixture(autouse=True)
def relative_paths(monkeypatch):
    monkeypatch.chdir(ROOT)  # reports show the path as given: keep it machine-independent


def _row(text: str, first: str) -> list[str]:
    """The cells of the table row that starts with `first`."""
    line = next(ln for ln in text.splitlines() if ln.split()[:1] == [first])
    return re.split(r"\s{2,}", line.strip())


def test_inspect_table(golden):
    result = inspect_model("sample_models/hand_set.keras", "a", ["b"])
    text = inspect.table(result, width=WIDTH)
    l2 = math.sqrt(8 * (5**2 + 6**2))
    assert _row(text, "a")[:7] == ["a", "b", "(8, 2)", "(8, 1)", "ok", f"{l2:.4g}", "5.5"]
    assert _row(text, "1")[1:3] == ["unit 1", "6"] and _row(text, "2")[1:3] == ["unit 0", "5"]
    golden("inspect_hand_set.txt", text)


def test_inspect_markdown_with_a_cause(golden):
    result = inspect_model("sample_models/residual.keras", "side", ["head", "block"])
    text = inspect.markdown(result)
    # 'side' is a branch of its own: neither head nor block reads it (see make_samples.py)
    assert "| `side` | `head` | **none** |" in text and "| `side` | `block` | **none** |" in text
    assert text.count("**not_downstream**") == 2
    assert "other (a sibling branch or an unrelated output). Fix: pick a --to" in text
    golden("inspect_residual.md", text)


def test_scan_table(golden):
    result = scan_model("sample_models/hand_set.keras", target="b")
    text = scan.table(result, width=WIDTH)
    assert [r.gradient.mean_abs for r in result.rows] == [28.0, 5.5, 1.0]  # (17 + 39) / 2
    assert [_row(text, name)[5] for name in ("x", "a", "b")] == ["28", "5.5", "1"]
    golden("scan_hand_set.txt", text)


def test_check_table(golden):
    verdicts = check_files(["sample_models/hand_set.keras", "sample_models/cause_round.keras"])
    text = check.table(verdicts, width=WIDTH)
    assert _row(text, "sample_models/hand_set.keras")[1:3] == ["PASS", "8/8 ok"]
    assert _row(text, "sample_models/cause_round.keras")[1:3] == ["FAIL", "1/2 ok, ✗ safe"]
    assert text.rstrip().endswith("1 passed, 1 failed")
    golden("check.txt", text)
