"""Render an `inspect` report: a table for people, JSON for programs, markdown for reviews."""

from __future__ import annotations

from collections.abc import Sequence

from rich import box
from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.text import Text

from layergrad.core.results import InspectReport, Result
from layergrad.core.vocab import Status
from layergrad.render import jacobian
from layergrad.render.columns import RESULT_COLUMNS, md_rows, text_table
from layergrad.render.common import (
    STATUS_STYLE,
    causes_lines,
    md_cause,
    md_code,
    md_text,
    model_header,
    ranked_units_table,
    to_text,
)
from layergrad.render.data import data_lines


def table(report: InspectReport, *, color: bool = False, width: int | None = 100) -> str:
    """The results table, a panel of causes per non-ok result, warnings, the top units."""
    items: list[RenderableType] = [
        model_header(report.model, report.probe, f"d {report.probe.reduce}(to) / d from"),
        *text_table(RESULT_COLUMNS, report.results, width),
    ]
    many = len(report.results) > 1
    for res in report.results:
        items += data_lines(res.data, res.source.layer, f"→ {res.target.layer}: " if many else "")
        if res.causes:
            items.append(_causes_panel(res))
        if res.warnings:
            items.append(
                Text("\n".join(f"warning: {_pair(res)}: {w}" for w in res.warnings), "yellow")
            )
    ranked = [
        r for r in report.results if r.status == Status.OK and r.gradient and r.gradient.top_units
    ]
    if any(r.jacobian for r in report.results):  # --measure jacobian: its norms and ranking
        items += jacobian.inspect_items(report.results, width)
    elif ranked:
        items.append(_units_table(ranked))
    return to_text(items, color=color, width=width)


def _pair(res: Result) -> str:
    return f"d {res.target.layer} / d {res.source.layer}"


def _units_table(results: Sequence[Result]) -> Group:
    """Top units of the source activation (mean |g| per unit on its last axis), per target."""
    return ranked_units_table(
        f"most sensitive units of {results[0].source.layer} (mean |g| per unit of its last axis)",
        "mean |g|",
        [(r.target.layer, r.gradient.top_units if r.gradient else ()) for r in results],
    )


def _causes_panel(res: Result) -> Panel:
    return Panel(
        Group(*causes_lines(res.causes)),
        title=Text(f"{res.status}: {_pair(res)}"),
        title_align="left",
        border_style=STATUS_STYLE.get(res.status, ""),
        box=box.ROUNDED,
    )


def markdown(report: InspectReport, **_: object) -> str:
    """The results as markdown for a pull-request comment, then causes and warnings."""
    head = (
        f"**layergrad inspect** {md_code(report.model.path)}: "
        f"d {report.probe.reduce}(to) / d from\n\n"
    )
    notes = [
        f"- {md_code(r.target.layer)}: {md_cause(c)}" for r in report.results for c in r.causes
    ]
    notes += [
        f"- warning, {md_code(r.target.layer)}: {md_text(w)}"
        for r in report.results
        for w in r.warnings
    ]
    return (
        head
        + md_rows(RESULT_COLUMNS, report.results)
        + jacobian.inspect_markdown(report.results)
        + "".join(f"\n{n}" for n in notes)
        + ("\n" if notes else "")
    )
