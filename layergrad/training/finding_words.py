"""The words of the training findings: one message template a variant, named `CODE/VARIANT`
(the finding's code, then which of its shapes), said from the finding's typed facts by `said`
(the curve and layer tests of `rules.RULES` render their findings with it). No TensorFlow.
"""

from __future__ import annotations

from layergrad.core.results import Fact, Reason, say
from layergrad.core.vocab import Finding

_HEALTHY = "healthy is about 1e-3"
_GROWS = "the loss grows from {low:.4g} to {end:.4g} by step {step}"
_RATIO = (
    " while {layer}'s update ratio reaches {ratio:.3g} per step (step {top_step}; " + _HEALTHY + ")"
)
_HIGH = ": the learning rate is too high"
_FAST = (
    " over {steps} steps: the learning rate is too high for the batch size; lower it, or "
    "train on larger batches"
)
_CONSTANT = (
    "{layer}: every unit of the output is the same for every sample of the batch from step "
    "{step} to the end ({run} checkpoints): the predictions ignore the inputs; "
)
_DEPTH = (
    "from step {step} the gradient of the first {count} layers, up to {layer}, is more than "
    "{decades:g} decades "
)
_VANISHED = _DEPTH + "below the head's (relative to their weights): they barely learn; "
_SQUASHING = "use ReLU-family activations instead of sigmoid/tanh stacks, residual connections"
_WHERE = "step {step} (epoch {epoch}, batch {batch}): "

_BORN_DEAD = (
    ": they were dead before training moved them (biases or an initialisation that hold their "
    "inputs at or below 0), and get no gradient: reset the biases that pin them (Keras's "
    "default is 0), draw the kernel again (He; an all-zero kernel gives every unit 0), or use "
    "LeakyReLU"
)
SAYS: dict[str, str] = {
    "nonfinite/update": _WHERE + "the weights of {held} hold NaN/Inf, finite at the step "
    "before: its update (its gradient, or the optimizer's step with it: learning rate, "
    "epsilon), or code run between the steps, left them",
    "nonfinite/updates": _WHERE + "the weights of {held} hold NaN/Inf, finite at step "
    "{since}: an update of steps {since} to {before}, whose losses were finite, left them (a "
    "ReLU after a layer hides them from the loss, and a layer fed NaN/Inf gets them in turn): "
    "a gradient, or the optimizer's step with it (learning rate, epsilon), was NaN/Inf",
    "nonfinite/weights": _WHERE + "the weights of {held} hold NaN/Inf before the fit's first "
    "step: the fit began with them (the model was saved or built with them, or an earlier fit "
    "left them)",
    "nonfinite/batch": _WHERE + "the training data holds NaN/Inf: {input} of the step's batch "
    "has NaN/Inf values; the loss stayed finite (a ReLU hides them), but the gradient left "
    "NaN/Inf in the weights of {held}, found at step {found}; clean the data (the model is "
    "not at fault)",
    "nonfinite/data": _WHERE + "the training data holds NaN/Inf: input {layer!r} of the step's "
    "batch has {count} NaN/Inf values, the first in sample {row} of the batch; clean the data "
    "(the model is not at fault)",
    "nonfinite/forward": _WHERE + "the first NaN/Inf of the forward pass is in the output of "
    "{layer} ({count} values)",
    "nonfinite/backward": _WHERE + "the forward pass is finite; the backward pass first gives "
    "NaN/Inf in the gradient of {layer} ({count} values)",
    "nonfinite/loss": _WHERE + "the loss is NaN/Inf although every layer's output is finite: "
    "the loss itself (e.g. log of 0) does not fit the outputs",
    "diverging/grows": _GROWS + _HIGH,
    "diverging/ratio": _GROWS + _RATIO + _HIGH,
    "diverging/nonfinite": _GROWS.replace("{end:.4g}", "NaN/Inf") + _RATIO + _HIGH,
    "not_learning/flat": "the loss stays at {level:.4g} over {steps} steps (it moved "
    "{change:+.3g}, {moved:.1f} standard errors of its batch-to-batch spread {spread:.3g}) and "
    f"no layer's update ratio exceeds {{ratio:.3g}} per step ({{top}}; {_HEALTHY}): raise the "
    "learning rate, or look for a dead network (layergrad scan --wrt weights)",
    "not_learning/stuck": "the loss stays at {level:.4g} over {steps} steps, {times:.3g}x the "
    "trivial loss ({chance:.4g}; predicting the labels' prior, or the targets' mean or median): "
    "it covered {travelled:.0%} of the way down to it, with {top}'s update ratio at most "
    "{ratio:.3g} per step: the steps are too small for the targets' scale; raise the learning "
    "rate (or use Adam), or scale the targets",
    "plateau_at_chance": "from step {step} the loss sits at {level:.4g}, the trivial loss of "
    "predicting the labels' prior ({chance:.4g}; the class frequencies, or the targets' mean or "
    "median): the model learns nothing from the inputs; check that the labels match the inputs "
    "and the loss fits the outputs",
    "oscillating/swings": "the loss swings {reversals} times by up to {amplitude:.3g} without a "
    "trend" + _FAST,
    "oscillating/jumps": "the loss jumps by {jumps:.3g} from batch to batch (the trivial loss "
    "is {reference:.3g})" + _FAST,
    "slow_convergence": "the loss falls by {fall:.3g} per step, and ends at {end:.4g}: at that "
    "rate it needs about {needed:,} more steps to get {margin:.0%} below the trivial loss "
    "({chance:.4g}), {times:.0f}x this run: raise the learning rate (or train that much longer)",
    # what to do about a constant head, from what is known of it and of the run
    "constant_predictions/one_unit": _CONSTANT + "a softmax over one unit is always 1.0: use "
    "sigmoid for one unit",
    "constant_predictions/blew_up": _CONSTANT + "the loss blew up first (`diverging`): its steps "
    "left the layers before the head dead or saturated; lower the learning rate",
    "constant_predictions/died": _CONSTANT + "the ReLU units before it died in training "
    "(`dying_units`), so every sample reaches the head alike: lower the learning rate, or use "
    "LeakyReLU",
    "constant_predictions/unknown": _CONSTANT + "a softmax over one unit is always 1.0, or a "
    "dead, saturated or zero-initialised head: use sigmoid for one unit, one unit per class for "
    "softmax, or check the head's initialisation",
    "constant_predictions/saturated": _CONSTANT + "its {activation} is saturated: scale the "
    "inputs or the initialisation down, or lower the learning rate",
    "constant_predictions/relu": _CONSTANT + "a ReLU output is 0 for every sample once its units "
    "die: no activation (or softmax / sigmoid) on the output layer",
    "constant_predictions/other": _CONSTANT + "the layers before it are dead or zero-initialised: "
    "check the initialisation (all-zero kernels give every unit the same value) and the "
    "learning rate",
    # the vanishing hint names sigmoid / tanh, or dead ReLU units, only where the layers have them
    "vanishing/unknown": _VANISHED + _SQUASHING + ", batch normalisation or a better "
    "initialisation (He/Glorot)",
    "vanishing/squashing": _VANISHED + _SQUASHING + " or batch normalisation",
    "vanishing/dead": _VANISHED + "their ReLU units are dead (`dying_units`), so no gradient "
    "passes them: lower the learning rate, or use LeakyReLU",
    "vanishing/other": _VANISHED + "use residual connections, batch normalisation or a better "
    "initialisation (He/Glorot)",
    "exploding/depth": _DEPTH + "above the head's (relative to their weights): they take huge "
    "steps; clip the gradients (clipnorm=1.0), lower the learning rate, or scale the "
    "initialisation down",
    "exploding/steps": "{layer}: at step {step} one step moves its weights by {ratio:.3g}x their "
    f"own size ({_HEALTHY}): the gradient explodes; clip the gradients (clipnorm=1.0), lower "
    "the learning rate, scale the initialisation down or the inputs into about [-1, 1]",
    "dying_units": "{layer}: {fraction:.0%} of its units get no gradient for a whole batch (was "
    "{first:.0%} at step {first_step}), dead from step {step}: lower the learning rate, or use "
    "LeakyReLU / better initialisation",
    "dead/from_start": "{layer}: at least {fraction:.0%} of its units output 0 for every "
    "sample of a batch at every checkpoint from step {step} to step {last}" + _BORN_DEAD,
    "dead/all": "{layer}: all of its units output 0 for every sample of a batch at every "
    "checkpoint from step {step} to step {last}" + _BORN_DEAD,
    "stalled_layer": "{layer}: from step {step} its update ratio stays more than {decades:g} "
    "decades below the other layers' median: it has stopped learning (a saturated or dead "
    "layer, or a learning rate too small for it)",
}


def said(name: str, layer: str | None, step: int, **facts: Fact) -> Reason:
    """The finding `name` (a key of `SAYS`) at `layer` and `step`, said from `facts`."""
    message = say(SAYS[name], {"layer": layer, "step": step, **facts})
    code = Finding(name.split("/")[0])
    return Reason(code, message, layer=layer, step=step, facts=tuple(facts.items()))
