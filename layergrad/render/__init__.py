"""Renderers: one module per command, each with one function per output format.

`render(command, fmt, value)` picks the function; adding a format means adding it to
`vocab.OutputFormat`, to `FUNCTIONS` here, and one function to each command's module.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from layergrad.vocab import OutputFormat

COMMANDS = ("inspect", "scan", "check", "layers", "diff")
FUNCTIONS = {
    OutputFormat.TABLE: "table",
    OutputFormat.JSON: "as_json",
    OutputFormat.MARKDOWN: "markdown",
}

Renderer = Callable[..., str]


def renderer(command: str, fmt: OutputFormat) -> Renderer:
    """The function that renders `command`'s report in `fmt`."""
    module = importlib.import_module(f"layergrad.render.{command}")
    function: Renderer = getattr(module, FUNCTIONS[fmt])
    return function


def render(
    command: str,
    fmt: OutputFormat,
    value: Any,
    *,
    color: bool = False,
    width: int | None = 100,
    **options: Any,
) -> str:
    """`command`'s report `value` as text in format `fmt` (colour and width for tables).

    `options` are the command's own rendering options (`show_all` for `diff`).
    """
    return renderer(command, fmt)(value, color=color, width=width, **options)
