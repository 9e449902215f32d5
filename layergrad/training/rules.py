"""The findings of a monitored training run, each a rule over the record (docs/training.md).

Pure functions of the per-step losses and the checkpoints; no TensorFlow. Every finding
names a layer (None only when the model as a whole is meant) and the step, counted from 1,
where the problem starts.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from layergrad.core.fit_results import Checkpoint
from layergrad.core.results import Reason
from layergrad.core.vocab import Finding, Severity
from layergrad.model.loss_forms import read_loss
from layergrad.training.curve_rules import (
    diverging,
    not_learning,
    oscillating,
    plateau_at_chance,
    slow_convergence,
)
from layergrad.training.layer_rules import (
    Facts,
    constant_predictions,
    dead_from_start,
    dying_units,
    exploding,
    stalled_layers,
    vanishing,
)
from layergrad.training.nonfinite import all_finite, nonfinite_finding

BLOWN_UP = 10.0  # a loss this many times the trivial loss has blown up
# a test of the loss curve: the losses, the checkpoints, the trivial loss
CurveTest = Callable[[Sequence[float | None], Sequence[Checkpoint], float | None], Reason | None]


def findings(
    losses: Sequence[float | None],
    checkpoints: Sequence[Checkpoint],
    nonfinite: Reason | None,
    *,
    chance_loss: float | None = None,
    heads: Sequence[str] = (),
    facts: Facts | None = None,
) -> list[Reason]:
    """Every finding of a run, in the order of the rules (nonfinite first, then the learning
    rate when the loss grew or blew up in its first steps).

    One cause, one finding: a head whose predictions are constant explains a loss that does
    not move or sits at the trivial loss; a loss that grows, or cannot move, explains one
    that sits at the trivial loss or converges slowly (a growing loss may swing as well);
    layers whose gradient has vanished, or whose units are dead, are not also stalled, and a
    gradient that vanishes through layers dead from the start is theirs (`dead`). `facts`
    (each layer's activation and units) decide which hint each finding gives.
    """
    out = [nonfinite] if nonfinite is not None else []
    cut = int(nonfinite.step or 0) if nonfinite is not None else 0
    later = losses[cut - 1 :] if cut else []
    if later and all(v is not None and math.isfinite(v) for v in later):
        # NaN/Inf weights (or a batch) that no loss showed: the steps from it on say nothing
        losses, checkpoints = losses[: cut - 1], [c for c in checkpoints if c.step < cut]
    grows = diverging(losses, checkpoints, nonfinite is not None)
    # the loss blew up: it grew, turned NaN/Inf, or reached BLOWN_UP times the trivial loss
    # (unscaled inputs or a scaled-up initialisation start there)
    seen = [v for v in losses if v is not None and math.isfinite(v)]
    blown = chance_loss is not None and bool(seen) and max(seen) >= BLOWN_UP * chance_loss
    unstable = grows is not None or nonfinite is not None or blown
    # the per-layer numbers of a step with NaN/Inf (and after it) say nothing of the layers
    finite = [c for c in checkpoints if all_finite(c)]
    dying, born = dying_units(finite), dead_from_start(finite, facts)
    constant = constant_predictions(
        finite, heads, facts, grows is not None, bool(dying), bool(born)
    )
    curve: list[Reason] = []
    if grows is not None:
        # a loss that also jumps from batch to batch: the batch is too small for the rate
        curve = [grows, *_one(oscillating(losses, checkpoints, chance_loss))]
    elif not constant:
        for test in (not_learning, plateau_at_chance, oscillating, slow_convergence):
            curve = _one(test(losses, checkpoints, chance_loss))
            if curve:
                break
    out += curve + constant + dying + born
    # layers dead from the start explain the gradient vanishing through them
    gone = vanishing(finite, facts, [str(f.layer) for f in dying], [str(f.layer) for f in born])
    order = [r.layer for r in finite[-1].layers] if finite else []
    skip = [str(f.layer) for f in (*dying, *born)]
    for named in (*born, *((gone,) if gone is not None else ())):
        # the layers before it up to it get no gradient through it, and after a layer whose
        # every unit is dead, no input: not stalled apart
        whole = named.code is Finding.DEAD and named.fact("fraction") == 1.0
        end = len(order) if whole else order.index(named.layer) + 1
        skip += order[:end] if named.layer in order else [named.layer]
    out += stalled_layers(finite, skip)
    out += [f for f in (gone, exploding(finite, unstable)) if f is not None]
    # each finding as its entry of `RULES` says: its severity, and the entry that found it
    return [replace(f, severity=BY_CODE[f.code].severity, rule=f.rule or str(f.code)) for f in out]


def chance_loss(loss_name: str, output_units: Sequence[int]) -> float | None:
    """The cross-entropy of predicting a uniform class prior: log C, or log 2 for binary.
    The name may be any alias Keras accepts (`"bce"`, `"BinaryCrossentropy"`)."""
    read = read_loss(loss_name.strip())
    name = (read.name if read is not None and read.known else loss_name).lower().replace(" ", "_")
    if len(output_units) != 1 or "crossentropy" not in name.replace("_", ""):
        return None
    if "binary" in name:
        return math.log(2.0)
    classes = output_units[0]
    return math.log(classes) if classes > 1 else None


@dataclass(frozen=True)
class Run:
    """What a training rule reads of a run: the loss of every step, the checkpoints, the
    trivial loss (None: unknown), the output layers and each layer's activation and units."""

    losses: Sequence[float | None]
    checkpoints: Sequence[Checkpoint]
    chance: float | None = None
    heads: Sequence[str] = ()
    facts: Facts | None = None


@dataclass(frozen=True)
class TrainingRule:
    """One training finding: what it reads, its predicate (`find`: the curve or layer test it
    calls, on a run alone), the docs' words for its condition, the layer and step it names, its
    severity (a failure says the run learns nothing: `fit --fail-on`'s default), its hint (what
    to do by hand), what `fix` changes (`repair`, in words; `fixes`: the repairs it tries, by
    name), when it holds (`when`: during training, or before the first step by a rule of
    `check`), and the runs that show it: `examples` that trigger it and `near_misses` that
    must not (by name, built in benchmarks/training_examples.py)."""

    code: Finding
    reads: str
    condition: str
    layer: str
    step: str
    severity: Severity
    hint: str
    repair: str
    find: Callable[[Run], list[Reason]] | None = None
    fixes: tuple[str, ...] = ()  # the repairs `fix` tries, in order (`commands/fix/plan.py`)
    examples: tuple[str, ...] = ()
    near_misses: tuple[str, ...] = ()
    when: str = "during training"


def _one(found: Reason | None) -> list[Reason]:
    return [found] if found is not None else []


def _curve(test: CurveTest) -> Callable[[Run], list[Reason]]:
    """A test of the loss curve, on a run."""
    return lambda r: _one(test(r.losses, r.checkpoints, r.chance))


def _nonfinite(run: Run) -> list[Reason]:
    bad = [c for c in run.checkpoints if not all_finite(c)]
    if not bad:
        return []
    order = [r.layer for r in run.checkpoints[0].layers]
    before = [c.step for c in run.checkpoints if c.step < bad[0].step]
    since = before[-1] if before else None
    return [nonfinite_finding(bad[0], order, bad[0].epoch, bad[0].batch, since)]


CURVE = "the loss of every step (up to the first NaN/Inf) and the update ratios"
LAYERS = "each layer's numbers at the checkpoints"
FAIL, WARN = Severity.FAIL, Severity.WARN
LOWER_RATE = "the learning rate: lower (with data, the rate that trains best of those tried)"
RAISE_RATE = "the learning rate: higher (with data, the rate that trains best of those tried)"
# fmt: off

# In the order a run's findings are given (`findings`).
RULES: tuple[TrainingRule, ...] = (
    TrainingRule(
        Finding.NONFINITE,
        "each checkpoint's NaN/Inf counts: weights, inputs, outputs, gradients",
        "the loss or a checkpoint holds NaN/Inf (above): named at the layer nearest the loss "
        "whose weights hold NaN/Inf at the step's start (an update left them), else the input "
        "of the batch that holds one, else the first layer whose output has one, else the "
        "layer nearest the loss whose gradient has one", "where it started", "the step", FAIL,
        "clean the data, or lower the learning rate",
        "none alone: the repair of the learning rate or of the inputs' scale covers it",
        _nonfinite, (), ("nan_in_head",), ("finite_run",),
    ),
    TrainingRule(
        Finding.DIVERGING, CURVE,
        "a window's mean (of about 20, after the first 3 steps) is 4 standard errors above the "
        "lowest window before it and above the first 3 steps' mean, and at least 10% above "
        "that lowest; and some layer's update ratio reaches 0.1 or the loss doubles. Or the "
        "run ends on NaN/Inf with an update ratio of 0.1. Or the first steps blow up (first, "
        "when both hold): within the first 10% of the run (at least 10 steps) a step's loss "
        "reaches twice the first step's, by more than 4 batch-to-batch standard deviations, "
        "and some layer's update ratio reaches 0.1 or the last half never gets 3 standard "
        "errors below the first step (a rate too high wrecks a run in its first steps and "
        "leaves it at the trivial loss, which the windows, the first of which holds those "
        "steps, never see grow); with no update ratio at 0.1, the peak must stand out: the "
        "last half's mean stays at twice the first step's, or the peak is 4 batch-to-batch "
        "standard deviations above every loss of the last half (else it is the run's "
        "spread: a batch of one sample)",
        "the layer with the largest update ratio",
        "the first step of that window, or the step of the blow-up", FAIL,
        "lower the learning rate", LOWER_RATE,
        lambda r: _one(diverging(r.losses, r.checkpoints, False)), ("learning_rate",),
        ("loss_grows", "first_steps_blow_up"), ("flat_noisy_high_ratios", "spikes_recur"),
    ),
    TrainingRule(
        Finding.CONSTANT_PREDICTIONS, "each output layer's constant fraction at the "
        "checkpoints",
        "every unit of an output layer's output is the same for every sample of the batch "
        "(spread at most 1e-6 of its size) at each of at least the last 2 checkpoints; a batch "
        "of one sample never counts", "that output layer", "the first checkpoint of that run",
        FAIL, "from the head's facts: a sigmoid for one unit; after a blow-up or dying units, "
        "a lower learning rate; a saturated head, smaller inputs or initialisation",
        "none alone: the head's repair (a softmax over one unit) or the learning rate's "
        "covers it",
        lambda r: constant_predictions(r.checkpoints, r.heads, r.facts), (),
        ("constant_head",), ("constant_once",),
    ),
    TrainingRule(
        Finding.NOT_LEARNING, CURVE,
        "at least 20 steps; neither the slope nor the last quarter's mean against the first "
        "quarter's reaches 3 standard errors; no layer's update ratio reaches 1e-5. Or, "
        "whatever the update ratios, the last quarter's mean stays at 1.5 times the trivial "
        "loss or more, having covered less than 10% of the way from the first quarter's mean "
        "down to it (3 standard errors of that difference under 10% of the way too: the noise "
        "can tell), whether or not that small fall is beyond the noise: an MAE with plain SGD "
        "on targets around 100 moves each weight by at most the rate a step",
        "the layer with the largest update ratio", "the first checkpoint", FAIL,
        "raise the learning rate, or look for a dead network (layergrad scan --wrt weights)",
        RAISE_RATE,
        _curve(not_learning), ("learning_rate",),
        ("flat_tiny_ratios", "stuck_far_above"), ("falling_tiny_ratios", "flat_healthy_ratios"),
    ),
    TrainingRule(
        Finding.PLATEAU_AT_CHANCE, CURVE,
        "at least 100 steps; the last quarter's mean lies within 3 standard errors (plus 3% of "
        "it) of the trivial loss, and the last half does not fall by 3 standard errors and 2% "
        "of the trivial loss (it would be still falling)", "the last layer",
        "the first of the windows that stay in that band to the end", FAIL,
        "check that the labels match the inputs and the loss fits the outputs",
        "none alone: the inputs' scale covers it when they are raw",
        _curve(plateau_at_chance), (),
        ("at_chance",), ("below_chance",),
    ),
    TrainingRule(
        Finding.OSCILLATING, CURVE,
        "at least 50 steps; the means of 10 to 25 windows change direction by more than 4 "
        "standard errors of their difference at least 4 times, with a swing larger than the "
        "net fall and than a tenth of the trivial loss (or of the loss the run starts at: not "
        "the spikes of a converged loss); or the batch-to-batch standard deviation over the "
        "second half of the run (plain, not robust: heavy tails count) is half the trivial "
        "loss or more (a batch of one sample; a loss that starts far above the trivial loss "
        "jumps as much while it falls, then settles)", "the layer with the largest update "
        "ratio", "the first step", WARN,
        "lower the learning rate, or train on larger batches", LOWER_RATE,
        _curve(oscillating), ("learning_rate",),
        ("square_wave", "batch_of_one"), ("falling", "converged_spikes"),
    ),
    TrainingRule(
        Finding.SLOW_CONVERGENCE, CURVE,
        "at least 50 steps; the last half's slope is 3 standard errors below 0, the last "
        "tenth's mean is still above half the trivial loss, and at that slope getting there "
        "takes more steps than the run had; not when the loss levels off (the last quarter's "
        "slope under half the last half's, shallower by 3 standard errors of the quarter's "
        "slope, measured with the last half's own batch-to-batch noise: a loss that converges "
        "above half the trivial loss, a noisy task's, would not get there in any number of "
        "steps); the message says how many", "the last layer", "the middle of the run", WARN,
        "raise the learning rate (or train that much longer)", RAISE_RATE,
        _curve(slow_convergence), ("learning_rate",),
        ("slow_fall",), ("fast_fall", "levelling_off"),
    ),
    TrainingRule(
        Finding.VANISHING, LAYERS,
        "at each of at least the last 2 checkpoints, the relative gradient (gradient L2 / "
        "weight L2) of the first layers from the input is more than 3 decades below the last "
        "layer's: at least 2 layers, and at least half of those up to the deepest such layer "
        "(a first layer that recovers while the next ones stay down still counts)",
        "the layer nearest the output of those", "the first checkpoint of that run", WARN,
        "ReLU-family activations with he_normal kernels in the deep stack, or "
        "BatchNormalization / residual connections between its layers",
        "kernels far off their initialiser's scale drawn afresh",
        lambda r: _one(vanishing(r.checkpoints, r.facts)), ("kernels",),
        ("shrinking_to_input",), ("one_layer_low",),
    ),
    TrainingRule(
        Finding.EXPLODING, LAYERS,
        "the same, 3 decades above; or one step moves a layer's weights by their own size or "
        "more (update ratio 1) at 2 checkpoints in a row, or at one in a run whose loss blew "
        "up: it diverged, turned NaN/Inf or reached 10 times the trivial loss (an adaptive "
        "optimizer bounds its real step: a large gradient alone, in a run that trains well, "
        "is not reported)", "that layer (the largest ratio)", "the first such checkpoint",
        WARN, "smaller initial kernels (glorot_uniform; he_normal for ReLU), gradient clipping "
        "(clipnorm=1.0), or BatchNormalization",
        "kernels far off their initialiser's scale drawn afresh; else " + LOWER_RATE,
        lambda r: _one(exploding(r.checkpoints)), ("kernels", "learning_rate"),
        ("growing_to_input", "huge_steps_twice"), ("one_huge_step",),
    ),
    TrainingRule(
        Finding.DYING_UNITS, LAYERS,
        "a layer's `dead_fraction` ends at 0.5 or more, having grown by at least 0.2 since the "
        "first checkpoint, and is at 0.5 or more at each of the last 3 checkpoints (a unit "
        "silent for one small batch of a small data set may answer the next)", "that layer",
        "the first checkpoint of the final run at or above 0.5", WARN,
        "lower the learning rate, or use LeakyReLU / better initialisation", LOWER_RATE,
        lambda r: dying_units(r.checkpoints), ("learning_rate",),
        ("units_die",), ("dead_from_the_start", "dead_last_batch"),
    ),
    TrainingRule(
        Finding.DEAD, LAYERS,
        "a layer's `dead_fraction` is 0.5 or more at every checkpoint from the run's first "
        "(measured there; at least 2), and grows by less than 0.2 (units that die in training "
        "are `dying_units`): its units were dead before training moved them, held at 0 by "
        "their biases or initialisation. The first such layer only (those after it are dead "
        "because their inputs are), and one with a ReLU activation where it is known (not a "
        "Dropout or pooling after it); a vanishing gradient whose first layers include it is "
        "said as `dead`, not `vanishing`", "that layer", "the first checkpoint", WARN,
        "reset the biases that pin them (Keras's default is 0), draw the kernel again (He), or "
        "use LeakyReLU", "the biases whose entries exceed 10 in magnitude reset to 0, as for "
        "check's `dead`", lambda r: dead_from_start(r.checkpoints, r.facts), ("biases",),
        ("born_dead",), ("dead_then_alive", "dies_in_training"),
    ),
    TrainingRule(
        Finding.STALLED_LAYER, LAYERS,
        "at each of at least the last 3 checkpoints, the layer's update ratio is more than 3 "
        "decades below the median of the other layers' (at least 2 others); not for the "
        "layers `vanishing`, `dying_units` or `dead` names, nor those before a layer "
        "`vanishing` or `dead` names (no gradient passes it)", "that layer",
        "the first checkpoint of that run", WARN,
        "look for a saturated or dead layer, or a learning rate too small for it",
        "none alone: the inputs' scale covers it when they are raw",
        lambda r: stalled_layers(r.checkpoints), (),
        ("one_layer_stalls",), ("stalls_twice",),
    ),
    TrainingRule(
        Finding.TARGET_MISMATCH, "the labels against each output and its loss",
        "the labels do not fit an output or its loss, by the rule of `check --data` "
        "([verdicts.md](verdicts.md#the-output-cannot-produce-the-targets-target_mismatch))",
        "the output layer", "0", FAIL, "the message's", "the head or its loss, for the labels",
        fixes=("head",),
        when="before the first step (`layergrad fit`)",
    ),
    TrainingRule(
        Finding.INPUT_RANGE, "the untrained copy on the data's first batch",
        "by the rule of `check --data`: raw pixels reaching the first convolution, or a "
        "feature whose root mean square is above 100 reaching the first layer with a kernel "
        "with no normalising layer before it (a ReLU network never shows raw units by "
        "saturating; the run still trains)", "the first layer with weights", "0", WARN,
        "scale the inputs (a Rescaling or Normalization layer)",
        "a `Rescaling` / `Normalization` layer on the input", fixes=("scale_inputs",),
        when="before the first step (`layergrad fit`)",
    ),
)
# fmt: on

BY_CODE = {rule.code: rule for rule in RULES}
