"""Render a gradient-flow scan: a table with a log-scale bar, JSON, markdown. Pure functions."""

from __future__ import annotations

import json
import math
from typing import Any

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from layergrad.report import (
    STATUS_STYLE,
    cause_json,
    causes_lines,
    data_json,
    fmt,
    md_table,
    meta_json,
    probe_line,
    render,
    shape_text,
)
from layergrad.results import ScanReport, ScanRow

SCAN_SCHEMA = "layergrad.scan/1"
BAR_WIDTH = 16


def scan_text(report: ScanReport, *, color: bool = False, width: int = 100) -> str:
    """The scan table in depth order, then the causes of blocked / non-finite layers."""
    items: list[RenderableType] = [
        Text.assemble(
            (report.model.path, "bold"),
            f"  {report.model.class_name} {report.model.name!r}, {report.model.format}\n",
            probe_line(report.probe, f"d {report.probe.reduce}({_target(report)}) / d each layer"),
        ),
        _table(report),
    ]
    items += [Text(f"note: {note}", style="yellow") for note in report.notes]
    for row in _distinct_causes([r for r in report.rows if r.causes]):
        title = Text(f"{row.status} at {row.layer} (and the layers before it):", style="bold")
        items.append(Group(title, *causes_lines(row.causes)))
    return render(items, color=color, width=width)


def _table(report: ScanReport) -> Table:
    table = Table(box=box.SIMPLE_HEAVY, pad_edge=False)
    for name in (
        "layer",
        "class",
        "shape",
        "status",
        "L2",
        "mean |g|",
        "zeros",
        "log10 mean |g|",
        "flags",
    ):
        table.add_column(name, justify="right" if name in ("L2", "mean |g|", "zeros") else "left")
    scale = _log_range(report.rows)
    for row in report.rows:
        g = row.gradient
        table.add_row(
            row.layer,
            row.class_name,
            shape_text(row.shape),
            Text(_status_label(row), style=STATUS_STYLE.get(row.status, "dim")),
            fmt(g.l2) if g else "-",
            fmt(g.mean_abs) if g else "-",
            f"{g.zero_fraction:.0%}" if g else "-",
            _bar(row, scale),
            Text(", ".join(row.flags), style="yellow" if row.flags else ""),
        )
    return table


def _target(report: ScanReport) -> str:
    return report.target or "model outputs"


def _status_label(row: ScanRow) -> str:
    return "not differentiable" if row.status == "integer" else row.status


def _log_range(rows: tuple[ScanRow, ...]) -> tuple[float, float] | None:
    logs = [math.log10(r.gradient.mean_abs) for r in rows if r.gradient and r.gradient.mean_abs > 0]
    return (min(logs), max(logs)) if logs else None


def _bar(row: ScanRow, scale: tuple[float, float] | None) -> str:
    g = row.gradient
    if g is None or scale is None or g.mean_abs <= 0:
        return ""
    lo, hi = scale
    filled = (
        1 if hi == lo else 1 + round((BAR_WIDTH - 1) * (math.log10(g.mean_abs) - lo) / (hi - lo))
    )
    return "█" * filled + f" {math.log10(g.mean_abs):+.1f}"


def _distinct_causes(rows: list[ScanRow]) -> list[ScanRow]:
    """Rows whose causes differ from the row after them (upstream rows often share a cause)."""
    seen: set[tuple[tuple[str, str | None], ...]] = set()
    out = []
    for row in reversed(rows):
        key = tuple((c.code, c.layer) for c in row.causes)
        if key not in seen:
            seen.add(key)
            out.append(row)
    return out[::-1]


def scan_json(report: ScanReport) -> str:
    """The `layergrad.scan/1` JSON document."""
    doc = {
        "schema": SCAN_SCHEMA,
        **meta_json(report.model, report.probe),
        "target": report.target,
        "layers": [_row_json(r) for r in report.rows],
        "notes": list(report.notes),
    }
    return json.dumps(doc, indent=2, allow_nan=False)


def _row_json(row: ScanRow) -> dict[str, Any]:
    g = row.gradient
    return {
        "layer": row.layer,
        "class": row.class_name,
        "shape": list(row.shape),
        "dtype": row.dtype,
        "status": row.status,
        "gradient": None
        if g is None
        else {
            "l2": g.l2,
            "mean_abs": g.mean_abs,
            "max_abs": g.max_abs,
            "zero_fraction": g.zero_fraction,
            "nonfinite": g.nonfinite,
        },
        "flags": list(row.flags),
        "causes": [cause_json(c) for c in row.causes],
        **({} if row.data is None else data_json(row.data, g is not None)),
    }


def scan_markdown(report: ScanReport) -> str:
    """A markdown table for a pull-request comment."""
    head = (
        f"**layergrad scan** `{report.model.path}`: "
        f"d {report.probe.reduce}({_target(report)}) / d each layer\n\n"
    )
    rows = [
        [
            f"`{r.layer}`",
            r.class_name,
            shape_text(r.shape),
            _status_label(r),
            fmt(r.gradient.mean_abs) if r.gradient else "-",
            ", ".join(r.flags),
            "; ".join(f"{c.code} at `{c.layer}`" for c in r.causes),
        ]
        for r in report.rows
    ]
    notes = "".join(f"\n> note: {note}\n" for note in report.notes)
    header = ["layer", "class", "shape", "status", "mean \\|g\\|", "flags", "causes"]
    return head + md_table(header, rows) + notes
