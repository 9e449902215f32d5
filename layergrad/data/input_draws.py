"""How a random float input is drawn when the model preprocesses its own inputs: the raw range
a `Rescaling` maps onto [0, 1] (pixels 0-255), the statistics an adapted `Normalization` was
fitted to."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from layergrad.core.tf_types import KerasModel
from layergrad.data.input_kinds import input_consumers


@dataclass(frozen=True)
class InputDraw:
    """How a random float input is drawn when the model preprocesses its own inputs.

    `kind` "uniform" draws from [a, b); "normal" from mean a, standard deviation b (per
    channel: the last axis). `why` says which layer asked for it.
    """

    kind: str
    a: tuple[float, ...]
    b: tuple[float, ...]
    why: str

    def describe(self, name: str) -> str:
        """`image uniform 0-255 (Rescaling 'rescaling' expects raw pixels)`."""
        if self.kind == "uniform":
            return f"{name} uniform {self.a[0]:g}-{self.b[0]:g} ({self.why})"
        return f"{name} normal around the adapted mean ({self.why})"


def drawn(rng: np.random.Generator, shape: tuple[int, ...], draw: InputDraw) -> np.ndarray:
    a, b = np.asarray(draw.a), np.asarray(draw.b)
    if draw.kind == "uniform":
        return a + (b - a) * rng.random(shape)
    return a + b * rng.standard_normal(shape)


PIXELS = 255.0  # a Rescaling that maps [0, 255] onto [0, 1] or [-1, 1] expects raw pixels


def preprocessing_draws(model: KerasModel) -> dict[str, InputDraw]:
    """For each float input whose first layer preprocesses it, the range the model expects.

    `Rescaling(scale, offset)` with 0 < scale < 1 maps raw x to x * scale + offset; the raw
    range is the one mapped onto [offset, 1] (0-255 for `1/255` and for `1/127.5, -1`). An
    adapted `Normalization` expects its own mean and variance. keras.applications models
    that preprocess inside the model start with one of these.
    """
    out: dict[str, InputDraw] = {}
    for input_name, layer in input_consumers(model):
        kind = type(layer).__name__
        ref = f"{kind} '{layer.name}'"
        if kind == "Rescaling":
            scale, offset = _scalar(layer.scale), _scalar(layer.offset)
            if scale is None or offset is None or not 0 < scale < 1 or offset >= 1:
                continue
            high = (1 - offset) / scale
            high = PIXELS if abs(high - PIXELS) < 1 else high
            out[input_name] = InputDraw(
                "uniform", (0.0,), (float(high),), f"{ref} expects raw values"
            )
        elif kind == "Normalization" and not getattr(layer, "invert", False):
            mean, variance = getattr(layer, "mean", None), getattr(layer, "variance", None)
            if mean is None or variance is None:
                continue
            m = np.asarray(mean, dtype=np.float64).reshape(-1)
            v = np.asarray(variance, dtype=np.float64).reshape(-1)
            if not m.size or (np.all(m == 0) and np.all(v == 1)) or np.any(v < 0):
                continue
            out[input_name] = InputDraw(
                "normal",
                tuple(float(x) for x in m),
                tuple(float(x) for x in np.sqrt(v)),
                f"{ref} is adapted to mean {_short(m)}, std {_short(np.sqrt(v))}",
            )
    return out


def _scalar(value: object) -> float | None:
    array = np.asarray(value, dtype=np.float64).reshape(-1)
    return float(array[0]) if array.size and np.all(array == array[0]) else None


def _short(values: np.ndarray) -> str:
    shown = ", ".join(f"{x:.3g}" for x in values[:3])
    return f"[{shown}{', ...' if values.size > 3 else ''}]" if values.size > 1 else shown
