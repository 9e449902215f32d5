"""Renderers: one module per command, each with one function per output format.

`render(report, fmt, value)` picks the function; adding a format means adding it to
`vocab.OutputFormat`, to `FUNCTIONS` here, and one function to each report's module. A report
is what a command prints: `scan --wrt weights` prints a `weights` report.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from layergrad.core.vocab import OutputFormat

REPORTS = ("inspect", "scan", "weights", "check", "layers", "diff", "fit", "fix")
FUNCTIONS = {
    OutputFormat.TABLE: "table",
    OutputFormat.JSON: "as_json",
    OutputFormat.MARKDOWN: "markdown",
    OutputFormat.HTML: "html",
}

Renderer = Callable[..., str]


def renderer(report: str, fmt: OutputFormat) -> Renderer:
    """The function that renders a `report` (one of REPORTS) in `fmt`."""
    module = importlib.import_module(f"layergrad.render.{report}")
    function: Renderer = getattr(module, FUNCTIONS[fmt])
    return function


def render(
    report: str,
    fmt: OutputFormat,
    value: object,
    *,
    color: bool = False,
    width: int | None = 100,
    **options: object,
) -> str:
    """A `report` (one of REPORTS) `value` as text in format `fmt` (colour, width for tables).

    `options` are the report's own rendering options (`show_all` for `diff`). Every text
    format but JSON (whose encoder escapes strings exactly) sees the report with its strings
    made `escape.visible`: no name can move the cursor, reorder a line or break markup.
    """
    function = renderer(report, fmt)
    module = importlib.import_module(f"layergrad.render.{report}")
    if fmt != OutputFormat.JSON and not getattr(module, "SCRUBS_ITSELF", False):
        from layergrad.render.escape import scrubbed

        value = scrubbed(value)
    return function(value, color=color, width=width, **options)
