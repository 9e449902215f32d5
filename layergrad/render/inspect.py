"""Render an `inspect` report: a table for people, JSON for programs, markdown for reviews, a
page with the unit-sensitivity chart; with `--measure jacobian` the per-sample Jacobian norms,
with `--data` what the data set adds (dead units, per-sample L2, the first non-finite batch)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from rich import box
from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.text import Text

from layergrad.core.results import DataStats, InspectReport, JacobianStats, Result
from layergrad.render import plot
from layergrad.render.columns import (
    RESULT_COLUMNS,
    html_rows,
    jacobian_columns,
    md_rows,
    name,
    num,
    number_cell,
    stderr_column,
    text_table,
)
from layergrad.render.common import (
    STATUS_STYLE,
    Column,
    causes_lines,
    md_cause,
    md_code,
    md_lines,
    md_text,
    md_title,
    model_header,
    number,
    ranked_units_table,
    to_text,
)
from layergrad.render.html_page import Html, causes_panel, cell, chart, el, join, page, page_facts
from layergrad.render.html_page import table as html_table


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
            items.append(
                Panel(
                    Group(*causes_lines(res.causes)),
                    title=Text(f"{res.status}: {_pair(res)}"),
                    title_align="left",
                    border_style=STATUS_STYLE.get(res.status, ""),
                    box=box.ROUNDED,
                )
            )
        if res.warnings:
            items.append(
                Text("\n".join(f"warning: {_pair(res)}: {w}" for w in res.warnings), "yellow")
            )
    ranked = _ranked_units(report)
    if any(r.jacobian for r in report.results):  # --measure jacobian: its norms and ranking
        items += jacobian_items(report.results, width)
    elif ranked:
        source = report.results[0].source.layer
        title = f"most sensitive units of {source} (mean |g| per unit of its last axis)"
        items.append(ranked_units_table(title, "mean |g|", ranked))
    return to_text(items, color=color, width=width)


def _pair(res: Result) -> str:
    return f"d {res.target.layer} / d {res.source.layer}"


def markdown(report: InspectReport, **_: object) -> str:
    """The results as markdown for a pull-request comment, then causes and warnings."""
    head = md_title("inspect", report.model.path, f"d {report.probe.reduce}(to) / d from")
    notes = [
        f"- {md_code(r.target.layer)}: {md_cause(c)}" for r in report.results for c in r.causes
    ]
    notes += [
        f"- warning, {md_code(r.target.layer)}: {md_text(w)}"
        for r in report.results
        for w in r.warnings
    ]
    jacobians = [r for r in report.results if r.jacobian is not None]
    title = "\nPer-sample Jacobian norms, J_i = d to[i] / d from[i]:\n\n"
    norms = title + md_rows(NORM_COLUMNS, jacobians) if jacobians else ""
    return head + md_rows(RESULT_COLUMNS, report.results) + norms + md_lines(notes)


def html(report: InspectReport, **_: object) -> str:
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
    broken = [r for r in results if r.status != "ok"]
    said, kind = f"all {len(results)} results ok", "ok"
    if broken:
        kind = "bad" if any(r.status in ("none", "nonfinite") for r in broken) else "warn"
        names = "; ".join(f"{r.status}: {_pair(r)}" for r in broken)
        said = f"{len(broken)} of {len(results)} results not ok ({names})"
    body: list[Html | None] = [
        el("p", said, class_=f"verdict {kind}"),
        page_facts(report.model, report.probe, target),
        el("h2", "Results"),
        html_rows([*RESULT_COLUMNS, *jacobian_columns(results)], results),
    ]
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


def _ranked_units(report: InspectReport) -> list[tuple[str, tuple[tuple[int, float], ...]]]:
    """(target, the source's units of largest mean |g|) for each ok result that has them."""
    return [(r.target.layer, plot.top_units(r)) for r in report.results if plot.top_units(r)]


def _units_section(report: InspectReport) -> Html:
    ranked = _ranked_units(report)
    if not ranked:
        return el("p", "no result has status ok: no unit sensitivity to show", class_="muted")
    figure = chart(plot.inspect_figure(report), "unit-sensitivity chart")
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
    return join([figure, note, html_table(header, rows, numeric=[0, *range(2, len(header), 2)])])


# --- --measure jacobian ---------------------------------------------------------------------

TOP_UNITS = 10


def _spectral(field: str) -> Callable[[Result], float | None]:
    return lambda r: None if r.jacobian is None or r.jacobian.spectral is None else getattr(
        r.jacobian.spectral, field)  # fmt: skip


NORM_COLUMNS = (  # inspect --measure jacobian: the norms of each pair (results that have them)
    name("from", lambda r: r.source.layer),
    name("to", lambda r: r.target.layer),
    Column("method", get=lambda r: r.jacobian.method
           + ("" if r.jacobian.probes is None else f" K={r.jacobian.probes}")),
    num("‖J‖F mean", lambda r: r.jacobian.frobenius.mean),
    num("‖J‖F max", lambda r: r.jacobian.frobenius.max, drop=5),
    stderr_column(1),
    num("‖J‖2 mean", _spectral("mean")),
    num("‖J‖2 max", _spectral("max"), drop=4),
    Column("iterations", "right", drop=2, where="t",
           get=lambda r: "-" if (i := _spectral("iterations")(r)) is None else str(i)),
    Column("batch", drop=3, get=lambda r: r.jacobian.batch_independent, where="t",
           text=lambda b: "independent" if b else Text("mixed", style="yellow")),
    Column("batch independent", where="m",
           get=lambda r: "yes" if r.jacobian.batch_independent else "**no**"),
    Column("most sensitive units", where="m", get=lambda r: ", ".join(
           f"{u} ({number(v)})" for u, v in _top(r.jacobian.unit_sensitivity, 3))),
)  # fmt: skip


# --- inspect tables -------------------------------------------------------------------------


def jacobian_items(results: Sequence[Result], width: int | None) -> list[RenderableType]:
    """The per-sample norms table and the unit-sensitivity ranking, for results that have them
    (at least one does)."""
    measured = [(r, r.jacobian) for r in results if r.jacobian is not None]
    title = Text("per-sample Jacobian norms, J_i = d to[i] / d from[i]", style="bold")
    items: list[RenderableType] = [
        Group(title, *text_table(NORM_COLUMNS, [r for r, _ in measured], width))
    ]
    ranked = [
        (r.target.layer, _top(j.unit_sensitivity, TOP_UNITS))
        for r, j in measured
        if j.unit_sensitivity
    ]
    if ranked:  # the units of the source's last axis by their Jacobian column norm, per target
        heading = (
            f"most sensitive units of {results[0].source.layer} (norm of J_i's columns for the "
            "unit, root-mean-square over samples)"
        )
        items.append(ranked_units_table(heading, "column norm", ranked))
    over_data = [(r, j) for r, j in measured if j.frobenius.distribution is not None]
    if over_data:
        items.append(_samples_table(over_data))
    return items


def _samples_table(results: Sequence[tuple[Result, JacobianStats]]) -> Group:
    """Over a data set: the distribution of ‖J_i‖F and its most sensitive samples."""
    lines: list[RenderableType] = []
    columns = []
    for res, j in results:
        d = j.frobenius.distribution
        assert d is not None
        lines.append(
            Text(
                f"‖J‖F over {d.count:,} samples ({res.source.layer} → {res.target.layer}): "
                f"mean {number(d.mean)}, p50 {percentile_text(d.p50)}, "
                f"p95 {percentile_text(d.p95)}, max {number(d.max)}"
            )
        )
        columns.append((res.target.layer, [(r.sample, r.value) for r in d.top]))
    title = "most sensitive samples (largest ‖J_i‖F; index in the data, from 0)"
    return Group(*lines, ranked_units_table(title, "‖J‖F", columns, item="sample"))


def _top(values: Sequence[float], top: int) -> list[tuple[int, float]]:
    """The `top` (unit, value) of largest value, largest first (the lower unit first on a tie)."""
    return sorted(enumerate(values), key=lambda uv: (-uv[1], uv[0]))[:top]


# --- --data ---------------------------------------------------------------------------------

SHOWN_UNITS = 12


def percentile_text(value: float | None) -> str:
    """A percentile, or why there is none (a report merged from shards)."""
    return "n/a (shards do not combine)" if value is None else number(value)


def data_lines(data: DataStats | None, source: str, where: str) -> list[Text]:
    """Text lines for a result over a data set (nothing without one)."""
    if data is None:
        return []
    lines = []
    s = data.per_sample_l2
    if s is not None:
        lines.append(
            Text(
                f"{where}per-sample L2 over {s.count:,} samples: mean {number(s.mean)}, std "
                f"{number(s.std)}, min {number(s.min)}, p50 {percentile_text(s.p50)}, p95 "
                f"{percentile_text(s.p95)}, max {number(s.max)}"
            )
        )
    if data.dead_units:
        shown = ", ".join(map(str, data.dead_units[:SHOWN_UNITS]))
        more = ", ..." if len(data.dead_units) > SHOWN_UNITS else ""
        lines.append(
            Text(
                f"{where}{len(data.dead_units)} dead units of {source} (zero gradient for every "
                f"sample): {shown}{more}",
                style="yellow",
            )
        )
    if data.first_nonfinite_batch is not None:
        lines.append(Text(f"{where}first non-finite value in batch {data.first_nonfinite_batch}"))
    return lines
