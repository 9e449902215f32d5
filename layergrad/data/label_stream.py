"""The labels of `--data`, read with its inputs from the same rows: the one label reader of
`fit`, `scan --wrt weights --data` and `check --data`.

- a `.npz`: `y` (one output) or `y:NAME` per output, read as records beside the inputs;
- a folder of images: the class of each image, from its class sub-folder, as
  `keras.utils.image_dataset_from_directory(labels="inferred")` infers it (`images.
  class_listing`), in the form the output's loss takes, as Keras's `label_mode` gives it:
  class ids (`int`), one-hot rows as wide as the output (`categorical`), or 0/1 for one
  binary unit (`binary`);
- a data function: `y` of each `(x, y)` element (`data/functions.py`), from the same element
  as its x: one call of the function per pass.

Each batch of the stream holds the inputs, then the labels (`DataStream.labels` names them
`y`, or `y:NAME` per output). Under `--distribute multi-worker` a worker's part is cut from
those batches, so it holds its own rows' labels. `Labelled.label_batches` reads the labels
over the whole data, for the label summaries of `check` and the class prior of `fit`: alone
from a file or a folder (no image decoded, no input array read); a data function runs whole
(its elements hold both).

The labels are summarised per output (`target_fit.LabelSummary`: `summarise_arrays` for `y`
or `y:NAME` of an `--input` `.npz`, `summarise_batches` for `label_batches`) and as the class
prior a classifier's chance loss is the entropy of (`ClassPrior`, `TrivialLoss`); both add up
a batch at a time, so memory does not grow with the data.
"""

from __future__ import annotations

import os
import zipfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from layergrad.core.errors import InputError, describe
from layergrad.core.tf_runtime import tf
from layergrad.core.tf_types import Dataset, Tensor
from layergrad.data import images
from layergrad.data.array_records import npz_batches
from layergrad.data.functions import Failure, function_source
from layergrad.data.input_keys import is_label
from layergrad.data.preflight import check_sizes, source_kind
from layergrad.data.shards import Part, Shard, input_context
from layergrad.data.sources import (
    DataStream,
    batch_signature,
    finish_stream,
    image_batches,
)
from layergrad.data.value_checks import InputSpec, reader_refusal
from layergrad.files.array_files import DAMAGE, NpyRows, npz_members
from layergrad.model.target_fit import MAX_CLASSES, LabelSummary


@dataclass(frozen=True)
class LabelRequest:
    """The labels a model takes: per output (in output order) its name, the kind of labels
    its loss reads (`engine.compiled_loss.label_kind`: ids, one_hot, bits, positive,
    normal), its loss's name and the units of its last axis (None: unknown)."""

    outputs: tuple[str, ...]
    kinds: tuple[str, ...] = ()
    losses: tuple[str, ...] = ()
    units: tuple[int | None, ...] = ()
    # a model whose outputs are a dict keyed apart from its layers: each output's key
    output_keys: tuple[str, ...] = ()

    def keys(self) -> tuple[str, ...]:
        """How the labels are keyed: `y` for one output, `y:NAME` for each of several."""
        return ("y",) if len(self.outputs) <= 1 else tuple(f"y:{n}" for n in self.outputs)


def label_keys(names: Sequence[str], keys: Sequence[str]) -> dict[str, str]:
    """{output name: array key} for the label arrays among `keys` (`y`, or `y:NAME`)."""
    if len(names) == 1 and "y" in keys:
        return {names[0]: "y"}
    return {n: f"y:{n}" for n in names if f"y:{n}" in keys}


def by_output_name(
    labels: Mapping[str, np.ndarray], names: Sequence[str], keys: Sequence[str] | None
) -> dict[str, np.ndarray]:
    """`labels` with each `y:KEY` of an output of a dict keyed apart from its layer (`keys`,
    the dict keys in output order) renamed `y:NAME` after the output's name, as the rest of
    layergrad reads them; a `y:NAME` given as well wins."""
    out = dict(labels)
    for name, key in zip(names, keys or (), strict=False):
        if f"y:{name}" not in out and f"y:{key}" in out:
            out[f"y:{name}"] = out.pop(f"y:{key}")
    return out


def summarise_arrays(
    arrays: Mapping[str, np.ndarray], names: Sequence[str], ranks: Mapping[str, int]
) -> dict[str, LabelSummary]:
    """Summaries of labels held in memory (the `--input` batch)."""
    return summarise_batches([arrays], names, ranks)


def summarise_batches(
    batches: Iterable[Mapping[str, np.ndarray]], names: Sequence[str], ranks: Mapping[str, int]
) -> dict[str, LabelSummary]:
    """Summaries of the labels of every batch (each keyed `y` or `y:NAME`), per output name."""
    out: dict[str, LabelSummary] = {}
    for batch in batches:
        for name, key in label_keys(names, list(batch)).items():
            out.setdefault(name, LabelSummary()).add(batch[key], ranks.get(name))
    return out


class ClassPrior:
    """The class frequencies of one output's labels, batch by batch, for the chance loss of a
    cross-entropy `loss`: class ids (sparse), 0/1 targets (binary) or one-hot rows."""

    def __init__(self, loss: str, units: int = 0) -> None:
        name = loss.lower().replace("_", "")
        self.kind = (
            "" if "crossentropy" not in name
            else "sparse" if "sparse" in name
            else "binary" if "binary" in name
            else "rows"
        )  # fmt: skip
        self.units = units
        size = {"sparse": units, "binary": 2}.get(self.kind, 0)
        self.counts = np.zeros(size, np.float64)
        self.seen = 0
        self.bad = False  # labels with no single prior (negative ids, several binary outputs)

    def add(self, y: np.ndarray) -> None:
        """Take in one batch of labels."""
        y = np.asarray(y)
        if not self.kind or self.bad or not y.size:
            return
        if self.kind == "sparse":
            flat = y.reshape(-1)
            if y.dtype.kind not in "biuf" or not np.all(np.isfinite(flat)):
                self.bad = True
                return
            ids = flat.astype(np.int64)
            size = self.units or MAX_CLASSES
            if ids.min() < 0 or ids.max() >= size or np.any(ids != flat):
                self.bad = True  # (not class ids of this output: `target_fit` says so)
                return
            # counted within the units only: one huge id must not allocate its size
            found = np.bincount(ids, minlength=len(self.counts)).astype(np.float64)
            found[: len(self.counts)] += self.counts
            self.counts = found
        elif y.dtype.kind not in "biuf":
            self.bad = True
            return
        elif self.kind == "binary":
            if (y.ndim > 1 and y.shape[-1] > 1) or not np.all(np.isfinite(y)):
                self.bad = True
                return
            self.counts += [float(np.sum(y)), float(y.size - np.sum(y))]
        else:  # one-hot (or soft) rows, one per sample, as wide as the units
            width = len(self.counts) or self.units
            if y.ndim < 2 or (width and y.shape[-1] != width) or not np.all(np.isfinite(y)):
                self.bad = True  # (not rows of this output: `target_fit` says so)
                return
            rows = y.reshape(-1, y.shape[-1]).astype(np.float64)
            self.counts = rows.sum(axis=0) + (self.counts if len(self.counts) else 0)
        self.seen += int(y.shape[0]) if y.ndim else 1

    def entropy(self) -> float | None:
        """The cross-entropy of predicting the labels' own class frequencies (None: no prior
        or a prior of one class)."""
        if not self.kind or self.bad or not self.counts.sum():
            return None
        p = self.counts / self.counts.sum()
        p = p[p > 0]
        entropy = float(-(p * np.log(p)).sum())
        return entropy if entropy > 0 else None


class TrivialLoss:
    """The loss of a model that ignores its inputs and predicts the labels' prior, batch by
    batch: the class frequencies' cross-entropy (`ClassPrior`), the targets' variance for
    squared error (predicting their mean), their mean absolute deviation from the median
    for absolute error (predicting the median; from the first `SAMPLE_VALUES` values)."""

    SAMPLE_VALUES = 1_000_000

    def __init__(self, loss: str, units: int = 0) -> None:
        key = loss.lower().replace("_", "").replace(" ", "")
        self.prior = ClassPrior(loss, units)
        self.kind = (
            "squared" if key in ("mse", "meansquarederror")
            else "absolute" if key in ("mae", "meanabsoluteerror")
            else ""
        )  # fmt: skip
        self.total: np.ndarray | None = None  # per column, float64
        self.squares: np.ndarray | None = None
        self.rows = 0
        self.kept: list[np.ndarray] = []
        self.kept_values = 0
        self.bad = False

    @property
    def known(self) -> bool:
        """Whether the loss has a trivial value here (a cross-entropy, mse or mae)."""
        return bool(self.prior.kind or self.kind)

    def add(self, y: np.ndarray) -> None:
        """Take in one batch of labels."""
        y = np.asarray(y)
        if self.prior.kind:
            self.prior.add(y)
            return
        if not self.kind or self.bad or not y.size:
            return
        if y.dtype.kind not in "biuf" or y.ndim == 0:
            self.bad = True
            return
        rows = y.reshape(len(y), -1).astype(np.float64)
        if not np.all(np.isfinite(rows)):
            self.bad = True
            return
        if self.total is not None and self.total.shape != rows.shape[1:]:
            self.bad = True
            return
        if self.kind == "squared":
            self.total = rows.sum(axis=0) + (0 if self.total is None else self.total)
            self.squares = (rows * rows).sum(axis=0) + (0 if self.squares is None else self.squares)
        elif self.kept_values < self.SAMPLE_VALUES:
            self.kept.append(rows)
            self.kept_values += rows.size
            self.total = np.zeros(rows.shape[1:])
        self.rows += len(rows)

    def value(self) -> float | None:
        """The trivial loss (None: unknown, or 0: the labels never vary)."""
        if self.prior.kind:
            return self.prior.entropy()
        if self.bad or not self.rows:
            return None
        if self.kind == "squared" and self.total is not None and self.squares is not None:
            mean = self.total / self.rows
            variance = np.maximum(self.squares / self.rows - mean * mean, 0.0)
            found = float(np.mean(variance))
        elif self.kept:
            held = np.concatenate(self.kept)
            found = float(np.mean(np.abs(held - np.median(held, axis=0))))
        else:
            return None
        return found if found > 0 else None


class Labelled:
    """What `open_labelled` found: the stream of inputs and labels, or why there is none
    (`missing`, a message naming the fix), and an image folder's class names by id."""

    def __init__(
        self,
        stream: DataStream | None,
        missing: str = "",
        labels: Dataset | None = None,
        failure: Failure | None = None,
        classes: tuple[str, ...] = (),
    ) -> None:
        self.stream, self.missing, self.classes = stream, missing, classes
        self._labels, self._failure = labels, failure

    def label_batches(self) -> Iterator[dict[str, np.ndarray]]:
        """The labels alone over the whole data, a batch at a time, keyed as the stream's.

        Raises:
            InputError: the labels cannot be read (the message names the source).
        """
        if self.stream is None or self._labels is None:
            return
        keys = self.stream.labels
        try:
            for batch in self._labels:
                yield dict(zip(keys, (np.asarray(t.numpy()) for t in batch), strict=True))
        except tf.errors.OpError as exc:
            refusal = reader_refusal(exc)  # values outside the labels' dtype
            if refusal is not None:
                raise refusal from None
            raise InputError(
                f"--data {self.stream.source}: its labels cannot be read ({describe(exc)})"
            ) from None
        if self._failure is not None and self._failure.error is not None:
            raise self._failure.error

    def classes_note(self) -> str:
        """What a report says of an image folder's labels: where they come from, by class."""
        source = self.stream.source if self.stream is not None else "the folder"
        return (
            f"labels from the class sub-folders of {source}, as "
            f"keras.utils.image_dataset_from_directory infers them: {self.describe_classes()}"
        )

    def describe_classes(self, shown: int = 20) -> str:
        """`0 cat, 1 dog, ...`: the class of each id (the first `shown`)."""
        named = [f"{i} {name}" for i, name in enumerate(self.classes[:shown])]
        more = len(self.classes) - shown
        return ", ".join(named) + (f" and {more} more" if more > 0 else "")


def open_labelled(
    path: str | os.PathLike[str],
    specs: Sequence[InputSpec],
    request: LabelRequest,
    batch_size: int,
    limit: int | None = None,
    shard: Shard | None = None,
    replicas: int = 1,
    first_sample: int = 0,
    strict: bool = True,
) -> Labelled:
    """Open `--data PATH` with its labels, for a model with inputs `specs` and outputs as
    `request` says (arguments as for `sources.open_data`).

    `strict` (fit, the weight scan): labels that cannot be the outputs' targets are refused
    (an image folder with more classes than the output has units, or more than two for one
    binary unit). Without it (check), they are read in Keras's own form, for the
    `target_mismatch` rules to judge.

    Raises:
        InputError: the data does not fit the inputs; the labels do not fit the outputs (a
            `.npz` without one array per output; with `strict`, see above); images lie both
            in the folder and in class sub-folders.
    """
    text = os.fspath(path)
    check_sizes(batch_size, limit)
    kind = source_kind(text)
    if kind == "npy":
        return Labelled(
            None,
            f"--data {text} holds the inputs alone; save the labels beside them in a .npz "
            "(np.savez(FILE, x=x, y=y))",
        )
    how = _Opening(text, tuple(specs), request, batch_size, limit, shard, replicas, first_sample,
                   strict)  # fmt: skip
    if kind == "npz":
        return _npz(how)
    return _folder(how) if kind == "images" else _function(how)


@dataclass(frozen=True)
class _Opening:
    """What `open_labelled` was asked: each reader's arguments."""

    text: str
    specs: tuple[InputSpec, ...]
    request: LabelRequest
    batch_size: int
    limit: int | None
    shard: Shard | None
    replicas: int
    first_sample: int
    strict: bool

    def stream(
        self,
        dataset: Dataset,
        rows: int | None,
        part: Part | None,
        failure: Failure,
        labels: Sequence[str],
        found: Sequence[images.ImageFile] | None = None,
    ) -> DataStream:
        """The source's `DataStream` of these batches (`sources.finish_stream`)."""
        return finish_stream(
            self.text, self.specs, dataset, rows, part, failure, self.batch_size, self.limit,
            self.shard, self.first_sample, labels=labels, found=found,
        )  # fmt: skip


def _npz(how: _Opening) -> Labelled:
    text, specs, batch_size, limit = how.text, how.specs, how.batch_size, how.limit
    request = how.request
    chosen, named = _npz_labels(text, request.outputs, how.strict, request.output_keys)
    if not chosen:
        return Labelled(
            None,
            f"--data {text} holds no labels; save them in it as `y` (one output) or `y:NAME` "
            "per output",
        )
    failure, alone = Failure(), Failure()
    signature = (*batch_signature(specs), *batch_signature(chosen))
    dataset, rows, part = npz_batches(
        text, specs, batch_size, limit, signature, failure, how.shard, labels=chosen
    )
    stream = how.stream(dataset, rows, part, failure, labels=named)
    only, _, _ = npz_batches(text, chosen, batch_size, limit, batch_signature(chosen), alone)
    return Labelled(stream, labels=only, failure=alone)


def _npz_labels(
    text: str, outputs: Sequence[str], strict: bool, keys: Sequence[str] = ()
) -> tuple[list[InputSpec], list[str]]:
    """The label arrays of a `.npz` as specs named by their keys, in output order: `y` for a
    model with one output (or no output names, as a Sequential model), `y:NAME` per output
    name, or `y:KEY` for an output of a dict keyed apart from its layer (`keys`, in output
    order). Without `strict`, those of the outputs that have some. With them, how the stream
    names each (`y`, or `y:NAME` by the output's name)."""
    aliases = dict(zip(outputs, keys, strict=True)) if len(keys) == len(outputs) else {}
    try:
        with zipfile.ZipFile(text) as archive:
            members = npz_members(archive, text)
            held = {k: v for k, v in members.items() if is_label(k)}
            if not held:
                return [], []
            distinct_outputs(outputs, f"--data {text}")
            if "y" in held and len(outputs) <= 1:
                chosen = {"y": held["y"]}
                named = ["y"]
            else:
                key_of = {
                    n: f"y:{n}" if f"y:{n}" in held or n not in aliases else f"y:{aliases[n]}"
                    for n in outputs
                }
                missing = [n for n in outputs if key_of[n] not in held]
                if strict and (missing or not outputs):
                    raise InputError(
                        f"the labels in --data {text} are {sorted(held)}, but the model has "
                        f"{len(outputs)} outputs ({', '.join(outputs)}); save one array per "
                        "output as `y:NAME` (or `y` for one output, `y:KEY` for an output of a "
                        "dict)"
                    )
                chosen = {key_of[n]: held[key_of[n]] for n in outputs if n not in missing}
                named = [f"y:{n}" for n in outputs if n not in missing]
            headers = {
                name: NpyRows(archive.open(member), f"{text} array {name!r}")
                for name, member in chosen.items()
            }
    except InputError:
        raise
    except DAMAGE as exc:  # zipfile's many errors of a damaged archive
        raise InputError(
            f"--data {text} is not a readable .npz file ({exc}); write it with np.savez"
        ) from None
    for name, rows in headers.items():
        if rows.dtype.kind not in "biuf":  # strings, objects: no loss reads them
            raise InputError(
                f"--data {text}: the labels {name!r} are not numbers (dtype {rows.dtype}, shape "
                f"{rows.shape}); save class ids or numeric targets, e.g. "
                "`classes, y = np.unique(labels, return_inverse=True)`"
            )
    return [InputSpec(n, tuple(r.shape[1:]), str(r.dtype)) for n, r in headers.items()], named


def distinct_outputs(outputs: Sequence[str], where: str) -> None:
    """Refuse labels for outputs that share a name (one layer called more than once): the
    labels are keyed by output name (`y:NAME`), which cannot tell them apart."""
    shared = next((n for n in dict.fromkeys(outputs) if outputs.count(n) > 1), None)
    if shared is not None:
        raise InputError(
            f"{where}: the model has {outputs.count(shared)} outputs named {shared!r} (one "
            f"layer called {outputs.count(shared)} times), and labels keyed `y:{shared}` cannot "
            "tell them apart; give each output a layer of its own name (keras.layers."
            "Identity(name='head_a') after each call) and label each as `y:NAME`"
        )


@dataclass(frozen=True)
class FolderForm:
    """How an image folder's class ids become one output's labels, as Keras's `label_mode`
    would: `int` (the ids), `categorical` (one-hot rows `depth` wide) or `binary` (0.0 / 1.0,
    one per image); `problem` says why they cannot be that output's targets."""

    mode: str
    depth: int = 0
    problem: str | None = None

    def encode(self, ids: Tensor) -> Tensor:
        """The labels of images of class `ids` (int32, one per image)."""
        if self.mode == "categorical":
            return tf.one_hot(ids, self.depth, dtype=tf.float32)
        if self.mode == "binary":
            return tf.expand_dims(tf.cast(ids, tf.float32), -1)
        return ids


def folder_form(request: LabelRequest, classes: int, where: str) -> FolderForm:
    """The form the one output's loss takes its labels in (sparse: ids; categorical: one-hot
    of the output's units; binary with one unit: 0/1; any other loss: ids, Keras's default)."""
    kind = request.kinds[0] if request.kinds else ""
    units = request.units[0] if request.units else None
    loss = request.losses[0] if request.losses else "its loss"
    output = f"output '{request.outputs[0]}'" if request.outputs else "the output"
    several = f"{where} has {classes} classes (one per sub-folder)"
    if kind == "one_hot" or (kind == "bits" and units is not None and units > 1):
        if units is not None and classes > units:
            return FolderForm("categorical", classes, f"{several}, but {output} has {units} units "
                              f"for one-hot rows ({loss}); give it one unit per class, "
                              f"Dense({classes})")  # fmt: skip
        return FolderForm("categorical", units or classes)
    if kind == "bits":
        if classes > 2:
            return FolderForm("int", 0, f"{several}, but {output} is one unit with {loss}, "
                              f"which tells two apart; use Dense({classes}, activation="
                              "'softmax') with sparse_categorical_crossentropy")  # fmt: skip
        return FolderForm("binary")
    if kind == "ids" and units is not None and classes > units:
        return FolderForm("int", 0, f"{several}, but {output} has {units} units: class ids "
                          f"must lie in 0 to {units - 1}; give it one unit per class, "
                          f"Dense({classes})")  # fmt: skip
    return FolderForm("int")


def _folder(how: _Opening) -> Labelled:
    text, request, strict, limit = how.text, how.request, how.strict, how.limit
    where = f"--data {text}"
    listing = images.class_listing(text)
    if not listing.classes:
        return Labelled(
            None,
            f"{where} has its images directly in the folder, with no class sub-folders, so "
            f"they have no labels; put each class's images in a sub-folder of its own "
            f"({os.path.join(text, 'cat')}, {os.path.join(text, 'dog')}, ...), as "
            "keras.utils.image_dataset_from_directory reads them",
        )
    if listing.loose:
        loose = f"{listing.loose[0]}{', ...' if len(listing.loose) > 1 else ''}"
        count = len(listing.loose)
        message = (
            f"{where}: {count} image{'s lie' if count > 1 else ' lies'} directly in the folder, "
            f"outside its class sub-folders ({loose}), and Keras's image_dataset_from_directory "
            "would skip them; move each into the sub-folder of its class"
        )
        if strict:
            raise InputError(message)
        return Labelled(None, message)
    if len(request.outputs) > 1:
        return Labelled(
            None,
            f"{where} gives one label per image (its class sub-folder), but the model has "
            f"{len(request.outputs)} outputs ({', '.join(request.outputs)}); give the labels "
            "through FILE.py:function",
        )
    form = folder_form(request, len(listing.classes), where)
    if form.problem is not None and strict:
        raise InputError(form.problem)
    ids = np.asarray(listing.ids, np.int32)

    def column(start: int, stop: int) -> Dataset:
        return tf.data.Dataset.from_tensor_slices(ids[start:stop]).map(form.encode)

    dataset, rows, part = image_batches(
        text, how.specs, how.batch_size, limit, how.shard, listing.images, column
    )
    stream = how.stream(dataset, rows, part, Failure(), labels=["y"], found=listing.images)
    only = column(0, len(ids) if limit is None else limit).batch(how.batch_size)
    return Labelled(stream, labels=only.map(lambda y: (y,)), classes=listing.classes)


def _function(how: _Opening) -> Labelled:
    text, specs, shard = how.text, how.specs, how.shard
    failure = Failure()
    context = input_context(shard, how.replicas)
    distinct_outputs(how.request.outputs, f"--data {text}")
    batches = function_source(text, specs, how.batch_size, how.limit, batch_signature(specs),
                              failure, context, outputs=how.request.outputs,
                              weights_ignored=not how.strict)  # fmt: skip
    if not batches.labelled:
        return Labelled(
            None,
            f"--data {text} gives inputs without labels; yield (x, y) batches (or dicts with "
            "the inputs and `y`) to give them",
        )
    part = None
    if shard is not None and batches.sharded:  # the function returned its own shard
        part = Part(batches.dataset.prefetch(tf.data.AUTOTUNE), None)
    stream = how.stream(batches.dataset, batches.rows, part, failure, labels=how.request.keys())
    n = len(specs)
    return Labelled(stream, labels=stream.whole.map(lambda *b: b[n:]), failure=failure)
