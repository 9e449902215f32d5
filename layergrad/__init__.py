"""layergrad: how much does one Keras layer's output move when an earlier one moves?

The public API. Import from here, never from a module path: the stages underneath may move.

>>> import layergrad
>>> sorted(layergrad.Status.__members__)
['NONE', 'NONFINITE', 'OK', 'ZERO']

Importing layergrad does not import TensorFlow; the command functions load it when called.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from layergrad.core.display import install_renderers
from layergrad.core.errors import (
    DataError,
    InputError,
    LayergradError,
    LayerNotFound,
    LoadError,
    OutputError,
    UnsafeModelError,
    UsageError,
)
from layergrad.core.probe_options import ProbeOptions
from layergrad.core.vocab import (
    CauseCode,
    Change,
    Finding,
    Flag,
    JacobianMethod,
    Measure,
    OutputFormat,
    Status,
    Wrt,
)

if TYPE_CHECKING:
    from layergrad.commands.api import inspect_model, scan_model
    from layergrad.commands.api import scan_weights_model as scan_weights
    from layergrad.commands.check.check_files import check_files
    from layergrad.commands.diff import diff_models
    from layergrad.commands.fix.repair import FixOptions, fix_model
    from layergrad.training.monitor import GradientMonitor

__version__ = "0.1.0"

# Public name -> (module, attribute), imported on first use so that `import layergrad` stays light.
_LAZY = {
    "inspect_model": ("layergrad.commands.api", "inspect_model"),
    "scan_model": ("layergrad.commands.api", "scan_model"),
    "scan_weights": ("layergrad.commands.api", "scan_weights_model"),
    "check_files": ("layergrad.commands.check.check_files", "check_files"),
    "diff_models": ("layergrad.commands.diff", "diff_models"),
    "fix_model": ("layergrad.commands.fix.repair", "fix_model"),
    "FixOptions": ("layergrad.commands.fix.repair", "FixOptions"),
    "GradientMonitor": ("layergrad.training.monitor", "GradientMonitor"),
}

__all__ = [
    "CauseCode",
    "Change",
    "DataError",
    "Finding",
    "FixOptions",
    "Flag",
    "GradientMonitor",
    "InputError",
    "JacobianMethod",
    "LayerNotFound",
    "LayergradError",
    "LoadError",
    "Measure",
    "OutputError",
    "OutputFormat",
    "ProbeOptions",
    "Status",
    "UnsafeModelError",
    "UsageError",
    "Wrt",
    "__version__",
    "check_files",
    "diff_models",
    "fix_model",
    "inspect_model",
    "scan_model",
    "scan_weights",
]


def _notebook_html(report: object) -> str:
    from layergrad.render.notebook import notebook_html

    return notebook_html(report)


def _short_text(report: object) -> str:
    from layergrad.render.notebook import short_text

    return short_text(report)


# reports show as HTML in Jupyter (`_repr_html_`), and print(report) as the first lines of
# their table
install_renderers(_notebook_html, _short_text)


def __getattr__(name: str) -> object:
    """The command functions, imported when first asked for (PEP 562)."""
    try:
        module, attribute = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'layergrad' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
