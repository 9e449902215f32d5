"""Renderers: one module per report (what a command prints: `scan --wrt weights` prints a
`weights` report), each with one function per output format, a `Format`. Adding a format means
adding it to `vocab.OutputFormat`, to `FUNCTIONS` here, and one function to each report's
module (or one to `SHARED`)."""

from __future__ import annotations

import importlib
from collections.abc import Callable

from layergrad.core.vocab import OutputFormat
from layergrad.render.common import json_document
from layergrad.render.escape import scrubbed

REPORTS = ("inspect", "scan", "weights", "check", "layers", "diff", "fit", "fix")
FUNCTIONS = {
    OutputFormat.TABLE: "table",
    OutputFormat.JSON: "as_json",
    OutputFormat.MARKDOWN: "markdown",
    OutputFormat.HTML: "html",
}

Format = Callable[..., str]  # (report, *, color, width, **options) -> text
as_json = json_document  # any report's JSON document, strict (a non-finite number is null)
SHARED: dict[OutputFormat, Format] = {OutputFormat.JSON: as_json}


def render(
    report: str,
    fmt: OutputFormat,
    value: object,
    *,
    color: bool = False,
    width: int | None = 100,
    **options: object,
) -> str:
    """A `report` (one of REPORTS) `value` as text in format `fmt` (colour, width for tables):
    the report module's function named in FUNCTIONS, else the one in SHARED.

    `options` are the report's own rendering options (`show_all` for `diff`). Every text
    format but JSON (whose encoder escapes strings exactly) sees the report with its strings
    made `escape.visible`: no name can move the cursor, reorder a line or break markup.
    """
    module = importlib.import_module(f"layergrad.render.{report}")
    function: Format = getattr(module, FUNCTIONS[fmt], None) or SHARED[fmt]
    if fmt != OutputFormat.JSON and not getattr(module, "SCRUBS_ITSELF", False):
        value = scrubbed(value)
    return function(value, color=color, width=width, **options)
