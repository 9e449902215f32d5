"""The loss chart of the `fit` and `fix` pages: loss curves per step as inline SVG.

One or more curves (each a colour) share the axes; a step whose loss is NaN/Inf is left out of
its curve (and, with `nan_ticks`, marked by a red tick); `reference` draws a dashed line (the
trivial loss of curves divided by it) and keeps 0 and it inside the range.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from layergrad.render.common import number
from layergrad.render.html_page import Html, el, svg

WIDTH, PAD = 720, 40
BLUE, RED = "#0b5cad", "#c62828"


def loss_chart(
    curves: Sequence[tuple[Sequence[float | None], str]],
    *,
    label: str = "loss per step",
    reference: float | None = None,
    nan_ticks: bool = False,
    height: int = 220,
) -> Html:
    """An `<svg>` of each (losses, colour) curve over the steps, `label` its accessible name."""
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
