"""Render a gradient-flow scan: a table with a log-scale bar, JSON, markdown, a page with the
gradient-flow chart (inline SVG)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from rich.console import Group, RenderableType
from rich.text import Text

from layergrad.core.results import Reason, ScanReport, ScanRow
from layergrad.render import plot
from layergrad.render.columns import (
    SEVERE_FLAGS,
    html_rows,
    jacobian_columns,
    md_rows,
    scan_columns,
    text_table,
)
from layergrad.render.common import (
    causes_lines,
    flow_text,
    md_text,
    md_title,
    model_header,
    to_text,
)
from layergrad.render.html_page import Html, causes_panel, chart, el, page, page_facts

# the page scrolls: a long scan's chart grows in height, one column of rows at the labels'
# own size, instead of wrapping into columns that a browser shrinks to fit its width
PAGE_ROWS_PER_COLUMN = 400


def _columns(report: ScanReport) -> list:
    return scan_columns(report.rows, any(row.jacobian for row in report.rows))


def table(report: ScanReport, *, color: bool = False, width: int | None = 100) -> str:
    """The scan table in depth order, then notes and the causes of blocked / non-finite rows."""
    items: list[RenderableType] = [
        model_header(report.model, report.probe, flow_text(report)),
        *text_table(_columns(report), report.rows, width),
    ]
    items += [Text(f"note: {note}", style="yellow") for note in report.notes]
    # the last row of each set of causes, in depth order (upstream rows often share one)
    rows = [r for r in report.rows if r.causes]
    last = {tuple((c.code.value, c.layer) for c in r.causes): (i, r) for i, r in enumerate(rows)}
    for _, row in sorted(last.values()):
        title = Text(f"{row.status} at {row.layer} (and the layers before it):", style="bold")
        items.append(Group(title, *causes_lines(row.causes)))
    return to_text(items, color=color, width=width)


def markdown(report: ScanReport, **_: object) -> str:
    """A markdown table for a pull-request comment."""
    head = md_title("scan", report.model.path, md_text(flow_text(report)))
    notes = "".join(f"\n> note: {md_text(note)}\n" for note in report.notes)
    return head + md_rows(_columns(report), report.rows) + notes


def html(report: ScanReport, **_: object) -> str:
    """The `scan` page: the gradient-flow chart, every layer's row, the causes of broken ones."""
    rows = report.rows
    body: list[Html | None] = [
        _scan_verdict(report.rows),
        page_facts(report.model, report.probe, flow_text(report)),
    ]
    body += [el("p", "note: ", note, class_="note") for note in report.notes]
    body += [
        el("h2", "Gradient flow"),
        chart(
            plot.scan_figure(report, rows_per_column=PAGE_ROWS_PER_COLUMN),
            "gradient-flow profile",
        ),
        el("h2", f"Layers ({len(report.rows)}, in execution order)"),
        html_rows([*scan_columns(rows), *jacobian_columns(rows)], rows, numbered=True),
    ]
    groups = _cause_groups(report.rows)
    if groups:
        body.append(el("h2", "Causes"))
        body += [
            causes_panel(f"{status} at {', '.join(layers)}", causes)
            for status, layers, causes in groups
        ]
    return page("scan", report.model.path, body)


def _scan_verdict(rows: Sequence[ScanRow]) -> Html:
    counts = Counter(flag for row in rows for flag in row.flags)
    kind = "bad" if any(f in counts for f in SEVERE_FLAGS) else "warn" if counts else "ok"
    found = ", ".join(f"{n} {flag}" for flag, n in counts.items()) or "none flagged"
    return el("p", f"{len(rows)} layers: {found}", class_=f"verdict {kind}")


def _cause_groups(rows: Sequence[ScanRow]) -> list[tuple[str, list[str], tuple[Reason, ...]]]:
    """(status, layers, causes) for each distinct set of causes, in the order first seen."""
    groups: dict[tuple[object, ...], tuple[str, list[str], tuple[Reason, ...]]] = {}
    for row in rows:
        if row.causes:
            key = (row.status, *((c.code, c.layer, c.message) for c in row.causes))
            groups.setdefault(key, (row.status, [], row.causes))[1].append(row.layer)
    return list(groups.values())
