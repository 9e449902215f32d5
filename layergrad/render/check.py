"""Render check verdicts: a summary table, JSON and markdown (JUnit XML is in `junit.py`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from rich.console import RenderableType
from rich.text import Text

from layergrad.core.results import FileVerdict
from layergrad.render.common import Column, fitted_table, md_code, md_table, md_text, to_text

SCHEMA = "layergrad.check/1"
COLUMNS = (
    Column("file", name_like=True),
    Column("verdict"),
    Column("checks"),
    Column("findings", name_like=True),
)


def table(verdicts: Sequence[FileVerdict], *, color: bool = False, width: int | None = 100) -> str:
    """One row per file: verdict, checks passed (and which failed), and what was found."""
    rows: list[list[RenderableType]] = []
    for v in verdicts:
        failed = [c.name for c in v.checks if not c.passed]
        marks = f"{len(v.checks) - len(failed)}/{len(v.checks)} ok"
        marks += f", ✗ {', '.join(failed)}" if failed else ""
        rows.append(
            [
                v.path,
                Text("PASS" if v.passed else "FAIL", style="green" if v.passed else "bold red"),
                marks,
                Text(_notes(v, "\n"), style="" if v.passed else "red"),
            ]
        )
    n_failed = sum(1 for v in verdicts if not v.passed)
    summary = Text(
        f"{len(verdicts) - n_failed} passed, {n_failed} failed",
        style="bold red" if n_failed else "bold green",
    )
    # the findings column wraps at the page width: it holds sentences, not names
    page = width or 120
    return to_text([fitted_table(COLUMNS, rows, page), summary], color=color, width=page)


def _notes(v: FileVerdict, sep: str) -> str:
    """What the checks that found something or failed say."""
    return sep.join(f"{c.name}: {c.message}" for c in v.checks if c.findings or not c.passed)


def as_json(verdicts: Sequence[FileVerdict], **_: Any) -> str:
    """The `layergrad.check/1` JSON document."""
    doc = {
        "schema": SCHEMA,
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


def markdown(verdicts: Sequence[FileVerdict], **_: Any) -> str:
    """A markdown summary for a pull-request comment."""
    failed = sum(1 for v in verdicts if not v.passed)
    head = f"**layergrad check**: {len(verdicts) - failed} passed, {failed} failed\n\n"
    rows = [
        [
            md_code(v.path),
            "✅ pass" if v.passed else "❌ **fail**",
            md_text(_notes(v, "; ")),
        ]
        for v in verdicts
    ]
    return head + md_table(["file", "verdict", "findings"], rows)


def html(value: Sequence[FileVerdict], **_: Any) -> str:
    """One self-contained HTML page (inline style and charts, nothing fetched)."""
    from layergrad.render.html_report import check_html

    return check_html(value)
