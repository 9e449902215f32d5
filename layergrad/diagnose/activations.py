"""What a layer's activation function is, and how much of its output is pinned at a bound."""

from __future__ import annotations

import numpy as np

from layergrad.core.tf_types import KerasLayer
from layergrad.model.head_forms import activation_named

SATURATION_EPS = 1e-6  # a sigmoid / tanh output this close to its bound is pinned


def activation_name(layer: KerasLayer) -> str | None:
    """'relu', 'sigmoid', 'tanh', 'softmax' for layers that apply one, else None: an
    activation layer (``ReLU``, ``Softmax``), or a layer's ``activation`` given by name, as a
    function (``keras.activations.relu``, ``tf.nn.softmax``) or as a layer instance."""
    own = type(layer).__name__ in ("ReLU", "Softmax")  # the layer is its activation
    function = layer if own else getattr(layer, "activation", None)
    if function is None:
        return None
    name = activation_named(getattr(function, "__name__", None) or type(function).__name__)
    return name if name in ("relu", "sigmoid", "tanh", "softmax") else None


def saturated_fraction(value: np.ndarray, kind: str, eps: float = SATURATION_EPS) -> float:
    """Fraction of sigmoid / tanh outputs (softmax rows) pinned at their bounds: within `eps`
    of them (a softmax row's largest within `eps` of 1)."""
    if not value.size:
        return 0.0
    if kind == "sigmoid":
        pinned = (value <= eps) | (value >= 1 - eps)
    elif kind == "tanh":
        pinned = np.abs(value) >= 1 - eps
    else:
        pinned = np.max(value, axis=-1) >= 1 - eps
    return float(np.mean(pinned))
