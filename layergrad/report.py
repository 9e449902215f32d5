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

from layergrad.results import (
    Cause,
    DataStats,
    Endpoint,
    GradientStats,
    InspectReport,
    ModelMeta,
    ProbeMeta,
    Result,
)

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


def probe_line(p: ProbeMeta, what: str) -> str:
    """`probe: random (seed 0), batch 8, inference, <what>`."""
    mode = "training" if p.training else "inference"
    source = f"random (seed {p.seed})" if p.source == "random" else p.source
    if p.samples is not None:  # --data
        source += f" ({p.samples:,} samples)"
    replicas = f", {p.replicas} replicas" if p.replicas and p.replicas > 1 else ""
    return f"probe: {source}, batch {p.batch_size}{replicas}, {mode}, {what}"


def model_header(m: ModelMeta, p: ProbeMeta, what: str) -> Text:
    """Two header lines: the model file, then how it was probed."""
    return Text.assemble(
        (m.path, "bold"), f"  {m.class_name} {m.name!r}, {m.format}\n", probe_line(p, what)
    )


def _inspect_renderables(report: InspectReport) -> list[RenderableType]:
    header = model_header(report.model, report.probe, f"d {report.probe.reduce}(to) / d from")
    items: list[RenderableType] = [header, _results_table(report.results)]
    for res in report.results:
        many = len(report.results) > 1
        items += data_lines(res.data, res.source.layer, f"→ {res.target.layer}: " if many else "")
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
            shape_text(res.source.shape),
            shape_text(res.target.shape),
            Text(res.status, style=STATUS_STYLE.get(res.status, "")),
            *numbers,
        )
    return table


def _units_table(results: list[Result]) -> Group:
    """Top units of the source activation (mean |g| per unit on its last axis), per target."""
    title = Text(
        f"most sensitive units of {results[0].source.layer} (mean |g| per unit of its last axis)",
        style="bold",
    )
    table = Table(box=box.SIMPLE, pad_edge=False)
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
    return Group(title, table)


def causes_lines(causes: Iterable[Cause]) -> list[Text]:
    """Numbered causes, each with its evidence and a `fix:` line."""
    lines = []
    for rank, cause in enumerate(causes, 1):
        where = f" at {cause.layer}" if cause.layer else ""
        op = f" (op {cause.op})" if cause.op else ""
        head = (f"{rank}. {cause.code}", "bold")
        lines.append(Text.assemble(head, f"{where}{op}: {cause.message}"))
        lines.append(Text(f"   fix: {cause.hint}", style="cyan"))
    return lines


def _causes_panel(res: Result) -> Panel:
    return Panel(
        Group(*causes_lines(res.causes)),
        title=f"{res.status}: d {res.target.layer} / d {res.source.layer}",
        title_align="left",
        border_style=STATUS_STYLE.get(res.status, ""),
        box=box.ROUNDED,
    )


def shape_text(shape: Iterable[int]) -> str:
    """`(8, 4)`."""
    return "(" + ", ".join(str(d) for d in shape) + ")"


def inspect_json(report: InspectReport) -> str:
    """The `layergrad.inspect/1` JSON document (one object, keys as documented)."""
    doc = {
        "schema": INSPECT_SCHEMA,
        **meta_json(report.model, report.probe),
        "results": [result_json(r) for r in report.results],
    }
    return json.dumps(doc, indent=2, allow_nan=False)


def meta_json(model: ModelMeta, probe: ProbeMeta) -> dict[str, Any]:
    """The `model` and `probe` members shared by the JSON documents."""
    return {
        "model": {
            "path": model.path,
            "format": model.format,
            "class": model.class_name,
            "name": model.name,
        },
        "probe": {
            key: value
            for key, value in asdict(probe).items()
            if value is not None or key not in ("samples", "replicas")  # only with --data
        },
    }


def result_json(res: Result) -> dict[str, Any]:
    """One result as a JSON-ready dict."""
    doc = {
        "from": _endpoint_json(res.source),
        "to": _endpoint_json(res.target),
        "status": res.status,
        "gradient": None if res.gradient is None else _gradient_json(res.gradient),
        "causes": [cause_json(c) for c in res.causes],
    }
    if res.data is not None:
        doc.update(data_json(res.data, res.gradient is not None))
    return doc


def data_json(data: DataStats, has_gradient: bool) -> dict[str, Any]:
    """What a result over a data set adds: dead units, per-sample L2, first non-finite batch."""
    sample = data.per_sample_l2
    return {
        "dead_units": list(data.dead_units) if has_gradient else None,
        "per_sample_l2": None
        if sample is None
        else {k: getattr(sample, k) for k in ("mean", "std", "min", "p50", "p95", "max")},
        "first_nonfinite_batch": data.first_nonfinite_batch,
    }


def data_lines(data: DataStats | None, source: str, where: str) -> list[Text]:
    """Text lines for a result over a data set (nothing without one)."""
    if data is None:
        return []
    lines = []
    s = data.per_sample_l2
    if s is not None:
        lines.append(
            Text(
                f"{where}per-sample L2 over {s.count:,} samples: mean {fmt(s.mean)}, std "
                f"{fmt(s.std)}, min {fmt(s.min)}, p50 {fmt(s.p50)}, p95 {fmt(s.p95)}, max "
                f"{fmt(s.max)}"
            )
        )
    if data.dead_units:
        shown = ", ".join(map(str, data.dead_units[:12])) + (
            ", ..." if len(data.dead_units) > 12 else ""
        )
        lines.append(
            Text(
                f"{where}{len(data.dead_units)} dead units of {source} (zero gradient for every "
                f"sample): {shown}",
                style="yellow",
            )
        )
    if data.first_nonfinite_batch is not None:
        lines.append(
            Text(f"{where}first non-finite value in batch {data.first_nonfinite_batch}")
        )
    return lines


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


def cause_json(c: Cause) -> dict[str, Any]:
    """A cause as `{code, layer, message, hint}` (the op, if any, is named in the message)."""
    message = f"{c.message} (op {c.op})" if c.op else c.message
    return {"code": c.code, "layer": c.layer, "message": message, "hint": c.hint}


def md_table(header: list[str], rows: list[list[str]]) -> str:
    """A GitHub-flavoured markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def inspect_markdown(report: InspectReport) -> str:
    """The inspect results as markdown, for a pull-request comment."""
    head = f"**layergrad inspect** `{report.model.path}`: d {report.probe.reduce}(to) / d from\n\n"
    rows = []
    for r in report.results:
        g = r.gradient
        rows.append(
            [
                f"`{r.source.layer}`",
                f"`{r.target.layer}`",
                f"**{r.status}**" if r.status != "ok" else "ok",
                fmt(g.l2) if g else "-",
                fmt(g.mean_abs) if g else "-",
                fmt(g.max_abs) if g else "-",
                f"{g.zero_fraction:.1%}" if g else "-",
                str(g.nonfinite) if g else "-",
            ]
        )
    header = ["from", "to", "status", "L2", "mean \\|g\\|", "max \\|g\\|", "zeros", "non-finite"]
    out = head + md_table(header, rows)
    for r in report.results:
        for c in r.causes:
            where = f" at `{c.layer}`" if c.layer else ""
            out += f"\n- `{r.target.layer}`: **{c.code}**{where}: {c.message} Fix: {c.hint}"
    return out + ("\n" if any(r.causes for r in report.results) else "")
