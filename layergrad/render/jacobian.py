"""Render per-sample Jacobian norms (`--measure jacobian`) for `inspect` and `scan`.

Pure functions of the result objects, kept apart from the command renderers, which call them
only when a result carries Jacobian norms (so `--measure gradient` output is unchanged).
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Group, RenderableType
from rich.text import Text

from layergrad.core.results import (
    FrobeniusNorms,
    JacobianStats,
    Result,
    ScanRow,
)
from layergrad.render.columns import NORM_COLUMNS
from layergrad.render.common import (
    log_bar,
    log_range,
    md_code,
    md_table,
    number,
    ranked_units_table,
    shape_text,
    table_with_note,
)
from layergrad.render.data import percentile_text as _rank

TOP_UNITS = 10
MD_HEADER = (
    *("from", "to", "method", "‖J‖F mean", "‖J‖F max", "± s.e.", "‖J‖2 mean", "‖J‖2 max"),
    *("batch independent", "most sensitive units"),
)


# --- inspect tables -------------------------------------------------------------------------


def inspect_items(results: Sequence[Result], width: int | None) -> list[RenderableType]:
    """The per-sample norms table and the unit-sensitivity ranking, for results that have them."""
    measured = [(r, r.jacobian) for r in results if r.jacobian is not None]
    if not measured:
        return []
    title = Text("per-sample Jacobian norms, J_i = d to[i] / d from[i]", style="bold")
    items: list[RenderableType] = [
        Group(
            title, *table_with_note(NORM_COLUMNS, [_norm_cells(r, j) for r, j in measured], width)
        )
    ]
    ranked = [(r, j) for r, j in measured if j.unit_sensitivity]
    if ranked:
        items.append(_units_table(ranked))
    over_data = [(r, j) for r, j in measured if j.frobenius.distribution is not None]
    if over_data:
        items.append(_samples_table(over_data))
    return items


def _samples_table(results: Sequence[tuple[Result, JacobianStats]]) -> Group:
    """Over a data set: the distribution of ‖J_i‖F and its most sensitive samples."""
    lines: list[RenderableType] = []
    for res, j in results:
        d = j.frobenius.distribution
        assert d is not None
        lines.append(
            Text(
                f"‖J‖F over {d.count:,} samples ({res.source.layer} → {res.target.layer}): "
                f"mean {number(d.mean)}, p50 {_rank(d.p50)}, p95 {_rank(d.p95)}, "
                f"max {number(d.max)}"
            )
        )
    columns = [
        (res.target.layer, [(r.sample, r.value) for r in j.frobenius.distribution.top])
        for res, j in results
        if j.frobenius.distribution is not None
    ]
    table = ranked_units_table(
        "most sensitive samples (largest ‖J_i‖F; index in the data, from 0)",
        "‖J‖F",
        columns,
        item="sample",
    )
    return Group(*lines, table)


def _norm_cells(res: Result, j: JacobianStats) -> list[RenderableType]:
    f, s = j.frobenius, j.spectral
    method = _method(j)
    return [
        res.source.layer,
        res.target.layer,
        method,
        number(f.mean),
        number(f.max),
        stderr_text(f),
        number(s.mean) if s else "-",
        number(s.max) if s else "-",
        "-" if s is None or s.iterations is None else str(s.iterations),
        "independent" if j.batch_independent else Text("mixed", style="yellow"),
    ]


def _method(j: JacobianStats) -> str:
    return j.method if j.probes is None else f"{j.method} K={j.probes}"


def stderr_text(f: FrobeniusNorms) -> str:
    """`±1.2%`: the largest relative standard error of a sample; `-` when exact."""
    return "-" if f.rel_stderr is None else f"±{f.rel_stderr:.1%}"


def _units_table(results: Sequence[tuple[Result, JacobianStats]]) -> Group:
    """Units of the source's last axis ranked by their Jacobian column norm, per target."""
    columns = []
    for res, j in results:
        values = j.unit_sensitivity
        columns.append((res.target.layer, [(u, values[u]) for u in _top(values, TOP_UNITS)]))
    return ranked_units_table(
        f"most sensitive units of {results[0][0].source.layer} (norm of J_i's columns for the "
        "unit, root-mean-square over samples)",
        "column norm",
        columns,
    )


# --- scan table -----------------------------------------------------------------------------


def scan_cells(
    row: ScanRow, status: RenderableType, scale: tuple[float, float] | None
) -> list[RenderableType]:
    """One scan row in Jacobian mode; `status` is the command's own status cell."""
    g, j = row.gradient, row.jacobian
    return [
        row.layer,
        row.class_name,
        shape_text(row.shape),
        status,
        number(g.mean_abs) if g else "-",
        number(j.frobenius.mean) if j else "-",
        stderr_text(j.frobenius) if j else "",
        log_bar(j.frobenius.mean if j else 0.0, scale),
        Text(", ".join(row.flags), style="yellow" if row.flags else ""),
    ]


def scan_scale(rows: Sequence[ScanRow]) -> tuple[float, float] | None:
    """The log10 range of the rows' mean Frobenius norms (positive ones)."""
    return log_range(r.jacobian.frobenius.mean for r in rows if r.jacobian)


# --- markdown -------------------------------------------------------------------------------


def inspect_markdown(results: Sequence[Result]) -> str:
    """A second markdown table with the per-sample norms ('' when none were measured)."""
    measured = [(r, r.jacobian) for r in results if r.jacobian is not None]
    if not measured:
        return ""
    rows = []
    for r, j in measured:
        s = j.spectral
        rows.append(
            [
                md_code(r.source.layer),
                md_code(r.target.layer),
                _method(j),
                number(j.frobenius.mean),
                number(j.frobenius.max),
                stderr_text(j.frobenius),
                number(s.mean) if s else "-",
                number(s.max) if s else "-",
                "yes" if j.batch_independent else "**no**",
                _top_units(j.unit_sensitivity),
            ]
        )
    return "\nPer-sample Jacobian norms, J_i = d to[i] / d from[i]:\n\n" + md_table(MD_HEADER, rows)


def _top(values: Sequence[float], top: int) -> list[int]:
    """The `top` units of largest value, largest first (the lower unit first on a tie)."""
    return sorted(range(len(values)), key=lambda u: (-values[u], u))[:top]


def _top_units(values: Sequence[float], top: int = 3) -> str:
    return ", ".join(f"{u} ({number(values[u])})" for u in _top(values, top))


def scan_markdown_cells(row: ScanRow) -> list[str]:
    """The extra markdown cells of a scan row: mean ‖J‖F and its error bar."""
    j = row.jacobian
    return [number(j.frobenius.mean), stderr_text(j.frobenius)] if j else ["-", ""]
