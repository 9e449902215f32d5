"""The training run of `layergrad fit` on a model already loaded (`train.fit_model` loads it
after its checks): compile it, read the labelled batches of `--data`, read the labels once
before the first step, shuffle the batches within a buffer of at most SHUFFLE_BUFFER samples
and SHUFFLE_BYTES of inputs (memory stays bounded) and train with `GradientMonitor` on. `fix`
trains its repaired copy with the same parts.

Whether each output can take its labels is the `target_mismatch` rule of `check --data`
(`model/target_fit.py`), so a label problem is a finding before training, never a failure
inside TensorFlow's graph; the same pass gives the trivial loss (`data/label_stream.py`
`TrivialLoss`: the loss of predicting the labels' prior) and the samples the data holds.
"""

from __future__ import annotations

import contextlib
import copy
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

import numpy as np

from layergrad.commands.check.verdicts import head_losses, output_ranks
from layergrad.commands.fit.checks import (
    DEFAULT_STEPS,
    FitOptions,
    Notice,
    check_unsized,
    unsized_epoch_notice,
)
from layergrad.commands.session import data_specs
from layergrad.core.errors import InputError, describe
from layergrad.core.fit_results import FitReport
from layergrad.core.probe_options import PathLike
from layergrad.core.results import Reason
from layergrad.core.tf_runtime import keras, tf
from layergrad.core.tf_types import Dataset, KerasCallback, KerasModel, Strategy, TensorTree
from layergrad.core.vocab import Finding, Severity
from layergrad.data.label_stream import Labelled, TrivialLoss, label_keys, open_labelled
from layergrad.data.sources import DataStream
from layergrad.data.stall import stall_watch
from layergrad.data.value_checks import reader_refusal, tf_dtype
from layergrad.diagnose import causes as why
from layergrad.diagnose.forward_findings import raw_input
from layergrad.engine.compiled_loss import compile_loss, label_request
from layergrad.engine.layer_calls import model_args, model_targets
from layergrad.engine.loader import LoadedModel
from layergrad.engine.random_layers import seed_model
from layergrad.engine.trace import run_trace
from layergrad.files.file_info import FileInfo
from layergrad.model.label_summary import LabelSummary
from layergrad.model.layer_refs import iter_layers
from layergrad.model.loss_fit import Head, output_heads, per_output
from layergrad.model.loss_forms import LossSpec, find_loss
from layergrad.model.target_fit import target_mismatches
from layergrad.training.monitor import GradientMonitor
from layergrad.training.rules import chance_loss

SHUFFLE_BUFFER = 10_000  # samples held for shuffling at most: memory stays bounded
SHUFFLE_BYTES = 64 << 20  # and at most this many bytes of inputs (64 MiB: images are large)
TEXT_ITEM_BYTES = 256  # a string in the shuffle buffer, counted generously (a sentence)


def train_loaded(
    loaded: LoadedModel,
    strategy: Strategy | None,
    data: PathLike,
    options: FitOptions,
    limit: int | None,
    stall_timeout: float | None,
    on_stall: Notice | None,
    on_notice: Notice | None,
) -> FitReport:
    """`fit_model`'s run once the model is loaded (under `strategy`, if any)."""
    seed_model(loaded.model, options.seed)  # Keras's random state and the random layers' draws
    with (
        strategy.scope() if strategy is not None else contextlib.nullcontext(),
        stall_watch(stall_timeout, on_stall, os.fspath(data)) as watch,
    ):
        beat = watch.beat if watch is not None else (lambda _: None)
        ready = make_ready(loaded, strategy, data, options, limit, beat, on_notice)
        model, labels = ready.model, ready.labels
        if labels.refusals:  # before the first step, as `check --data` says it
            report = refused(model, ready.spec.name, labels.refusals)
            return replace(report, path=loaded.info.path, data=ready.data)
        scale = input_scale(model, loaded.info, ready.stream)  # the untrained copy, first batch
        beats = keras.callbacks.LambdaCallback(  # the stall watch hears of every batch
            on_train_begin=lambda logs: beat(0), on_train_batch_end=lambda batch, logs: beat(1)
        )
        report, _, _ = fit_steps(ready, ready.stream, options, beats)
    notes = report.notes
    if ready.labelled.classes:
        notes += (ready.labelled.classes_note(),)
    found = (*labels.warnings, *((scale,) if scale is not None else ()), *report.findings)
    return replace(report, path=loaded.info.path, data=ready.data, notes=notes, findings=found)


@dataclass(frozen=True)
class Ready:
    """A model as `fit` has it before its first step: compiled with its file's optimizer and
    loss (or the options'), its labelled data open and its labels read and judged
    (`labels.refusals`: the outputs they do not fit, where `fit` stops with
    `target_mismatch`)."""

    model: KerasModel
    strategy: Strategy | None
    spec: LossSpec
    labelled: Labelled
    labels: LabelCheck
    data: str
    stream: DataStream  # the labelled batches (`make_ready` refuses data without labels)


def make_ready(
    loaded: LoadedModel,
    strategy: Strategy | None,
    data: PathLike,
    options: FitOptions,
    limit: int | None,
    beat: Callable[[int], None] | None = None,
    on_notice: Notice | None = None,
    *,
    flags: bool = True,
) -> Ready:
    """`fit`'s steps before the first (under `strategy`'s scope, entered by the caller):
    compile the model, open the labelled data, read the labels once (a source that does not
    say its size: at most the samples the run trains on) and judge them against each output.
    `beat` is told of each batch of labels read; `flags`: as for `compile_for_fit`.

    Raises:
        InputError: no loss or optimizer in the file, a loss or an optimizer Keras cannot
            make, data without labels or without samples, an unsized epoch past its bound.
    """
    model, info, path = loaded.model, loaded.info, os.fspath(data)
    # Keras's deserialize edits the config it reads: the file's (shared) stays as read
    spec = compile_for_fit(model, copy.deepcopy(info.compile_config), options, flags=flags)
    request = label_request(model, spec)
    labelled = open_labelled(path, data_specs(model), request, options.batch_size, limit)
    stream = labelled.stream
    if stream is None:
        command = "fit" if flags else "fix"  # (`fix` trains with the file's compile)
        raise InputError(f"layergrad {command} needs labels: {labelled.missing}")
    known = stream.samples
    if known is None and options.epochs is not None and on_notice is not None:
        on_notice(unsized_epoch_notice(data, limit))
    bound = None if options.epochs else (options.steps or DEFAULT_STEPS) * options.batch_size
    names, ranks = output_ranks(model)
    units = [u or 0 for u in request.units]
    trivial = TrivialLoss(spec.name, units[0] if units else 0) if len(stream.labels) == 1 else None
    summaries: dict[str, LabelSummary] = {}
    seen = 0
    for batch in labelled.label_batches():
        for name, key in label_keys(names, list(batch)).items():
            summaries.setdefault(name, LabelSummary()).add(batch[key], ranks.get(name))
        y = next(iter(batch.values()))
        if trivial is not None:
            trivial.add(y)
        seen += len(y) if getattr(y, "ndim", 0) else 1
        if beat is not None:
            beat(1)
        if known is None and bound is None:
            check_unsized(seen, data)
        if known is None and seen >= (bound or UNKNOWN_READ):
            break  # a source that does not say how many samples it has may have no end
    found = tuple(_mismatches(info, names, units, summaries, spec, options.loss))
    labels = LabelCheck(found, trivial.value() if trivial else None, known or seen, summaries)
    if labels.samples == 0:  # training on nothing proves nothing
        raise InputError(f"--data {path}: no samples (0 rows); fit needs data to train on")
    return Ready(model, strategy, spec, labelled, labels, path, stream)


def fit_steps(
    ready: Ready,
    trained: DataStream,
    options: FitOptions,
    *others: KerasCallback,
    held: Dataset | None = None,
    rival: KerasModel | None = None,
) -> tuple[FitReport, float | None, Predicted]:
    """Keras's `fit` on the shuffled batches of `trained` (`ready`'s stream, or a part of it)
    for `options.epochs`, else `options.steps` over the repeated batches, with
    `GradientMonitor` on: its report, the chance loss it judged by, and (`fix`) the trained
    model's and the trained `rival`'s predictions of the `held` batches (as far as they can
    be made). A batch tf.data could not make is an InputError (a value the data's checks
    refuse: a DataError naming it)."""
    model, labels, stream = ready.model, ready.labels, ready.stream
    dataset = training_batches(model, trained, options, labels.samples)
    batches = max(1, math.ceil(labels.samples / options.batch_size))
    total = batches * options.epochs if options.epochs else options.steps or DEFAULT_STEPS
    units = [u or 0 for u in label_request(model, ready.spec).units]  # 0: not known
    chance = labels.trivial or chance_loss(ready.spec.name, units)
    monitor = GradientMonitor(
        every=options.every or max(1, total // 50),
        log_dir=options.log_dir,
        chance_loss=chance,
        # --steps trains one Keras epoch over the repeated data: count passes over it
        batches_per_epoch=None if options.epochs is not None else batches,
    )
    callbacks = [monitor, *others]
    try:
        if options.epochs is not None:
            model.fit(dataset, epochs=options.epochs, verbose=0, callbacks=callbacks)
        else:
            steps = options.steps or DEFAULT_STEPS
            model.fit(dataset.repeat(), epochs=1, steps_per_epoch=steps, verbose=0,
                      callbacks=callbacks)  # fmt: skip
    except tf.errors.InvalidArgumentError as exc:
        stream.raise_failure()
        refusal = reader_refusal(exc)  # NaN ids, values outside the input's dtype
        if refusal is not None:
            raise refusal from exc
        raise InputError(f"--data {ready.data}: training stopped: {describe(exc)}") from exc
    stream.raise_failure()  # a Python reader that failed ended the data early
    assert monitor.report is not None
    predicted: Predicted = []
    with contextlib.suppress(Exception):  # a model that cannot predict them: no score
        for x, y in held if held is not None else ():
            other = None
            if rival is not None:
                try:
                    other = rival(x, training=False)
                except Exception:  # the rival cannot predict them (other outputs): not scored,
                    rival = None  # and not asked again
            predicted.append((x, y, model(x, training=False), other))
    return monitor.report, chance, predicted


# each held-back batch: inputs, labels, the trained model's predictions, the rival's (or None)
Predicted = list[tuple[TensorTree, TensorTree, TensorTree, TensorTree | None]]


def input_scale(model: KerasModel, info: FileInfo, stream: DataStream) -> Reason | None:
    """`input_range` before the first step, as `check --data` says it on the first batch:
    raw pixels or features in raw units reaching the first layer with weights unscaled (the
    data's own statistics; a ReLU network never shows them by saturating). None when the
    inputs are in range or the trace cannot be run (training then says what it sees)."""
    try:
        trace = run_trace(model, stream.batch(0))
    except Exception:  # the model's own code, a batch the stream cannot make again
        return None
    layers = dict(iter_layers(model))
    found = raw_input(trace, info.graph, layers)
    if found is None:
        return None
    cause = why.input_range(found)
    return Reason(Finding.INPUT_RANGE, str(cause), layer=cause.layer, step=0)


def compile_for_fit(
    model: KerasModel, compiled: Mapping[str, object], options: FitOptions, *, flags: bool = True
) -> LossSpec:
    """Compile with the file's (or the given) optimizer and loss; return the loss. `flags`:
    the command has `--loss` and `--optimizer` to offer (`fix` has not: it trains the file's)."""
    spec = find_loss(compiled, options.loss)
    # a legacy .h5 file keeps it as `optimizer_config` (Keras 3's own .h5 writer too)
    raw = options.optimizer or compiled.get("optimizer") or compiled.get("optimizer_config")
    if spec is None:
        loss = f"--loss {suggested_loss(model)}"
        if raw is None:  # both at once, not one error after the other
            both = f"pass --loss NAME --optimizer NAME, e.g. {loss} --optimizer adam"
            raise InputError(
                "the model was saved without a loss or an optimizer (no model.compile); "
                + (both if flags else _next_step(flags, "", "a loss and an optimizer"))
            )
        raise InputError(
            "the model was saved without a loss (no model.compile); "
            + _next_step(flags, loss, "a loss")
        )
    if raw is None:
        raise InputError(
            "the model was saved without an optimizer (no model.compile); "
            + _next_step(flags, "--optimizer adam", "an optimizer")
        )
    try:
        optimizer = keras.optimizers.get(raw)  # a name or a config
    except (ValueError, TypeError, KeyError) as exc:
        why = (  # a class that needs arguments a name cannot give (LossScaleOptimizer)
            f"it needs the argument {exc.args[0]!r}, which a name cannot give"
            if isinstance(exc, KeyError) and exc.args
            else str(exc)
        )
        why = why if len(why) <= 240 else why[:239] + "…"  # Keras repeats the whole config
        raise InputError(
            f"--optimizer {raw} is not an optimizer Keras can make from a name ({why}); use a "
            "keras.optimizers name such as adam or sgd"
            if options.optimizer is not None
            else f"the optimizer in the file is not one Keras can make ({why}); "
            + _next_step(flags, "--optimizer adam", "a keras.optimizers optimizer")
        ) from exc
    if options.learning_rate is not None:
        optimizer.learning_rate = options.learning_rate
    else:  # the file's rate is held to what --learning-rate must be
        _check_rate(optimizer, flags)
    compile_loss(model, spec, optimizer=optimizer)
    return spec


def _check_rate(optimizer: object, flags: bool) -> None:
    """Refuse a compiled learning rate (a schedule's, at its first step) that is not a positive
    finite number: a negative one climbs the loss, which training would read as a rate too
    high."""
    try:
        rate = float(np.asarray(getattr(optimizer, "learning_rate", 1.0)))
    except (TypeError, ValueError):
        return  # a callable rate: Keras calls it as it trains
    if 0 < rate < math.inf:
        return
    said = "climbs the loss" if rate < 0 else "cannot train" if rate == 0 else "is no number"
    raise InputError(
        f"the optimizer in the file has learning_rate={rate:g}: a rate must be a positive "
        f"finite number, and this one {said}; "
        + _next_step(flags, "--learning-rate 1e-3", "a positive rate", "LR")
    )


def suggested_loss(model: KerasModel) -> str:
    """A loss that fits the model's (first) output, to suggest: a cross-entropy for a softmax
    or sigmoid head, else the squared error."""
    try:
        layer = model.outputs[0]._keras_history[0]
    except (AttributeError, IndexError, TypeError, ValueError):
        return "sparse_categorical_crossentropy"
    activation = getattr(getattr(layer, "activation", None), "__name__", "")
    name = type(layer).__name__.lower()
    if "softmax" in (activation, name):
        return "sparse_categorical_crossentropy"
    if "sigmoid" in (activation, name):
        return "binary_crossentropy"
    return "mean_squared_error"


def _next_step(flags: bool, example: str, what: str, value: str = "NAME") -> str:
    """The next step: the flag to pass (`example`), or (`fix`, no `flags`) the compile to
    save again."""
    if flags:
        return f"pass {example.split()[0]} {value}, e.g. {example}"
    return f"compile the model with {what} and save it again (fix trains with the file's compile)"


def training_batches(
    model: KerasModel, stream: DataStream, options: FitOptions, samples: int
) -> Dataset:
    """(x, y) batches, shuffled within a bounded buffer."""

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


UNKNOWN_READ = 1_000_000  # labels read at most from a source of unknown length (--epochs)


@dataclass(frozen=True)
class LabelCheck:
    """What the labels hold: the outputs they do not fit, the trivial loss, the samples, each
    output's labels summarised (by output name)."""

    mismatches: tuple[Reason, ...]
    trivial: float | None
    samples: int
    summaries: Mapping[str, LabelSummary]

    @property
    def refusals(self) -> tuple[Reason, ...]:
        """The mismatches that stop a run before its first step (their rules fail)."""
        return tuple(m for m in self.mismatches if m.severity is Severity.FAIL)

    @property
    def warnings(self) -> tuple[Reason, ...]:
        """The mismatches whose rules only warn (such models train: the run goes on and its
        own findings say whether this one does), as findings at step 0."""
        said = (m for m in self.mismatches if m.severity is Severity.WARN)
        return tuple(replace(m, message=str(m), hint="", step=0) for m in said)  # as `refused`


def _mismatches(
    info: FileInfo,
    names: list[str],
    units: list[int],
    labels: Mapping[str, LabelSummary],
    spec: LossSpec,
    loss: str | None,
) -> list[Reason]:
    """`target_mismatches` with the file's output heads (the rule of `check --data`), or,
    when the file does not say which layers make the outputs, heads of unknown activation
    with the model's output widths."""
    if not labels:
        return []
    heads = output_heads(info.config, info.graph) if info.graph.known else []
    if not heads or len(heads) != len(names):
        heads = [Head(n, n, "unknown", u or None) for n, u in zip(names, units, strict=False)]
    if len(heads) == 1 and len(labels) == 1:  # `y`: however Keras names the one output
        labels = {heads[0].name: next(iter(labels.values()))}
    elif {h.name for h in heads} == set(names):  # by name: the heads' order may differ
        labels = {h.name: labels[h.name] for h in heads if h.name in labels}
    else:
        labels = {h.name: labels[n] for h, n in zip(heads, names, strict=False) if n in labels}
    names = [h.name for h in heads]
    specs, custom = head_losses(info, loss, names)
    if not specs or (all(s is None for s in specs) and not custom):
        specs = per_output(spec.name, names)
    return target_mismatches(heads, specs, labels, custom)


def refused(model: KerasModel, loss: str, mismatches: tuple[Reason, ...]) -> FitReport:
    """The report of a run that never started: each mismatch a `target_mismatch` finding at
    step 0 (before the first step)."""
    optimizer = getattr(model, "optimizer", None)
    findings = tuple(
        Reason(Finding.TARGET_MISMATCH, f"{m.message}. Fix: {m.hint}", layer=m.layer, step=0)
        for m in mismatches
    )
    return FitReport(
        model=str(model.name),
        model_class=type(model).__name__,
        every=0,
        steps=0,
        epochs=0,
        loss_name=loss,
        optimizer=type(optimizer).__name__ if optimizer is not None else "",
        learning_rate=None,
        losses=(),
        checkpoints=(),
        findings=findings,
        stopped=Finding.TARGET_MISMATCH.value,
    )
