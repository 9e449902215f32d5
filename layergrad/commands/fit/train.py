"""`layergrad fit`: train a copy of a saved model in memory, with `GradientMonitor` on.

The file is read, audited and loaded in safe mode like every command; the loaded model is the
copy that trains (nothing is ever written back). It is compiled with the optimizer and loss
of its file (a fresh optimizer state, from the compiled config) or `--optimizer` / `--loss`,
and trained on `--data` for `--steps` or `--epochs`. The labels come with the data, read
with the inputs from the same rows (`data/label_stream.py`): `y` (one output) or `y:NAME`
per output in a `.npz`, the class sub-folders of an image folder (in the form the loss takes),
or `y` of the `(x, y)` elements a data function yields. Samples are shuffled within a buffer
of at most SHUFFLE_BUFFER samples and SHUFFLE_BYTES of inputs, so memory stays bounded.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, cast

import numpy as np

from layergrad.commands.fit.guards import (
    Notice,
    beating,
    check_before_loading,
    check_options,
    check_unsized,
    require_samples,
    unsized_epoch_notice,
)
from layergrad.commands.session import load
from layergrad.core.errors import InputError, describe
from layergrad.core.fit_results import FitReport
from layergrad.core.probe_options import PathLike, ProbeOptions
from layergrad.core.tf_types import Dataset, KerasModel, TensorTree

if TYPE_CHECKING:
    from layergrad.core.vocab import Distribute
    from layergrad.data.label_stream import Labelled
    from layergrad.data.sources import DataStream
    from layergrad.model.loss_forms import LossSpec

DEFAULT_STEPS = 300
SHUFFLE_BUFFER = 10_000  # samples held for shuffling at most: memory stays bounded
SHUFFLE_BYTES = 64 << 20  # and at most this many bytes of inputs (64 MiB: images are large)
TEXT_ITEM_BYTES = 256  # a string in the shuffle buffer, counted generously (a sentence)


@dataclass(frozen=True)
class FitOptions:
    """How `layergrad fit` trains: `steps` or `epochs` (not both; neither: DEFAULT_STEPS),
    rows per batch, the learning rate, loss and optimizer overriding the file's (None keeps
    them), a checkpoint `every` steps (None: about 50 checkpoints), TensorBoard `log_dir`."""

    steps: int | None = None
    epochs: int | None = None
    batch_size: int = 32
    learning_rate: float | None = None
    loss: str | None = None
    optimizer: str | None = None
    every: int | None = None
    seed: int = 0
    log_dir: str | None = None

    def __post_init__(self) -> None:
        if self.steps is not None and self.epochs is not None:
            raise InputError("--steps and --epochs exclude each other; pass one of them")
        for name in ("steps", "epochs", "batch_size", "every"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise InputError(f"--{name.replace('_', '-')} must be at least 1: {name}={value}")
        check_options(self.learning_rate, self.optimizer, self.loss)


def fit_model(
    path: PathLike,
    data: PathLike | None,
    options: FitOptions | None = None,
    *,
    limit: int | None = None,
    distribute: str | None = None,
    cpu_replicas: int | None = None,
    imports: Sequence[str] = (),
    unsafe: bool = False,
    stall_timeout: float | None = None,
    on_stall: Notice | None = None,
    on_notice: Notice | None = None,
) -> FitReport:
    """Train a copy of the model in `path` on `data` with the gradient monitor on.

    Args:
        path: a `.keras` or `.h5` model file (never written).
        data: data with labels (`data/label_stream.py`): a `.npz` with the model's inputs by
            name and `y` (or `y:NAME` per output), a folder of images in class sub-folders,
            or `FILE.py:function` / `module:function` yielding `(x, y)`.
        options: steps or epochs, batch size, learning rate, loss, optimizer.
        limit: read at most this many samples.
        distribute, cpu_replicas: train under `MirroredStrategy` (see `ProbeOptions`).
        imports, unsafe: as for every command.
        stall_timeout, on_stall: call `on_stall(message)` (from another thread) when no
            batch has come for this many seconds (`data/stall.py`); none by default.
        on_notice: called with what the run should say while it works (a source that does
            not say its size, under `--epochs`); the API never prints.

    Returns:
        The `FitReport`: every step's loss, the checkpoints, the findings.

    Raises:
        InputError: no `--data` (training on random labels proves nothing), data without
            labels or with labels the outputs cannot take, no loss or optimizer to train with.
    """
    options = options or FitOptions()
    if data is None:
        raise InputError(
            "layergrad fit needs --data with labels (a .npz with the inputs and `y`, a folder "
            "of class sub-folders, or a function yielding (x, y)): training on random labels "
            "proves nothing"
        )
    check_before_loading(options.log_dir, data, distribute)
    probe = ProbeOptions(
        batch_size=options.batch_size,
        seed=options.seed,
        data=data,
        limit=limit,
        distribute=cast("Distribute | None", distribute),  # its word: ProbeOptions checks it
        cpu_replicas=cpu_replicas,
    )
    loaded, _warnings, strategy = load(path, probe, imports=imports, unsafe=unsafe)
    model, info = loaded.model, loaded.info
    from layergrad.core.keras_backend import quiet_import
    from layergrad.data.stall import stall_watch

    tf, keras = quiet_import()
    keras.utils.set_random_seed(options.seed)
    with (
        strategy.scope() if strategy is not None else contextlib.nullcontext(),
        stall_watch(stall_timeout, on_stall, os.fspath(data)) as watch,
    ):
        spec = compile_for_fit(model, info.compile_config, options)
        labelled = read_labelled(model, os.fspath(data), options, limit, spec)
        stream = labelled.stream
        assert stream is not None
        if stream.samples is None and options.epochs is not None and on_notice is not None:
            on_notice(unsized_epoch_notice(data, limit))
        beat = watch.beat if watch is not None else (lambda _: None)
        from layergrad.commands.fit.labels import read_labels, refused

        bound = None if options.epochs else (options.steps or DEFAULT_STEPS) * options.batch_size
        unsized = stream.samples is None and bound is None

        def on_batch(seen: int) -> None:
            beat(1)
            if unsized:
                check_unsized(seen, data)

        labels = read_labels(model, info, labelled, spec, options.loss, bound, on_batch)
        if labels.mismatches:  # before the first step, as `check --data` says it
            report = refused(model, spec.name, labels.mismatches)
            return replace(report, path=info.path, data=os.fspath(data))
        prior, samples = labels.trivial, labels.samples
        require_samples(samples, data)
        dataset = training_batches(model, stream, options, samples)
        batches = max(1, math.ceil(samples / options.batch_size))
        total = batches * options.epochs if options.epochs else options.steps or DEFAULT_STEPS
        every = options.every or max(1, total // 50)
        from layergrad.training.monitor import GradientMonitor
        from layergrad.training.rules import chance_loss

        chance = prior or chance_loss(spec.name, output_units_of(model, spec))
        monitor = GradientMonitor(every=every, log_dir=options.log_dir, chance_loss=chance)
        callbacks = [monitor, beating(beat)]
        try:
            if options.epochs is not None:
                model.fit(dataset, epochs=options.epochs, verbose=0, callbacks=callbacks)
            else:
                steps = options.steps or DEFAULT_STEPS
                model.fit(dataset.repeat(), epochs=1, steps_per_epoch=steps, verbose=0,
                          callbacks=callbacks)  # fmt: skip
        except tf.errors.InvalidArgumentError as exc:  # a batch tf.data could not make
            stream.raise_failure()
            raise InputError(
                f"--data {os.fspath(data)}: training stopped: {describe(exc)}"
            ) from exc
        stream.raise_failure()  # a Python reader that failed ended the data early
    assert monitor.report is not None
    notes = monitor.report.notes
    if labelled.classes:
        notes += (labelled.classes_note(),)
    return replace(monitor.report, path=info.path, data=os.fspath(data), notes=notes)


def compile_for_fit(
    model: KerasModel, compiled: Mapping[str, object], options: FitOptions
) -> LossSpec:
    """Compile with the file's (or the given) optimizer and loss; return the loss."""
    from layergrad.core.keras_backend import quiet_import
    from layergrad.engine.compiled_loss import compile_loss
    from layergrad.model.loss_forms import find_loss

    _, keras = quiet_import()
    spec = find_loss(compiled, options.loss)
    if spec is None:
        raise InputError(
            "the model was saved without a loss (no model.compile); pass --loss NAME, e.g. "
            "--loss sparse_categorical_crossentropy"
        )
    # a legacy .h5 file keeps it as `optimizer_config` (Keras 3's own .h5 writer too)
    raw = options.optimizer or compiled.get("optimizer") or compiled.get("optimizer_config")
    if raw is None:
        raise InputError(
            "the model was saved without an optimizer (no model.compile); pass --optimizer "
            "NAME, e.g. --optimizer adam"
        )
    try:
        optimizer = (
            keras.optimizers.get(raw) if isinstance(raw, str) else keras.optimizers.deserialize(raw)
        )
    except (ValueError, TypeError, KeyError) as exc:
        why = (  # a class that needs arguments a name cannot give (LossScaleOptimizer)
            f"it needs the argument {exc.args[0]!r}, which a name cannot give"
            if isinstance(exc, KeyError) and exc.args
            else str(exc)
        )
        raise InputError(
            f"--optimizer {raw if isinstance(raw, str) else 'in the file'} is not an optimizer "
            f"Keras can make from a name ({why}); use a keras.optimizers name such as adam or sgd"
        ) from exc
    if options.learning_rate is not None:
        optimizer.learning_rate = options.learning_rate
    compile_loss(model, spec, optimizer=optimizer)
    return spec


def read_labelled(
    model: KerasModel, path: str, options: FitOptions, limit: int | None, spec: LossSpec
) -> Labelled:
    """The inputs and labels of `--data`, read together (refused when it has no labels)."""
    from layergrad.data.label_stream import open_labelled
    from layergrad.data.probe_input import input_specs
    from layergrad.engine.compiled_loss import label_request

    request = label_request(model, spec)
    labelled = open_labelled(path, input_specs(model), request, options.batch_size, limit)
    if labelled.stream is None:
        raise InputError(f"layergrad fit needs labels: {labelled.missing}")
    return labelled


def prior_and_samples(
    labelled: Labelled, loss: str, options: FitOptions, units: list[int]
) -> tuple[float | None, int]:
    """The trivial loss of the labels (one output: `data/labels.py` `TrivialLoss`) and the
    samples in the data, read from the labels alone in one pass when either is needed: over
    the whole data, or the samples `--steps` trains on when the source does not say how many
    it has. (`fit_model` reads them with `labels.read_labels`, which judges them too.)"""
    from layergrad.data.labels import TrivialLoss

    stream = labelled.stream
    assert stream is not None
    trivial = TrivialLoss(loss, units[0] if units else 0) if len(stream.labels) == 1 else None
    samples = stream.samples
    if (trivial is None or not trivial.known) and samples is not None:
        return None, samples
    bound = None
    if samples is None and options.epochs is None:
        bound = (options.steps or DEFAULT_STEPS) * options.batch_size
    seen = 0
    for batch in labelled.label_batches():
        y = next(iter(batch.values()))
        if trivial is not None:
            trivial.add(y)
        seen += len(y)
        if bound is not None and seen >= bound:
            break
    return (trivial.value() if trivial is not None else None), (samples or seen)


def training_batches(
    model: KerasModel, stream: DataStream, options: FitOptions, samples: int
) -> Dataset:
    """(x, y) batches, shuffled within a bounded buffer."""
    from layergrad.core.keras_backend import quiet_import
    from layergrad.data.functions import tf_dtype
    from layergrad.engine.layer_calls import model_args, model_targets

    tf, keras = quiet_import()
    n = len(stream.specs)

    def pack(*batch: TensorTree) -> tuple[TensorTree, TensorTree]:
        # the inputs as every command calls the model, lists as tuples (as Keras's data
        # adapters give them: tf.data would stack a list of same-shaped inputs into one);
        # the labels (in output order) as the outputs are
        x = keras.tree.lists_to_tuples(model_args(model, batch[:n]))
        return x, model_targets(model, batch[n:])

    row_bytes = sum(
        math.prod(int(d or 1) for d in s.shape)
        * (TEXT_ITEM_BYTES if s.dtype == "string" else np.dtype(tf_dtype(s.dtype)).itemsize)
        for s in stream.specs
    )
    buffer = max(1, min(samples or SHUFFLE_BUFFER, SHUFFLE_BUFFER, SHUFFLE_BYTES // row_bytes))
    dataset = stream.dataset.unbatch().shuffle(buffer, seed=options.seed)
    return dataset.batch(options.batch_size).map(pack).prefetch(tf.data.AUTOTUNE)


def output_units_of(model: KerasModel, spec: LossSpec) -> list[int]:
    """The units of each output's last axis (0: not known), by the rule the labels are read
    with (`compiled_loss.label_request`: a rank-1 output has one unit)."""
    from layergrad.engine.compiled_loss import label_request

    return [u or 0 for u in label_request(model, spec).units]
