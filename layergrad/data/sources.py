"""Resolve `--data PATH` into batches in the model's input order, read as they are used.

PATH is a `.npy` (one input), a `.npz` (one array per input name, or `x` for a model with
one input; `y`, the labels, is ignored; see `data/input_keys.py`), a folder of images, or
`FILE.py:function` / `module:function` returning a `tf.data.Dataset` or any iterable of
batches (`data_functions`). Whatever the source yields is
cut into batches of `batch_size` rows (the last one partial). Files are read a batch at a time
and nothing is kept, so memory does not grow with the number of samples.

Files are checked against the model's inputs from their headers; what a function gives is
checked batch by batch. A bad batch stops the run with an `InputError` that names the batch
and the input. Errors inside the reading thread of `tf.data` are kept and raised by
`DataStream.raise_failure` when the stream ends.

With `shard=(worker, workers)` (`--distribute multi-worker`) each worker reads only its part,
cut on the batches of one process so that every batch, and every sample's index, is the one
of a single run: files by records (a contiguous range of rows, read in place), image folders
by file, a function that takes an argument through the `tf.distribute.InputContext` it is
given (it returns its own shard), and anything else by batch, round robin.
"""

from __future__ import annotations

import os
import sys
import zipfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TypeVar

import numpy as np

from layergrad.core.errors import InputError, UsageError
from layergrad.core.keras_backend import quiet_import
from layergrad.core.tf_types import Dataset, Tensor, TensorSpec
from layergrad.data import images
from layergrad.data.functions import (
    Failure,
    function_source,
    is_function,
    python_dataset,
    tf_dtype,
)
from layergrad.data.input_keys import input_keys
from layergrad.data.probe_input import InputSpec, ProbeBatch, check_fits, fit_array
from layergrad.data.shards import (
    Part,
    Shard,
    input_context,
    part_rows,
    round_robin,
    with_sample_indices,
)
from layergrad.files.array_files import DAMAGE, open_checked, open_member, open_zip
from layergrad.files.guards import require_regular
from layergrad.files.npy_rows import NpyLayout, NpyRows, npy_layout, npz_layouts, npz_members

IMAGE_FORMATS = (".bmp", ".gif", ".jpeg", ".jpg", ".png")  # what Keras decodes
KINDS_HELP = "a .npy or .npz file, a folder of images, or FILE.py:function / module:function"


class DataStream:
    """The batches of one `--data` source.

    `dataset` yields tuples of tensors in the model's input order, `batch_size` rows each
    (the last may be shorter), prefetched: this worker's part when the source is sharded
    (`whole` is then every batch, read again for a diagnosis). `samples` is how many rows to
    expect (None when the source does not say).
    """

    def __init__(
        self,
        source: str,
        specs: Sequence[InputSpec],
        dataset: Dataset,
        samples: int | None,
        failure: Failure,
        checked: bool = False,
        batch_size: int = 1,
        part: Part | None = None,
        first_sample: int = 0,
    ) -> None:
        self.source, self.specs, self.whole = source, tuple(specs), dataset
        self.samples, self._failure, self.checked = samples, failure, checked
        self.batch_size, self.part, self.first_sample = batch_size, part, first_sample
        # names what made batch N unreadable (the image that does not decode), if it can
        self.explain: Callable[[int], str | None] | None = None
        self.dataset = dataset if part is None else part.dataset
        if part is not None:
            self.samples = part.samples

    def batch_index(self, local: int) -> int:
        """The index among every batch of the data of this process's batch `local`."""
        if self.part is None:
            return local
        return self.part.first_batch + local * self.part.stride

    def indexed(self) -> Dataset:
        """The batches this process runs, each followed by its samples' indices in the data
        (int64, counted from `first_sample` over the whole source)."""
        if self.part is not None and self.part.indexed is not None:
            if not self.first_sample:
                return self.part.indexed
            return self.part.indexed.map(lambda *b: (*b[:-1], b[-1] + self.first_sample))
        offset = 0 if self.part is None else self.part.offset
        return with_sample_indices(self.dataset, self.first_sample + offset)

    def check_batch(self, index: int, parts: Sequence[Sequence[Tensor]]) -> int:
        """Check batch `index` (per input, its pieces on each replica); return its rows.

        A source whose shapes were checked already (a file, an image folder) is only
        counted."""
        if self.checked:
            return sum(int(p.shape[0]) for p in parts[0]) if parts else 0
        where = f"--data {self.source}: batch {index}"
        rows = [sum(int(p.shape[0]) for p in pieces) for pieces in parts]
        if len(set(rows)) > 1:
            sizes = ", ".join(f"{s.name}: {n}" for s, n in zip(self.specs, rows, strict=True))
            raise InputError(
                f"{where}: the inputs have different batch sizes ({sizes}); give every input "
                "the same number of rows"
            )
        for spec, pieces, n in zip(self.specs, parts, rows, strict=True):
            for piece in pieces:
                check_fits((n, *piece.shape[1:]), piece.dtype.as_numpy_dtype, spec, where)
        return rows[0] if rows else 0

    def raise_failure(self, batch: int | None = None) -> None:
        """Raise the error that stopped a Python reader, if one did; with ``batch``, also the
        one `explain` finds for that batch (the image that does not decode)."""
        if self._failure.error is not None:
            raise self._failure.error
        if batch is not None and self.explain is not None:
            found = self.explain(self.batch_index(batch))
            if found:
                raise InputError(found)

    def batch(self, index: int) -> ProbeBatch:
        """Batch `index` again, as arrays (the source is read again up to it)."""
        for i, tensors in enumerate(self.whole):
            if i == index:
                arrays = tuple(np.asarray(t.numpy()) for t in tensors)
                return ProbeBatch(arrays, tuple(s.name for s in self.specs), self.source, None)
        self.raise_failure()
        raise InputError(f"--data {self.source} has no batch {index}")


def precheck(path: str | os.PathLike[str]) -> None:
    """What can be checked of `--data PATH` before TensorFlow starts: each file is a regular
    file (links followed), headers and archives are sound, each image's size within budget.

    Raises:
        InputError: as `open_data` would, for everything that does not need the model.
    """
    text = os.fspath(path)
    lowered = text.lower()
    if lowered.endswith(".npy") and os.path.lexists(text):
        size = open_checked(text, "--data")
        with open(text, "rb") as stream:
            NpyRows(stream, text, size)
    elif lowered.endswith(".npz") and os.path.lexists(text):
        size = open_checked(text, "--data")
        with open_zip(Path(text), size, "--data") as archive:
            for name, member in _guarded(lambda: npz_members(archive, text), text).items():
                info = archive.getinfo(member)
                with open_member(archive, info, Path(text), "--data") as stream:
                    _guarded(lambda s=stream, n=name, i=info: NpyRows(  # type: ignore[misc]
                        s, f"{text}, array {n!r},", i.file_size), text)  # fmt: skip
    elif os.path.isdir(text):
        images.list_images(text)
    elif is_function(text):
        target = text.rpartition(":")[0]
        if target.endswith(".py") and os.path.lexists(target):
            require_regular(Path(target), "a Python file", lambda m: InputError(f"--data {m}"))


def open_data(
    path: str | os.PathLike[str],
    specs: Sequence[InputSpec],
    batch_size: int,
    limit: int | None = None,
    shard: Shard | None = None,
    replicas: int = 1,
    first_sample: int = 0,
) -> DataStream:
    """Open `--data PATH` for a model with inputs `specs`.

    Args:
        path: `.npy`, `.npz`, an image folder, or `FILE.py:function` / `module:function`.
        specs: the model's inputs (`inputs.input_specs(model)`).
        batch_size: rows per batch.
        limit: read at most this many samples.
        shard: (this worker, workers): read this worker's part only (see the module).
        replicas: replicas in sync over every worker (for a function's InputContext).
        first_sample: the index of the data's first sample in a larger data set.

    Raises:
        InputError: the source is missing, of an unknown kind, or does not fit the inputs.

    Example (not run)::

        stream = open_data("x.npy", input_specs(model), batch_size=32)
        stream.samples  # 20000
    """
    text = os.fspath(path)
    if batch_size < 1:
        raise UsageError(f"--batch-size must be at least 1: batch_size={batch_size}")
    if limit is not None and limit < 1:
        raise UsageError(f"--limit must be at least 1: limit={limit}")
    kind = source_kind(text)
    tf, _ = quiet_import()
    failure = Failure()
    signature = tuple(tf.TensorSpec((None, *s.shape), tf_dtype(s.dtype)) for s in specs)
    rows: int | None
    part: Part | None = None
    if kind == "npy":
        dataset, rows, part = _npy(text, specs, batch_size, limit, shard)
    elif kind == "npz":
        dataset, rows, part = _npz(text, specs, batch_size, limit, signature, failure, shard)
    elif kind == "images":
        dataset, rows, part = _images(text, specs, batch_size, limit, shard)
    else:
        dataset, rows, sharded = function_source(
            text, specs, batch_size, limit, signature, failure, input_context(shard, replicas)
        )
        if shard is not None and sharded:  # the function returned its own shard
            part = Part(dataset.prefetch(tf.data.AUTOTUNE), None)
    samples = rows if limit is None or rows is None else min(rows, limit)
    if samples is None and limit is not None:
        samples = limit
    dataset = dataset.prefetch(tf.data.AUTOTUNE)
    if shard is not None and part is None:
        part = round_robin(dataset, shard, batch_size)
    stream = DataStream(
        text, specs, dataset, samples, failure, checked=not is_function(text),
        batch_size=batch_size, part=part, first_sample=first_sample,
    )  # fmt: skip
    if os.path.isdir(text):  # a batch that fails to decode: name its image
        found = images.list_images(text)
        find = images.locate_failure(text, found, int(specs[0].shape[2] or 0))
        stream.explain = lambda b: find(b * batch_size, (b + 1) * batch_size)
    return stream


def source_kind(path: str) -> str:
    """What `--data PATH` is: "npy", "npz", "images" (a folder) or "function".

    Raises:
        InputError: the file, folder or `FILE.py` does not exist, or is of no kind read here.
    """
    lowered = path.lower()
    if lowered.endswith((".npy", ".npz")):
        if not os.path.isfile(path):
            raise InputError(f"--data {path}: no such file; expected {KINDS_HELP}.")
        return lowered[-3:]
    if os.path.isdir(path):
        return "images"
    if is_function(path):
        target = path.rsplit(":", 1)[0]
        if target.endswith(".py") and not os.path.isfile(target):
            raise InputError(f"--data {path}: no such file {target}; pass FILE.py:function.")
        return "function"
    if not os.path.exists(path):
        raise InputError(f"--data {path}: no such file or folder; expected {KINDS_HELP}.")
    raise InputError(f"--data {path}: not a kind of data layergrad reads; expected {KINDS_HELP}.")


def check_source(path: str | os.PathLike[str], specs: Sequence[InputSpec] | None) -> None:
    """Check `--data PATH` as far as the files' headers go, without TensorFlow: that it
    exists, and, with the model's inputs `specs` (None: not known yet), that a `.npy` or
    `.npz` holds an array of the right shape and dtype for every input.

    Raises:
        InputError: as `open_data` would, for the same fault.
    """
    text = os.fspath(path)
    precheck(text)  # special files, forged headers, archive members: before anything else
    kind = source_kind(text)
    if specs is None:
        return
    if kind == "npy":
        _npy_layout(text, specs)
    elif kind == "npz":
        _npz_layouts(text, specs)


def _npy_layout(path: str, specs: Sequence[InputSpec]) -> NpyLayout:
    if len(specs) != 1:
        raise InputError(
            f"--data {path} holds one array but the model has {len(specs)} inputs "
            f"({', '.join(s.name for s in specs)}); save them with "
            "np.savez(FILE, **{name: array}) and pass the .npz"
        )
    layout = npy_layout(path)
    check_fits(layout.shape, layout.dtype, specs[0], f"--data {path}")
    return layout


def _npy(
    path: str, specs: Sequence[InputSpec], batch_size: int, limit: int | None, shard: Shard | None
) -> tuple[Dataset, int, Part | None]:
    layout = _npy_layout(path, specs)
    rows = layout.shape[0]
    return (
        _records([layout], specs, batch_size, limit),
        rows,
        _records_part([layout], specs, batch_size, limit, rows, shard),
    )


def _records_part(
    layouts: Sequence[NpyLayout],
    specs: Sequence[InputSpec],
    batch_size: int,
    limit: int | None,
    rows: int,
    shard: Shard | None,
) -> Part | None:
    """This worker's rows of arrays read in place: the records outside them are skipped as
    header and footer bytes, so nothing else is read."""
    if shard is None:
        return None
    total = rows if limit is None else min(rows, limit)
    start, stop = part_rows(total, batch_size, shard)
    cut = [
        NpyLayout(
            path=lay.path,
            shape=(stop - start, *lay.shape[1:]),
            dtype=lay.dtype,
            offset=lay.offset + start * lay.row_bytes,
            footer=lay.footer + (rows - stop) * lay.row_bytes,
        )
        for lay in layouts
    ]
    tf, _ = quiet_import()
    dataset = _records(cut, specs, batch_size, None).prefetch(tf.data.AUTOTUNE)
    return Part(dataset, stop - start, offset=start, first_batch=start // batch_size)


def _npz(
    path: str,
    specs: Sequence[InputSpec],
    batch_size: int,
    limit: int | None,
    signature: tuple[TensorSpec, ...],
    failure: Failure,
    shard: Shard | None = None,
) -> tuple[Dataset, int, Part | None]:
    stored, total = _npz_layouts(path, specs)
    in_place = [s for s in stored if s is not None]
    if len(in_place) == len(stored):  # np.savez: tf.data reads the rows in place
        return (
            _records(in_place, specs, batch_size, limit),
            total,
            _records_part(in_place, specs, batch_size, limit, total, shard),
        )

    def read() -> Iterator[tuple[np.ndarray, ...]]:  # np.savez_compressed: inflate as we go
        with zipfile.ZipFile(path) as archive:
            for part in _chunks(_npz_readers(archive, path, specs), batch_size, limit):
                yield tuple(
                    fit_array(a, s, f"--data {path}") for a, s in zip(part, specs, strict=True)
                )

    return python_dataset(read, signature, failure, path), total, None


def _npz_members(archive: zipfile.ZipFile, path: str, specs: Sequence[InputSpec]) -> dict[str, str]:
    """Input name -> the archive member holding its array (see `data/input_keys.py`)."""
    names = npz_members(archive, path)
    keys = input_keys(names, [s.name for s in specs], f"--data {path}")
    return {s.name: names[keys[s.name]] for s in specs}


def _npz_readers(archive: zipfile.ZipFile, path: str, specs: Sequence[InputSpec]) -> list[NpyRows]:
    return [
        NpyRows(archive.open(member), f"{path} array {name!r}")
        for name, member in _npz_members(archive, path, specs).items()
    ]


def _npz_layouts(path: str, specs: Sequence[InputSpec]) -> tuple[list[NpyLayout | None], int]:
    """Where each input's rows lie (None: compressed) and how many rows there are, checked
    against `specs` from the headers."""
    try:
        with zipfile.ZipFile(path) as archive:
            headers = _npz_readers(archive, path, specs)
            layouts = npz_layouts(path, archive, _npz_members(archive, path, specs))
    except (zipfile.BadZipFile, OSError) as exc:
        raise InputError(
            f"--data {path} is not a readable .npz file ({exc}); write it with np.savez"
        ) from None
    for spec, rows in zip(specs, headers, strict=True):
        check_fits(rows.shape, rows.dtype, spec, f"--data {path} array {spec.name!r}")
    counts = {s.name: r.rows for s, r in zip(specs, headers, strict=True)}
    if len(set(counts.values())) > 1:
        listed = ", ".join(f"{k}: {v}" for k, v in counts.items())
        raise InputError(
            f"--data {path}: the inputs have different numbers of rows ({listed}); give every "
            "input the same number of samples"
        )
    return [layouts[s.name] for s in specs], next(iter(counts.values()))


# numpy kinds and sizes that tf.io.decode_raw reads (bool is read as uint8)
_RAW = {"f2", "f4", "f8", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", "b1"}


def _records(
    layouts: Sequence[NpyLayout], specs: Sequence[InputSpec], batch_size: int, limit: int | None
) -> Dataset:
    """Rows read by tf.data as fixed-length records, in batches, decoded and cast."""
    tf, _ = quiet_import()
    for layout in layouts:
        code = f"{layout.dtype.kind}{layout.dtype.itemsize}"
        if code not in _RAW or not layout.row_bytes:
            raise InputError(
                f"--data {layout.path}: arrays of dtype {layout.dtype} and shape "
                f"{layout.shape} cannot be read; save a numeric array (float, int or bool)"
            )
    columns = [
        tf.data.FixedLengthRecordDataset(
            lay.path, lay.row_bytes, header_bytes=lay.offset, footer_bytes=lay.footer
        )
        for lay in layouts
    ]
    dataset = columns[0] if len(columns) == 1 else tf.data.Dataset.zip(tuple(columns))
    if limit is not None:
        dataset = dataset.take(limit)

    def decode(*raw: Tensor) -> tuple[Tensor, ...]:
        return tuple(_decode(r, lay, s) for r, lay, s in zip(raw, layouts, specs, strict=True))

    return dataset.batch(batch_size).map(decode, num_parallel_calls=tf.data.AUTOTUNE)


def _decode(raw: Tensor, layout: NpyLayout, spec: InputSpec) -> Tensor:
    tf, _ = quiet_import()
    dtype = layout.dtype
    little = dtype.byteorder == "<" or (dtype.byteorder in "=|" and sys.byteorder == "little")
    read_as = tf.uint8 if dtype.kind == "b" else tf.as_dtype(dtype.newbyteorder("="))
    values = tf.io.decode_raw(raw, read_as, little_endian=little)
    values = tf.reshape(values, [-1, *layout.shape[1:]])
    return _fitted_cast(values, layout, spec)


def _fitted_cast(values: Tensor, layout: NpyLayout, spec: InputSpec) -> Tensor:
    """Cast to the input's dtype, refusing what `fit_array` refuses for `--input`: integers
    outside the dtype (int64 ids beyond int32 would wrap) and floats that overflow it."""
    tf, _ = quiet_import()
    target = tf.as_dtype(tf_dtype(spec.dtype))
    cast = tf.cast(values, target)
    where = f"--data {layout.path} refused: values of input {spec.name!r}"
    if target.is_integer and values.dtype.is_integer and values.dtype != target:
        low, high = int(target.min), int(target.max)
        wide = tf.cast(values, tf.float64)  # exact enough to compare with the bounds
        check = tf.debugging.assert_equal(
            tf.reduce_all((wide >= low) & (wide <= high)), True,
            message=f"{where} lie outside {target.name} [{low}, {high}]; save values that fit",
        )  # fmt: skip
        with tf.control_dependencies([check]):
            return tf.identity(cast)
    if target.is_floating and values.dtype.is_floating and values.dtype.size > target.size:
        check = tf.debugging.assert_equal(
            tf.reduce_all(tf.math.is_finite(cast) == tf.math.is_finite(values)),
            True,
            message=f"{where} include one that overflows {target.name} (the model's input "
            f"dtype) to inf; scale the data or save it as {target.name}",
        )
        with tf.control_dependencies([check]):
            return tf.identity(cast)
    return cast


T = TypeVar("T")


def _guarded(make: Callable[[], T], path: str) -> T:
    """Run ``make``; a damaged archive (zipfile's many errors) is one InputError."""
    try:
        return make()
    except InputError:
        raise
    except DAMAGE as exc:
        raise InputError(
            f"--data {path} is not a readable .npz file ({type(exc).__name__}: "
            f"{' '.join(str(exc).split())[:160]}); write it with np.savez"
        ) from None


def _chunks(
    readers: Sequence[NpyRows], batch_size: int, limit: int | None
) -> Iterator[list[np.ndarray]]:
    left = readers[0].rows if limit is None else min(readers[0].rows, limit)
    while left > 0:
        n = min(batch_size, left)
        yield [r.read(n) for r in readers]
        left -= n


def _images(
    path: str, specs: Sequence[InputSpec], batch_size: int, limit: int | None, shard: Shard | None
) -> tuple[Dataset, int, Part | None]:
    """Decode and resize as Keras's `image_dataset_from_directory` does (pixels 0-255), each
    entry checked first (`data/images`)."""
    tf, _ = quiet_import()
    spec = specs[0] if len(specs) == 1 else None
    shape = spec.shape if spec is not None else ()
    if spec is None or len(shape) != 3 or None in shape[:2] or shape[2] not in (1, 3, 4):
        got = ", ".join(f"{s.name} {s.shape}" for s in specs)
        raise InputError(
            f"--data {path} is a folder of images, which needs a model with one image input "
            f"(height, width, 1, 3 or 4 channels); this model's inputs are {got}; pass the "
            "images as a .npy or through FILE.py:function instead"
        )
    found = images.list_images(path)  # every entry checked, every size within budget
    if not found:
        raise InputError(
            f"--data {path} is a folder with no images: no {', '.join(IMAGE_FORMATS)} files in "
            "it or its sub-folders; pass a folder of images, or a .npy / .npz file"
        )
    if limit is not None:
        found = found[:limit]
    dtype = tf_dtype(spec.dtype)
    size, channels = (int(shape[0] or 0), int(shape[1] or 0)), int(shape[2] or 0)
    dataset = images.image_dataset(found, size, channels, dtype).batch(batch_size)
    part = None
    if shard is not None:  # by file: this worker decodes its own images only
        start, stop = part_rows(len(found), batch_size, shard)
        mine = images.image_dataset(found[start:stop], size, channels, dtype).batch(batch_size)
        part = Part(
            mine.prefetch(tf.data.AUTOTUNE), stop - start, offset=start,
            first_batch=start // batch_size,
        )  # fmt: skip
    return dataset, len(found), part


def open_labels(
    path: str | os.PathLike[str],
    outputs: Sequence[str],
    batch_size: int,
    limit: int | None = None,
    shard: Shard | None = None,
) -> DataStream | None:
    """The labels stored with `--data` in a `.npz`, batched like its inputs: `y` for a model
    with one output (or no output names, as a Sequential model), `y:NAME` per output name;
    None when the data holds no labels. With `shard`, `dataset` is this worker's part, cut
    as the inputs' part is.

    Raises:
        InputError: labels that do not match the outputs, or a row count unlike the inputs'.
    """
    text = os.fspath(path)
    if not text.lower().endswith(".npz") or not os.path.isfile(text):
        return None
    try:
        with zipfile.ZipFile(text) as archive:
            members = npz_members(archive, text)
            held = {k: v for k, v in members.items() if k == "y" or k.startswith("y:")}
            if not held:
                return None
            if "y" in held and len(outputs) <= 1:  # no output names: a Sequential model
                chosen = {"y": held["y"]}
            else:
                missing = [n for n in outputs if f"y:{n}" not in held]
                if missing or not outputs:
                    raise InputError(
                        f"the labels in --data {text} are {sorted(held)}, but the model has "
                        f"{len(outputs)} outputs ({', '.join(outputs)}); save one array per "
                        "output as `y:NAME` (or `y` for one output)"
                    )
                chosen = {f"y:{n}": held[f"y:{n}"] for n in outputs}
            headers = {
                name: NpyRows(archive.open(member), f"{text} array {name!r}")
                for name, member in chosen.items()
            }
            rows = {r.rows for r in headers.values()}
            inputs = {
                NpyRows(archive.open(m), text).rows for k, m in members.items() if k not in held
            }
    except (zipfile.BadZipFile, OSError) as exc:
        raise InputError(
            f"--data {text} is not a readable .npz file ({exc}); write it with np.savez"
        ) from None
    if len(rows | inputs) > 1:
        raise InputError(
            f"--data {text}: the labels and the inputs have different numbers of rows "
            f"({sorted(rows | inputs)}); give every array the same number of samples"
        )
    specs = [InputSpec(n, tuple(r.shape[1:]), str(r.dtype)) for n, r in headers.items()]
    return open_data(text, specs, batch_size, limit, shard)
