"""Repairs of weights, inputs and the learning rate: kernels scaled far off their initialiser's
scale, biases far off zero, raw inputs, a learning rate that diverges or does not learn.

Each rule reads numbers (the loaded model's weights as NumPy arrays, the data's input
statistics, the update ratios of the original's training run) and plans the change. No
TensorFlow.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TypeGuard

import numpy as np

from layergrad.commands.fix.plan import (
    Edit,
    Plan,
    at,
    code_name,
    layer_code,
    listing,
    option_edit,
    set_learning_rate,
)
from layergrad.core.fit_results import Checkpoint, FitReport
from layergrad.files.file_info import FileInfo
from layergrad.model import config_edit as ed
from layergrad.model.graph import ModelGraph
from layergrad.render.escape import python_name, python_string, python_value

KERNEL_FACTOR = 4.0  # a kernel whose std is this many times off its initialiser's: far off
BIAS_LIMIT = 10.0  # a bias entry beyond this (in |value|): far off (Keras starts at 0)
TARGET_RATIO = 1e-3  # the update ratio a healthy step has (lr x |grad| / |W|)
RELU_LIKE = ("relu", "relu6", "elu", "selu", "gelu", "leaky_relu", "silu", "swish")


@dataclass(frozen=True)
class InputStats:
    """One float input over the data: min, max, mean |x|, per-feature mean and variance."""

    name: str
    low: float
    high: float
    mean_abs: float
    mean: tuple[float, ...]
    variance: tuple[float, ...]


def expected_std(kernel_shape: Sequence[int], activation: str) -> float | None:
    """The std Keras's default for this layer draws (Glorot), or He's for ReLU layers."""
    if len(kernel_shape) < 2:
        return None
    receptive = math.prod(kernel_shape[:-2]) if len(kernel_shape) > 2 else 1
    fan_in, fan_out = kernel_shape[-2] * receptive, kernel_shape[-1] * receptive
    if activation in RELU_LIKE:
        return math.sqrt(2.0 / fan_in)
    return math.sqrt(2.0 / (fan_in + fan_out))


def kernels(
    info: FileInfo, weights: Mapping[str, Mapping[str, np.ndarray]], finding: str
) -> Plan | None:
    """Kernels whose spread is far off the Glorot (He, for ReLU) scale: re-initialised."""
    names, factors, code, edits = [], [], [], []
    for path, arrays in weights.items():
        kernel = arrays.get("kernel")
        entry = info.graph.get(path)
        if kernel is None or entry is None or kernel.size < 4:
            continue
        act = str(entry.config.get("activation") or "linear")
        want = expected_std(kernel.shape, act)
        factor = float(np.std(kernel)) / want if want else 0.0
        # all zero: every unit the same, no signal; else a spread far off either way
        zero = want is not None and not np.any(kernel)
        if not zero and not (factor > 0 and max(factor, 1 / factor) >= KERNEL_FACTOR):
            continue
        init = "he_normal" if act in RELU_LIKE else "glorot_uniform"
        old = {"class_name": entry.class_name, "config": entry.config}
        names.append(path)
        factors.append(factor)
        code.append(f"{layer_code(old)} -> {layer_code(old, kernel_initializer=init)}{at(path)}")
        edits.append(option_edit(path, "kernel_initializer", init))
    if not names:
        return None
    factors.sort()
    span = f"{factors[0]:.2g}x" if len(factors) == 1 else f"{factors[0]:.2g}x to {factors[-1]:.2g}x"
    span = "0x (all zero)" if factors[-1] == 0 else span
    why = (
        f"the kernels of {listing(names)} are re-initialised: their spread is {span} the scale "
        "of Keras's initialiser for their activation (Glorot; He for ReLU), so the signal "
        + ("grows" if factors[-1] > 1 else "shrinks")
        + " layer after layer"
    )
    fresh = tuple((p, "kernel") for p in names)
    return Plan(finding, names[0], why, tuple(code), tuple(edits), (), fresh)


def biases(
    info: FileInfo, weights: Mapping[str, Mapping[str, np.ndarray]], finding: str
) -> Plan | None:
    """Biases far off zero (a layer pinned dead or saturated): re-initialised as Keras would."""
    far = []
    for path, arrays in weights.items():
        bias = arrays.get("bias")
        if bias is not None and bias.size and float(np.max(np.abs(bias))) > BIAS_LIMIT:
            far.append((path, float(bias[np.argmax(np.abs(bias))]), bias.shape))
    if not far:
        return None
    names = [p for p, _, _ in far]
    code = tuple(
        f"bias of {python_string(p)} (up to {v:+g}) -> "
        f"{_get_layer(p)}.bias.assign(keras.ops.zeros({python_value(tuple(shape))}))"
        for p, v, shape in far
    )
    why = (
        f"the biases of {listing(names)} are re-initialised to zero: a bias of "
        f"{far[0][1]:+g} pins the layer's units (dead or saturated) for every input"
    )
    return Plan(finding, names[0], why, code, (), (), tuple((p, "bias") for p in names))


def _get_layer(path: str) -> str:
    """`model.get_layer("enc").get_layer("dense")` for the layer at `enc/dense`."""
    return "model" + "".join(f".get_layer({python_string(name)})" for name in path.split("/"))


def scale_inputs(info: FileInfo, stats: Sequence[InputStats], finding: str) -> Plan | None:
    """Raw inputs: Rescaling(1/255) for 8-bit values, else an adapted Normalization."""
    from layergrad.diagnose.forward_findings import UNSCALED  # the bound `scan` flags on

    raw = [s for s in stats if s.mean_abs > UNSCALED]
    if not raw:
        return None
    code = []
    edits = []
    for s in raw:
        pixels = s.low >= 0 and s.high <= 255
        tensor = python_name(s.name) or "inputs"  # the input's variable in the user's code
        if pixels:
            cls = "Rescaling"
            options: ed.Config = {"scale": 1 / 255, "offset": 0.0}
            code.append(f"x = {tensor} -> x = Rescaling(1/255)({tensor}){at(s.name)}")
        else:
            cls = "Normalization"
            options = {"axis": -1, "mean": list(s.mean), "variance": list(s.variance)}
            code.append(f"x = {tensor} -> x = norm({tensor}){at(s.name)} (norm = "
                        "Normalization(); norm.adapt(x_train))")  # fmt: skip
        edits.append(_insert_input(s.name, cls, options))
    names = [s.name for s in raw]
    reader = _first_reader(info.graph, names[0])
    why = (
        f"the inputs {listing(names)} are scaled in the model: values of mean |x| "
        f"{raw[0].mean_abs:.3g} (from {raw[0].low:g} to {raw[0].high:g}) reach the first "
        "layer with weights unscaled, its outputs and the first steps as many times too large "
        "(units pinned, or a ReLU network's logits and loss far above the trivial loss); a "
        "scaling layer first brings them to [0, 1] (8-bit pixels) or to unit variance with "
        "the data's own statistics, the saved model scales its own inputs, and the learning "
        "rate is left as it is"
    )
    return Plan(finding, reader, why, tuple(code), tuple(edits))


def _first_reader(graph: ModelGraph, source: str) -> str:
    """The first layer that reads the input `source`, where its scale did harm (the layer
    `check` names); the input itself when the graph does not say."""
    for node in graph.order:
        if (source, 0) in graph.preds.get(node, ()):
            return node[0]
    return source


LOWER = ("diverging", "oscillating")  # the findings of a rate too high
RAISE = ("not_learning", "slow_convergence")  # ... and too low
# too high when the first steps say so: one step moving a layer's weights by a tenth of their
# size or more (100x a healthy step) explodes them or pushes ReLU units dead; else the cause
# is elsewhere (the kernels' scale, the inputs) and the rate is left alone
FIRST_STEPS = ("exploding", "dying_units")
STEP_TOO_LARGE = 0.1
FIRST_TARGET = 1e-2  # the first steps of a healthy run move the weights 10x more than later ones
# optimizers whose first steps move each weight by about the learning rate, whatever its
# gradient (the step is normalised by the gradient's own running size)
ADAPTIVE = ("Adam", "AdamW", "Adamax", "Nadam", "RMSprop", "Adagrad", "Lion")


def learning_rate(
    fit: FitReport,
    finding: str,
    weights: Mapping[str, Mapping[str, np.ndarray]],
    compiled: Mapping[str, object] | None = None,
) -> Plan | None:
    """`diverging` / `oscillating` (too high), `not_learning` / `slow_convergence` (too low):
    the learning rate times the factor that brings the median update ratio of the first half
    of the run to about TARGET_RATIO, and at least 3x down (or up) as the finding says (up
    when the steps are 10x below healthy ones, whatever the finding).
    `exploding` / `dying_units` in training, or a `diverging` of the first steps: down, to
    FIRST_TARGET, from the first steps' ratios when one of them is STEP_TOO_LARGE or more
    (None otherwise)."""
    lr, first = fit.learning_rate, finding in FIRST_STEPS or _blew_up_early(fit, finding)
    if lr is None or not lr > 0:
        return None
    if first:
        ratios, how = _first_steps(fit, lr, weights)
        if not ratios or max(ratios) < STEP_TOO_LARGE:
            return None
    else:
        ratios = _ratios(fit.checkpoints[: max(1, len(fit.checkpoints) // 2)])
        how = "(lr x |grad| / |W|) in the first half of the run"
    if not ratios:
        return None
    median = float(np.median(ratios))
    target = FIRST_TARGET if first else TARGET_RATIO
    toward = target / median
    # the finding says which way the rate must go, at least 3x that way; but steps 10x below
    # healthy ones are never too large: a loss that swings with them is noise from batch to
    # batch on a model that does not learn, and the rate goes up
    down = first or (finding in LOWER and median >= TARGET_RATIO / 10)
    factor = min(toward, 1 / 3) if down else max(toward, 3.0)
    step = (
        f"x{factor:.2g} brings it toward {target:g}"
        if factor == toward
        else f"x{factor:.2g}: at least 3x {'down' if down else 'up'}, as {finding} says"
    )
    measured = f"the median update ratio {how} is {median:.2g}; {step}"
    plan = _rate_plan(fit, finding, compiled, factor, measured)
    # ratios read from a run that blew up (or barely moved) misjudge the rate by decades: the
    # rates a decade at a time toward the original are tried too, and the data chooses
    others = []
    for k in range(1, ALTERNATIVES + 1):
        moved = factor * (10.0**k if down else 10.0**-k)
        if (down and moved > 1 / 3) or (not down and moved < 3.0):
            break
        tried = f"{measured}; x{moved:.2g} is {k} decade{'s' if k > 1 else ''} toward the original"
        others.append(_rate_plan(fit, finding, compiled, moved, tried))
    return replace(plan, alternatives=tuple(others))


ALTERNATIVES = 3  # other learning rates tried with data, a decade apart


def _rate_plan(
    fit: FitReport,
    finding: str,
    compiled: Mapping[str, object] | None,
    factor: float,
    measured: str,
) -> Plan:
    """The learning rate times `factor`; a schedule's rates each times `factor` (its other
    options kept: never replaced by the constant it was at)."""
    schedule = _schedule(compiled or {})
    if schedule is None:
        old = fit.learning_rate or 0.0
        new = _rounded(old * factor)
        why = f"the learning rate changes from {old:g} to {new:g}: {measured}"
        shown, edit = "{:g}", set_learning_rate(new)
    else:
        cls, key, old = schedule
        new = _rounded(old * factor)
        why = (
            f"the learning rate schedule {cls} is scaled x{factor:.2g} (its {key} from {old:g} "
            f"to {new:g}; its other options kept), not replaced by a constant: {measured}"
        )
        rate = "values=[{:g}, ...]" if key == "values" else f"{key}={{:g}}"
        shown, edit = f"{code_name(cls)}({rate}, ...)", _scale_schedule(factor)
    optimizer = code_name(fit.optimizer)
    code = (f"optimizer={optimizer}(learning_rate={shown.format(old)}) -> "
            f"optimizer={optimizer}(learning_rate={shown.format(new)})",)  # fmt: skip
    return Plan(finding, None, why, code, (), (edit,))


def _blew_up_early(fit: FitReport, finding: str) -> bool:
    """Whether `finding` is a `diverging` of the run's first steps (the first tenth, at least
    10): the rate did its harm there, and the later steps of dead units say nothing of it."""
    step = next((f.step for f in fit.findings if str(f.code) == finding), None)
    return finding == "diverging" and step is not None and step <= max(10, fit.steps // 10)


# the rates of Keras's schedules (a PiecewiseConstantDecay's are its `values`); the other
# options (steps, decay rates, fractions) keep the schedule's shape
SCHEDULE_RATES = ("initial_learning_rate", "end_learning_rate", "warmup_target", "values")


def _schedule(compiled: Mapping[str, object]) -> tuple[str, str, float] | None:
    """(the schedule's class, its first rate option, that rate) when the compiled optimizer's
    learning rate is a schedule with a rate to scale; None for a constant rate."""
    optimizer = compiled.get("optimizer") or compiled.get("optimizer_config")
    inner = optimizer.get("config") if isinstance(optimizer, Mapping) else None
    rate = inner.get("learning_rate") if isinstance(inner, Mapping) else None
    if not isinstance(rate, Mapping):
        return None
    cls, options = str(rate.get("class_name", "")), rate.get("config")
    if not cls.isidentifier() or not isinstance(options, Mapping):
        return None
    for key in SCHEDULE_RATES:
        value = options.get(key)
        first = value[0] if isinstance(value, list) and value else value
        if _number(first):
            return cls, key, float(first)
    return None


def _rounded(value: float) -> float:
    return float(f"{value:.2g}")


def _scale_schedule(factor: float) -> Edit:
    """An edit of the compile config: each rate of the optimizer's schedule times `factor`."""

    def edit(compiled: ed.Config) -> None:
        optimizer = ed.as_object(compiled.get("optimizer"), "the optimizer")
        inner = ed.as_object(optimizer.get("config"), "the optimizer's config")
        rate = ed.as_object(inner.get("learning_rate"), "the learning rate schedule")
        options = ed.as_object(rate.get("config"), "the schedule's config")
        for key in SCHEDULE_RATES:
            value = options.get(key)
            if isinstance(value, list):
                options[key] = [_rounded(v * factor) if _number(v) else v for v in value]
            elif _number(value):
                options[key] = _rounded(value * factor)

    return edit


def _number(value: object) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _ratios(checkpoints: Sequence[Checkpoint]) -> list[float]:
    return [
        row.update_ratio
        for checkpoint in checkpoints
        for row in checkpoint.layers
        if row.update_ratio is not None and math.isfinite(row.update_ratio)
        and row.update_ratio > 0
    ]  # fmt: skip


def _first_steps(
    fit: FitReport, lr: float, weights: Mapping[str, Mapping[str, np.ndarray]]
) -> tuple[list[float], str]:
    """How far the first steps move each layer's weights, relative to their size, and how
    that was read: for an adaptive optimizer about lr per weight (lr / mean |kernel|), for
    the others the first checkpoint's update ratios."""
    sizes = [float(np.mean(np.abs(a["kernel"]))) for a in weights.values() if "kernel" in a]
    if fit.optimizer in ADAPTIVE and any(sizes):
        ratios = [lr / size for size in sizes if size > 0]
        return ratios, f"of {fit.optimizer}'s first steps (about lr per weight / mean |kernel|)"
    return _ratios(fit.checkpoints[:1]), "(lr x |grad| / |W|) at the first checkpoint"


def _insert_input(source: str, cls: str, options: ed.Config) -> Edit:
    """An edit: a layer of class `cls` right after the input `source`."""

    def edit(c: ed.Config) -> None:
        layer = ed.new_layer(cls, ed.fresh_name(c, cls.lower()), options)
        ed.insert_after_input(c, source, layer)

    return edit
