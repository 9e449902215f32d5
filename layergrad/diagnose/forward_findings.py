"""What the forward pass alone shows: non-finite activations, and outputs that never vary.

A model whose output is the same for every sample of the batch cannot learn anything from its
inputs: `Dense(1, activation="softmax")` always outputs 1.0, a saturated sigmoid head 0 or 1,
a ReLU layer dead for the whole batch 0, a layer whose weights are all zero its bias. The
place to fix is where the output first stops varying, found here from one trace.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from layergrad.core.gradient_stats import dead_fraction, mean_abs
from layergrad.core.results import ConstantOutput, InputRange
from layergrad.core.tf_types import KerasLayer
from layergrad.diagnose.activations import activation_name, saturated_fraction
from layergrad.diagnose.locate import finite, nearest_preds
from layergrad.engine.layer_calls import Activation
from layergrad.engine.trace import Trace
from layergrad.model.graph import ModelGraph
from layergrad.model.layer_refs import CallKey

CONSTANT_RTOL = 1e-6  # spread across the batch below this (relative to the values): constant
MIN_BATCH = 4  # fewer samples say too little: discrete layers often agree by chance
SATURATED = 0.99  # this share of a sigmoid / tanh layer's outputs pinned: saturated
UNSCALED = 10.0  # an input whose mean |x| is above this is not scaled (pixels 0-255, raw units)
FLOAT16_NORMAL = 6.1e-5  # float16's smallest normal number: below it, values lose their digits
PINNED = 0.5  # this share of the first activation's units dead or saturated: out of range
PIXEL_MAX = 16.0  # whole-number image values reaching above this: raw pixels (0-255, 0-65535)
RAW_SCALE = 100.0  # a feature whose root mean square (mean and spread) is above this: raw units
IMAGE_CHANNELS = (1, 3, 4)  # grey, RGB, RGBA
NORMALIZING = ("BatchNormalization", "LayerNormalization", "GroupNormalization")
# Layers that bring an input to unit scale before the first weight layer sees it: a
# BatchNormalization's moving statistics are learnt from the data in training (untrained they
# are 0 and 1, and the input passes unscaled), a Normalization's come from `adapt`, the others
# scale each sample, or by a fixed factor (`Rescaling`).
INPUT_NORMALIZING = frozenset({
    "BatchNormalization", "SyncBatchNormalization", "LayerNormalization", "GroupNormalization",
    "UnitNormalization", "RMSNormalization", "Normalization", "Rescaling",
})  # fmt: skip


def first_nonfinite(trace: Trace) -> Activation | None:
    """The first floating-point activation of a trace (execution order) that holds NaN / Inf."""
    return next((a for a in trace.activations if a.is_float and not finite(a.value)), None)


def is_constant(act: Activation) -> bool:
    """Whether a floating-point activation is the same for every sample (of at least 4)."""
    value = act.value
    if not act.is_float or value.ndim == 0 or value.shape[0] < MIN_BATCH or not finite(value):
        return False
    v = value.astype(np.float64).reshape(value.shape[0], -1)
    spread = float(np.max(v.max(axis=0) - v.min(axis=0))) if v.size else 0.0
    return spread <= CONSTANT_RTOL * max(1.0, float(np.max(np.abs(v))) if v.size else 0.0)


def constant_outputs(
    trace: Trace, graph: ModelGraph | None, layers: Mapping[str, KerasLayer]
) -> list[ConstantOutput]:
    """Every model output that is constant across the batch, with where and why it stopped."""
    found = []
    for i in dict.fromkeys(o for o in trace.outputs if o is not None):
        if is_constant(trace.activations[i]):
            start = _start(trace, graph, i)
            act = trace.activations[start]
            found.append(
                ConstantOutput(trace.activations[i].site.ref, act.site.ref, reason(act, layers))
            )
    return found


def _start(trace: Trace, graph: ModelGraph | None, i: int) -> int:
    """Walk back from activation `i` while every input is constant; the earliest such call."""
    index = {a.site.key: k for k, a in enumerate(trace.activations)}
    frontier, starts, seen = [i], [], set()
    while frontier:
        k = frontier.pop()
        if k in seen:
            continue
        seen.add(k)
        preds = _captured_preds(trace.activations[k].site.key, graph, index)
        if preds and all(is_constant(trace.activations[p]) for p in preds):
            frontier.extend(preds)
        else:
            starts.append(k)
    return min(starts)


def _captured_preds(key: CallKey, graph: ModelGraph | None, index: dict[CallKey, int]) -> list[int]:
    """The captured activations feeding call `key`, looking through uncaptured graph nodes."""
    if graph is None or not graph.preds:
        return []
    return [index[node] for node in nearest_preds(graph, key, index.__contains__)]


def reason(act: Activation, layers: Mapping[str, KerasLayer]) -> str:
    """Why a constant activation is constant, when its layer says so."""
    layer = layers.get(act.site.path)
    kind = activation_name(layer)
    value = act.value
    if kind == "softmax" and value.shape[-1] == 1:
        return "softmax_one_unit"
    if kind in ("sigmoid", "tanh") and saturated_fraction(value, kind) >= SATURATED:
        return "saturated"
    if kind == "relu" and dead_fraction(value) == 1.0:
        return "dead"
    kernel = getattr(layer, "kernel", None)
    if kernel is not None and not np.any(np.asarray(kernel.numpy())):
        return "zero_weights"
    if act.dtype == "float16" and value.size and np.all(np.abs(value) < FLOAT16_NORMAL):
        return "float16_underflow"  # its sums are below what float16 holds: rounded to 0
    return "constant"


def unscaled_input(
    trace: Trace, graph: ModelGraph | None, layers: Mapping[str, KerasLayer], pixels: bool = True
) -> InputRange | None:
    """Inputs far from unit scale that pin the first ReLU / sigmoid / tanh layer they feed;
    else (with `pixels`) raw pixels or raw units that reach the first layer with weights
    unscaled (`raw_input`)."""
    for inp in _float_inputs(trace):
        magnitude = mean_abs(inp.value)
        if magnitude <= UNSCALED:
            continue
        for act in trace.activations:
            kind = activation_name(layers.get(act.site.path))
            if kind is None or not _fed_by(graph, act, inp):
                continue
            value = act.value
            pinned = dead_fraction(value) if kind == "relu" else saturated_fraction(value, kind)
            if pinned >= PINNED and not normalized_first(trace, graph, layers, act, inp):
                return InputRange(inp.site.ref, magnitude, act.site.ref, kind, pinned)
            break  # the first activation this input feeds decides (unless normalised before it)
    if not pixels:
        return None
    return raw_input(trace, graph, layers)


def _float_inputs(trace: Trace) -> list[Activation]:
    """The model's floating-point inputs, as the trace captured them."""
    return [a for a in trace.activations if a.site.input_index is not None and a.is_float]


def feature_scale(value: np.ndarray) -> float:
    """The largest root mean square over the batch of one feature (the last axis) of `value`:
    sqrt(mean^2 + spread^2), large when its values sit far from 0 or vary widely."""
    if value.ndim == 0 or not value.size or not finite(value):
        return 0.0
    v = value.astype(np.float64).reshape(-1, value.shape[-1] if value.ndim > 1 else 1)
    return float(np.sqrt(np.mean(v * v, axis=0)).max())


def raw_input(
    trace: Trace, graph: ModelGraph | None, layers: Mapping[str, KerasLayer]
) -> InputRange | None:
    """An input of raw values that reaches the first layer with a kernel still raw, no
    normalising layer before or right after it: raw pixels (`_pixels`) reaching a convolution,
    whose kernels see inputs ~255 times larger than their initialisation is scaled for
    (`pinned`: their largest value; needs the graph), else a float feature of root mean square
    above `RAW_SCALE` (prices, years: `pinned` holds that largest root mean square). Read off
    the data, not the activations: a ReLU is never pinned by large inputs, so no saturation
    rule sees them."""
    for kind in ("pixels", "units") if graph is not None and graph.preds else ("units",):
        for inp in (a for a in _float_inputs(trace) if _raw(kind, a.value)):
            first = _first_kernel(trace, graph, layers, inp)
            if first is None:
                continue
            act, preds = first
            if kind == "pixels" and "Conv" not in type(layers.get(act.site.path)).__name__:
                continue
            reads = [p for p in preds if p.is_float or kind == "pixels"]
            if not reads or not all(_raw(kind, p.value) for p in reads):
                continue  # what reaches the layer was scaled (or turned into ids) on the way
            if graph is not None and _normalized_next(graph, act.site.key, layers):
                continue  # its output goes straight into a normalization layer
            value = inp.value.astype(np.float64)
            said = float(value.max()) if kind == "pixels" else feature_scale(value)
            return InputRange(inp.site.ref, mean_abs(value), act.site.ref, kind, said)
    return None


def _raw(kind: str, value: np.ndarray) -> bool:
    return _pixels(value) if kind == "pixels" else feature_scale(value) > RAW_SCALE


def _first_kernel(
    trace: Trace, graph: ModelGraph | None, layers: Mapping[str, KerasLayer], inp: Activation
) -> tuple[Activation, list[Activation]] | None:
    """The first call with a kernel the input `inp` reaches, with the captured activations it
    reads; None when a normalising layer comes before it (the first layer with a kernel
    decides). Layers without a kernel (an embedding, a lookup) are passed: what they give
    the layer is in its captured inputs."""
    index = {a.site.key: k for k, a in enumerate(trace.activations)}
    for act in trace.activations:
        layer = layers.get(act.site.path)
        if getattr(layer, "kernel", None) is None or not _fed_by(graph, act, inp):
            continue
        if normalized_first(trace, graph, layers, act, inp):
            return None
        preds = _captured_preds(act.site.key, graph, index)
        return act, [trace.activations[p] for p in preds] if graph and graph.preds else [inp]
    return None


def _pixels(value: np.ndarray) -> bool:
    """Whether `value` is a batch of images of raw pixel values: rank 4 with 1, 3 or 4
    channels (last or first axis), non-negative whole numbers reaching above `PIXEL_MAX`."""
    if value.ndim != 4 or value.dtype.kind != "f" or not value.size:
        return False
    if value.shape[-1] not in IMAGE_CHANNELS and value.shape[1] not in IMAGE_CHANNELS:
        return False
    v = value.astype(np.float64)
    if not np.all(np.isfinite(v)) or v.min() < 0 or v.max() < PIXEL_MAX:
        return False
    return bool(np.all(v == np.round(v)))


def _normalized_next(graph: ModelGraph, key: CallKey, layers: Mapping[str, KerasLayer]) -> bool:
    """Whether every layer call that takes the output of call `key` normalizes it."""
    users = [node for node, preds in graph.preds.items() if key in preds]
    return bool(users) and all(
        any(n in type(layers.get(path)).__name__ for n in NORMALIZING) for path, _ in users
    )


def normalized_first(
    trace: Trace,
    graph: ModelGraph | None,
    layers: Mapping[str, KerasLayer],
    act: Activation,
    inp: Activation,
) -> bool:
    """Whether every chain from the input `inp` to the call `act` passes a normalising layer
    (`INPUT_NORMALIZING`). What the untrained model shows of the input's scale there is not
    what training shows: a `BatchNormalization` first passes 0-255 pixels unscaled until its
    moving statistics are learnt from them. Without a graph, a normalising call anywhere before
    `act` counts."""

    def normalizing(path: str) -> bool:
        layer = layers.get(path)
        entry = graph.get(path) if graph is not None and graph.known else None
        name = type(layer).__name__ if layer is not None else entry.class_name if entry else ""
        return name in INPUT_NORMALIZING

    if graph is None or not graph.preds:
        order = [a.site for a in trace.activations]
        stop = order.index(act.site) if act.site in order else len(order)
        return any(normalizing(site.path) for site in order[:stop])
    reached = {inp.site.key}  # calls the input reaches with no normalising layer on the way
    for node in graph.order:
        if not normalizing(node[0]) and any(p in reached for p in graph.preds.get(node, ())):
            reached.add(node)
    return act.site.key not in reached


def _fed_by(graph: ModelGraph | None, act: Activation, inp: Activation) -> bool:
    if graph is None:
        return True
    a, i = act.site, inp.site
    return graph.depends(a.path, i.path, to_call=a.call, frm_call=i.call) is not False
