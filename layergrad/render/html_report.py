"""Render results as one self-contained HTML page each: inspect and scan (check: `check_page.py`).
Pure functions.

A page states its verdict first, then the header (model, format, probe, target, mode), the
chart (matplotlib SVG, inline), and every row of the text report in tables that sort when
script runs and read the same without it. Names from the model file are always escaped.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING

from layergrad.core.results import (
    InspectReport,
    ModelMeta,
    ProbeMeta,
    Reason,
    Result,
    ScanReport,
    ScanRow,
)
from layergrad.render import chart_files, plot
from layergrad.render.columns import (
    JACOBIAN_MEAN,
    RESULT_COLUMNS,
    SEVERE_FLAGS,
    STATUS_KIND,
    html_rows,
    number_cell,
    scan_columns,
)
from layergrad.render.common import target_text
from layergrad.render.html_page import (
    Html,
    badge,
    cell,
    definition_list,
    el,
    join,
    page,
    table,
)

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["STATUS_KIND", "inspect_html", "scan_html"]  # STATUS_KIND: the diff page's too
# the page scrolls: a long scan's chart grows in height, one column of rows at the labels'
# own size, instead of wrapping into columns that a browser shrinks to fit its width
PAGE_ROWS_PER_COLUMN = 400
CHART_SCALE = 1.25  # inline charts are drawn up to this times their size in a paper figure


def inspect_html(report: InspectReport, **_: object) -> str:
    """The `inspect` page: results, unit-sensitivity chart, a cause panel per non-ok result."""
    results = report.results
    source = results[0].source.layer if results else "?"
    targets = [r.target.layer for r in results]
    reduce = report.probe.reduce
    target = (
        f"d {reduce}({targets[0]}) / d {source}"
        if len(targets) == 1
        else f"d {reduce}(to) / d {source}, for to in {', '.join(targets)}"
    )
    body: list[Html | None] = [
        _inspect_verdict(results),
        page_facts(report.model, report.probe, target),
        el("h2", "Results"),
        html_rows([*RESULT_COLUMNS, *_jacobian(results)], results),
    ]
    broken = [r for r in results if r.status != "ok"]
    if broken or any(r.warnings for r in results):
        body.append(el("h2", "Causes and warnings"))
        body += [causes_panel(f"{r.status}: {_pair(r)}", r.causes) for r in broken]
        body += [
            el(
                "section",
                el("h3", f"warnings: {_pair(r)}"),
                el("ul", (el("li", w) for w in r.warnings)),
                class_="panel warn",
            )
            for r in results
            if r.warnings
        ]
    body += [el("h2", f"Unit sensitivity of {source}"), _units_section(report)]
    return page("inspect", report.model.path, body)


def scan_html(report: ScanReport, **_: object) -> str:
    """The `scan` page: the gradient-flow chart, every layer's row, the causes of broken ones."""
    rows = report.rows
    body: list[Html | None] = [
        _scan_verdict(report.rows),
        page_facts(report.model, report.probe, f"d {target_text(report)} / d each layer"),
    ]
    body += [el("p", "note: ", note, class_="note") for note in report.notes]
    body += [
        el("h2", "Gradient flow"),
        _chart(
            plot.scan_figure(report, rows_per_column=PAGE_ROWS_PER_COLUMN),
            "gradient-flow profile",
        ),
        el("h2", f"Layers ({len(report.rows)}, in execution order)"),
        html_rows([*scan_columns(rows), *_jacobian(rows)], rows, numbered=True),
    ]
    groups = _cause_groups(report.rows)
    if groups:
        body.append(el("h2", "Causes"))
        body += [
            causes_panel(f"{status} at {', '.join(layers)}", causes)
            for status, layers, causes in groups
        ]
    return page("scan", report.model.path, body)


def page_facts(model: ModelMeta, probe: ProbeMeta, target: str) -> Html:
    source = f"random (seed {probe.seed})" if probe.source == "random" else f"file {probe.source}"
    return definition_list(
        [
            ("model", join([el("code", model.path), f"  {model.class_name} {model.name!r}"])),
            ("format", model.format),
            ("probe", f"{source}, batch {probe.batch_size}"),
            ("target", target),
            ("mode", "training" if probe.training else "inference"),
        ]
    )


def _chart(fig: Figure, label: str) -> Html:
    """A figure inlined as SVG, drawn a little larger than its natural size where room allows."""
    width = round(fig.get_figwidth() * 96 * CHART_SCALE)
    # matplotlib writes the SVG and escapes every text in it; it is inserted as markup.
    svg = Html(chart_files.figure_svg(fig))
    return el(
        "figure", svg, class_="chart", role="img", aria_label=label, style=f"max-width:{width}px"
    )


def _jacobian(items: Sequence[object]) -> list:
    """The Jacobian norm's column, when any row or result carries one."""
    return [JACOBIAN_MEAN] if any(plot.jacobian_mean(i) is not None for i in items) else []


def _inspect_verdict(results: Sequence[Result]) -> Html:
    broken = [r for r in results if r.status != "ok"]
    if not broken:
        return el("p", f"all {len(results)} results ok", class_="verdict ok")
    kind = "bad" if any(r.status in ("none", "nonfinite") for r in broken) else "warn"
    names = "; ".join(f"{r.status}: {_pair(r)}" for r in broken)
    return el(
        "p", f"{len(broken)} of {len(results)} results not ok ({names})", class_=f"verdict {kind}"
    )


def _pair(r: Result) -> str:
    return f"d {r.target.layer} / d {r.source.layer}"


def causes_panel(title: str, causes: Sequence[Reason]) -> Html:
    """Numbered causes with code, layer (and op), evidence and fix."""
    items = [
        el(
            "li",
            badge(c.code, "bad"),
            join([" at ", el("code", c.layer)]) if c.layer else None,
            join([" (op ", el("code", c.op), ")"]) if c.op else None,
            ": ",
            c.message,
            el("div", el("strong", "fix: "), c.hint, class_="fix"),
        )
        for c in causes
    ]
    content = el("ol", items) if items else el("p", "no cause found", class_="muted")
    return el("section", el("h3", title), content, class_="panel")


def _units_section(report: InspectReport) -> Html:
    ranked = [
        (r.target.layer, r.gradient.top_units)
        for r in report.results
        if r.status == "ok" and r.gradient and r.gradient.top_units
    ]
    if not ranked:
        return el("p", "no result has status ok: no unit sensitivity to show", class_="muted")
    chart = _chart(plot.inspect_figure(report), "unit-sensitivity chart")
    header = ["rank", *(h for layer, _ in ranked for h in (f"-> {layer}", "mean |g|"))]
    rows = []
    for rank in range(max(len(units) for _, units in ranked)):
        row = [cell(str(rank + 1), sort=rank, num=True)]
        for _, units in ranked:
            if rank < len(units):
                unit, value = units[rank]
                row += [cell(f"unit {unit}", sort=unit), number_cell(value)]
            else:
                row += [cell(""), cell("", sort="-Infinity")]
        rows.append(row)
    note = el("p", "mean |g| per unit of the last axis, largest first", class_="muted")
    return join([chart, note, table(header, rows, numeric=[0, *range(2, len(header), 2)])])


def _scan_verdict(rows: Sequence[ScanRow]) -> Html:
    counts = Counter(flag for row in rows for flag in row.flags)
    if not counts:
        return el("p", f"{len(rows)} layers: none flagged", class_="verdict ok")
    kind = "bad" if any(f in counts for f in SEVERE_FLAGS) else "warn"
    found = ", ".join(f"{n} {flag}" for flag, n in counts.items())
    return el("p", f"{len(rows)} layers: {found}", class_=f"verdict {kind}")


def _cause_groups(rows: Sequence[ScanRow]) -> list[tuple[str, list[str], tuple[Reason, ...]]]:
    """(status, layers, causes) for each distinct set of causes, in the order first seen."""
    groups: dict[tuple[object, ...], tuple[str, list[str], tuple[Reason, ...]]] = {}
    for row in rows:
        if row.causes:
            key = (row.status, *((c.code, c.layer, c.message) for c in row.causes))
            groups.setdefault(key, (row.status, [], row.causes))[1].append(row.layer)
    return list(groups.values())
