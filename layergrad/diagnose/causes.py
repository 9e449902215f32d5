"""Why a gradient is None, zero or non-finite: one table (`KINDS`), one entry a cause code,
from which `docs/make_tables.py` writes the README's cause table. `cause(name, layer, **facts)`
says one variant (`Says`) into the finding record, its facts kept typed beside the words.
Finding the evidence is `diagnoser.py`'s job. No TensorFlow.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass

from layergrad.core.results import ConstantOutput, Fact, InputRange, Reason, reads, say
from layergrad.core.vocab import Finding

# What the diagnosis looks at, for the `unknown` cause to say.
CHECKED = (
    "graph connectivity, dtypes on the path, the ops of the layer where the gradient is lost, "
    "ReLU/sigmoid/tanh/softmax activations, forward and backward NaN/Inf, float16, training mode"
)


@dataclass(frozen=True)
class Says:
    """One way a cause is said: its name (what `cause` is called with), its message and hint
    templates, and the op it points at when that is always the same."""

    name: str
    message: str
    hint: str
    op: str | None = None

    @property
    def reads(self) -> tuple[str, ...]:
        """The facts its templates read, in order of first use (`layer` among them)."""
        return reads(self.message, self.hint)


@dataclass(frozen=True)
class CauseKind:
    """One cause code: the README's words for it and the words its causes are said in (none
    for a code only `check` reports, from its own rules)."""

    code: Finding
    meaning: str
    detected: str
    fix: str
    says: tuple[Says, ...] = ()


# Why an output stops varying (`forward_findings.reason`), and its fix: one `constant_output`
# variant each, named `constant_output/REASON`.
_CONSTANT = {
    "softmax_one_unit": (
        "a softmax over one unit is always 1.0",
        "for a yes/no output use Dense(1, activation='sigmoid') with binary_crossentropy, or "
        "Dense(2, activation='softmax') with sparse_categorical_crossentropy",
    ),
    "saturated": (
        "its activation is saturated for every sample",
        "scale the inputs (a Rescaling or Normalization layer), normalise before this layer "
        "(BatchNormalization / LayerNormalization) or scale down its weights",
    ),
    "dead": (
        "its ReLU units output 0 for every sample",
        "check the bias and initialisation of the layer before it, or use LeakyReLU / GELU",
    ),
    "zero_weights": (
        "its weights are all zero, so it outputs its bias",
        "initialise the weights (glorot_uniform / he_normal), not zeros",
    ),
    "constant": (
        "its output does not depend on the batch",
        "look at the weights of this layer and of the layers before it (`layergrad layers "
        "MODEL` shows weight health); a custom layer's call() should compute its output from "
        "its input",
    ),
    "float16_underflow": (
        "it computes in float16, where outputs below 6.1e-5 lose their digits or round to 0",
        "compute this layer in float32 (dtype='float32' on the layer under a mixed_float16 "
        "policy), or scale its inputs or weights up",
    ),
}

_INPUT_RANGE = (
    "the input {input!r} is not scaled (mean |x| = {mean_abs:.3g}, e.g. pixels in 0-255): "
    "{pinned:.0%} of the {kind} units of {layer!r}, the first it feeds, are "
)
_INPUT_RANGE_FIX = (
    "scale the input inside the model: a keras.layers.Rescaling(1 / 255) for pixels, or a "
    "keras.layers.Normalization adapted to the data, before the first layer"
)

# fmt: off
KINDS: tuple[CauseKind, ...] = (
    CauseKind(
        Finding.NOT_DOWNSTREAM,
        "`--to` does not depend on `--from`: a sibling branch, another output, or the two in "
        "reverse order (it says which)",
        "the model graph in the file, before running anything",
        "pick a `--to` after `--from` on the same path (`layergrad layers MODEL` shows each "
        "layer's inbound layers), or swap them",
        (
            Says("not_downstream",
                 "{layer!r} does not depend on {source!r}: no chain of layers leads from one to "
                 "the other (a sibling branch or an unrelated output)",
                 "pick a --to layer after --from on the same path; `layergrad layers MODEL` "
                 "shows each layer's inbound layers"),
            Says("reversed_order",
                 "{layer!r} comes before {source!r}: {source!r} depends on {layer!r}, not the "
                 "reverse",
                 "swap them: --from {layer!q} --to {source!q}"),
            Says("other_output",
                 "{target!r} depends on output {used} of {layer!r}, not on output {probed}, the "
                 "one layergrad probes for a layer with several outputs",
                 "take --from the layer that consumes output {used} of {layer!r}"),
            Says("feeds_no_output",
                 "{layer!r} feeds none of the model's outputs",
                 "remove the unused branch, or add it to the model's outputs"),
        ),
    ),
    CauseKind(
        Finding.INTEGER_PATH,
        "an integer or boolean tensor on the path: integer inputs (Embedding ids), lookup / "
        "hashing / discretization layers, a cast to int",
        "the dtypes of the activations on the path, and integer casts inside the blocking layer",
        "differentiate from the first floating-point layer (the Embedding output, not the ids)",
        (
            Says("integer_path",
                 "{layer!r} is {dtype}: gradients are only defined for floating-point tensors, "
                 "so the tape returns None",
                 "take the gradient from the first floating-point layer instead (e.g. the "
                 "Embedding output rather than the integer ids)"),
            Says("integer_inside",
                 "{layer!r} turns its input into integers inside the layer",
                 "keep the values floating-point on the path you differentiate"),
        ),
    ),
    CauseKind(
        Finding.NON_DIFFERENTIABLE_OP,
        "an op with no usable gradient in a named layer, or in a functional operation (a "
        "`keras.ops` call between layers) that feeds it: ArgMax, Round, Floor, Ceil, a cast to "
        "an integer, comparisons, `tf.numpy_function` / `tf.py_function`, or an op with no "
        "registered gradient",
        "traces the blocking layer's `call` (else the functional operations before it) and "
        "reads its op types; a list of known blockers is "
        "needed as well as TensorFlow's registry, because Round and ArgMax *have* registered "
        "gradients that return None",
        "a differentiable relaxation (softmax instead of argmax, a straight-through estimator "
        "for round), or take `--from` after that layer",
        (
            Says("non_differentiable_op",
                 "the gradient reaches the output of {layer!r} but not its input: {why}",
                 "replace the op with a differentiable relaxation (softmax instead of argmax, "
                 "x + tf.stop_gradient(tf.round(x) - x) as a straight-through round), or take "
                 "--from after {layer!r}"),
            Says("non_differentiable_op/output",
                 "the model's output is the functional operation {operation!r} (a keras.ops "
                 "call after its last layer), which stops the gradient: {why}",
                 "replace {operation!r} with a differentiable relaxation, or apply it after "
                 "the model (at prediction time) and leave the layer before it as the output"),
            Says("non_differentiable_op/operation",
                 "the gradient reaches the input of {layer!r} but not the layer before it: "
                 "the functional operation {operation!r} between them (a keras.ops call in the "
                 "model, not a layer): {why}",
                 "replace {operation!r} with a differentiable relaxation (keras.ops.softmax "
                 "instead of argmax, x + keras.ops.stop_gradient(keras.ops.round(x) - x) as a "
                 "straight-through round), or take --from after {layer!r}"),
        ),
    ),
    CauseKind(
        Finding.STOP_GRADIENT,
        "a `tf.stop_gradient` in the layer where the gradient stops",
        "a StopGradient op in that layer",
        "remove it if the gradient should flow, or take `--from` after it",
        (
            Says("stop_gradient",
                 "the gradient reaches the output of {layer!r} but not its input: it calls "
                 "tf.stop_gradient",
                 "remove tf.stop_gradient from {layer!r} if the gradient should flow, or take "
                 "--from after it",
                 op="StopGradient"),
        ),
    ),
    CauseKind(
        Finding.DEAD_RELU,
        "zero gradient because the ReLU units of a layer on the path are inactive for the "
        "whole batch",
        "the layer where the gradient becomes zero applies ReLU; reports the fraction of units "
        "that output 0 for every sample",
        "check the bias / initialisation before it, lower the learning rate, or use LeakyReLU "
        "/ GELU",
        (
            Says("dead_relu",
                 "{fraction:.0%} of the ReLU units of {layer!r} output 0 for every sample in "
                 "the batch, so no gradient passes them",
                 "check the bias and initialisation of the layer before it, lower the learning "
                 "rate, or use LeakyReLU / GELU"),
        ),
    ),
    CauseKind(
        Finding.SATURATED,
        "sigmoid / tanh / softmax outputs pinned at their bounds, where the derivative is 0",
        "the layer where the gradient becomes zero applies one of them; reports the fraction "
        "of pinned outputs",
        "normalise its inputs (BatchNormalization / LayerNormalization) or scale down its "
        "weights",
        (
            Says("saturated",
                 "{fraction:.0%} of the {kind} outputs of {layer!r} are pinned at their "
                 "bounds, where the derivative is 0",
                 "normalise the inputs of this layer (BatchNormalization / "
                 "LayerNormalization) or scale down its weights"),
        ),
    ),
    CauseKind(
        Finding.NONFINITE_FORWARD,
        "NaN or Inf already in a forward activation (e.g. from NaN weights)",
        "the first layer, in execution order, whose output is non-finite",
        "check that layer's weights (`layergrad layers` shows weight health) and the probe "
        "input",
        (
            Says("nonfinite_forward",
                 "the forward pass is already non-finite at {layer!r} ({bad} of {size} values "
                 "NaN/Inf), the first layer where it appears",
                 "check the weights of {layer!r} (`layergrad layers MODEL` shows weight "
                 "health) and the probe input"),
            Says("nonfinite_input",
                 "the batch itself holds NaN/Inf: {bad} of {size} values of the input "
                 "{layer!r}, before any layer",
                 "clean the input: find the NaN/Inf values (np.isfinite) and replace or drop "
                 "those rows"),
        ),
    ),
    CauseKind(
        Finding.NONFINITE_BACKWARD,
        "the forward pass is finite but the gradient turns NaN/Inf (sqrt, log, division or a "
        "norm at 0)",
        "the layer where the gradient turns non-finite going backwards, and the op in it "
        "(Sqrt, Log, RealDiv, ...)",
        "add an epsilon inside the op (`tf.sqrt(x + 1e-12)`) or use a safe form "
        "(`tf.math.divide_no_nan`)",
        (
            Says("nonfinite_backward",
                 "the forward pass is finite, but the gradient turns NaN/Inf going back "
                 "through {layer!r}: {why}",
                 "add a small epsilon inside the op (tf.sqrt(x + 1e-12), tf.math.log(x + eps)) "
                 "or use a safe form (tf.math.divide_no_nan)"),
        ),
    ),
    CauseKind(
        Finding.TRAINING_MODE,
        "zeros that appear only with `--training`: BatchNormalization over a batch-summed "
        "target (the batch sum of batch-normalised values is constant), Dropout",
        "re-runs the probe in inference mode and compares",
        "probe in inference mode, or differentiate a target that is not a batch sum of "
        "normalised values",
        (
            Says("training_mode",
                 "the gradient is zero with --training and non-zero in inference: batch "
                 "statistics (BatchNormalization) or dropout change the function",
                 "probe in inference mode (drop --training), or differentiate a target that "
                 "is not a batch sum of batch-normalised values"),
        ),
    ),
    CauseKind(
        Finding.FLOAT16_UNDERFLOW,
        "a mixed-precision (float16) layer on the path and a gradient smaller than float16 can "
        "hold (about 6e-8)",
        "the layer where the gradient becomes zero computes in float16",
        "loss scaling (`keras.optimizers.LossScaleOptimizer`) or a float32 policy for that "
        "layer",
        (
            Says("float16_underflow",
                 "{layer!r} computes in float16 and the gradient below it is smaller than "
                 "float16 can hold (about 6e-8), so it rounds to 0",
                 "use loss scaling (keras.optimizers.LossScaleOptimizer) or a float32 policy "
                 "for {layer!r}"),
        ),
    ),
    CauseKind(
        Finding.UNUSED_INPUT,
        "a layer receives an input and never uses it (a custom merge layer that ignores its "
        "second input), so everything that feeds only that input gets None",
        "traces the blocking layer's `call` on the shapes it was called with: the input that "
        "comes from `--from` (or from the variable's layer) is consumed by no op",
        "use the input in the layer's `call()`, or stop passing it",
        (
            Says("unused_input",
                 "{layer!r} receives input {position} (from {feeding!r}) but never uses it: "
                 "its call() computes nothing from it, so everything that feeds only that "
                 "input gets no gradient",
                 "use the input in the call() of {layer!r}, or stop passing it (remove the "
                 "branch that feeds it)"),
        ),
    ),
    CauseKind(
        Finding.CONSTANT_OUTPUT,
        "the output (of the model, or of the layer the gradient stops at) is the same for "
        "every sample of the batch, so nothing before it can change it: "
        "`Dense(1, activation=\"softmax\")` (always 1.0), a saturated sigmoid head, a ReLU "
        "layer dead for the whole batch, a layer whose weights are all zero; or a `--to` that "
        "ends in softmax, whose sum (what `inspect` derives) is 1 for every sample. Symptom: "
        "the loss does not move, accuracy stays at chance, every prediction is the same",
        "walks back from the output while every input is constant too, to the layer where it "
        "first stops varying, and names why (softmax over one unit, saturation, dead units, "
        "zero weights)",
        "for a yes/no output `Dense(1, activation=\"sigmoid\")` with `binary_crossentropy`; "
        "otherwise the fix for the reason named",
        (
            *(
                Says(f"constant_output/{reason}",
                     "the output {output!r} is the same for every sample of the batch (to "
                     "within 1e-6 of its largest value, or of 1 if that is smaller): it "
                     "stops varying at {layer!r} (" + said + "), so nothing before it can "
                     "change the output",
                     fix)
                for reason, (said, fix) in _CONSTANT.items()
            ),
            # a softmax target of `inspect`: its outputs vary, their sum (what is derived) not
            Says("constant_output/softmax_sum",
                 "{layer!r} ends in softmax: the sum of its outputs is 1 for every sample, so "
                 "nothing before it can change that sum (its gradient is zero, up to rounding)",
                 "take {before}, or --measure jacobian (d each output / d --from, per sample)"),
        ),
    ),
    CauseKind(
        Finding.INPUT_RANGE,
        "the inputs are not scaled (pixels 0-255, raw features in the thousands): the first "
        "sigmoid / tanh layer they feed is saturated, or the first layer with weights gets them "
        "unscaled (a ReLU never shows it)",
        "with `--input` or `--data`: an input whose mean |x| is above 10 with at least half of "
        "the first activation it feeds pinned; raw pixels reaching the first convolution; or, "
        "from the data's own statistics, a feature whose root mean square (mean and spread) is "
        "above 100 reaching the first layer with a kernel, no normalising layer before it",
        "a `keras.layers.Rescaling(1 / 255)` for pixels, or a `keras.layers.Normalization` "
        "adapted to the data, as the model's first layer",
        (
            Says("input_range/relu", _INPUT_RANGE + "dead (output 0 for every sample)",
                 _INPUT_RANGE_FIX),
            Says("input_range", _INPUT_RANGE + "saturated", _INPUT_RANGE_FIX),
            Says("input_range/pixels",
                 "the input {input!r} holds raw pixel values (whole numbers up to "
                 "{pinned:.0f}, mean |x| = {mean_abs:.3g}) and reaches the convolution "
                 "{layer!r} unscaled: kernels initialised for inputs near unit scale see "
                 "activations and gradients ~255 times too large",
                 "unless the model was trained on raw pixels, scale them inside the model: "
                 "keras.layers.Rescaling(1 / 255) before {layer!r} (or a keras.layers."
                 "Normalization adapted to the images)"),
            Says("input_range/units",
                 "the input {input!r} is in raw units (mean |x| = {mean_abs:.3g}; a feature's "
                 "root mean square reaches {pinned:.3g}) and reaches {layer!r}, the first layer "
                 "with weights, unscaled: kernels initialised for inputs near unit scale give "
                 "outputs, logits and first steps hundreds of times too large",
                 "scale the input inside the model: a keras.layers.Normalization adapted to the "
                 "data (norm.adapt(x_train)) before {layer!r}"),
        ),
    ),
    CauseKind(
        Finding.LOSS_MISMATCH,
        "the compiled loss does not fit the output's activation (see "
        "[the loss check](#layergrad-check-a-ci-gate-for-model-files)); reported by `check`",
        "the compile config in the file",
        "the pairing the message names",
    ),
    CauseKind(
        Finding.TARGET_MISMATCH,
        "the labels given with the data cannot be produced by the output or do not fit the "
        "loss: targets outside a sigmoid's [0, 1] (a ReLU's [0, inf), a tanh's [-1, 1]), "
        "several classes into one unit, class ids with a one-hot loss, one-hot rows with the "
        "sparse loss, ids beyond the number of units; reported by `check`",
        "the labels in `--input` or `--data` (`y`, an image folder's classes, a function's "
        "`(x, y)`), against each output's activation, units and compiled loss",
        "the fix the message names",
    ),
    CauseKind(
        Finding.UNKNOWN,
        "none of the above explains it",
        "says what was checked, and names the layer where the gradient is lost when it found "
        "one",
        "save the gradient with `--save-gradient` and read that layer's `call()`",
        (
            Says("unknown",
                 f"no known cause found; checked: {CHECKED}",
                 "save the gradient with --save-gradient and inspect the layers between the "
                 "two"),
            Says("unknown_at",
                 "the gradient reaches the output of {layer!r} but not its input; its ops "
                 "({ops}) include no known blocker",
                 "read the call() of {layer!r} for numpy calls, casts or tf.stop_gradient"),
            Says("variable_not_used",
                 "the loss's gradient reaches the output of {layer!r} but is {status} for its "
                 "variable {variable!r}: the layer's call() does not use it in a "
                 "differentiable way (unused, behind tf.stop_gradient or a cast), or the "
                 "layer's inputs are zero",
                 "read the call() of {layer!r}; a variable that should not train can be made "
                 "non-trainable (trainable=False)"),
        ),
    ),
)
# fmt: on

BY_NAME: Mapping[str, tuple[CauseKind, Says]] = {
    says.name: (kind, says) for kind in KINDS for says in kind.says
}


# The cause that explains a status of `check` whose record names none: what `fix` says to do
# by hand about it is that cause's hint (at the layer, when known), else its code's fix.
EXPLAINS = {
    Finding.DEAD: "dead_relu",
    Finding.BLOCKED: "non_differentiable_op",
    Finding.NO_GRADIENT: "variable_not_used",
}


def fallback_hint(code: str, layer: str | None = None) -> str:
    """What to do about the status `code` (`EXPLAINS`; "" for a code it does not hold)."""
    name = EXPLAINS.get(Finding(code)) if code in set(Finding) else None
    if name is None:
        return ""
    kind, says = BY_NAME[name]
    if layer is None and "layer" in reads(says.hint):
        return kind.fix
    return say(says.hint, {"layer": layer})


def cause(name: str, layer: str | None = None, **facts: Fact) -> Reason:
    """The cause `name` (a `Says` of the table) at `layer`, said from `facts`; `op` names the
    operation it points at."""
    kind, says = BY_NAME[name]
    words = {"layer": layer, **facts}
    op = facts.get("op") or says.op
    return Reason(
        kind.code,
        say(says.message, words),
        say(says.hint, words),
        layer,
        rule=name,
        facts=tuple(facts.items()),
        op=None if op is None else str(op),
    )


def constant_output(found: ConstantOutput) -> Reason:
    """A model output that is the same for every sample, from its layer on, for its reason (a
    `forward_findings.reason`; one it does not know is said as `constant`)."""
    said = found.reason if f"constant_output/{found.reason}" in BY_NAME else "constant"
    return cause(f"constant_output/{said}", found.layer, **_facts(found))


def input_range(found: InputRange) -> Reason:
    """Inputs far from unit scale that pin the first ReLU / sigmoid / tanh layer, raw pixels
    (kind "pixels", `pinned` their largest value) reaching the first convolution, or raw
    units (kind "units", `pinned` a feature's largest root mean square) reaching the first
    layer with weights."""
    kind = found.kind if found.kind in ("pixels", "relu", "units") else None
    return cause("input_range" + (f"/{kind}" if kind else ""), found.layer, **_facts(found))


def _facts(found: ConstantOutput | InputRange) -> dict[str, Fact]:
    """A found record's fields but its layer, in order: the facts its cause is said from."""
    return {name: value for name, value in asdict(found).items() if name != "layer"}
