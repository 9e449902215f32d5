"""Render check verdicts: a summary table, JSON, markdown and JUnit XML. Pure functions."""

from __future__ import annotations

import json
from collections.abc import Sequence
from xml.etree import ElementTree as ET

from rich import box
from rich.table import Table
from rich.text import Text

from layergrad.report import md_table, render
from layergrad.results import FileVerdict

CHECK_SCHEMA = "layergrad.check/1"


def check_text(verdicts: Sequence[FileVerdict], *, color: bool = False, width: int = 100) -> str:
    """One row per file: verdict, checks passed (and which failed), and what was found."""
    table = Table(box=box.SIMPLE_HEAVY, pad_edge=False)
    table.add_column("file", overflow="fold", ratio=2)
    table.add_column("verdict", no_wrap=True)
    table.add_column("checks", no_wrap=True)
    table.add_column("findings", overflow="fold", ratio=5)
    for v in verdicts:
        failed = [c.name for c in v.checks if not c.passed]
        marks = f"{len(v.checks) - len(failed)}/{len(v.checks)} ok"
        marks += f", ✗ {', '.join(failed)}" if failed else ""
        notes = "\n".join(f"{c.name}: {c.message}" for c in v.checks if c.findings or not c.passed)
        table.add_row(
            v.path,
            Text("PASS" if v.passed else "FAIL", style="green" if v.passed else "bold red"),
            marks,
            Text(notes, style="" if v.passed else "red"),
        )
    n_failed = sum(1 for v in verdicts if not v.passed)
    summary = Text(
        f"{len(verdicts) - n_failed} passed, {n_failed} failed",
        style="bold red" if n_failed else "bold green",
    )
    return render([table, summary], color=color, width=width)


def check_json(verdicts: Sequence[FileVerdict]) -> str:
    """The `layergrad.check/1` JSON document."""
    doc = {
        "schema": CHECK_SCHEMA,
        "passed": all(v.passed for v in verdicts),
        "files": [
            {
                "path": v.path,
                "passed": v.passed,
                "checks": [
                    {
                        "name": c.name,
                        "passed": c.passed,
                        "message": c.message,
                        "findings": list(c.findings),
                    }
                    for c in v.checks
                ],
            }
            for v in verdicts
        ],
    }
    return json.dumps(doc, indent=2)


def check_markdown(verdicts: Sequence[FileVerdict]) -> str:
    """A markdown summary for a pull-request comment."""
    failed = sum(1 for v in verdicts if not v.passed)
    head = f"**layergrad check**: {len(verdicts) - failed} passed, {failed} failed\n\n"
    rows = [
        [
            f"`{v.path}`",
            "✅ pass" if v.passed else "❌ **fail**",
            "; ".join(f"{c.name}: {c.message}" for c in v.checks if c.findings or not c.passed),
        ]
        for v in verdicts
    ]
    return head + md_table(["file", "verdict", "findings"], rows)


def check_junit(verdicts: Sequence[FileVerdict]) -> str:
    """JUnit XML: one testcase per file and check; a failed check carries its message."""
    suite = ET.Element(
        "testsuite",
        name="layergrad.check",
        tests=str(sum(len(v.checks) for v in verdicts)),
        failures=str(sum(1 for v in verdicts for c in v.checks if not c.passed)),
        errors="0",
    )
    for v in verdicts:
        for c in v.checks:
            case = ET.SubElement(suite, "testcase", classname=v.path, name=c.name)
            if not c.passed:
                ET.SubElement(case, "failure", message=c.message, type=",".join(c.findings))
            elif c.findings:
                ET.SubElement(case, "system-out").text = c.message
    ET.indent(suite)
    return (
        '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suite, encoding="unicode") + "\n"
    )
