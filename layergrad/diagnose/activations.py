"""What a layer's activation function is, and how much of its output is pinned at a bound."""

from __future__ import annotations

import numpy as np

from layergrad.core.tf_types import KerasLayer

SATURATION_EPS = 1e-6  # a sigmoid / tanh output this close to its bound is pinned


def activation_name(layer: KerasLayer) -> str | None:
    """'relu', 'sigmoid', 'tanh', 'softmax' for layers that apply one, else None."""
    if layer is None:
        return None
    class_name = type(layer).__name__
    if class_name in ("ReLU", "Softmax"):
        return class_name.lower()
    name = getattr(getattr(layer, "activation", None), "__name__", None)
    return name if name in ("relu", "sigmoid", "tanh", "softmax") else None


def saturated_fraction(value: np.ndarray, kind: str) -> float:
    """Fraction of sigmoid / tanh outputs (softmax rows) pinned at their bounds."""
    if kind == "sigmoid":
        pinned = (value <= SATURATION_EPS) | (value >= 1 - SATURATION_EPS)
    elif kind == "tanh":
        pinned = np.abs(value) >= 1 - SATURATION_EPS
    else:
        pinned = np.max(value, axis=-1) >= 1 - SATURATION_EPS
    return float(np.mean(pinned))
