"""Render results as text: rich tables for people, JSON for programs. Pure functions."""

from __future__ import annotations

import io
import json
import math
from collections.abc import Iterable
from dataclasses import asdict
from typing import Any

from rich import box
from rich.console import Console, Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from layergrad.results import Cause, Endpoint, GradientStats, InspectReport, Result

INSPECT_SCHEMA = "layergrad.inspect/1"
STATUS_STYLE = {
    "ok": "green",
    "none": "bold red",
    "zero": "bold yellow",
    "nonfinite": "bold magenta",
}


def render(renderables: Iterable[RenderableType], *, color: bool, width: int) -> str:
    """Render rich objects to a string (no colour codes unless `color`)."""
    buffer = io.StringIO()
    console = Console(
        file=buffer,
        width=width,
        color_system="standard" if color else None,
        force_terminal=color,
        no_color=not color,
        highlight=False,
        emoji=False,
    )
    for item in renderables:
        console.print(item)
    return buffer.getvalue()


def fmt(value: float) -> str:
    """A number in 4 significant digits: fixed for ordinary sizes, scientific otherwise."""
    if value == 0:
        return "0"
    if not math.isfinite(value):
        return str(value)
    if 1e-3 <= abs(value) < 1e5:
        return f"{value:.4g}"
    return f"{value:.3e}"


def inspect_text(report: InspectReport, *, color: bool = False, width: int = 100) -> str:
    """The `inspect` table, the most sensitive units, and a panel of causes per non-ok result."""
    return render(_inspect_renderables(report), color=color, width=width)


def _inspect_renderables(report: InspectReport) -> list[RenderableType]:
    m, p = report.model, report.probe
    mode = "training" if p.training else "inference"
    source = f"random (seed {p.seed})" if p.source == "random" else p.source
    header = Text.assemble(
        (f"{m.path}", "bold"),
        f"  {m.class_name} {m.name!r}, {m.format}\n",
        f"probe: {source}, batch {p.batch_size}, {mode}, d {p.reduce}(to) / d from",
    )
    items: list[RenderableType] = [header, _results_table(report.results)]
    for res in report.results:
        if res.causes:
            items.append(_causes_panel(res))
        if res.warnings:
            items.append(Text("\n".join(f"warning: {w}" for w in res.warnings), style="yellow"))
    ranked = [r for r in report.results if r.status == "ok" and r.gradient and r.gradient.top_units]
    if ranked:
        items.append(_units_table(ranked))
    return items


def _results_table(results: Iterable[Result]) -> Table:
    table = Table(box=box.SIMPLE_HEAVY, pad_edge=False, title_justify="left")
    for name, justify in [
        ("from", "left"), ("to", "left"), ("from shape", "left"), ("to shape", "left"),
        ("status", "left"), ("L2", "right"), ("mean |g|", "right"), ("max |g|", "right"),
        ("zeros", "right"), ("non-finite", "right"),
    ]:  # fmt: skip
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for res in results:
        g = res.gradient
        numbers = ["-"] * 5
        if g is not None:
            zeros = f"{g.zero_fraction:.1%}"
            numbers = [fmt(g.l2), fmt(g.mean_abs), fmt(g.max_abs), zeros, str(g.nonfinite)]
        table.add_row(
            res.source.layer,
            res.target.layer,
            _shape(res.source.shape),
            _shape(res.target.shape),
            Text(res.status, style=STATUS_STYLE.get(res.status, "")),
            *numbers,
        )
    return table


def _units_table(results: list[Result]) -> Table:
    """Top units of the source activation (mean |g| per unit on its last axis), per target."""
    table = Table(
        title=f"most sensitive units of {results[0].source.layer} (mean |g| over all but the "
        "last axis)",
        box=box.SIMPLE,
        title_justify="left",
        pad_edge=False,
    )
    table.add_column("rank", justify="right")
    for res in results:
        table.add_column(f"→ {res.target.layer}", justify="right")
        table.add_column("mean |g|", justify="right")
        table.add_column("", justify="left")
    rows = max(len(r.gradient.top_units) for r in results if r.gradient)
    for rank in range(rows):
        cells = [str(rank + 1)]
        for res in results:
            units = res.gradient.top_units if res.gradient else ()
            if rank < len(units):
                unit, value = units[rank]
                bar = "█" * max(1, round(10 * value / (units[0][1] or 1.0)))
                cells += [f"unit {unit}", fmt(value), bar]
            else:
                cells += ["", "", ""]
        table.add_row(*cells)
    return table


def _causes_panel(res: Result) -> Panel:
    lines = []
    for rank, cause in enumerate(res.causes, 1):
        where = f" at {cause.layer}" if cause.layer else ""
        op = f" (op {cause.op})" if cause.op else ""
        head = (f"{rank}. {cause.code}", "bold")
        lines.append(Text.assemble(head, f"{where}{op}: {cause.message}"))
        lines.append(Text(f"   fix: {cause.hint}", style="cyan"))
    return Panel(
        Group(*lines),
        title=f"{res.status}: d {res.target.layer} / d {res.source.layer}",
        title_align="left",
        border_style=STATUS_STYLE.get(res.status, ""),
        box=box.ROUNDED,
    )


def _shape(shape: Iterable[int]) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ")"


def inspect_json(report: InspectReport) -> str:
    """The `layergrad.inspect/1` JSON document (one object, keys as documented)."""
    doc = {
        "schema": INSPECT_SCHEMA,
        "model": {
            "path": report.model.path,
            "format": report.model.format,
            "class": report.model.class_name,
            "name": report.model.name,
        },
        "probe": asdict(report.probe),
        "results": [result_json(r) for r in report.results],
    }
    return json.dumps(doc, indent=2, allow_nan=False)


def result_json(res: Result) -> dict[str, Any]:
    """One result as a JSON-ready dict."""
    return {
        "from": _endpoint_json(res.source),
        "to": _endpoint_json(res.target),
        "status": res.status,
        "gradient": None if res.gradient is None else _gradient_json(res.gradient),
        "causes": [_cause_json(c) for c in res.causes],
    }


def _endpoint_json(e: Endpoint) -> dict[str, Any]:
    return {"layer": e.layer, "shape": list(e.shape), "dtype": e.dtype}


def _gradient_json(g: GradientStats) -> dict[str, Any]:
    return {
        "shape": list(g.shape),
        "l2": g.l2,
        "mean_abs": g.mean_abs,
        "max_abs": g.max_abs,
        "zero_fraction": g.zero_fraction,
        "nonfinite": g.nonfinite,
    }


def _cause_json(c: Cause) -> dict[str, Any]:
    message = f"{c.message} (op {c.op})" if c.op else c.message
    return {"code": c.code, "layer": c.layer, "message": message, "hint": c.hint}
