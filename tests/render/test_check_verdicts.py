"""check's verdicts and table: warnings are findings that do not fail a file, shown in every
format; file names are never broken; columns dropped to fit are named under the table."""

from __future__ import annotations

import json
from xml.etree import ElementTree as ET

import pytest
from click.testing import CliRunner
from helpers import ROOT, sample
from pagecheck import read_page

from layergrad.cli.app import main

BCE = sample("bug_bce_on_softmax.keras")  # fails: loss_mismatch
STACK = sample("bug_sigmoid_stack.keras")  # passes with one finding: vanishing (a heuristic)
SEED = sample("seed.keras")  # passes clean


def run(*args: str, columns: int | None = None):
    env = {"COLUMNS": str(columns)} if columns else {}
    return CliRunner(env=env).invoke(main, ["check", *args])


@pytest.fixture(scope="module")
def as_json():
    out = run(BCE, STACK, SEED, "--json")
    assert out.exit_code == 1
    return {f["path"]: f for f in json.loads(out.stdout)["files"]}


def test_the_samples_are_what_the_tests_say(as_json):
    trainable = {c["name"]: c for c in as_json[STACK]["checks"]}["trainable"]
    assert as_json[STACK]["passed"] and trainable["passed"]
    assert trainable["findings"] == trainable["warnings"] == ["vanishing"]
    assert not as_json[BCE]["passed"]
    assert all(not c["findings"] for c in as_json[SEED]["checks"])


def test_json_counts_the_warnings(as_json):
    assert as_json[STACK]["verdict"] == "PASS, 1 warning"
    assert as_json[STACK]["warnings"] == ["vanishing"] and as_json[STACK]["failures"] == []
    assert (as_json[SEED]["verdict"], as_json[SEED]["warnings"]) == ("PASS", [])
    assert as_json[BCE]["verdict"].startswith("FAIL")


def test_table_and_markdown_say_pass_with_a_warning():
    table = run(BCE, STACK, SEED).stdout
    line = next(t for t in table.splitlines() if STACK in t)
    assert "PASS, 1 warning" in line
    assert "! trainable (warning): vanishing: dense_0" in " ".join(table.split())
    assert "✗ loss: binary_crossentropy on output 'head'" in table
    assert table.rstrip().endswith("2 passed, 1 failed, 1 warning")
    md = run(BCE, STACK, SEED, "--format", "markdown").stdout
    assert md.startswith("**layergrad check**: 2 passed, 1 failed, 1 warning")
    assert f"| `{STACK}` | ⚠️ pass, 1 warning | trainable (warning): vanishing" in md


def test_html_and_junit_say_pass_with_a_warning(tmp_path):
    page = read_page(run(BCE, STACK, SEED, "--format", "html").stdout)
    summary = page.tables[0]
    row = next(r for r in summary if r[0] == STACK)
    assert row[1] == "PASS, 1 warning" and row[3] == "vanishing (warning)"
    assert next(r for r in summary if r[0] == BCE)[3] == "loss_mismatch"  # a name, no sentence
    assert "PASS, 1 warning" not in next(r for r in summary if r[0] == SEED)[1]
    junit = tmp_path / "j.xml"
    run(STACK, "--junit", str(junit))
    case = next(c for c in ET.parse(junit).getroot() if c.get("name") == "trainable")
    assert case.find("failure") is None
    assert case.findtext("system-out").startswith("warning (vanishing): vanishing: dense_0")


RELATIVE = ["sample_models/bug_bce_on_softmax.keras", "sample_models/bug_sigmoid_stack.keras"]


@pytest.mark.parametrize("columns", [60, 80])
def test_file_names_never_break_and_dropped_columns_are_named(columns, monkeypatch):
    monkeypatch.chdir(ROOT)  # paths as a user types them in the repository
    table = run(*RELATIVE, columns=columns).stdout
    lines = table.splitlines()
    for path in RELATIVE:  # the table row, and the heading of the file's findings
        assert sum(1 for line in lines if path in line) == 2, (path, table)
    note = next(line for line in lines if "columns left out to fit" in line)
    assert note.startswith(f"columns left out to fit {columns} columns: checks")
    assert all(len(line.rstrip()) <= columns for line in lines)


def test_a_name_longer_than_the_page_widens_it_instead_of_breaking(monkeypatch):
    table = run(BCE, columns=40).stdout
    assert any(BCE in line for line in table.splitlines())


def test_a_wide_page_drops_nothing_and_says_nothing():
    table = run(BCE, STACK, SEED, columns=200).stdout
    assert "columns left out" not in table
    header = table.splitlines()[1].split()
    assert header == ["file", "verdict", "checks", "findings"]


def test_the_html_file_names_do_not_wrap():
    page = read_page(run(BCE, STACK, "--format", "html").stdout)
    names = [a for t, a in page.tags if t == "td" and (a.get("class") or "") == "name"]
    assert len(names) == 2
    assert any(".name,.name code{white-space:nowrap" in style for style in page.styles)
