"""Train one model file for `fix` as `fit` does, and score what the trained model outputs.

The run is `fit`'s (the same compile, labels, shuffled batches and `GradientMonitor`, from
`commands/fit/train.py`); what `fix` adds is the loss of the trained model's *predictions*: Keras on
TensorFlow trains a softmax or sigmoid head through the logits it keeps beside the output, so
a head whose outputs are useless (a softmax over one unit is always 1.0) can show a training
loss as good as the repaired one. The served loss is computed from the predictions as plain
arrays, the way a user of the model sees them.
"""

from __future__ import annotations

import contextlib
import copy
import math
import os
from typing import TYPE_CHECKING

import numpy as np

from layergrad.commands.fit.guards import DEFAULT_STEPS
from layergrad.commands.fit.run import (
    compile_for_fit,
    output_units_of,
    prior_and_samples,
    read_labelled,
    training_batches,
)
from layergrad.commands.fit.train import FitOptions
from layergrad.core.errors import InputError, describe
from layergrad.core.fit_results import FitReport
from layergrad.core.probe_options import PathLike
from layergrad.core.tf_runtime import keras, tf
from layergrad.training.monitor import GradientMonitor
from layergrad.training.rules import chance_loss

if TYPE_CHECKING:
    from layergrad.commands.check.steps import Opened

SCORED_BATCHES = 32  # batches of the data the trained model's predictions are scored on


def train_and_score(
    opened: Opened, data: PathLike, options: FitOptions, *, limit: int | None = None
) -> tuple[FitReport, float | None, float | None]:
    """(the fit report, the served loss of the trained model, the chance loss of the labels)
    of the model `opened` (as `session.load` returns it), which is trained in place.

    Raises:
        InputError: as `fit_model` (data without labels, no loss or optimizer, ...).
    """
    loaded, _warnings, strategy = opened
    model, info = loaded.model, loaded.info
    keras.utils.set_random_seed(options.seed)
    with strategy.scope() if strategy is not None else contextlib.nullcontext():
        # Keras's deserialize edits the config it reads: the file's (shared) stays as read
        spec = compile_for_fit(model, copy.deepcopy(info.compile_config), options)
        labelled = read_labelled(model, os.fspath(data), options, limit, spec)
        stream = labelled.stream
        assert stream is not None
        units = output_units_of(model, spec)
        prior, samples = prior_and_samples(labelled, spec.name, options, units)
        dataset = training_batches(model, stream, options, samples)
        steps = options.steps or DEFAULT_STEPS
        chance = prior or chance_loss(spec.name, units)
        monitor = GradientMonitor(every=max(1, steps // 50), chance_loss=chance)
        try:
            model.fit(dataset.repeat(), epochs=1, steps_per_epoch=steps, verbose=0,
                      callbacks=[monitor])  # fmt: skip
        except tf.errors.InvalidArgumentError as exc:
            stream.raise_failure()
            raise InputError(
                f"--data {os.fspath(data)}: training stopped: {describe(exc)}"
            ) from exc
        stream.raise_failure()
    assert monitor.report is not None
    return monitor.report, _served_loss(model, dataset), chance


def _served_loss(model: object, dataset: object) -> float | None:
    """The compiled loss of the model's predictions (plain arrays) on the first batches."""
    values = []
    with contextlib.suppress(Exception):  # a model whose loss cannot be recomputed: no score
        for x, y in dataset.take(SCORED_BATCHES):  # type: ignore[attr-defined]
            predicted = model(x, training=False)  # type: ignore[operator]
            plain = tf.nest.map_structure(lambda t: tf.constant(np.asarray(t)), predicted)
            loss = model.compute_loss(x=x, y=y, y_pred=plain)  # type: ignore[attr-defined]
            values.append(float(np.asarray(loss)))
    finite = [v for v in values if math.isfinite(v)]
    if not values or len(finite) < len(values):
        return None
    return sum(finite) / len(finite)
