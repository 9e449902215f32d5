"""A chart as a file: the `--plot` path checked before any work, the figure written as a
reproducible .png, .svg or .pdf (no date, no version), or inlined as `<svg>` in a page.

matplotlib is imported inside the functions, never at module import.
"""

from __future__ import annotations

import io
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from layergrad.core.errors import UsageError
from layergrad.files import outputs

if TYPE_CHECKING:
    from matplotlib.figure import Figure

PLOT_FORMATS = (".png", ".svg", ".pdf")


def check_plot_path(
    path: str | os.PathLike[str],
    protected: Sequence[str | os.PathLike[str] | None] = (),
    *,
    force: bool = False,
) -> str:
    """Validate a `--plot` path before any work, returned as a string: a known extension (it
    chooses the format; else UsageError), a target `outputs` accepts (never one of the
    `protected` inputs of the run, a directory, or without `force` a file that is not a chart;
    else OutputError)."""
    text = os.fspath(path)
    ext = os.path.splitext(text)[1].lower()
    if ext not in PLOT_FORMATS:
        raise UsageError(
            f"--plot {text}: unknown chart format {ext or '(no extension)'!r}; "
            f"use a file ending in {', '.join(PLOT_FORMATS)}"
        )
    reads = [None if p is None else os.fspath(p) for p in protected]
    outputs.check_target(text, "--plot", "chart", reads, force=force)
    return text


def save_figure(
    fig: Figure,
    path: str | os.PathLike[str],
    protected: Sequence[str | os.PathLike[str] | None] = (),
    *,
    force: bool = False,
) -> str:
    """Write a figure as `figure_bytes` makes it, the format following the extension, through
    `outputs.write_file` (as `check_plot_path` allows; InputError for a missing folder).
    Returns the format: png, svg or pdf."""
    text = check_plot_path(path)
    fmt = os.path.splitext(text)[1].lower().lstrip(".")
    outputs.write_file(text, "--plot", "chart", figure_bytes(fig, fmt), protected, force=force)
    return fmt


def figure_bytes(fig: Figure, fmt: str) -> bytes:
    """The figure as a reproducible ``png``, ``svg`` or ``pdf`` file (no date, no version)."""
    metadata: dict[str, None] = {
        "png": {"Software": None},
        "svg": {"Date": None},
        "pdf": {"CreationDate": None, "Producer": None},
    }[fmt]
    import matplotlib

    buffer = io.BytesIO()
    with matplotlib.rc_context({"svg.hashsalt": "layergrad"}):
        fig.savefig(buffer, format=fmt, dpi=150, metadata=metadata)
    return buffer.getvalue()


def figure_svg(fig: Figure) -> str:
    """The figure as an `<svg>` element for inlining in HTML (text kept as text, no prolog).

    matplotlib escapes text in its SVG output, so names read from a model file stay text.
    """
    import matplotlib

    with matplotlib.rc_context({"svg.fonttype": "none"}):
        svg = figure_bytes(fig, "svg").decode()
    svg = svg[svg.index("<svg") :]
    # The RDF metadata names matplotlib's web site; a page that fetches nothing carries no URL.
    start, end = svg.find("<metadata>"), svg.find("</metadata>")
    if start != -1 and end != -1:
        svg = svg[:start] + svg[end + len("</metadata>") :]
    return svg
