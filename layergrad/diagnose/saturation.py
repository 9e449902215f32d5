"""Initialisation scaled far up: a tanh / sigmoid layer whose kernel is drawn many times wider
than Keras's initialisers draw for its shape (the wider of Glorot and He), and whose units are
saturated for most of the probe batch.

Both must hold, on inputs at unit scale. A saturated unit passes almost no gradient
(tanh' = 1 - y^2 < 0.02 where |y| > 0.99), so the layers before it barely learn; an
update-ratio trend may not show it in a deep stack, since every saturated layer shrinks the
gradient about as much. The kernel's scale says it is the initialisation; a layer whose own
input is unscaled (mean |x| above `INPUT_SCALE`) is saturated by that input, which
`input_range` speaks of. A layer whose kernel was learnt that wide and still varies is left
alone; so are recurrent layers (their gates saturate by design) and layers whose kernel is not
their `kernel`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from layergrad.core.gradient_stats import mean_abs
from layergrad.core.tf_types import KerasLayer, KerasModel
from layergrad.diagnose.activations import activation_name, saturated_fraction
from layergrad.diagnose.locate import finite
from layergrad.engine.layer_calls import Recorded, unique_leaves
from layergrad.engine.trace import record_calls
from layergrad.model.layer_refs import iter_layers

KERNEL_FACTOR = 4.0  # a kernel this many times wider than Keras's initialisers draw: far up
INPUT_SCALE = 3.0  # mean |x| of a kernel layer's input above this: the input's scale, not its
SATURATED_SHARE = 0.5  # this share of a layer's outputs saturated on the probe: saturated
NEAR_BOUND = 0.01  # |tanh| within this of 1 (sigmoid of 0 or 1): saturated
RECURRENT = ("LSTM", "GRU", "RNN", "ConvLSTM")


@dataclass(frozen=True)
class SaturatedInit:
    """The first layer saturated by a kernel scaled far above the defaults: the layer with the
    kernel, the one applying the activation (the same, or an activation layer after it)."""

    layer: str
    activation_layer: str
    kind: str  # tanh or sigmoid
    factor: float  # kernel std / the widest default std for its shape (He or Glorot)
    saturated: float  # share of the outputs saturated on the probe

    def message(self) -> str:
        applied = (
            f"'{self.layer}'"
            if self.activation_layer == self.layer
            else f"'{self.activation_layer}' after '{self.layer}'"
        )
        return (
            f"exploding: {self.layer} (initialisation): its kernel's spread is {self.factor:.3g} "
            "times what Keras's initialisers (Glorot, He) draw for its shape, and "
            f"{self.saturated:.0%} of the {self.kind} outputs of {applied} are saturated on the "
            "probe, where they pass almost no gradient. Fix: the default kernel_initializer "
            "(glorot_uniform), or a smaller scale"
        )


def default_std(shape: Sequence[int]) -> float | None:
    """The widest std Keras's own kernel initialisers give a kernel of `shape`: He's
    sqrt(2 / fan_in), never narrower than Glorot's sqrt(2 / (fan_in + fan_out))."""
    if len(shape) < 2:
        return None
    receptive = math.prod(shape[:-2])
    fan_in, fan_out = shape[-2] * receptive, shape[-1] * receptive
    if fan_in + fan_out <= 0:
        return None
    return math.sqrt(2.0 / (fan_in if fan_in > 0 else fan_in + fan_out))


def _factor(layer: KerasLayer) -> float | None:
    kernel = getattr(layer, "kernel", None)
    if kernel is None or any(word in type(layer).__name__ for word in RECURRENT):
        return None
    try:
        array = np.asarray(kernel.numpy() if hasattr(kernel, "numpy") else kernel, np.float64)
    except (TypeError, ValueError):
        return None
    want = default_std(array.shape)
    if want is None or array.size < 4:
        return None
    return float(np.std(array)) / want


def saturated_init(
    model: KerasModel, arrays: Sequence[np.ndarray] | Recorded | None
) -> SaturatedInit | None:
    """The first layer (in call order) that a kernel scaled far up saturates on `arrays` (the
    probe batch, or its recorded forward pass `trace.record_calls`), None when there is
    none or the model fails on the batch."""
    recorded = record_calls(model, arrays) if isinstance(arrays, Sequence) else arrays
    if recorded is None:  # the forward check says why
        return None
    by_path = {path: layer for path, layer in iter_layers(model)}
    leaves = {path for _, path, _ in unique_leaves(iter_layers(model))}
    calls = [(c.path, c.outputs, c.args) for c in recorded.calls if c.path in leaves]
    made = {id(t): path for path, outs, _ in calls for t in outs}
    for path, outs, args in calls:
        layer = by_path.get(path)
        kind = activation_name(layer)
        if kind not in ("tanh", "sigmoid") or len(outs) != 1:
            continue
        if getattr(layer, "kernel", None) is not None:
            source: str | None = path
        elif type(layer).__name__ == "Activation":  # Dense -> Activation("tanh")
            source = _linear_source(args, made, by_path)
        else:  # a recurrent layer or another layer whose kernel is not `kernel`
            continue
        factor = _factor(by_path[source]) if source is not None else None
        if factor is None or factor < KERNEL_FACTOR or _unscaled(source, calls):
            continue
        value = np.asarray(outs[0], dtype=np.float64)
        share = saturated_fraction(value, kind, NEAR_BOUND) if finite(value) else 0.0
        if share >= SATURATED_SHARE:
            return SaturatedInit(source, path, kind, factor, share)  # type: ignore[arg-type]
    return None


def _linear_source(
    args: list[object], made: dict[int, str], by_path: dict[str, KerasLayer]
) -> str | None:
    """The layer with a kernel and no activation of its own whose output an activation layer
    takes (Dense -> Activation("tanh")), else None."""
    if len(args) != 1 or id(args[0]) not in made:
        return None
    path = made[id(args[0])]
    layer = by_path.get(path)
    if getattr(layer, "kernel", None) is None or activation_name(layer) is not None:
        return None
    own = getattr(layer, "activation", None)  # None, or a function: linear when it has none
    return path if getattr(own, "__name__", "linear") == "linear" else None


def _unscaled(path: str | None, calls: list[tuple[str, list[object], list[object]]]) -> bool:
    """Whether the layer at `path` takes an input of mean |x| above `INPUT_SCALE`: then the
    input saturates it, not the kernel (`input_range` speaks of unscaled inputs)."""
    for called, _, args in calls:
        if called == path and args:
            return mean_abs(np.asarray(args[0])) > INPUT_SCALE
    return False
