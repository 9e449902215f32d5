"""Render a gradient-flow scan: a table with a log-scale bar, JSON, markdown."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.text import Text

from layergrad.core.results import ScanReport, ScanRow
from layergrad.render import jacobian
from layergrad.render.columns import JACOBIAN_SCAN_COLUMNS, SCAN_COLUMNS
from layergrad.render.common import (
    STATUS_STYLE,
    causes_lines,
    log_bar,
    log_range,
    md_code,
    md_table,
    md_text,
    model_header,
    number,
    shape_text,
    table_with_note,
    target_text,
    to_text,
)


def table(report: ScanReport, *, color: bool = False, width: int | None = 100) -> str:
    """The scan table in depth order, then notes and the causes of blocked / non-finite rows."""
    if any(row.jacobian for row in report.rows):  # --measure jacobian: the ‖J‖F profile
        scale = jacobian.scan_scale(report.rows)
        cells = [jacobian.scan_cells(r, _status_cell(r), scale) for r in report.rows]
        body = table_with_note(JACOBIAN_SCAN_COLUMNS, cells, width)
    else:
        scale = log_range(_mean(r) for r in report.rows)
        body = table_with_note(SCAN_COLUMNS, [_cells(row, scale) for row in report.rows], width)
    items: list[RenderableType] = [
        model_header(report.model, report.probe, f"d {target_text(report)} / d each layer"),
        *body,
    ]
    items += [Text(f"note: {note}", style="yellow") for note in report.notes]
    for row in _distinct_causes([r for r in report.rows if r.causes]):
        title = Text(f"{row.status} at {row.layer} (and the layers before it):", style="bold")
        items.append(Group(title, *causes_lines(row.causes)))
    return to_text(items, color=color, width=width)


def _cells(row: ScanRow, scale: tuple[float, float] | None) -> list[RenderableType]:
    g = row.gradient
    return [
        row.layer,
        row.class_name,
        shape_text(row.shape),
        Text(_status_label(row), style=STATUS_STYLE.get(row.status, "")),
        number(g.l2) if g else "-",
        number(g.mean_abs) if g else "-",
        f"{g.zero_fraction:.0%}" if g else "-",
        log_bar(_mean(row), scale),
        Text(", ".join(row.flags), style="yellow" if row.flags else ""),
    ]


def _status_cell(row: ScanRow) -> Text:
    return Text(_status_label(row), style=STATUS_STYLE.get(row.status, ""))


def _status_label(row: ScanRow) -> str:
    return row.status.value  # `integer` as in the JSON and the README: not a failure


def _mean(row: ScanRow) -> float:
    return row.gradient.mean_abs if row.gradient else 0.0


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
    head = (
        f"**layergrad scan** {md_code(report.model.path)}: "
        f"d {md_text(target_text(report))} / d each layer\n\n"
    )
    rows = [
        [
            md_code(r.layer),
            md_code(r.class_name),
            shape_text(r.shape),
            _status_label(r),
            number(r.gradient.mean_abs) if r.gradient else "-",
            ", ".join(r.flags),
            "; ".join(f"{c.code} at {md_code(c.layer or '?')}" for c in r.causes),
        ]
        for r in report.rows
    ]
    notes = "".join(f"\n> note: {md_text(note)}\n" for note in report.notes)
    header = ["layer", "class", "shape", "status", "mean |g|", "flags", "causes"]
    if any(r.jacobian for r in report.rows):  # --measure jacobian: two more columns
        header[5:5] = ["‖J‖F mean", "± s.e."]
        extra = [jacobian.scan_markdown_cells(r) for r in report.rows]
        rows = [[*c[:5], *e, *c[5:]] for c, e in zip(rows, extra, strict=True)]
    return head + md_table(header, rows) + notes
