"""Reports that show themselves in a notebook: `_repr_html_` on every report dataclass.

The HTML comes from the render stage, which sits above this one; the package installs the
renderer when it is imported (`layergrad/__init__.py`), so no stage imports upwards.
"""

from __future__ import annotations

from collections.abc import Callable

_html: list[Callable[[object], str]] = []


def install_html_renderer(render: Callable[[object], str]) -> None:
    """Set the function that turns a report into a notebook's HTML."""
    _html[:] = [render]


class NotebookDisplay:
    """Mixin: Jupyter and IPython call `_repr_html_` to show a report as its HTML page."""

    __slots__ = ()

    def _repr_html_(self) -> str | None:
        return _html[0](self) if _html else None
