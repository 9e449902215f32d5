"""A report as notebook HTML: its self-contained page, isolated in a sandboxed frame.

The page keeps its own style, script and content security policy inside the frame, so a
notebook's styles do not reach it and nothing in it reaches the notebook.
"""

from __future__ import annotations

import html

from layergrad.core.fit_results import FitReport
from layergrad.core.results import InspectReport, ScanReport, WeightScanReport
from layergrad.core.vocab import OutputFormat
from layergrad.diagnose.regressions import DiffReport
from layergrad.files.layer_listing import LayerListing
from layergrad.render import render

REPORT_OF = {
    InspectReport: "inspect",
    ScanReport: "scan",
    WeightScanReport: "weights",
    DiffReport: "diff",
    LayerListing: "layers",
    FitReport: "fit",
}
FRAME_HEIGHT = 480  # pixels; the frame scrolls past it
TEXT_LINES = 12  # `print(report)` shows the table's first lines


def _render(report: object, fmt: OutputFormat, view: str) -> str:
    """The report in `fmt`; a TypeError naming the `view` for an object that is no report."""
    name = REPORT_OF.get(type(report))
    if name is None:
        raise TypeError(f"no {view} view for {type(report).__name__}")
    return render(name, fmt, report)


def notebook_html(report: object) -> str:
    """The report's HTML page inside a sandboxed `<iframe srcdoc>`.

    Example:
        >>> notebook_html(object())
        Traceback (most recent call last):
        ...
        TypeError: no notebook view for object
    """
    page = _render(report, OutputFormat.HTML, "notebook")
    return (
        f'<iframe sandbox="allow-scripts" srcdoc="{html.escape(page, quote=True)}" '
        f'style="width: 100%; height: {FRAME_HEIGHT}px; border: 0"></iframe>'
    )


def short_text(report: object) -> str:
    """The first lines of the report's table, plain text (what `print(report)` shows); the
    CLI's `--format` or `layergrad.render.render` gives the whole report. A training run
    (`FitReport`) shows its facts and every finding, without the layers' table.

    Example:
        >>> short_text(object())
        Traceback (most recent call last):
        ...
        TypeError: no text view for object
    """
    if isinstance(report, FitReport):  # its facts and every finding, whatever their number
        text = render("fit", OutputFormat.TABLE, report, layers=False)
        return "\n".join(ln.rstrip() for ln in text.splitlines())
    lines = [ln.rstrip() for ln in _render(report, OutputFormat.TABLE, "text").splitlines()]
    lines = [ln for ln in lines if ln.strip()]
    if len(lines) <= TEXT_LINES:
        return "\n".join(lines)
    more = len(lines) - TEXT_LINES
    return "\n".join([*lines[:TEXT_LINES], f"... {more} more line{'s' if more > 1 else ''}"])
