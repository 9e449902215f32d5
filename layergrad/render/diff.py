"""Render a comparison of two scans: a table with a verdict line, JSON, markdown.

By default the table shows the rows that changed, regressions first; `show_all=True` shows
every row in the new scan's order.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from layergrad.diff import DiffReport, RowDiff
from layergrad.profile import ProfileRow
from layergrad.render.common import (
    STATUS_STYLE,
    Column,
    fitted_table,
    md_code,
    md_table,
    md_text,
    meta_json,
    natural_width,
    number,
    probe_line,
    to_text,
)
from layergrad.results import ModelMeta
from layergrad.vocab import Change, Status

SCHEMA = "layergrad.diff/1"
MIN_WHY = 24  # the narrowest the why column gets before layer names wrap
COLUMNS = (
    Column(""),
    Column("layer", name_like=True),
    # on a narrow page the why sentence, which says what changed, outlasts the numbers
    Column("base", drop=2),
    Column("new", drop=1),
    Column("decades", "right", drop=3),
    Column("why", name_like=True),
)


def table(
    report: DiffReport, *, color: bool = False, width: int | None = 100, show_all: bool = False
) -> str:
    """The header, the rows (changed ones, regressions first, or all), and the verdict."""
    rows = shown_rows(report, show_all)
    items: list[RenderableType] = [_header(report)]
    if rows:
        items.append(_table(rows, width))
    verdict = Text(verdict_line(report), style="bold red" if report.regressions else "bold green")
    items.append(verdict)
    hidden = len(report.rows) - len(rows)
    if hidden:
        items.append(Text(f"{hidden} unchanged rows not shown; --all shows every row"))
    return to_text(items, color=color, width=width)


def _table(rows: list[RowDiff], width: int | None) -> Table:
    """The rows' table; the why sentences wrap before layer names do (down to MIN_WHY)."""
    table = fitted_table(COLUMNS, [_cells(r) for r in rows], width)
    excess = 0 if width is None else natural_width(table) - width
    if excess > 0:
        why = table.columns[-1]
        why.max_width = max(MIN_WHY, max(len(r.why) for r in rows) - excess)
    return table


def shown_rows(report: DiffReport, show_all: bool) -> list[RowDiff]:
    """Every row in order with `show_all`; else the rows that changed, regressions first."""
    if show_all:
        return list(report.rows)
    changed = [r for r in report.rows if r.change != Change.SAME]
    return [r for r in changed if r.regression] + [r for r in changed if not r.regression]


def verdict_line(report: DiffReport) -> str:
    """`FAIL: 2 regressions in 9 layers compared (tolerance 2 decades); 3 changed, 1 added`."""
    return ("FAIL: " if report.regressions else "PASS: ") + verdict(report)


def verdict(report: DiffReport) -> str:
    """`2 regressions in 9 layers compared (tolerance 2 decades); 3 changed, 1 added`."""
    bad = len(report.regressions)
    compared = len(report.rows) - report.count(Change.ADDED) - report.count(Change.REMOVED)
    head = (
        f"{bad} regression{'s' if bad > 1 else ''}" if bad else "no regression"
    ) + f" in {compared} layers compared (tolerance {report.tolerance:g} decades)"
    counts = [
        f"{report.count(c)} {c}"
        for c in (Change.CHANGED, Change.ADDED, Change.REMOVED)
        if report.count(c)
    ]
    return head + ("; " + ", ".join(counts) if counts else "; nothing changed")


def _header(report: DiffReport) -> Text:
    def model(label: str, m: ModelMeta) -> Text:
        return Text.assemble(label, (m.path, "bold"), f"  {m.class_name} {m.name!r}, {m.format}\n")

    what = f"d {_target(report)} / d each layer"
    return Text.assemble(
        model("base: ", report.base), model("new:  ", report.new), probe_line(report.probe, what)
    )


def _target(report: DiffReport) -> str:
    inner = "outputs · R" if report.target is None else report.target
    return f"{report.probe.reduce}({inner})"


def _cells(row: RowDiff) -> list[RenderableType]:
    return [
        Text("✗", style="bold red") if row.regression else "",
        Text(row.name),  # a name from a model file is text, never rich markup
        _side(row.base),
        _side(row.new),
        _decades(row.decades),
        Text(row.why, style="red" if row.regression else ""),
    ]


def _side(side: ProfileRow | None) -> Text:
    if side is None:
        return Text("-")
    return Text.assemble((side.status.value, STATUS_STYLE.get(side.status, "")), _mean(side))


def _decades(decades: float | None) -> str:
    return "-" if decades is None else f"{decades:+.2f}"


def as_json(report: DiffReport, **_: Any) -> str:
    """The `layergrad.diff/1` JSON document (every row, in order)."""
    base = meta_json(report.base, report.probe)["model"]
    new = meta_json(report.new, report.probe)["model"]
    doc = {
        "schema": SCHEMA,
        "base": base,
        "new": new,
        "probe": asdict(report.probe),
        "target": report.target,
        "tolerance": report.tolerance,
        "layers": [row_json(r) for r in report.rows],
        "regressions": len(report.regressions),
    }
    return json.dumps(doc, indent=2, allow_nan=False)


def row_json(row: RowDiff) -> dict[str, Any]:
    """One row as a JSON-ready dict."""
    return {
        "layer": row.name,
        "change": row.change,
        "base": _side_json(row.base),
        "new": _side_json(row.new),
        "decades": row.decades,
        "regression": row.regression,
        "why": row.why,
    }


def _side_json(side: ProfileRow | None) -> dict[str, Any] | None:
    if side is None:
        return None
    return {"status": side.status, "mean_abs": side.mean_abs, "flags": list(side.flags)}


def markdown(report: DiffReport, *, show_all: bool = False, **_: Any) -> str:
    """For a pull-request comment: the verdict, the regressions, the rest folded away."""
    said = md_text(verdict(report))
    what = f"d {_target(report)} / d each layer"
    head = (
        f"**layergrad diff** {md_code(report.base.path)} → {md_code(report.new.path)}: "
        + (f"❌ **{said}**" if report.regressions else f"✅ {said}")
        + f"\n\n{md_text(probe_line(report.probe, what))}\n"
    )
    rows = shown_rows(report, show_all)
    bad = [r for r in rows if r.regression]
    rest = [r for r in rows if not r.regression]
    out = head
    if bad:
        out += "\n" + _md_rows(bad)
    if rest:
        summary = f"{len(rest)} other {'rows' if show_all else 'changes'}"
        out += f"\n<details><summary>{summary}</summary>\n\n{_md_rows(rest)}\n</details>\n"
    return out


def _md_rows(rows: list[RowDiff]) -> str:
    header = ["layer", "base", "new", "decades", "why"]
    cells = [
        [
            md_code(r.name),
            _md_side(r.base),
            _md_side(r.new),
            _decades(r.decades),
            # md_table escapes the pipes of "mean |g|"; md_text must not escape them twice
            ("**regression**: " if r.regression else "") + md_text(r.why).replace("\\|", "|"),
        ]
        for r in rows
    ]
    return md_table(header, cells)


def _md_side(side: ProfileRow | None) -> str:
    if side is None:
        return "-"
    return f"{side.status}{_mean(side)}"


def _mean(side: ProfileRow) -> str:
    """` 0.31`: an ok row's mean |g| (a non-finite row's is over its finite part: not shown)."""
    if side.status != Status.OK or side.mean_abs is None:
        return ""
    return f" {number(side.mean_abs)}"
