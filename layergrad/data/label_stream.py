"""The labels of `--data`, read with its inputs from the same rows (each batch holds the
inputs, then the labels, so a worker's part holds its own rows' labels): a `.npz`'s `y` or
`y:NAME`, an image folder's class sub-folders in the form the output's loss takes (Keras's
`label_mode`), a data function's `y`. `Labelled.label_batches` reads the labels alone, for the
per-output summaries and the chance loss (`TrivialLoss`).
"""

from __future__ import annotations

import os
import zipfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import ClassVar

import numpy as np

from layergrad.core.errors import InputError, describe
from layergrad.core.tf_runtime import tf
from layergrad.core.tf_types import Dataset, Tensor
from layergrad.data import images
from layergrad.data.array_records import array_batches
from layergrad.data.functions import Failure, function_source
from layergrad.data.preflight import guarded, source_kind
from layergrad.data.probe_input import is_label
from layergrad.data.shards import Shard
from layergrad.data.sources import (
    DataStream,
    Opening,
    image_batches,
)
from layergrad.data.value_checks import InputSpec, reader_refusal
from layergrad.files.array_files import NpyRows, npz_members
from layergrad.model.label_summary import MAX_CLASSES, LabelSummary


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


class TrivialLoss:
    """The loss of a model that ignores its inputs and predicts the labels' prior, a batch at
    a time: a cross-entropy's is the entropy of the class frequencies (class ids, 0/1 targets
    or one-hot rows), squared error's the targets' variance (predicting their mean), absolute
    error's their mean absolute deviation from the median (predicting the median; from the
    first `SAMPLE_VALUES` values). Labels that cannot be this output's give none (`target_fit`
    says why), counted within the output's units: one huge id allocates nothing."""

    SAMPLE_VALUES = 1_000_000
    _REGRESSION: ClassVar = {"mse": "squared", "meansquarederror": "squared",
                             "mae": "absolute", "meanabsoluteerror": "absolute"}  # fmt: skip

    def __init__(self, loss: str, units: int = 0) -> None:
        key = loss.lower().replace("_", "").replace(" ", "")
        cross = "sparse" if "sparse" in key else "binary" if "binary" in key else "rows"
        self.kind = cross if "crossentropy" in key else self._REGRESSION.get(key, "")
        self.units, self.rows, self.bad = units, 0, False
        self.counts = np.zeros(0)  # per class (cross-entropies), or per column: sums, squares
        self.squares: np.ndarray | float = 0.0
        self.kept: list[np.ndarray] = []

    @property
    def known(self) -> bool:
        """Whether the loss has a trivial value here (a cross-entropy, mse or mae)."""
        return bool(self.kind)

    def add(self, y: np.ndarray) -> None:
        """Take in one batch of labels."""
        y = np.asarray(y)
        if self.kind and not self.bad and y.size:
            self.bad = not self._added(y)

    def _added(self, y: np.ndarray) -> bool:
        if y.dtype.kind not in "biuf" or y.ndim == 0 or not np.all(np.isfinite(y)):
            return False
        if self.kind == "sparse":
            flat = y.reshape(-1)
            ids = flat.astype(np.int64)
            if ids.min() < 0 or ids.max() >= (self.units or MAX_CLASSES) or np.any(ids != flat):
                return False
            found = np.bincount(ids).astype(np.float64)
        elif self.kind == "binary":
            if y.ndim > 1 and y.shape[-1] > 1:
                return False
            found = np.array([np.sum(y), y.size - np.sum(y)], np.float64)
        else:  # one-hot (or soft) rows as wide as the units, or the columns of regression
            rows = y.reshape(len(y), -1) if self.kind in self._REGRESSION.values() else (
                y.reshape(-1, y.shape[-1]))  # fmt: skip
            width = len(self.counts) or (self.units if self.kind == "rows" else 0)
            if (self.kind == "rows" and y.ndim < 2) or (width and rows.shape[1] != width):
                return False
            if self.kind == "absolute" and self.rows * rows.shape[1] < self.SAMPLE_VALUES:
                self.kept.append(rows.astype(np.float64))
            found = rows.sum(axis=0, dtype=np.float64)
            if self.kind == "squared":
                self.squares = np.square(rows, dtype=np.float64).sum(axis=0) + self.squares
        size = max(len(found), len(self.counts))
        self.counts = np.pad(found, (0, size - len(found))) + np.pad(
            self.counts, (0, size - len(self.counts))
        )
        self.rows += len(y)
        return True

    def value(self) -> float | None:
        """The trivial loss (None: unknown, or 0: the labels never vary)."""
        if self.bad or not self.rows:
            return None
        if self.kind == "squared":
            mean = self.counts / self.rows
            found = float(np.mean(np.maximum(self.squares / self.rows - mean * mean, 0.0)))
        elif self.kind == "absolute":
            held = np.concatenate(self.kept)
            found = float(np.mean(np.abs(held - np.median(held, axis=0))))
        else:
            p = self.counts[self.counts > 0] / self.counts.sum()
            found = float(-(p * np.log(p)).sum())
        return found if found > 0 else None


@dataclass(frozen=True)
class Labelled:
    """What `open_labelled` found: the stream of inputs and labels, or why there is none
    (`missing`, a message naming the fix), and an image folder's class names by id."""

    stream: DataStream | None
    missing: str = ""
    labels: Dataset | None = None  # the labels alone, batch by batch
    failure: Failure | None = None
    classes: tuple[str, ...] = ()

    def label_batches(self) -> Iterator[dict[str, np.ndarray]]:
        """The labels alone over the whole data, a batch at a time, keyed as the stream's.

        Raises:
            InputError: the labels cannot be read (the message names the source).
        """
        if self.stream is None or self.labels is None:
            return
        keys = self.stream.labels
        try:
            for batch in self.labels:
                yield dict(zip(keys, (np.asarray(t.numpy()) for t in batch), strict=True))
        except tf.errors.OpError as exc:
            refusal = reader_refusal(exc)  # values outside the labels' dtype
            if refusal is not None:
                raise refusal from None
            raise InputError(
                f"--data {self.stream.source}: its labels cannot be read ({describe(exc)})"
            ) from None
        if self.failure is not None and self.failure.error is not None:
            raise self.failure.error

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
    how = _Opening(os.fspath(path), tuple(specs), batch_size, limit, shard, replicas,
                   first_sample, request, strict)  # fmt: skip
    kind = source_kind(how.text)
    if kind == "npy":
        return Labelled(
            None,
            f"--data {how.text} holds the inputs alone; save the labels beside them in a .npz "
            "(np.savez(FILE, x=x, y=y))",
        )
    return {"npz": _npz, "images": _folder, "function": _function}[kind](how)


@dataclass(frozen=True)
class _Opening(Opening):
    """What `open_labelled` was asked: each reader's arguments."""

    request: LabelRequest
    strict: bool


def _npz(how: _Opening) -> Labelled:
    text, request = how.text, how.request
    chosen, named = _npz_labels(text, request.outputs, how.strict, request.output_keys)
    if not chosen:
        return Labelled(
            None,
            f"--data {text} holds no labels; save them in it as `y` (one output) or `y:NAME` "
            "per output",
        )
    failure, alone = Failure(), Failure()
    stream = how.stream(*array_batches(how, failure, chosen), failure, labels=named)
    only, _, _ = array_batches(replace(how, specs=tuple(chosen), shard=None), alone)
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

    def read() -> tuple[dict[str, NpyRows], list[str]]:
        with zipfile.ZipFile(text) as archive:
            held = {k: v for k, v in npz_members(archive, text).items() if is_label(k)}
            if not held:
                return {}, []
            distinct_outputs(outputs, f"--data {text}")
            key_of = {n: f"y:{n}" if f"y:{n}" in held or n not in aliases else f"y:{aliases[n]}"
                      for n in outputs}  # fmt: skip
            if "y" in held and len(outputs) <= 1:
                key_of, named = {"y": "y"}, ["y"]
            else:
                missing = [n for n in outputs if key_of[n] not in held]
                if strict and (missing or not outputs):
                    raise InputError(
                        f"the labels in --data {text} are {sorted(held)}, but the model has "
                        f"{len(outputs)} outputs ({', '.join(outputs)}); save one array per "
                        "output as `y:NAME` (or `y` for one output, `y:KEY` for an output of a "
                        "dict)"
                    )
                key_of = {n: key_of[n] for n in outputs if n not in missing}
                named = [f"y:{n}" for n in key_of]
            return {k: NpyRows(archive.open(held[k]), f"{text} array {k!r}")
                    for k in key_of.values()}, named  # fmt: skip

    headers, named = guarded(read, text)
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

    batches = image_batches(how, listing.images, column)
    stream = how.stream(*batches, Failure(), labels=["y"], found=listing.images)
    only = column(0, len(ids) if limit is None else limit).batch(how.batch_size)
    return Labelled(stream, labels=only.map(lambda y: (y,)), classes=listing.classes)


def _function(how: _Opening) -> Labelled:
    failure = Failure()
    outputs = how.request.outputs  # labels keyed `y` for one output, `y:NAME` for several
    distinct_outputs(outputs, f"--data {how.text}")
    keys = ("y",) if len(outputs) <= 1 else tuple(f"y:{n}" for n in outputs)
    dataset, rows, part, labelled = function_source(how, failure, outputs, not how.strict)
    stream = how.stream(dataset, rows, part, failure, keys if labelled else ())
    if not labelled:
        return Labelled(
            None,
            f"--data {how.text} gives inputs without labels; yield (x, y) batches (or dicts "
            "with the inputs and `y`) to give them",
        )
    n = len(how.specs)
    return Labelled(stream, labels=stream.whole.map(lambda *b: b[n:]), failure=failure)
