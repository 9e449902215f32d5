"""Render a gradient-flow scan: a table with a log-scale bar, JSON, markdown."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.text import Text

from layergrad.core.results import ScanReport, ScanRow
from layergrad.render.columns import md_rows, scan_columns, text_table
from layergrad.render.common import (
    causes_lines,
    md_text,
    md_title,
    model_header,
    target_text,
    to_text,
)


def _columns(report: ScanReport) -> list:
    return scan_columns(report.rows, any(row.jacobian for row in report.rows))


def table(report: ScanReport, *, color: bool = False, width: int | None = 100) -> str:
    """The scan table in depth order, then notes and the causes of blocked / non-finite rows."""
    items: list[RenderableType] = [
        model_header(report.model, report.probe, f"d {target_text(report)} / d each layer"),
        *text_table(_columns(report), report.rows, width),
    ]
    items += [Text(f"note: {note}", style="yellow") for note in report.notes]
    for row in _distinct_causes([r for r in report.rows if r.causes]):
        title = Text(f"{row.status} at {row.layer} (and the layers before it):", style="bold")
        items.append(Group(title, *causes_lines(row.causes)))
    return to_text(items, color=color, width=width)


def _distinct_causes(rows: list[ScanRow]) -> list[ScanRow]:
    """Rows whose causes differ from the row after them (upstream rows often share a cause)."""
    seen: set[tuple[tuple[str, str | None], ...]] = set()
    out = []
    for row in reversed(rows):
        key = tuple((c.code.value, c.layer) for c in row.causes)
        if key not in seen:
            seen.add(key)
            out.append(row)
    return out[::-1]


def markdown(report: ScanReport, **_: object) -> str:
    """A markdown table for a pull-request comment."""
    head = md_title("scan", report.model.path, f"d {md_text(target_text(report))} / d each layer")
    notes = "".join(f"\n> note: {md_text(note)}\n" for note in report.notes)
    return head + md_rows(_columns(report), report.rows) + notes
