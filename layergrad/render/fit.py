"""Render a monitored training run (`layergrad fit`, `GradientMonitor(report=...)`).

The JSON is `layergrad.fit/1`: every checkpoint's rows and the findings; a NaN or Inf is
written as null (strict JSON). The page draws the loss curve and a layers x checkpoints map
of the update ratios as inline SVG, and fetches nothing; `fix`'s page draws its loss curves
with the same `loss_chart`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from rich.console import RenderableType
from rich.text import Text

from layergrad.core.fit_results import Checkpoint, FitReport
from layergrad.render import columns as cols
from layergrad.render.common import Column, count, md_code, md_head, md_text, number, to_text
from layergrad.render.html_page import Html, badge, cell, el, page, report_head, svg

WIDTH, PAD = 720, 40  # the loss chart
BLUE, RED = "#0b5cad", "#c62828"
COLUMNS = (  # one row per layer of a checkpoint
    cols.name("layer", lambda r: r.layer),
    cols.num("update ratio", lambda r: r.update_ratio),
    cols.num("grad L2", lambda r: r.grad_l2, drop=2),
    cols.percent("dead", lambda r: r.dead_fraction, 0, 1),
    Column("NaN/Inf", "right", drop=3,  # its gradients', outputs' and weights'
           get=lambda r: str(r.nonfinite_gradient + r.nonfinite_activation + r.nonfinite_weight)),
)  # fmt: skip
FINDING_COLUMNS = (  # the findings, in markdown and on the page
    Column("finding", get=lambda f: str(f.code), md=md_code, html=lambda c: cell(badge(c, "bad"))),
    cols.name("layer", lambda f: f.layer or "-"),
    Column("step", "right", get=lambda f: str(f.step)),
    Column("message", get=lambda f: f.message, md=md_text),
)


def verdict_line(report: FitReport) -> str:
    """One sentence: the findings, or that none were found."""
    if not report.findings:
        return f"no finding in {report.steps} steps"
    words = ", ".join(dict.fromkeys(str(f.code) for f in report.findings))
    return f"{count(len(report.findings), 'finding')}: {words}"


def _facts(report: FitReport) -> list[tuple[str, str]]:
    facts = [("model", f"{report.path or report.model} ({report.model_class})")]
    if report.data:
        facts.append(("data", report.data))
    started = report.stopped != "target_mismatch"
    training = (
        f"{count(report.steps, 'step')} in {count(report.epochs, 'epoch')}, "
        f"checkpoint every {count(report.every, 'step')}"
        if started
        else "not started: the labels do not fit the outputs (before the first step)"
    )
    facts += [("training", training), ("loss", report.loss_name or "-")]
    facts.append(("optimizer", f"{report.optimizer}, learning rate {number(report.learning_rate)}"))
    if report.stopped and started:
        facts.append(("stopped", f"early, on {report.stopped}"))
    return facts


def _last(report: FitReport) -> Checkpoint | None:
    return report.checkpoints[-1] if report.checkpoints else None


def table(
    report: FitReport, *, color: bool = False, width: int | None = 100, layers: bool = True
) -> str:
    """The facts, the last checkpoint's layers (unless not `layers`), the findings."""
    items: list[RenderableType] = [Text(f"{k}: {v}") for k, v in _facts(report)]
    last = _last(report)
    if last is not None and layers:
        items.append(Text(f"\nlayers at step {last.step} (loss {number(last.loss)}):"))
        items += cols.text_table(COLUMNS, last.layers, width, note=False)
    items.append(Text(verdict_line(report), style="bold red" if report.findings else "green"))
    for f in report.findings:
        where = f" at {f.layer}" if f.layer else ""
        items.append(Text(f"  {f.code}{where} (step {f.step}): {f.message}"))
    items += [Text(f"note: {n}") for n in report.notes]
    return to_text(items, color=color, width=width)


def markdown(report: FitReport, **_: object) -> str:
    """A pull-request comment: the verdict, the findings, the last checkpoint's layers."""
    lines = md_head("fit", verdict_line(report), _facts(report))
    if report.findings:
        lines.append(cols.md_rows(FINDING_COLUMNS, report.findings))
    last = _last(report)
    if last is not None:
        lines += [f"Layers at step {last.step}:\n", cols.md_rows(COLUMNS, last.layers)]
    return "\n".join(lines)


def html(report: FitReport, **_: object) -> str:
    """One self-contained page: verdict, facts, findings, loss curve, update-ratio map."""
    ok = not report.findings
    body: list[Html | None] = [*report_head(verdict_line(report), ok, _facts(report))]
    if report.findings:
        body += [el("h2", "Findings"), cols.html_rows(FINDING_COLUMNS, report.findings)]
    # the loss of every step; a step whose loss is NaN/Inf as a red tick
    loss = loss_chart([(report.losses, BLUE)], nan_ticks=True)
    body += [el("h2", "Loss"), el("div", loss, class_="chart")]
    body += [
        el("h2", "Update ratio, layers x checkpoints"),
        el("p", "lr x |grad| / |weights| per step, log scale; grey: no value.", class_="muted"),
        el("div", ratio_map_svg(report), class_="chart"),
    ]
    last = _last(report)
    if last is not None:
        body += [el("h2", f"Layers at step {last.step}"), cols.html_rows(COLUMNS, last.layers)]
    return page("fit", report.path or report.model, body)


def ratio_map_svg(report: FitReport) -> Html:
    """A cell per layer and checkpoint, coloured by log10 of its update ratio."""
    layers, checkpoints = report.layer_names, report.checkpoints
    label, cw, ch = 180, max(4, min(24, 720 // max(len(checkpoints), 1))), 16
    width, height = label + cw * len(checkpoints) + 10, ch * len(layers) + 40
    cells: list[Html] = []
    box, foot = {"width": cw, "height": ch}, {"y": height - 12, "font_size": 11}
    for j, c in enumerate(checkpoints):
        rows = {r.layer: r for r in c.layers}
        for i, name in enumerate(layers):
            ratio = rows[name].update_ratio if name in rows else None
            title = el("title", f"{name}, step {c.step}: {number(ratio)}")
            cells.append(el("rect", title, x=label + j * cw, y=i * ch, **box, fill=_colour(ratio)))
    names = [
        el("text", name[-28:], x=2, y=i * ch + 12, font_size=11) for i, name in enumerate(layers)
    ]
    axis = el("text", "checkpoints (step) ->", x=label, **foot)
    legend = el("text", "blue 1e-7 .. green 1e-3 .. red 1e1", x=label + 160, **foot)
    return svg([*cells, *names, axis, legend], width, height, "update ratio per layer and step")


def loss_chart(
    curves: Sequence[tuple[Sequence[float | None], str]],
    *,
    label: str = "loss per step",
    reference: float | None = None,
    nan_ticks: bool = False,
    height: int = 220,
) -> Html:
    """An `<svg>` of each (losses, colour) curve over the steps, `label` its accessible name.

    A NaN/Inf loss is left out of its curve (with `nan_ticks`, a red tick marks it);
    `reference` draws a dashed line (the trivial loss) and keeps 0 and it in the range.
    """
    finite = [v for values, _ in curves for v in values if v is not None and math.isfinite(v)]
    steps = max((len(values) for values, _ in curves), default=0)
    parts: list[Html] = []
    if finite:
        low, high = min(finite), max(finite)
        if reference is not None:
            low, high = min(low, 0.0), max(high, reference)
        span = high - low or 1.0
        n = max(steps - 1, 1)

        def x(i: int) -> str:
            return f"{PAD + (WIDTH - 2 * PAD) * i / n:.1f}"

        def y(v: float) -> str:
            return f"{height - PAD - (height - 2 * PAD) * (v - low) / span:.1f}"

        for values, colour in curves:
            points = " ".join(
                f"{x(i)},{y(v)}" for i, v in enumerate(values) if v is not None and math.isfinite(v)
            )
            if points:
                parts.append(el("polyline", points=points, fill="none", stroke=colour,
                                stroke_width=1.5))  # fmt: skip
            if nan_ticks:
                parts += [
                    el("line", x1=x(i), x2=x(i), y1=PAD, y2=height - PAD, stroke=RED)
                    for i, v in enumerate(values)
                    if v is None or not math.isfinite(v)
                ]
        if reference is not None:
            parts.append(el("line", x1=PAD, x2=WIDTH - PAD, y1=y(reference), y2=y(reference),
                            stroke="#888", stroke_dasharray="4 4"))  # fmt: skip
        parts.append(el("text", number(high), x=2, y=PAD, font_size=11))
        parts.append(el("text", number(low), x=2, y=height - PAD, font_size=11))
    parts.append(el("text", f"step 1 .. {steps}", x=PAD, y=height - 8, font_size=11))
    return svg(parts, WIDTH, height, label)


BLUE_RGB, GREEN_RGB, RED_RGB = (30, 90, 200), (30, 210, 70), (220, 50, 40)  # the map's stops


def _colour(ratio: float | None) -> str:
    """log10(ratio) from -7 (blue) through -3 (green) to 1 (red); grey when missing."""
    if ratio is None or not math.isfinite(ratio) or ratio <= 0:
        return "#d8dee4"
    t = min(max((math.log10(ratio) + 7) / 8, 0.0), 1.0)
    low, high, a = (BLUE_RGB, GREEN_RGB, 2 * t) if t < 0.5 else (GREEN_RGB, RED_RGB, 2 * t - 1)
    return "#" + "".join(f"{int(x + (y - x) * a):02x}" for x, y in zip(low, high, strict=True))
