"""The one loop over the batches of a data set on a `tf.distribute` strategy, and what every
compiled step over data shares.

`over_batches` distributes a `DataStream`, traces the step (`strategy.run` in a
`tf.function`, once: the batch axis is None) and runs one fused call per batch that adds the
step's summaries up in `accumulators.Accumulators` on each replica; a batch that cannot be
read, or that the model fails on, is named in the error. Also here: the model called as it
was built, a replica's empty share of a batch padded and masked so that it adds nothing, and
the model's BatchNormalization statistics left as the file has them after a pass in training
mode.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

import numpy as np

from layergrad.core.errors import InputError, describe
from layergrad.core.probe_options import Progress
from layergrad.core.tf_runtime import tf
from layergrad.core.tf_types import KerasModel, Strategy, Tensor, TFFunction
from layergrad.data.devices import is_multi_worker
from layergrad.data.stats import aggregates
from layergrad.data.stats.accumulators import Accumulators, OneStep, summary_shapes
from layergrad.data.value_checks import reader_refusal
from layergrad.engine.layer_calls import guarded
from layergrad.engine.random_layers import drawing_for, generator_states
from layergrad.model.layer_refs import iter_layers

if TYPE_CHECKING:
    from layergrad.data.sources import DataStream

# a replica's step: one batch (inputs, then labels if the stream has them, then the samples'
# indices in the data) -> its summaries, added up over the batches
ReplicaStep = Callable[[tuple[Tensor, ...]], dict[str, Tensor]]


@dataclass(frozen=True)
class Summed:
    """The summaries added up over every batch (every replica's and worker's), the samples
    (every worker's) and the batches this process ran."""

    totals: dict[str, np.ndarray]
    samples: int
    batches: int


def over_batches(
    stream: DataStream,
    strategy: Strategy,
    replica_step: ReplicaStep,
    on_progress: Progress | None = None,
    model: KerasModel | None = None,
) -> Summed:
    """Run `replica_step` on every batch of `stream` (`stream.indexed()`) under `strategy`.

    Under `--distribute multi-worker` each worker runs its own shard; under another
    strategy each batch is split between the replicas. A probe batch (`stream.probe`, one
    batch) runs eagerly (tracing a large model costs many times its one eager pass) and adds
    up without accumulator variables (`OneStep`).
    The random layers of `model` (the model the step runs) draw each batch's own numbers,
    from the batch's index in the data (`random_layers.drawing_for`).
    `on_progress` is called with (0, samples expected or None) before the step is traced,
    then after each batch with (samples done, samples expected or None).

    Raises:
        InputError: a batch that cannot be read or that the model fails on (with its index),
        or a data set without samples.
    """
    workers = is_multi_worker(strategy)
    if workers:  # each worker runs its own shard; its batches go to its replicas in turn
        dataset = strategy.distribute_datasets_from_function(lambda _: stream.indexed())
    elif is_default(strategy):
        dataset = stream.indexed()
    else:
        dataset = strategy.experimental_distribute_dataset(stream.indexed())
    signature = [] if stream.probe else [dataset.element_spec]
    source = None if stream.probe else stream.source
    done = batches = 0
    where = stream.batch_index  # among all the data's batches
    draws = model is not None and bool(generator_states(model))  # random layers to set
    inputs = len(stream.specs)
    if on_progress is not None:  # the total is known before the trace, which takes a while
        on_progress(0, stream.samples)
    if stream.probe:
        concrete, acc, fused = replica_step, None, None
    else:
        compute = tf.function(  # nothing to convert: autograph would only cost tracing time
            lambda batch: strategy.run(replica_step, args=(batch,)),
            input_signature=signature,
            autograph=False,
        )
        concrete = guarded(compute.get_concrete_function, "the data", source)
        shapes = summary_shapes(strategy, concrete.structured_outputs)
        acc = None if shapes is None else Accumulators(strategy, shapes)
        fused = None if acc is None else _fused_step(strategy, concrete, acc, signature)
    iterator = iter(dataset)
    while True:
        try:
            batch = next(iterator)
        except StopIteration:
            break
        except tf.errors.OpError as exc:
            stream.raise_failure(batches)
            raise _unreadable(exc, stream.source, where(batches), workers) from exc
        parts = [strategy.experimental_local_results(t) for t in batch[:inputs]]
        rows = stream.check_batch(where(batches), parts)
        name = "the probe batch" if stream.probe else f"batch {where(batches)}"
        drawing = drawing_for(model, where(batches)) if draws else nullcontext()
        with drawing:
            if fused is not None:
                guarded(partial(fused, batch), name, source)
            elif stream.probe:
                acc = OneStep()
                acc.update(guarded(partial(concrete, batch), name))
            else:  # a summary's size is only known from the first batch (an open last axis)
                summaries = guarded(partial(concrete, batch), name, source)
                acc = Accumulators(strategy, summary_shapes(strategy, summaries) or {})
                tf.function(lambda s, a=acc: strategy.run(a.update, args=(s,)), autograph=False)(
                    summaries
                )
                fused = _fused_step(strategy, concrete, acc, signature)
        done, batches = done + rows, batches + 1
        if on_progress is not None:
            on_progress(done, stream.samples)
    stream.raise_failure()
    totals = None if acc is None else acc.totals(strategy)
    if workers and totals is not None:  # every worker's samples (this one may have none)
        done = int(totals["samples"].sum())
    if totals is None or not done:
        raise InputError(f"--data {stream.source} holds no samples; expected at least one row")
    return Summed(totals, done, batches)


def _unreadable(exc: Exception, source: str, batch: int, workers: bool) -> InputError:
    """The error for a batch the reader stopped on."""
    refused = reader_refusal(exc)
    if refused is not None:  # a check in the reader (NaN ids, values outside the input's dtype)
        return refused
    if workers:  # the iterator agrees with the other workers at every step
        return InputError(
            f"--data {source}: the run stopped at batch {batch}: {describe(exc)}; when "
            "another worker of the cluster stopped, its error says why"
        )
    return InputError(f"--data {source}: batch {batch} could not be read: {describe(exc)}")


@contextmanager
def moving_statistics_kept(model: KerasModel, training: bool = True) -> Iterator[None]:
    """Put every BatchNormalization's moving statistics back as they were after the block: in
    training mode Keras updates them at each batch, and a rule judged after the pass (a
    never-trained BatchNormalization) or a pass in inference after it must see the model as
    the file has it (nothing to keep for a pass in inference)."""
    saved = []
    if training:  # (a pass in inference moves nothing: no walk over the layers)
        norms = [x for _, x in iter_layers(model) if "BatchNormalization" in type(x).__name__]
        moving = [getattr(n, k, None) for n in norms for k in ("moving_mean", "moving_variance")]
        saved = [(v, v.numpy()) for v in moving if v is not None]
    try:
        yield
    finally:
        for variable, value in saved:
            variable.assign(value)


def pad_if_empty(inputs: Sequence[Tensor], samples: Tensor, empty: Tensor) -> tuple[Tensor, Tensor]:
    """An empty share of a batch gets one row of zeros, whose summaries `masked` drops: the
    model never runs on zero rows (some fused CPU kernels return a wrong shape for them)."""
    extra = tf.reshape(tf.cast(empty, tf.int32), [1])
    padded = []
    for x in inputs:
        zeros = tf.zeros(tf.concat([extra, tf.shape(x)[1:]], 0), x.dtype)
        padded.append(tf.ensure_shape(tf.concat([x, zeros], 0), x.shape))
    return tuple(padded), tf.concat([samples, tf.zeros(extra, samples.dtype)], 0)


def masked(summaries: dict[str, Tensor], empty: Tensor) -> dict[str, Tensor]:
    """The summaries, or for an empty share what adds nothing: 0 to sums, -inf / +inf to
    maxima / minima (whatever the row of zeros gave, NaN included)."""
    out = {}
    for name, value in summaries.items():
        identity = tf.constant(aggregates.initial(aggregates.kind_of(name), ()), tf.float64)
        out[name] = tf.where(empty, tf.fill(tf.shape(value), identity), value)
    return out


def _fused_step(
    strategy: Strategy, concrete: TFFunction, acc: Accumulators, signature: list[Tensor]
) -> TFFunction:
    """One compiled call per batch: the traced step, then adding its summaries up (its
    concrete function: calling it skips the signature matching of each call)."""
    return tf.function(
        lambda batch: strategy.run(acc.update, args=(concrete(batch),)),
        input_signature=signature,
        autograph=False,
    ).get_concrete_function()


def is_default(strategy: Strategy) -> bool:
    """Whether `strategy` is TensorFlow's default one (a single device, no distribution)."""
    return type(strategy).__name__ == "_DefaultDistributionStrategy"
