"""What every compiled step over data shares: the model called as it was built, a failure of
the model's own ops named by its batch (`BatchFailed`), a replica's empty share of a batch
padded and masked so that it adds nothing, one fused call per batch, and the model's
BatchNormalization statistics left as the file has them after a pass in training mode.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar, cast

from layergrad.core.errors import InputError, describe
from layergrad.core.keras_backend import quiet_import
from layergrad.core.tf_types import (
    KerasModel,
    KerasVariable,
    Strategy,
    Tensor,
    TensorTree,
    TFFunction,
)
from layergrad.data.stats import aggregates
from layergrad.data.stats.accumulators import Accumulators
from layergrad.engine.layer_calls import model_args
from layergrad.model.layer_refs import iter_layers

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., object])


def statistics_kept(func: F) -> F:
    """Run a pass over data, whose first argument is the model, and put every
    BatchNormalization's moving statistics back as they were: in training mode Keras updates
    them at each batch, and a rule judged after the pass (a never-trained BatchNormalization)
    or a pass in inference after it must see the model as the file has it."""

    @functools.wraps(func)
    def kept(model: KerasModel, *args: object, **kwargs: object) -> object:
        saved = [(v, v.numpy()) for v in _moving_statistics(model)]
        try:
            return func(model, *args, **kwargs)
        finally:
            for variable, value in saved:
                variable.assign(value)

    return cast(F, kept)


def _moving_statistics(model: KerasModel) -> Iterator[KerasVariable]:
    for _, layer in iter_layers(model):
        if "BatchNormalization" in type(layer).__name__:
            for name in ("moving_mean", "moving_variance"):
                variable = getattr(layer, name, None)
                if variable is not None:
                    yield variable


def pad_if_empty(inputs: Sequence[Tensor], samples: Tensor, empty: Tensor) -> tuple[Tensor, Tensor]:
    """An empty share of a batch gets one row of zeros, whose summaries `masked` drops: the
    model never runs on zero rows (some fused CPU kernels return a wrong shape for them)."""
    tf, _ = quiet_import()
    extra = tf.reshape(tf.cast(empty, tf.int32), [1])
    padded = []
    for x in inputs:
        zeros = tf.zeros(tf.concat([extra, tf.shape(x)[1:]], 0), x.dtype)
        padded.append(tf.ensure_shape(tf.concat([x, zeros], 0), x.shape))
    return tuple(padded), tf.concat([samples, tf.zeros(extra, samples.dtype)], 0)


def masked(summaries: dict[str, Tensor], empty: Tensor) -> dict[str, Tensor]:
    """The summaries, or for an empty share what adds nothing: 0 to sums, -inf / +inf to
    maxima / minima (whatever the row of zeros gave, NaN included)."""
    tf, _ = quiet_import()
    out = {}
    for name, value in summaries.items():
        identity = tf.constant(aggregates.initial(aggregates.kind_of(name), ()), tf.float64)
        out[name] = tf.where(empty, tf.fill(tf.shape(value), identity), value)
    return out


def fused_step(
    strategy: Strategy, concrete: TFFunction, acc: Accumulators, signature: list[Tensor]
) -> TFFunction:
    """One compiled call per batch: the traced step, then adding its summaries up (its
    concrete function: calling it skips the signature matching of each call)."""
    tf, _ = quiet_import()
    return tf.function(
        lambda batch: strategy.run(acc.update, args=(concrete(batch),)),
        input_signature=signature,
        autograph=False,
    ).get_concrete_function()


def is_default(strategy: Strategy) -> bool:
    """Whether `strategy` is TensorFlow's default one (a single device, no distribution)."""
    return type(strategy).__name__ == "_DefaultDistributionStrategy"


class BatchFailed(InputError):
    """The model's own code failed on a batch (a shape it was not built for, an id out of
    range): an input error, which `check` records as the file's `error` finding."""


def guarded(run: Callable[[], T], what: str, source: str | None = None) -> T:
    """Run the step; a failure of the model's own ops names the batch."""
    tf, _ = quiet_import()
    where = f"--data {source}: " if source else ""
    try:
        return run()
    except (tf.errors.OpError, ValueError, TypeError) as exc:
        detail = re.sub(r"\s*\[\[\{\{node [^]]*\]\]|\s*\[Op:[^]]*\]", "", describe(exc))
        raise BatchFailed(
            f"{where}the model failed on {what}: {detail}; check the values and shapes "
            "of the data (ids inside the vocabulary, the shape the model was built for)"
        ) from exc


def call_model(model: KerasModel, inputs: list[Tensor], training: bool) -> TensorTree:
    """Call the model the way it was built to be called (one tensor, a list or a dict)."""
    return model(model_args(model, inputs), training=training)
