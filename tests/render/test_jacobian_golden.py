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
from helpers import ROOT, seed_inspect

from layergrad.commands.api import inspect_model, scan_model
from layergrad.core.vocab import OutputFormat
from layergrad.render import inspect, render, scan

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
    doc = json.loads(render("inspect", OutputFormat.JSON, result))
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


def test_the_docs_worked_example_is_what_the_tool_prints():
    from click.testing import CliRunner

    from layergrad.cli.app import main

    page = (ROOT / "docs" / "jacobian.md").read_text(encoding="utf-8")
    shown = re.search(
        r"prints, under the gradient table of the README's first example:\n\n```\n(.*?)```",
        page,
        flags=re.S,
    )
    assert shown, "docs/jacobian.md lost its Jacobian worked example"
    args = seed_inspect("--measure", "jacobian")
    # as written: output to a pipe or a file, as wide as the table needs (every column)
    output = CliRunner().invoke(main, args, env={"COLUMNS": None}).stdout
    assert "‖J‖F max" in output
    tail = output[output.index("per-sample Jacobian norms") :]
    assert [ln.rstrip() for ln in shown.group(1).strip().splitlines()] == [
        ln.rstrip() for ln in tail.strip().splitlines()
    ]


def test_the_docs_worked_example_numbers_hold_on_paper():
    # dense_1 = relu(h W + b): J_i is the rows of W^T for the units active on sample i
    import numpy as np
    from helpers import load_sample

    m = load_sample("seed.keras")
    x = np.random.default_rng(0).standard_normal((8, 5)).astype("float32")  # the random batch
    h = m.get_layer("dense")(x).numpy()
    active = m.get_layer("dense_1")(h).numpy() > 0
    w = m.get_layer("dense_1").get_weights()[0].astype(np.float64)
    assert [list(np.flatnonzero(a)) for a in active] == [
        [3],
        [2],
        [2],
        [1, 3],
        [3],
        [3],
        [1, 3],
        [1, 3],
    ]
    assert np.linalg.norm(w[:, 3]) == pytest.approx(1.2187, abs=1e-4)
    assert np.linalg.norm(w[:, 2]) == pytest.approx(1.0664, abs=1e-4)
    assert np.linalg.norm(w[:, [1, 3]]) == pytest.approx(1.612, abs=1e-3)
    assert np.linalg.norm(w[:, [1, 3]], 2) == pytest.approx(1.2648, abs=1e-4)
    j = (
        inspect_model("sample_models/seed.keras", "dense", ["dense_1"], measure="jacobian")
        .results[0]
        .jacobian
    )
    expected = [np.linalg.norm(w[:, np.flatnonzero(a)]) for a in active]
    assert j.frobenius.per_sample == pytest.approx(expected, rel=1e-5)


def test_names_that_look_like_rich_markup_print_as_they_are_in_jacobian_tables():
    from layergrad.core.results import (
        Endpoint,
        FrobeniusNorms,
        InspectReport,
        JacobianStats,
        ModelMeta,
        ProbeMeta,
        Result,
        ScanJacobian,
        ScanReport,
        ScanRow,
        SpectralNorms,
    )
    from layergrad.core.vocab import JacobianMethod, Status

    names = ("[bold red]loud[/bold red]", "a[/b]")
    meta, probe = (
        ModelMeta("m.keras", "keras", "Functional", "m"),
        ProbeMeta("random", 0, 2, False, "sum"),
    )
    frob = FrobeniusNorms((1.0, 2.0), 1.5, 2.0)
    stats = JacobianStats(
        JacobianMethod.EXACT, None, True, frob, SpectralNorms((1.0, 2.0), 1.5, 2.0), (0.5, 0.25)
    )
    result = Result(
        Endpoint(names[0], (2, 2), "float32"),
        Endpoint(names[1], (2, 2), "float32"),
        Status.OK,
        None,
        jacobian=stats,
    )
    text = render("inspect", OutputFormat.TABLE, InspectReport(meta, probe, (result,)), width=None)
    assert names[0] in text and f"→ {names[1]}" in text
    rows = tuple(
        ScanRow(n, "Dense", (2, 2), "float32", Status.OK, None, jacobian=ScanJacobian(frob))
        for n in names
    )
    text = render("scan", OutputFormat.TABLE, ScanReport(meta, probe, None, rows), width=None)
    assert all(n in text for n in names)
