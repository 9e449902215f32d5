"""Render results as one self-contained HTML page each: inspect and scan (check: `check_page.py`).
Pure functions.

A page states its verdict first, then the header (model, format, probe, target, mode), the
chart (matplotlib SVG, inline), and every row of the text report in tables that sort when
script runs and read the same without it. Names from the model file are always escaped.
"""

from __future__ import annotations

import math
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
from layergrad.render.columns import RESULT_COLUMNS, SCAN_COLUMNS
from layergrad.render.common import log_scale, number, shape_text, target_text
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

STATUS_KIND = {
    "ok": "ok", "none": "bad", "nonfinite": "bad", "zero": "warn", "integer": "muted",
    "string": "muted",
}  # fmt: skip
SEVERE_FLAGS = ("blocked", "nonfinite")
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
        _results_table(results),
    ]
    broken = [r for r in results if r.status != "ok"]
    if broken or any(r.warnings for r in results):
        body.append(el("h2", "Causes and warnings"))
        body += [_result_panel(r) for r in broken]
        body += [_warnings_panel(r) for r in results if r.warnings]
    body += [el("h2", f"Unit sensitivity of {source}"), _units_section(report)]
    return page("inspect", report.model.path, body)


def scan_html(report: ScanReport, **_: object) -> str:
    """The `scan` page: the gradient-flow chart, every layer's row, the causes of broken ones."""
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
        _scan_table(report.rows),
    ]
    groups = _cause_groups(report.rows)
    if groups:
        body.append(el("h2", "Causes"))
        body += [
            causes_panel(f"{status} at {', '.join(layers)}", causes)
            for status, layers, causes in groups
        ]
    return page("scan", report.model.path, body)


def flagged(flags: Sequence[str]) -> str | None:
    return "flagged" if flags else None


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


def status_badge(status: str) -> Html:
    return badge(status, STATUS_KIND.get(status, "muted"))


def number_cell(value: float | None) -> Html:
    """A right-aligned number cell that sorts by value ('-' sorts below every number)."""
    if value is None:
        return cell("-", sort="-Infinity", num=True)
    return cell(number(value), sort=repr(value) if math.isfinite(value) else "Infinity", num=True)


def _jacobian_cells(items: Sequence[object]) -> bool:
    """Whether any row or result carries a Jacobian norm (then the tables get a column)."""
    return any(plot.jacobian_mean(item) is not None for item in items)


def _inspect_verdict(results: Sequence[Result]) -> Html:
    broken = [r for r in results if r.status != "ok"]
    if not broken:
        return el("p", f"all {len(results)} results ok", class_="verdict ok")
    kind = "bad" if any(r.status in ("none", "nonfinite") for r in broken) else "warn"
    names = "; ".join(f"{r.status}: d {r.target.layer} / d {r.source.layer}" for r in broken)
    return el(
        "p", f"{len(broken)} of {len(results)} results not ok ({names})", class_=f"verdict {kind}"
    )


def _results_table(results: Sequence[Result]) -> Html:
    header = [c.header for c in RESULT_COLUMNS]  # the text table's
    jacobian = _jacobian_cells(results)
    if jacobian:
        header.append("||J||_F mean")
    rows = []
    for r in results:
        g = r.gradient
        row = [
            cell(el("code", r.source.layer)),
            cell(el("code", r.target.layer)),
            cell(shape_text(r.source.shape)),
            cell(shape_text(r.target.shape)),
            cell(status_badge(r.status), sort=r.status),
            number_cell(g.l2 if g else None),
            number_cell(g.mean_abs if g else None),
            number_cell(g.max_abs if g else None),
            cell(
                f"{g.zero_fraction:.1%}" if g else "-", sort=g.zero_fraction if g else -1, num=True
            ),
            cell(str(g.nonfinite) if g else "-", sort=g.nonfinite if g else -1, num=True),
        ]
        if jacobian:
            row.append(number_cell(plot.jacobian_mean(r)))
        rows.append(row)
    return table(header, rows, numeric=range(5, len(header)))


def _result_panel(r: Result) -> Html:
    return causes_panel(f"{r.status}: d {r.target.layer} / d {r.source.layer}", r.causes)


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


def _warnings_panel(r: Result) -> Html:
    title = f"warnings: d {r.target.layer} / d {r.source.layer}"
    return el(
        "section", el("h3", title), el("ul", (el("li", w) for w in r.warnings)), class_="panel warn"
    )


def _units_section(report: InspectReport) -> Html:
    ranked = [r for r in report.results if r.status == "ok" and r.gradient and r.gradient.top_units]
    if not ranked:
        return el(
            "p",
            "no result has status ok: no unit sensitivity to show",
            class_="muted",
        )
    chart = _chart(plot.inspect_figure(report), "unit-sensitivity chart")
    header = ["rank"]
    for r in ranked:
        header += [f"-> {r.target.layer}", "mean |g|"]
    rows = []
    for rank in range(max(len(r.gradient.top_units) for r in ranked if r.gradient)):
        row = [cell(str(rank + 1), sort=rank, num=True)]
        for r in ranked:
            units = r.gradient.top_units if r.gradient else ()
            if rank < len(units):
                row += [
                    cell(f"unit {units[rank][0]}", sort=units[rank][0]),
                    number_cell(units[rank][1]),
                ]
            else:
                row += [cell(""), cell("", sort="-Infinity")]
        rows.append(row)
    note = el("p", "mean |g| per unit of the last axis, largest first", class_="muted")
    return join([chart, note, table(header, rows, numeric=[0, *range(2, len(header), 2)])])


def _scan_verdict(rows: Sequence[ScanRow]) -> Html:
    counts: dict[str, int] = {}
    for row in rows:
        for flag in row.flags:
            counts[flag] = counts.get(flag, 0) + 1
    if not counts:
        return el("p", f"{len(rows)} layers: none flagged", class_="verdict ok")
    kind = "bad" if any(f in counts for f in SEVERE_FLAGS) else "warn"
    found = ", ".join(f"{n} {flag}" for flag, n in counts.items())
    return el("p", f"{len(rows)} layers: {found}", class_=f"verdict {kind}")


def _scan_table(rows: Sequence[ScanRow]) -> Html:
    header = ["#", *(c.header for c in SCAN_COLUMNS)]  # the text table's, numbered
    jacobian = _jacobian_cells(rows)
    if jacobian:
        header.append("||J||_F mean")
    logs = [v for v in (_log_mean(r) for r in rows) if v is not None]
    lo, hi = log_scale(logs) or (0.0, 1.0)
    out = []
    for i, row in enumerate(rows):
        g = row.gradient
        cells = [
            cell(str(i + 1), sort=i, num=True),
            cell(el("code", row.layer)),
            cell(row.class_name),
            cell(shape_text(row.shape)),
            cell(status_badge(row.status), sort=row.status),
            number_cell(g.l2 if g else None),
            number_cell(g.mean_abs if g else None),
            cell(
                f"{g.zero_fraction:.0%}" if g else "-", sort=g.zero_fraction if g else -1, num=True
            ),
            _log_bar(row, lo, hi),
            cell(
                join(badge(f, "bad" if f in SEVERE_FLAGS else "warn") for f in row.flags),
                sort=",".join(row.flags),
            ),
        ]
        if jacobian:
            cells.append(number_cell(plot.jacobian_mean(row)))
        out.append(cells)
    numbers = ("#", "L2", "mean |g|", "zeros", "||J||_F mean")
    numeric = [i for i, h in enumerate(header) if h in numbers]
    classes = ["flagged" if row.flags else None for row in rows]
    return table(header, out, numeric=numeric, row_classes=classes)


def _log_mean(row: ScanRow) -> float | None:
    """log10 of a row's mean |g|, or None when it has no positive finite one."""
    g = row.gradient
    ok = g is not None and math.isfinite(g.mean_abs) and g.mean_abs > 0
    return math.log10(g.mean_abs) if ok and g is not None else None


def _log_bar(row: ScanRow, lo: float, hi: float) -> Html:
    """log10 mean |g| as a CSS bar (1 to 120 px over the decades of `log_scale`) and the
    number."""
    value = _log_mean(row)
    if value is None:
        return cell("", sort="-Infinity")
    width = max(1.0, min(120.0, 120 * (value - lo) / (hi - lo)))
    bar = el("span", "", class_="bar", style=f"width:{width:.0f}px")
    return cell(join([bar, f"{value:+.1f}"]), sort=value, cls="mono")


def _cause_groups(rows: Sequence[ScanRow]) -> list[tuple[str, list[str], tuple[Reason, ...]]]:
    """(status, layers, causes) for each distinct set of causes, in the order first seen."""
    groups: dict[tuple[object, ...], tuple[str, list[str], tuple[Reason, ...]]] = {}
    for row in rows:
        if row.causes:
            key = (row.status, *((c.code, c.layer, c.message) for c in row.causes))
            groups.setdefault(key, (row.status, [], row.causes))[1].append(row.layer)
    return list(groups.values())
