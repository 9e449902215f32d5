"""Charts of results with matplotlib: the gradient-flow profile of a scan, the most sensitive
units of an inspect: a Figure from a result (`chart_files.py` writes it).

matplotlib is imported inside the functions that draw, never at module import, so commands that
do not plot do not pay for it. Figures are made without pyplot and drawn on an Agg canvas, so
building one never changes the backend of a notebook or script that calls the API.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from layergrad.core.results import InspectReport, Result, ScanReport, ScanRow, WeightScanReport

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

ROWS_PER_COLUMN = 60  # a longer scan wraps into columns that share the log axis
ROW_INCHES = 0.17  # about 1.5 lines of 8 pt text per bar: labels never overlap
MIN_DECADES = 3
LABEL_CHARS = 40  # longer layer names are shortened in the middle (the table has them whole)
FONT_SIZE = 8
TITLE_SIZE = 10


@dataclass(frozen=True)
class Mark:
    """How a scan row is drawn: its legend entry, colour, and the word shown without a bar."""

    label: str
    color: str
    word: str


# First match wins; the colours are the Okabe-Ito palette (readable with colour blindness),
# healthy rows in a quiet grey-blue so the marked ones stand out.
MARKS: dict[str, Mark] = {
    "blocked": Mark("blocked (None)", "#D55E00", "None"),
    "nonfinite": Mark("non-finite", "#CC79A7", "NaN/Inf"),
    "dead": Mark("dead", "#E69F00", "all 0"),
    "vanishing": Mark("vanishing", "#0072B2", ""),
    "exploding": Mark("exploding", "#882255", ""),
    "zero": Mark("zero", "#E69F00", "all 0"),
    "integer": Mark("not differentiable", "#999999", "integer"),
    "string": Mark("not differentiable", "#999999", "string"),
    "ok": Mark("ok", "#8FA7BF", ""),
}
JACOBIAN_COLOR = "#000000"


def mark_of(row: ScanRow) -> str:
    """The key in MARKS for a row: its first flag in MARKS order, else its status."""
    for key in MARKS:
        if key in row.flags:
            return key
    return row.status if row.status in MARKS else "ok"


def report_figure(report: InspectReport | ScanReport | WeightScanReport) -> Figure:
    """The chart of a report: gradient flow for a scan (a weight scan's drawn as a scan of its
    variables), unit sensitivity for an inspect."""
    if isinstance(report, ScanReport):
        return scan_figure(report)
    if isinstance(report, InspectReport):
        return inspect_figure(report)
    rows = tuple(
        ScanRow(v.variable, "", v.shape, v.dtype, v.status, v.gradient, v.flags)
        for v in report.variables
    )
    as_scan = ScanReport(report.model, report.probe, "loss", rows)
    return scan_figure(as_scan, what=f"d {report.loss.name} / d each trainable variable")


def scan_figure(
    report: ScanReport, what: str | None = None, rows_per_column: int = ROWS_PER_COLUMN
) -> Figure:
    """Gradient-flow profile: mean |g| per layer in execution order, on a log axis.

    One horizontal bar per row, first layer at the top. Flagged rows are coloured (MARKS,
    with a legend); a row with no positive mean |g| (None, all zero, integer) gets a word
    instead of a bar. More than `rows_per_column` rows wrap into columns sharing one axis (a
    page that scrolls passes more: one tall column keeps its labels at their size).
    Rows that carry a per-sample Jacobian norm get a marker for it on the same axis. In the
    Figure (Agg canvas) bars have gid `lg-bar-I`, words `lg-mark-I`, Jacobian markers
    `lg-jac-I`, for row index I.

    Example (with `layergrad.commands.api.scan_model` and `chart_files.save_figure`)::

        save_figure(scan_figure(scan_model("model.keras")), "flow.png")
    """
    from matplotlib.ticker import NullFormatter

    rows = report.rows
    columns = max(1, math.ceil(len(rows) / max(rows_per_column, 1)))
    per_column = max(1, math.ceil(len(rows) / columns))
    label_chars = max((len(_label(r.layer)) for r in rows), default=8)
    fig = _new_figure(
        width=max(6.4, columns * (2.8 + 0.07 * label_chars) + 0.4),
        height=max(3.2, 1.5 + per_column * ROW_INCHES),
    )
    # Columns share limits, not a sharex group: its tick bookkeeping costs seconds on ResNet50.
    axes = fig.subplots(1, columns, squeeze=False)[0]
    lo, hi = _log_limits(rows)
    for c, ax in enumerate(axes):
        start = c * per_column
        _scan_column(ax, rows[start : start + per_column], start, lo)
        ax.set_xscale("log")
        ax.set_xlim(lo, hi)
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_ylim(per_column - 0.5, -0.5)  # first layer at the top, same scale per column
        ax.set_xlabel("mean |g| over the batch (log scale)")
        if columns > 1:
            ax.set_title(f"layers {start + 1}-{min(start + per_column, len(rows))}", fontsize=9)
    target = report.target or "model outputs"
    _titles(
        fig,
        f"Gradient flow: {what or f'd {report.probe.reduce}({target}) / d each layer'}",
        f"{report.model.path} ({report.model.class_name} {report.model.name!r}), "
        f"{len(rows)} rows in execution order",
    )
    _legend(fig, rows)
    return fig


def _scan_column(ax: Axes, rows: Sequence[ScanRow], start: int, floor: float) -> None:
    """Draw one column of rows: a bar per positive mean |g|, a word for the others, a marker
    at each row's mean per-sample Jacobian norm."""
    from matplotlib.lines import Line2D

    ys = list(range(len(rows)))
    values = [_positive(r.gradient.mean_abs if r.gradient else None) for r in rows]
    drawn = [
        (y, v, MARKS[mark_of(r)].color)
        for y, v, r in zip(ys, values, rows, strict=True)
        if v is not None
    ]
    if drawn:  # one call for the column: a call per bar is slow on long models
        bars = ax.barh(
            [y for y, _, _ in drawn], [v - floor for _, v, _ in drawn], left=floor, height=0.7,
            color=[c for _, _, c in drawn],
        )  # fmt: skip
        for bar, (y, _, _) in zip(bars, drawn, strict=True):
            bar.set_gid(f"lg-bar-{start + y}")
    for y, row, value in zip(ys, rows, values, strict=True):
        if value is None:
            mark = MARKS[mark_of(row)]
            word = mark.word or row.status
            text = ax.text(
                floor * 1.2, y, word, va="center", ha="left", color=mark.color,
                fontsize=FONT_SIZE - 1, fontweight="bold", parse_math=False,
            )  # fmt: skip
            text.set_gid(f"lg-mark-{start + y}")
    for y, row in enumerate(rows):
        value = _positive(jacobian_mean(row))
        if value is not None:
            point = Line2D([value], [y], marker="D", linestyle="", color=JACOBIAN_COLOR,
                           markersize=3.5, gid=f"lg-jac-{start + y}")  # fmt: skip
            ax.add_line(point)
    ax.set_yticks(ys, [_label(r.layer) for r in rows], fontsize=FONT_SIZE, parse_math=False)
    ax.tick_params(axis="y", length=0)
    _grid(ax)


def jacobian_mean(item: object) -> float | None:
    """Mean per-sample Frobenius norm of a row's or result's `jacobian`, when it has one."""
    jacobian = getattr(item, "jacobian", None)
    return None if jacobian is None else float(jacobian.frobenius.mean)


def _positive(value: float | None) -> float | None:
    """The value if it can sit on a log axis, else None."""
    return value if value is not None and math.isfinite(value) and value > 0 else None


def _log_limits(rows: Sequence[ScanRow]) -> tuple[float, float]:
    """Axis limits a decade around every drawn value (bars and Jacobian markers), spanning at
    least MIN_DECADES so the axis always has labelled decades (never crowded minor labels)."""
    values = [_positive(r.gradient.mean_abs if r.gradient else None) for r in rows]
    values += [_positive(jacobian_mean(r)) for r in rows]
    drawn = [v for v in values if v is not None] or [1.0]
    top = math.ceil(math.log10(max(drawn)))
    bottom = min(math.floor(math.log10(min(drawn))) - 1, top - MIN_DECADES)
    return 10.0**bottom, 10.0 ** (top + 0.3)


def inspect_figure(report: InspectReport) -> Figure:
    """Unit sensitivity: the most sensitive units of the `--from` activation, per `--to`.

    One panel per result with status ok: mean |g| per unit of the `--from`
    activation's last axis, largest first (the units of the text report), bars of gid
    `lg-unit-P-R` (panel P, rank R). Without any such result the figure says so in words.
    """
    ranked = [r for r in report.results if top_units(r)]
    source = report.results[0].source.layer if report.results else "?"
    columns = min(3, max(1, len(ranked)))
    grid_rows = max(1, math.ceil(len(ranked) / columns))
    longest = max((len(top_units(r)) for r in ranked), default=1)
    fig = _new_figure(
        width=max(6.4, 3.6 * columns), height=max(3.2, 1.6 + grid_rows * (0.8 + 0.2 * longest))
    )
    title = f"Most sensitive units of {source}"
    subtitle = (
        f"mean |g| per unit of its last axis, d {report.probe.reduce}(to) / d {source}; "
        f"{report.model.path}"
    )
    _titles(fig, title, subtitle)
    if not ranked:
        fig.text(
            0.5, 0.45, "no result has status ok: nothing to chart",
            ha="center", va="center", fontsize=10, color="#555555",
        )  # fmt: skip
        return fig
    axes = fig.subplots(grid_rows, columns, squeeze=False).ravel()
    for p, ax in enumerate(axes):
        if p < len(ranked):
            _units_panel(ax, ranked[p], p)
        else:
            ax.set_visible(False)
    return fig


def top_units(result: Result) -> tuple[tuple[int, float], ...]:
    """(unit, mean |g|) of the source's most sensitive units, largest first, for an ok result."""
    g = result.gradient
    return g.top_units if result.status == "ok" and g is not None else ()


def _units_panel(ax: Axes, result: Result, panel: int) -> None:
    units = top_units(result)
    ys = list(range(len(units)))
    for y, (_unit, value) in zip(ys, units, strict=True):
        (bar,) = ax.barh(y, value, height=0.7, color=MARKS["vanishing"].color)
        bar.set_gid(f"lg-unit-{panel}-{y}")
    ax.set_yticks(ys, [f"unit {u}" for u, _ in units], fontsize=FONT_SIZE)
    ax.set_ylim(len(units) - 0.5, -0.5)
    ax.set_title(f"-> {_label(result.target.layer)}", fontsize=9, parse_math=False)
    ax.set_xlabel("mean |g| per unit")
    _grid(ax)


def _grid(ax: Axes) -> None:
    """Light vertical grid lines behind the bars; no frame on the top and right."""
    ax.grid(axis="x", which="major", color="#dddddd", linewidth=0.6)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


def _new_figure(width: float, height: float) -> Figure:
    """A Figure on an Agg canvas (no pyplot: the caller's backend stays as it is)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _titles(fig: Figure, title: str, subtitle: str) -> None:
    """A title line and a subtitle, wrapped to the figure's width."""
    import textwrap

    chars = int(fig.get_figwidth() * 72 / (TITLE_SIZE * 0.55))
    lines = textwrap.wrap(title, chars) + textwrap.wrap(subtitle, chars)
    # Model and layer names are data: parse_math=False keeps a `$` in a name from being
    # read as mathtext.
    fig.suptitle("\n".join(lines), fontsize=TITLE_SIZE, parse_math=False)


def _legend(fig: Figure, rows: Sequence[ScanRow]) -> None:
    """A patch for each mark present, in MARKS order; a marker for the Jacobian norms."""
    from matplotlib.artist import Artist
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    present = {mark_of(r) for r in rows}
    handles: list[Artist] = [
        Patch(color=m.color, label=m.label) for key, m in MARKS.items() if key in present
    ]
    if any(_positive(jacobian_mean(r)) is not None for r in rows):
        label = "Jacobian ||J_i||_F, mean over samples"
        handles.append(Line2D([], [], marker="D", linestyle="", color=JACOBIAN_COLOR, label=label))
    fig.legend(
        handles=handles, loc="outside lower center", ncols=min(len(handles), 5),
        fontsize=FONT_SIZE, frameon=False,
    )  # fmt: skip


def _label(name: str) -> str:
    """A layer name short enough for an axis label (middle elided)."""
    if len(name) <= LABEL_CHARS:
        return name
    half = (LABEL_CHARS - 1) // 2
    return f"{name[:half]}…{name[-half:]}"
