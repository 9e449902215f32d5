"""Render check verdicts: a summary table, JSON and markdown (JUnit XML is in `junit.py`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Group, RenderableType
from rich.padding import Padding
from rich.text import Text

from layergrad.core.results import FileVerdict
from layergrad.render.common import (
    Column,
    dropped_line,
    fit_table,
    json_document,
    md_code,
    md_table,
    md_text,
    natural_width,
    to_text,
    verdict_text,
)

SCHEMA = "layergrad.check/1"
COLUMNS = (
    Column("file"),  # a path is never broken: the findings go under the table instead
    Column("verdict"),
    Column("checks", drop=2),
    Column("findings", drop=1),
)


def summary_text(verdicts: Sequence[FileVerdict]) -> str:
    """`2 passed (1 with warnings), 1 failed`."""
    failed = sum(1 for v in verdicts if not v.passed)
    warned = sum(1 for v in verdicts if v.passed and v.warnings)
    with_warnings = f" ({warned} with warnings)" if warned else ""
    return f"{len(verdicts) - failed} passed{with_warnings}, {failed} failed"


def table(verdicts: Sequence[FileVerdict], *, color: bool = False, width: int | None = 100) -> str:
    """One row per file (verdict, checks passed, findings), then what each finding says.

    File names are never broken: when the table does not fit, the checks and findings
    columns go (a line says so), and a name longer than the page makes the page wider.
    """
    rows: list[list[RenderableType]] = []
    for v in verdicts:
        failed = [c.name for c in v.checks if not c.passed]
        marks = f"{len(v.checks) - len(failed)}/{len(v.checks)} ok"
        marks += f", ✗ {', '.join(failed)}" if failed else ""
        style = "green" if v.passed and not v.warnings else "yellow" if v.passed else "bold red"
        findings = sorted({f for c in v.checks for f in c.findings})
        rows.append([v.path, Text(verdict_text(v), style=style), marks, ", ".join(findings)])
    fitted, dropped = fit_table(COLUMNS, rows, width)
    items: list[RenderableType] = [fitted]
    if dropped:
        items.append(dropped_line(dropped, width))
    for v in verdicts:
        notes = _note_lines(v)
        if notes:
            items.append(Group(Text(v.path, style="bold"), *notes))
    n_failed = sum(1 for v in verdicts if not v.passed)
    items.append(Text(summary_text(verdicts), style="bold red" if n_failed else "bold green"))
    page = None if width is None else max(width, natural_width(fitted))
    return to_text(items, color=color, width=page)


def _note_lines(v: FileVerdict) -> list[RenderableType]:
    """A paragraph per check that failed (✗) or warns (!), indented under the file's name."""
    lines: list[RenderableType] = []
    for c in v.checks:
        if c.passed and not c.findings:
            continue
        mark, style = ("✗", "red") if not c.passed else ("!", "yellow")
        kind = "" if not c.passed else " (warning)"
        line = Text(f"{mark} {c.name}{kind}: ", style=style)
        line.append(c.message, style="")
        lines.append(Padding(line, (0, 0, 0, 2), expand=False))
    return lines


def _notes(v: FileVerdict, sep: str) -> str:
    """What the checks that found something or failed say."""
    return sep.join(
        f"{c.name}{'' if not c.passed else ' (warning)'}: {c.message}"
        for c in v.checks
        if c.findings or not c.passed
    )


def as_json(verdicts: Sequence[FileVerdict], **_: Any) -> str:
    """The `layergrad.check/1` JSON document."""
    doc = {
        "schema": SCHEMA,
        "passed": all(v.passed for v in verdicts),
        "files": [
            {
                "path": v.path,
                "passed": v.passed,
                "verdict": verdict_text(v),
                "warnings": [{"check": name, "finding": f} for name, f in v.warnings],
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
    return json_document(doc)


def markdown(verdicts: Sequence[FileVerdict], **_: Any) -> str:
    """A markdown summary for a pull-request comment."""
    head = f"**layergrad check**: {summary_text(verdicts)}\n\n"
    rows = [
        [
            md_code(v.path),
            _md_verdict(v),
            md_text(_notes(v, "; ")),
        ]
        for v in verdicts
    ]
    return head + md_table(["file", "verdict", "findings"], rows)


def _md_verdict(v: FileVerdict) -> str:
    if not v.passed:
        return "❌ **fail**" + verdict_text(v).removeprefix("FAIL")
    return ("⚠️ " if v.warnings else "✅ ") + verdict_text(v).replace("PASS", "pass")


def html(value: Sequence[FileVerdict], **_: Any) -> str:
    """One self-contained HTML page (inline style and charts, nothing fetched)."""
    from layergrad.render.html_report import check_html

    return check_html(value)
