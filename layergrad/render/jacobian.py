"""Render per-sample Jacobian norms (`--measure jacobian`) for `inspect` and `scan`.

Pure functions of the result objects, kept apart from the command renderers, which call them
only when a result carries Jacobian norms (so `--measure gradient` output is unchanged).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from rich.console import Group, RenderableType
from rich.text import Text

from layergrad.core.results import JacobianStats, Result
from layergrad.render.columns import md_rows, name, num, stderr_column, text_table
from layergrad.render.common import Column, number, ranked_units_table
from layergrad.render.data import percentile_text as _rank

TOP_UNITS = 10


def _spectral(field: str) -> Callable[[Result], float | None]:
    return lambda r: None if r.jacobian is None or r.jacobian.spectral is None else getattr(
        r.jacobian.spectral, field)  # fmt: skip


NORM_COLUMNS = (  # inspect --measure jacobian: the norms of each pair (results that have them)
    name("from", lambda r: r.source.layer),
    name("to", lambda r: r.target.layer),
    Column("method", get=lambda r: _method(r.jacobian)),
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
    Column("most sensitive units", where="m",
           get=lambda r: _top_units(r.jacobian.unit_sensitivity)),
)  # fmt: skip


# --- inspect tables -------------------------------------------------------------------------


def inspect_items(results: Sequence[Result], width: int | None) -> list[RenderableType]:
    """The per-sample norms table and the unit-sensitivity ranking, for results that have them."""
    measured = [(r, r.jacobian) for r in results if r.jacobian is not None]
    if not measured:
        return []
    title = Text("per-sample Jacobian norms, J_i = d to[i] / d from[i]", style="bold")
    items: list[RenderableType] = [
        Group(title, *text_table(NORM_COLUMNS, [r for r, _ in measured], width))
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


def _method(j: JacobianStats) -> str:
    return j.method if j.probes is None else f"{j.method} K={j.probes}"


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


def inspect_markdown(results: Sequence[Result]) -> str:
    """A second markdown table with the per-sample norms ('' when none were measured)."""
    measured = [r for r in results if r.jacobian is not None]
    if not measured:
        return ""
    title = "\nPer-sample Jacobian norms, J_i = d to[i] / d from[i]:\n\n"
    return title + md_rows(NORM_COLUMNS, measured)


def _top(values: Sequence[float], top: int) -> list[int]:
    """The `top` units of largest value, largest first (the lower unit first on a tie)."""
    return sorted(range(len(values)), key=lambda u: (-values[u], u))[:top]


def _top_units(values: Sequence[float], top: int = 3) -> str:
    return ", ".join(f"{u} ({number(values[u])})" for u in _top(values, top))
