"""What an output's values do on the probe batch, for heads whose activation the file does not
show (a custom layer, a Lambda, a nested model): probabilities that sum to one per sample,
values in [0, 1], non-negative values (above 1, or with many exact zeros: a ReLU), or values
of either sign. NumPy only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from layergrad.core.vocab import with_article

SUM_TOLERANCE = 1e-3  # a row of probabilities sums to 1 within this
MIN_VALUES = 4  # fewer values say too little about a range
SUBCLASSED = "<subclassed>"  # the layer class of an output of a model that shows no layers
# this share of the values exactly 0, none exactly 1, all >= 0: a ReLU (about half its outputs
# are 0 before training). A sigmoid reaches exactly 0 only at logits below -88, and then 1 as
# well on the other side; a hard sigmoid clips at both ends too.
RELU_ZEROS = 0.2


@dataclass(frozen=True)
class Observed:
    """The kind of values one output produced and their range. `kind` is what the loss rules
    judge: "softmax" (rows that sum to one: no linear head does that by chance), "relu" and
    "linear" (values outside [0, 1], or non-negative with many exact zeros: certainly not
    probabilities), or "unit_range" (values in [0, 1]: a sigmoid, or a linear head whose few
    outputs happen to fall there; only the categorical losses fail on it, when its rows do not
    sum to one: then it is no distribution, whatever made it)."""

    kind: str
    low: float
    high: float
    layer_class: str = ""
    zeros: float = 0.0  # the share of the values that are exactly 0
    units: int = 1  # the width of the last axis
    inner: str = ""  # the layer inside that returned the values and says `kind` itself

    def describe(self) -> str:
        """In words, for the messages: what the file does not say and what the probe saw."""
        seen = {
            "softmax": "sum to 1 per sample, like a softmax",
            "unit_range": "lie in [0, 1]"
            + (" without summing to 1 per sample," if self.units > 1 else ",")
            + " like a sigmoid",
            "relu": (
                "are non-negative and reach above 1, like a ReLU"
                if self.high > 1
                else f"are non-negative and {self.zeros:.0%} of them exactly 0, like a ReLU"
            ),
            "linear": "take either sign, like a linear layer",
        }.get(self.kind, f"look like {with_article(self.kind)}")
        span = f"{self.low:.3g} to {self.high:.3g}"
        who = f"custom layer {self.layer_class}" if self.layer_class else "a layer"
        if self.layer_class in ("Lambda", "TFOpLambda"):
            who = "Lambda layer"
        if self.inner and self.layer_class == SUBCLASSED:
            return f"layer of a subclassed model that applies {self.kind} (probe: {span})"
        if self.inner:
            return (
                f"{who} whose output comes from its inner layer {self.inner}, which applies "
                f"{self.kind} (probe: {span})"
            )
        if self.layer_class == SUBCLASSED:
            return f"output of a subclassed model; on the probe its values {seen} ({span})"
        return f"{who} that does not say its activation; on the probe its outputs {seen} ({span})"


def observe(values: np.ndarray, layer_class: str = "") -> Observed | None:
    """The kind of `values` (batch axis first), None when they say too little (too few,
    not finite, not floating point)."""
    v = np.asarray(values)
    if v.dtype.kind != "f" or v.size < MIN_VALUES or v.ndim < 1 or not np.all(np.isfinite(v)):
        return None
    v = v.astype(np.float64)
    low, high = float(v.min()), float(v.max())
    zeros = float(np.mean(v == 0))
    if low < 0:
        kind = "linear"
    elif high > 1:
        kind = "relu"
    elif _sums_to_one(v):
        kind = "softmax"
    elif zeros >= RELU_ZEROS and not np.any(v == 1):
        kind = "relu"
    else:
        kind = "unit_range"
    units = int(v.shape[-1]) if v.ndim >= 2 else 1
    return Observed(kind, low, high, layer_class, zeros, units)


def _sums_to_one(v: np.ndarray) -> bool:
    """Whether the values sum to 1 along some axis but the batch's (a softmax over the last
    axis, or over the channels of a channels-first map)."""
    return any(
        v.shape[axis] > 1 and bool(np.all(np.abs(v.sum(axis=axis) - 1) <= SUM_TOLERANCE))
        for axis in range(1, v.ndim)
    )
