"""What an output's values do on the probe batch, for heads whose activation the file does not
show (a custom layer, a Lambda, a nested model): probabilities that sum to one per sample,
values in [0, 1], non-negative values, or values of either sign. NumPy only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SUM_TOLERANCE = 1e-3  # a row of probabilities sums to 1 within this
MIN_VALUES = 4  # fewer values say too little about a range


@dataclass(frozen=True)
class Observed:
    """The kind of values one output produced and their range. `kind` is what the loss rules
    judge: "softmax" (rows that sum to one: no linear head does that by chance), "relu" and
    "linear" (values outside [0, 1]: certainly not probabilities), or "unit_range" (values in
    [0, 1]: a sigmoid, or a linear head whose few outputs happen to fall there; no rule fails
    on it)."""

    kind: str
    low: float
    high: float
    layer_class: str = ""

    def describe(self) -> str:
        """In words, for the messages: what the file does not say and what the probe saw."""
        seen = {
            "softmax": "sum to 1 per sample, like a softmax",
            "unit_range": "lie in [0, 1], like a sigmoid",
            "relu": "are non-negative and reach above 1, like a ReLU",
            "linear": "take either sign, like a linear layer",
        }[self.kind]
        who = f"custom layer {self.layer_class}" if self.layer_class else "a layer"
        if self.layer_class in ("Lambda", "TFOpLambda"):
            who = "Lambda layer"
        return (
            f"{who} that does not say its activation; on the probe its outputs "
            f"{seen} ({self.low:.3g} to {self.high:.3g})"
        )


def observe(values: np.ndarray, layer_class: str = "") -> Observed | None:
    """The kind of `values` (batch axis first), None when they say too little (too few,
    not finite, not floating point)."""
    v = np.asarray(values)
    if v.dtype.kind != "f" or v.size < MIN_VALUES or v.ndim < 1 or not np.all(np.isfinite(v)):
        return None
    v = v.astype(np.float64)
    low, high = float(v.min()), float(v.max())
    if low < 0:
        kind = "linear"
    elif high > 1:
        kind = "relu"
    elif v.ndim >= 2 and v.shape[-1] > 1 and np.all(np.abs(v.sum(axis=-1) - 1) <= SUM_TOLERANCE):
        kind = "softmax"
    else:
        kind = "unit_range"
    return Observed(kind, low, high, layer_class)
