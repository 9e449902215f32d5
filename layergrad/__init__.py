"""layergrad: how much does one Keras layer's output move when an earlier one moves?"""

from __future__ import annotations

from typing import TYPE_CHECKING

__version__ = "0.1.0"

if TYPE_CHECKING:
    from layergrad.training.monitor import GradientMonitor

# Names whose modules import TensorFlow: loaded on first use, so `import layergrad` stays light.
_LAZY = {"GradientMonitor": "layergrad.training.monitor"}


def __getattr__(name: str) -> object:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'layergrad' has no attribute {name!r}")


__all__ = ["GradientMonitor", "__version__"]
