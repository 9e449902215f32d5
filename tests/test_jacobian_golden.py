"""Rendered Jacobian norms, fixed width and no colour, against reviewed golden files.

hand_set.keras: b = (x @ [[1, 2], [3, 4]]) @ [[5], [6]] with no biases or activations, so
every sample's Jacobian is constant: d b / d a = [[5, 6]] (Frobenius = spectral = sqrt(61) =
7.810; unit 1 moves b by 6, unit 0 by 5) and d b / d x = [[17, 39]] (sqrt(17^2 + 39^2) =
42.54). Regenerate with `pytest tests/test_jacobian_golden.py --overwrite` and review the diff.
"""

from __future__ import annotations

import json
import math
import re

import pytest
from conftest import ROOT

from layergrad.api import inspect_model, scan_model
from layergrad.render import inspect, scan

WIDTH = 100
A_TO_B, X_TO_B = math.sqrt(5**2 + 6**2), math.sqrt(17**2 + 39**2)


@pytest.fixture(autouse=True)
def relative_paths(monkeypatch):
    monkeypatch.chdir(ROOT)


def _row(text: str, first: str, after: str = "") -> list[str]:
    """The cells of the first table row starting with `first` after the line containing `after`."""
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if after in ln)
    line = next(ln for ln in lines[start:] if ln.split()[:1] == [first])
    return re.split(r"\s{2,}", line.strip())


def test_inspect_jacobian_table(golden):
    result = inspect_model("sample_models/hand_set.keras", "a", ["b"], measure="jacobian")
    j = result.results[0].jacobian
    assert j.frobenius.per_sample == pytest.approx([A_TO_B] * 8)
    assert j.spectral.per_sample == pytest.approx([A_TO_B] * 8)
    assert j.unit_sensitivity == pytest.approx([5, 6])
    text = inspect.table(result, width=WIDTH)
    norms = _row(text, "a", "per-sample Jacobian norms")
    assert norms[:4] == ["a", "b", "exact", f"{A_TO_B:.4g}"]
    assert _row(text, "1", "most sensitive")[1:3] == ["unit 1", "6"]
    assert _row(text, "2", "most sensitive")[1:3] == ["unit 0", "5"]
    golden("inspect_hand_set_jacobian.txt", text)


def test_inspect_jacobian_markdown_and_json(golden):
    result = inspect_model("sample_models/hand_set.keras", "x", ["a", "b"], measure="jacobian")
    text = inspect.markdown(result)
    assert f"| `x` | `b` | exact | {X_TO_B:.4g} |" in text
    golden("inspect_hand_set_jacobian.md", text)
    doc = json.loads(inspect.as_json(result))
    b = doc["results"][1]["jacobian"]
    assert b["frobenius"]["mean"] == pytest.approx(X_TO_B) and b[
        "unit_sensitivity"
    ] == pytest.approx([17, 39])
    # d a / d x = [[1, 3], [2, 4]] (the kernel transposed): singular values of [[1, 2], [3, 4]]
    assert doc["results"][0]["jacobian"]["spectral"]["max"] == pytest.approx(5.4649857, rel=1e-6)


def test_scan_jacobian_table(golden):
    result = scan_model("sample_models/hand_set.keras", measure="jacobian")
    assert [r.jacobian.frobenius.mean for r in result.rows] == pytest.approx([X_TO_B, A_TO_B, 1.0])
    text = scan.table(result, width=WIDTH)
    assert [_row(text, name)[4] for name in ("x", "a", "b")] == [
        f"{X_TO_B:.4g}",
        f"{A_TO_B:.4g}",
        "1",
    ]
    golden("scan_hand_set_jacobian.txt", text)
    md = scan.markdown(result)
    assert f"| {X_TO_B:.4g} | - |" in md and "| ‖J‖F mean | ± s.e. |" in md
