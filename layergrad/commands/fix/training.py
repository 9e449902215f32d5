"""Train one model file for `fix` as `fit` does, and score what the trained model outputs.

The run is `fit`'s (the same compile, labels, shuffled batches and `GradientMonitor`, from
`commands/fit/run.py`), after `fit`'s checks (`ready`: what `fit` refuses before its first
step, `fix` refuses in the same words: exit 2 for the original, a copy left untrained). What
`fix` adds is the loss of the trained model's *predictions*: Keras on TensorFlow trains a
softmax or sigmoid head through the logits it keeps beside the output, so a head whose
outputs are useless (a softmax over one unit is always 1.0) can show a training loss as good
as the repaired one. The served loss is computed from the predictions as plain arrays, the
way a user of the model sees them, on samples no model trained on: every fifth sample is held
back (`_held_back`), so a model that memorised its batches is not taken for one that learned."""

from __future__ import annotations

import contextlib
import copy
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from layergrad.commands.fit.guards import DEFAULT_STEPS, require_samples
from layergrad.commands.fit.labels import LabelCheck, read_labels, refused
from layergrad.commands.fit.run import (
    compile_for_fit,
    output_units_of,
    read_labelled,
    training_batches,
)
from layergrad.commands.fit.train import FitOptions
from layergrad.core.errors import InputError, describe
from layergrad.core.fit_results import FitReport
from layergrad.core.fix_results import OutputLoss
from layergrad.core.probe_options import PathLike
from layergrad.core.tf_runtime import keras, tf
from layergrad.core.tf_types import Dataset, KerasModel, Strategy, Tensor
from layergrad.data.label_stream import Labelled
from layergrad.data.labels import LabelRequest, TrivialLoss
from layergrad.data.sources import DataStream
from layergrad.data.value_checks import reader_refusal
from layergrad.engine.compiled_loss import label_request, output_keys
from layergrad.engine.random_layers import seed_model
from layergrad.model.loss_forms import LossSpec
from layergrad.training.monitor import GradientMonitor
from layergrad.training.rules import chance_loss

if TYPE_CHECKING:
    from layergrad.commands.check.steps import Opened

SCORED_BATCHES = 32  # held-back batches the trained model's predictions are scored on
HOLD_BACK = 5  # every fifth sample is held back from training, to score the trained model


@dataclass(frozen=True)
class Scored:
    """A model trained for `fix`: the fit report, the loss of the trained model's predictions
    (None: not computable), the chance loss of the labels and, with several outputs, each
    output's own."""

    report: FitReport
    served: float | None
    chance: float | None
    outputs: tuple[OutputLoss, ...] = ()
    model: KerasModel | None = None  # the trained model, to be scored by the copies' losses
    baseline: float | None = None  # the rival's predictions scored as `served` is
    accuracy: float | None = None  # a classifier's on the scored batches (`Accuracy`)
    prior_accuracy: float | None = None  # always answering the most frequent class there


@dataclass(frozen=True)
class Ready:
    """A model as `fit` has it before its first step: compiled with its file's optimizer and
    loss, its labelled data open and its labels read and judged (`labels.mismatches`: the
    outputs they do not fit, where `fit` stops with `target_mismatch`)."""

    model: KerasModel
    strategy: Strategy | None
    spec: LossSpec
    labelled: Labelled
    labels: LabelCheck
    data: str


def ready(opened: Opened, data: PathLike, options: FitOptions, limit: int | None) -> Ready:
    """`fit`'s checks before its first step, on the model `opened` (as `session.load` returns
    it): compile it, open the labelled data, read and judge the labels.

    Raises:
        InputError: as `fit_model` does (no loss or optimizer in the file, a loss or an
            optimizer Keras cannot make, data without labels or without samples).
    """
    loaded, _warnings, strategy = opened
    model, info = loaded.model, loaded.info
    keras.utils.set_random_seed(options.seed)
    with strategy.scope() if strategy is not None else contextlib.nullcontext():
        # Keras's deserialize edits the config it reads: the file's (shared) stays as read;
        # `fix` has no --loss nor --optimizer: the file's compile is what it trains with
        spec = compile_for_fit(model, copy.deepcopy(info.compile_config), options, flags=False)
        labelled = read_labelled(model, os.fspath(data), options, limit, spec)
        bound = (options.steps or DEFAULT_STEPS) * options.batch_size
        labels = read_labels(model, info, labelled, spec, options.loss, bound)
        require_samples(labels.samples, data)
    return Ready(model, strategy, spec, labelled, labels, os.fspath(data))


def train_and_score(
    ready: Ready, options: FitOptions, *, rival: KerasModel | None = None
) -> Scored:
    """The model of `ready` trained in place, and scored; and the trained `rival` (the
    original, for a repaired copy) scored on the same batches by the same loss, when its
    outputs can take it (its losses are the `baseline`s).

    Raises:
        InputError: labels `fit` refuses before its first step (`target_mismatch`, its
            message), a model with no trainable weights, or a batch TensorFlow could not
            make.
    """
    model, spec, data = ready.model, ready.spec, ready.data
    if ready.labels.mismatches:  # `fit` stops here: nothing is trained, its message says why
        stopped = refused(model, spec.name, ready.labels.mismatches)
        said = "; ".join(f"{f.code} at {f.layer}: {f.message}" for f in stopped.findings)
        raise InputError(f"the labels do not fit the outputs (before the first step): {said}")
    if not model.trainable_weights:  # its losses move with the batches alone: no verdict
        raise InputError(
            "it has no trainable weights (every layer is frozen: trainable=False), so training "
            "cannot change it; unfreeze the layers that should learn"
        )
    stream = ready.labelled.stream
    assert stream is not None
    seed_model(model, options.seed)  # the original and each copy: the same random draws
    with ready.strategy.scope() if ready.strategy is not None else contextlib.nullcontext():
        units = output_units_of(model, spec)
        prior, samples = ready.labels.trivial, ready.labels.samples
        trained, held = _held_back(stream)
        dataset = training_batches(model, trained, options, samples)
        scored = training_batches(model, held, options, samples)
        steps = options.steps or DEFAULT_STEPS
        chance = prior or chance_loss(spec.name, units)
        monitor = GradientMonitor(
            every=max(1, steps // 50),
            chance_loss=chance,
            batches_per_epoch=max(1, math.ceil(samples / options.batch_size)),
        )
        try:
            model.fit(dataset.repeat(), epochs=1, steps_per_epoch=steps, verbose=0,
                      callbacks=[monitor])  # fmt: skip
        except tf.errors.InvalidArgumentError as exc:
            stream.raise_failure()
            refusal = reader_refusal(exc)  # NaN ids, values outside the input's dtype
            if refusal is not None:
                raise refusal from exc
            raise InputError(f"--data {data}: training stopped: {describe(exc)}") from exc
        stream.raise_failure()
    assert monitor.report is not None
    request = label_request(model, spec)
    hits = Accuracy() if _classifier(request) else None
    (served, outputs), rivals = _served_losses(model, scored, request, rival, hits)
    baseline = None
    if rivals is not None:
        baseline, theirs = rivals
        lost = {o.name: o.final for o in theirs}
        outputs = tuple(replace(o, baseline=lost.get(o.name)) for o in outputs)
    accuracy, prior = hits.result() if hits is not None else (None, None)
    return Scored(monitor.report, served, chance, outputs, model, baseline, accuracy, prior)


def _held_back(stream: DataStream) -> tuple[DataStream, DataStream]:
    """The stream split into the samples trained on and those held back to score the trained
    model (every `HOLD_BACK`-th sample, so a file sorted by class holds back every class)."""

    def part(held: bool) -> DataStream:
        def keep(i: Tensor, _: object) -> Tensor:
            return (i % HOLD_BACK == HOLD_BACK - 1) == held

        split = copy.copy(stream)
        rows = stream.dataset.unbatch().enumerate().filter(keep)
        split.dataset = rows.map(lambda _, row: row).batch(stream.batch_size)
        return split

    return part(held=False), part(held=True)


def _classifier(request: LabelRequest) -> bool:
    """One output under a categorical cross-entropy (sparse or not): one class per sample."""
    return len(request.outputs) == 1 and any("categorical" in n for n in request.losses)


class Accuracy:
    """A classifier's accuracy on the scored batches (the class of its largest output against
    the label's class id, or the largest column of a one-hot row) and the accuracy of always
    answering the most frequent class of those labels (the prior's)."""

    def __init__(self) -> None:
        self.right = 0
        self.counts: dict[int, int] = {}

    def add(self, labels: object, predicted: object) -> None:
        guess = np.asarray(predicted)
        if guess.ndim < 2 or guess.shape[-1] < 2:
            return
        y = np.asarray(labels)
        ids = np.argmax(y, axis=-1) if y.shape == guess.shape else y.reshape(guess.shape[:-1])
        ids = ids.astype("int64").reshape(-1)
        self.right += int(np.sum(np.argmax(guess, axis=-1).reshape(-1) == ids))
        for k, n in zip(*np.unique(ids, return_counts=True), strict=True):
            self.counts[int(k)] = self.counts.get(int(k), 0) + int(n)

    def result(self) -> tuple[float | None, float | None]:
        total = sum(self.counts.values())
        if not total:
            return None, None
        return self.right / total, max(self.counts.values()) / total


Served = tuple[float | None, tuple[OutputLoss, ...]]  # the total loss, each output's


def _served_losses(
    model: KerasModel,
    dataset: Dataset,
    request: LabelRequest,
    rival: KerasModel | None = None,
    hits: Accuracy | None = None,
) -> tuple[Served, Served | None]:
    """The compiled loss of the model's predictions (plain arrays) on the held-back batches and,
    for a model with several outputs, each output's loss and trivial loss on them; and in the
    same pass, on the same batches, `rival`'s predictions scored by `model`'s loss ((None, ())
    when they cannot be: another shape); a classifier's hits are counted in `hits`."""
    several = len(request.outputs) > 1
    trivial = [TrivialLoss(n, u or 0) for n, u in zip(request.losses, request.units, strict=False)]
    mine = _Tally(len(request.outputs))
    theirs = _Tally(len(request.outputs)) if rival is not None else None
    with contextlib.suppress(Exception):  # a model whose loss cannot be recomputed: no score
        losses = _output_losses(model, len(request.outputs)) if several else []
        for x, y in dataset.take(SCORED_BATCHES):
            predicted = model(x, training=False)
            mine.add(model, x, y, predicted, losses)
            if hits is not None:
                hits.add(y, predicted)
            for labels, prior in zip(
                keras.tree.flatten(y), trivial if several else [], strict=False
            ):
                prior.add(np.asarray(labels))
            if rival is not None and theirs is not None and theirs.usable:
                theirs.usable = False  # until this batch is scored
                with contextlib.suppress(Exception):
                    other = rival(x, training=False)
                    if _shapes(other) == _shapes(predicted):  # the same outputs, or no score
                        theirs.add(model, x, y, other, losses)
                        theirs.usable = True
    return mine.result(request, trivial), theirs.result(request, trivial) if theirs else None


class _Tally:
    """One predictor's losses on the scored batches: the total and each output's."""

    def __init__(self, outputs: int) -> None:
        self.values: list[float] = []
        self.per_output: list[list[float]] = [[] for _ in range(outputs)]
        self.usable = True

    def add(
        self,
        model: KerasModel,
        x: object,
        y: object,
        predicted: object,
        losses: list[Callable[..., object]],
    ) -> None:
        """Score one batch of predictions by `model`'s loss (and each output's, `losses`)."""
        plain = tf.nest.map_structure(lambda t: tf.constant(np.asarray(t)), predicted)
        self.values.append(float(np.asarray(model.compute_loss(x=x, y=y, y_pred=plain))))
        if not losses:
            return
        pairs = zip(keras.tree.flatten(y), keras.tree.flatten(plain), strict=True)
        with contextlib.suppress(Exception):  # an output's loss not computable: none scored
            for k, (labels, guess) in enumerate(pairs):
                self.per_output[k].append(float(np.mean(np.asarray(losses[k](labels, guess)))))

    def result(self, request: LabelRequest, trivial: list[TrivialLoss]) -> Served:
        if not self.usable:
            return None, ()
        outputs: tuple[OutputLoss, ...] = ()
        scored = all(len(v) == len(self.values) for v in self.per_output)
        if len(request.outputs) > 1 and self.values and scored:
            outputs = tuple(
                OutputLoss(name, loss, _mean(v), t.value() if t.known else None)
                for name, loss, v, t in zip(
                    request.outputs, request.losses, self.per_output, trivial, strict=False
                )
            )
        return _mean(self.values), outputs


def _shapes(outputs: object) -> list[tuple[int | None, ...]]:
    return [tuple(t.shape) for t in keras.tree.flatten(outputs)]


def _output_losses(model: KerasModel, count: int) -> list[Callable[..., object]]:
    """The compiled loss function of each output, in output order (as `output_names`)."""
    loss = model.loss
    names = list(getattr(model, "output_names", None) or [])
    keys = output_keys(model, count) or names
    if isinstance(loss, Mapping):
        each = [loss.get(n, loss.get(k)) for n, k in zip(names, keys, strict=True)]
    elif isinstance(loss, (list, tuple)):
        each = list(loss)
    else:
        each = [loss] * count
    return [keras.losses.get(v) if isinstance(v, str) else v for v in each]


def _mean(values: list[float]) -> float | None:
    """The mean, None when there is nothing or a value is NaN/Inf."""
    if not values or not all(math.isfinite(v) for v in values):
        return None
    return sum(values) / len(values)
