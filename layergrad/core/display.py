"""Reports that show themselves: `_repr_html_` in a notebook, a short text for `print`.

The HTML and the text come from the render stage, which sits above this one; the package
installs the renderers when it is imported (`layergrad/__init__.py`), so no stage imports
upwards.
"""

from __future__ import annotations

from collections.abc import Callable

_html: list[Callable[[object], str]] = []
_text: list[Callable[[object], str]] = []


def install_renderers(html: Callable[[object], str], text: Callable[[object], str]) -> None:
    """Set the functions that turn a report into a notebook's HTML and its short text."""
    _html[:], _text[:] = [html], [text]


class NotebookDisplay:
    """Mixin: Jupyter and IPython call `_repr_html_` to show a report as its HTML page;
    `print(report)` and the REPL show the first lines of its table (plain text, no colour),
    not the fields of the dataclass (a subclass is declared with `repr=False`)."""

    __slots__ = ()

    def _repr_html_(self) -> str | None:
        return _html[0](self) if _html else None

    def __str__(self) -> str:
        if _text:
            try:
                return _text[0](self)
            except Exception:  # showing a report must never raise
                pass
        return f"<{type(self).__name__}>"

    def __repr__(self) -> str:
        return str(self)
