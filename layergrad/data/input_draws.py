"""How a random input is drawn when the model preprocesses its own inputs: the raw range a
`Rescaling` maps onto [0, 1] (pixels 0-255), the statistics an adapted `Normalization` was
fitted to, the ids an `IntegerLookup` holds in its vocabulary (years, product codes: ids from
a numeric range would mostly be out of vocabulary, an error for `num_oov_indices=0`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from layergrad.core.tf_types import KerasLayer, KerasModel
from layergrad.data.input_kinds import class_names, input_consumers


@dataclass(frozen=True)
class InputDraw:
    """How a random float input is drawn when the model preprocesses its own inputs.

    `kind` "uniform" draws from [a, b); "normal" from mean a, standard deviation b (per
    channel: the last axis); "choice" one of the ids in a (an `IntegerLookup`'s vocabulary).
    `why` says which layer asked for it.
    """

    kind: str
    a: tuple[float, ...]
    b: tuple[float, ...]
    why: str

    def describe(self, name: str) -> str:
        """`image uniform 0-255 (Rescaling 'rescaling' expects raw pixels)`."""
        if self.kind == "uniform":
            return f"{name} uniform {self.a[0]:g}-{self.b[0]:g} ({self.why})"
        if self.kind == "choice":
            return f"{name}: ids drawn from {self.why}"
        return f"{name} normal around the adapted mean ({self.why})"


def drawn(rng: np.random.Generator, shape: tuple[int, ...], draw: InputDraw) -> np.ndarray:
    a, b = np.asarray(draw.a), np.asarray(draw.b)
    if draw.kind == "choice":
        return a[rng.integers(0, a.size, shape)]
    if draw.kind == "uniform":
        return a + (b - a) * rng.random(shape)
    return a + b * rng.standard_normal(shape)


PIXELS = 255.0  # a Rescaling that maps [0, 255] onto [0, 1] or [-1, 1] expects raw pixels
MAX_IDS_DRAWN = 20_000  # of an IntegerLookup's vocabulary: a probe needs variety, not every id


def preprocessing_draws(model: KerasModel) -> dict[str, InputDraw]:
    """For each input whose first layer preprocesses it, the values the model expects.

    `Rescaling(scale, offset)` with 0 < scale < 1 maps raw x to x * scale + offset; the raw
    range is the one mapped onto [offset, 1] (0-255 for `1/255` and for `1/127.5, -1`). An
    adapted `Normalization` expects its own mean and variance. keras.applications models
    that preprocess inside the model start with one of these. An `IntegerLookup` (not
    inverted) expects the ids of its vocabulary.
    """
    out: dict[str, InputDraw] = {}
    for input_name, layer in input_consumers(model):
        kind = type(layer).__name__
        ref = f"{kind} '{layer.name}'"
        if "IntegerLookup" in class_names(layer) and not getattr(layer, "invert", False):
            ids = _lookup_ids(layer)
            if ids and input_name not in out:
                out[input_name] = InputDraw(
                    "choice", ids, (), f"the {len(ids):,}-id vocabulary of {ref}"
                )
        elif kind == "Rescaling":
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


def _lookup_ids(layer: KerasLayer) -> tuple[int, ...]:
    """The ids of an `IntegerLookup`'s vocabulary, without its mask and out-of-vocabulary ids
    (empty when it holds none that could be read)."""
    get = getattr(layer, "get_vocabulary", None)
    try:
        vocabulary = list(get()) if get is not None else []
    except Exception:  # never adapted, or its vocabulary file was not kept
        return ()
    skip = {getattr(layer, "mask_token", None), getattr(layer, "oov_token", None)}
    ids = []
    for token in vocabulary[: MAX_IDS_DRAWN + len(skip)]:
        try:
            value = int(token)
        except (TypeError, ValueError):
            continue
        if value not in skip:
            ids.append(value)
    return tuple(ids[:MAX_IDS_DRAWN])


def _scalar(value: object) -> float | None:
    array = np.asarray(value, dtype=np.float64).reshape(-1)
    return float(array[0]) if array.size and np.all(array == array[0]) else None


def _short(values: np.ndarray) -> str:
    shown = ", ".join(f"{x:.3g}" for x in values[:3])
    return f"[{shown}{', ...' if values.size > 3 else ''}]" if values.size > 1 else shown
