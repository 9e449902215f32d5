"""Every `Cause` layergrad reports is built here: one small function per cause code.

A cause says what was found (`message`, with the evidence), where (`layer`, a layer
reference, or None) and what to do about it (`hint`). Finding the evidence is the job of
`diagnoser.py`; these functions only put it into words.
"""

from __future__ import annotations

import shlex

from layergrad.core.results import Cause
from layergrad.core.vocab import CauseCode
from layergrad.engine.tf_ops import OpFinding

# What the diagnosis looks at, for the `unknown` cause to say.
CHECKED = (
    "graph connectivity, dtypes on the path, the ops of the layer where the gradient is lost, "
    "ReLU/sigmoid/tanh/softmax activations, forward and backward NaN/Inf, float16, training mode"
)

# why an output stops varying (forward_findings.reason), said in a cause's message
REASONS = {
    "softmax_one_unit": "a softmax over one unit is always 1.0",
    "saturated": "its activation is saturated for every sample",
    "dead": "its ReLU units output 0 for every sample",
    "zero_weights": "its weights are all zero, so it outputs its bias",
    "constant": "its output does not depend on the batch",
    "float16_underflow": "it computes in float16, where outputs this small round to 0",
}


def not_downstream(source: str, target: str, *, reversed_order: bool = False) -> Cause:
    """`target` does not depend on `source` (or comes before it, when `reversed_order`)."""
    if reversed_order:
        message = (
            f"{target!r} comes before {source!r}: {source!r} depends on {target!r}, not the reverse"
        )
        hint = f"swap them: --from {shlex.quote(target)} --to {shlex.quote(source)}"
    else:
        message = (
            f"{target!r} does not depend on {source!r}: no chain of layers leads from one to "
            "the other (a sibling branch or an unrelated output)"
        )
        hint = (
            "pick a --to layer after --from on the same path; `layergrad layers MODEL` shows "
            "each layer's inbound layers"
        )
    return Cause(CauseCode.NOT_DOWNSTREAM, target, message, hint)


def other_output(source: str, target: str, used: int, probed: int) -> Cause:
    """`target` depends on another output of a multi-output `source` (LSTM states...)."""
    return Cause(
        CauseCode.NOT_DOWNSTREAM,
        source,
        f"{target!r} depends on output {used} of {source!r}, not on output {probed}, the one "
        "layergrad probes for a layer with several outputs",
        f"take --from the layer that consumes output {used} of {source!r}",
    )


def feeds_no_output(layer: str) -> Cause:
    """A scan row that no model output depends on."""
    return Cause(
        CauseCode.NOT_DOWNSTREAM,
        layer,
        f"{layer!r} feeds none of the model's outputs",
        "remove the unused branch, or add it to the model's outputs",
    )


def integer_path(layer: str, dtype: str) -> Cause:
    """An activation on the path whose dtype is not floating-point."""
    return Cause(
        CauseCode.INTEGER_PATH,
        layer,
        f"{layer!r} is {dtype}: gradients are only defined for floating-point tensors, so the "
        "tape returns None",
        "take the gradient from the first floating-point layer instead (e.g. the Embedding "
        "output rather than the integer ids)",
    )


def integer_inside(layer: str) -> Cause:
    """A layer that turns its floating-point input into integers inside its call."""
    return Cause(
        CauseCode.INTEGER_PATH,
        layer,
        f"{layer!r} turns its input into integers inside the layer",
        "keep the values floating-point on the path you differentiate",
    )


def non_differentiable_op(layer: str, finding: OpFinding) -> Cause:
    """An op without a usable gradient inside `layer`."""
    return Cause(
        CauseCode.NON_DIFFERENTIABLE_OP,
        layer,
        f"the gradient reaches the output of {layer!r} but not its input: {finding.reason}",
        "replace the op with a differentiable relaxation (softmax instead of argmax, "
        "x + tf.stop_gradient(tf.round(x) - x) as a straight-through round), or take "
        f"--from after {layer!r}",
        op=finding.op,
    )


def stop_gradient(layer: str) -> Cause:
    """A `tf.stop_gradient` inside `layer`."""
    return Cause(
        CauseCode.STOP_GRADIENT,
        layer,
        f"the gradient reaches the output of {layer!r} but not its input: it calls "
        "tf.stop_gradient",
        f"remove tf.stop_gradient from {layer!r} if the gradient should flow, or take --from "
        "after it",
        op="StopGradient",
    )


def dead_relu(layer: str, fraction: float) -> Cause:
    """ReLU units of `layer` that output 0 for every sample."""
    return Cause(
        CauseCode.DEAD_RELU,
        layer,
        f"{fraction:.0%} of the ReLU units of {layer!r} output 0 for every sample in the "
        "batch, so no gradient passes them",
        "check the bias and initialisation of the layer before it, lower the learning rate, "
        "or use LeakyReLU / GELU",
    )


def saturated(layer: str, kind: str, fraction: float) -> Cause:
    """Sigmoid / tanh / softmax outputs of `layer` pinned at their bounds."""
    return Cause(
        CauseCode.SATURATED,
        layer,
        f"{fraction:.0%} of the {kind} outputs of {layer!r} are pinned at their bounds, where "
        "the derivative is 0",
        "normalise the inputs of this layer (BatchNormalization / LayerNormalization) or scale "
        "down its weights",
    )


def nonfinite_forward(layer: str, bad: int, size: int) -> Cause:
    """The first activation whose forward value is NaN / Inf."""
    return Cause(
        CauseCode.NONFINITE_FORWARD,
        layer,
        f"the forward pass is already non-finite at {layer!r} ({bad} of {size} values "
        "NaN/Inf), the first layer where it appears",
        f"check the weights of {layer!r} (`layergrad layers MODEL` shows weight health) and "
        "the probe input",
    )


def nonfinite_backward(layer: str, finding: OpFinding | None) -> Cause:
    """The forward pass is finite but the gradient turns NaN / Inf going back through `layer`."""
    reason = finding.reason if finding else "its backward pass produced NaN/Inf"
    return Cause(
        CauseCode.NONFINITE_BACKWARD,
        layer,
        "the forward pass is finite, but the gradient turns NaN/Inf going back through "
        f"{layer!r}: {reason}",
        "add a small epsilon inside the op (tf.sqrt(x + 1e-12), tf.math.log(x + eps)) or use a "
        "safe form (tf.math.divide_no_nan)",
        op=finding.op if finding else None,
    )


def training_mode(layer: str | None) -> Cause:
    """Zeros that appear with `--training` only."""
    return Cause(
        CauseCode.TRAINING_MODE,
        layer,
        "the gradient is zero with --training and non-zero in inference: batch statistics "
        "(BatchNormalization) or dropout change the function",
        "probe in inference mode (drop --training), or differentiate a target that is not a "
        "batch sum of batch-normalised values",
    )


def float16_underflow(layer: str) -> Cause:
    """A float16 layer where the gradient rounds to zero."""
    return Cause(
        CauseCode.FLOAT16_UNDERFLOW,
        layer,
        f"{layer!r} computes in float16 and the gradient below it is smaller than float16 can "
        "hold (about 6e-8), so it rounds to 0",
        f"use loss scaling (keras.optimizers.LossScaleOptimizer) or a float32 policy for {layer!r}",
    )


def unused_input(layer: str, position: int, feeding: str | None) -> Cause:
    """A layer that receives an input and never uses it."""
    what = f"input {position}" + (f" (from {feeding!r})" if feeding else "")
    return Cause(
        CauseCode.UNUSED_INPUT,
        layer,
        f"{layer!r} receives {what} but never uses it: its call() computes nothing from it, "
        "so everything that feeds only that input gets no gradient",
        f"use the input in the call() of {layer!r}, or stop passing it (remove the branch "
        "that feeds it)",
    )


def variable_not_used(layer: str, variable: str, status: str) -> Cause:
    """The gradient reaches a layer's output but not one of its own variables."""
    lost = "none" if status == "none" else status
    return Cause(
        CauseCode.UNKNOWN,
        layer,
        f"the loss's gradient reaches the output of {layer!r} but is {lost} for its variable "
        f"{variable!r}: the layer's call() does not use it in a differentiable way (unused, "
        "behind tf.stop_gradient or a cast), or the layer's inputs are zero",
        f"read the call() of {layer!r}; a variable that should not train can be made "
        "non-trainable (trainable=False)",
    )


_CONSTANT_FIX = {
    "softmax_one_unit": "for a yes/no output use Dense(1, activation='sigmoid') with "
    "binary_crossentropy, or Dense(2, activation='softmax') with "
    "sparse_categorical_crossentropy",
    "saturated": "scale the inputs (a Rescaling or Normalization layer), normalise before this "
    "layer (BatchNormalization / LayerNormalization) or scale down its weights",
    "dead": "check the bias and initialisation of the layer before it, or use LeakyReLU / GELU",
    "zero_weights": "initialise the weights (glorot_uniform / he_normal), not zeros",
    "constant": "look at the weights of this layer and of the layers before it (`layergrad "
    "layers MODEL` shows weight health); a custom layer's call() should compute its output from "
    "its input",
    "float16_underflow": "compute this layer in float32 (dtype='float32' on the layer under a "
    "mixed_float16 policy), or scale its inputs or weights up",
}


def constant_output(output: str, layer: str, reason: str) -> Cause:
    """A model output that is the same for every sample, from `layer` on."""
    return Cause(
        CauseCode.CONSTANT_OUTPUT,
        layer,
        f"the output {output!r} is the same for every sample of the batch: it stops varying at "
        f"{layer!r} ({REASONS.get(reason, reason)}), so nothing before it can change the output",
        _CONSTANT_FIX.get(reason, _CONSTANT_FIX["constant"]),
    )


def input_range(name: str, mean_abs: float, layer: str, kind: str, pinned: float) -> Cause:
    """Inputs far from unit scale that pin the first ReLU / sigmoid / tanh layer, raw pixels
    (`kind` "pixels", `pinned` their largest value) reaching the first convolution, or raw
    units (`kind` "units", `pinned` a feature's largest root mean square) the first layer
    with weights."""
    if kind == "pixels":
        return Cause(
            CauseCode.INPUT_RANGE,
            layer,
            f"the input {name!r} holds raw pixel values (whole numbers up to {pinned:.0f}, "
            f"mean |x| = {mean_abs:.3g}) and reaches the convolution {layer!r} unscaled: "
            "kernels initialised for inputs near unit scale see activations and gradients "
            "~255 times too large",
            "unless the model was trained on raw pixels, scale them inside the model: "
            f"keras.layers.Rescaling(1 / 255) before {layer!r} (or a keras.layers."
            "Normalization adapted to the images)",
        )
    if kind == "units":
        return Cause(
            CauseCode.INPUT_RANGE,
            layer,
            f"the input {name!r} is in raw units (mean |x| = {mean_abs:.3g}; a feature's root "
            f"mean square reaches {pinned:.3g}) and reaches {layer!r}, the first layer with "
            "weights, unscaled: kernels initialised for inputs near unit scale give outputs, "
            "logits and first steps hundreds of times too large",
            "scale the input inside the model: a keras.layers.Normalization adapted to the "
            f"data (norm.adapt(x_train)) before {layer!r}",
        )
    state = "dead (output 0 for every sample)" if kind == "relu" else "saturated"
    return Cause(
        CauseCode.INPUT_RANGE,
        layer,
        f"the input {name!r} is not scaled (mean |x| = {mean_abs:.3g}, e.g. pixels in 0-255): "
        f"{pinned:.0%} of the {kind} units of {layer!r}, the first it feeds, are {state}",
        "scale the input inside the model: a keras.layers.Rescaling(1 / 255) for pixels, or a "
        "keras.layers.Normalization adapted to the data, before the first layer",
    )


def unknown(layer: str | None = None, ops: str | None = None) -> Cause:
    """No check explains the result: say what was checked (and where it was lost, if known)."""
    if layer is None:
        return Cause(
            CauseCode.UNKNOWN,
            None,
            f"no known cause found; checked: {CHECKED}",
            "save the gradient with --save-gradient and inspect the layers between the two",
        )
    return Cause(
        CauseCode.UNKNOWN,
        layer,
        f"the gradient reaches the output of {layer!r} but not its input; its ops "
        f"({ops or 'could not be traced'}) include no known blocker",
        f"read the call() of {layer!r} for numpy calls, casts or tf.stop_gradient",
    )
