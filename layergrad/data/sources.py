"""Resolve `--data PATH` into batches in the model's input order, read as they are used.

PATH is a `.npy` (one input), a `.npz` (one array per input name; `y`, the labels, is
ignored), a folder of images, or `FILE.py:function` / `module:function` returning a
`tf.data.Dataset` or any iterable of batches (`data_functions`). Whatever the source yields is
cut into batches of `batch_size` rows (the last one partial). Files are read a batch at a time
and nothing is kept, so memory does not grow with the number of samples.

Files are checked against the model's inputs from their headers; what a function gives is
checked batch by batch. A bad batch stops the run with an `InputError` that names the batch
and the input. Errors inside the reading thread of `tf.data` are kept and raised by
`DataStream.raise_failure` when the stream ends.
"""

from __future__ import annotations

import os
import zipfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any, TypeVar

import numpy as np

from layergrad.core.errors import InputError, UsageError
from layergrad.core.keras_backend import quiet_import
from layergrad.data import images
from layergrad.data.functions import (
    Failure,
    function_source,
    is_function,
    python_dataset,
    tf_dtype,
)
from layergrad.data.images import IMAGE_FORMATS
from layergrad.data.probe_input import InputSpec, ProbeBatch, check_fits, fit_array
from layergrad.files.array_files import DAMAGE, open_checked, open_member, open_zip
from layergrad.files.guards import require_regular
from layergrad.files.npy_rows import NpyRows, npz_members

KINDS_HELP = "a .npy or .npz file, a folder of images, or FILE.py:function / module:function"


class DataStream:
    """The batches of one `--data` source.

    `dataset` yields tuples of tensors in the model's input order, `batch_size` rows each
    (the last may be shorter), prefetched. `samples` is how many rows to expect (None when
    the source does not say).
    """

    def __init__(
        self,
        source: str,
        specs: Sequence[InputSpec],
        dataset: Any,
        samples: int | None,
        failure: Failure,
        checked: bool = False,
    ) -> None:
        self.source, self.specs, self.dataset = source, tuple(specs), dataset
        self.samples, self._failure, self.checked = samples, failure, checked
        # names what made batch N unreadable (the image that does not decode), if it can
        self.explain: Callable[[int], str | None] | None = None

    def check_batch(self, index: int, parts: Sequence[Sequence[Any]]) -> int:
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
        one `explain` finds for that batch."""
        if self._failure.error is not None:
            raise self._failure.error
        if batch is not None and self.explain is not None:
            found = self.explain(batch)
            if found:
                raise InputError(found)

    def batch(self, index: int) -> ProbeBatch:
        """Batch `index` again, as arrays (the source is read again up to it)."""
        for i, tensors in enumerate(self.dataset):
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
) -> DataStream:
    """Open `--data PATH` for a model with inputs `specs`.

    Args:
        path: `.npy`, `.npz`, an image folder, or `FILE.py:function` / `module:function`.
        specs: the model's inputs (`inputs.input_specs(model)`).
        batch_size: rows per batch.
        limit: read at most this many samples.

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
    tf, _ = quiet_import()
    failure = Failure()
    explain: Callable[[int], str | None] | None = None
    signature = tuple(tf.TensorSpec((None, *s.shape), tf_dtype(s.dtype)) for s in specs)
    lowered = text.lower()
    rows: int | None
    if lowered.endswith((".npy", ".npz")):
        if lowered.endswith(".npy"):
            dataset, rows = _npy(text, specs, batch_size, limit, signature, failure)
        else:
            dataset, rows = _npz(text, specs, batch_size, limit, signature, failure)
    elif os.path.isdir(text):
        dataset, rows, explain = _images(text, specs, batch_size, limit)
    elif is_function(text):
        dataset, rows = function_source(text, specs, batch_size, limit, signature, failure)
    elif not os.path.exists(text):
        raise InputError(f"--data {text}: no such file or folder; expected {KINDS_HELP}")
    else:
        raise InputError(
            f"--data {text}: not a kind of data layergrad reads; expected {KINDS_HELP}"
        )
    samples = rows if limit is None or rows is None else min(rows, limit)
    if samples is None and limit is not None:
        samples = limit
    dataset = dataset.prefetch(tf.data.AUTOTUNE)
    stream = DataStream(text, specs, dataset, samples, failure, checked=not is_function(text))
    stream.explain = explain
    return stream


def _npy(
    path: str,
    specs: Sequence[InputSpec],
    batch_size: int,
    limit: int | None,
    signature: tuple[Any, ...],
    failure: Failure,
) -> tuple[Any, int]:
    if len(specs) != 1:
        raise InputError(
            f"--data {path} holds one array but the model has {len(specs)} inputs "
            f"({', '.join(s.name for s in specs)}); save them with "
            "np.savez(FILE, **{name: array}) and pass the .npz"
        )
    size = open_checked(path, "--data")

    def readers(stream: IO[bytes]) -> list[NpyRows]:
        return [NpyRows(stream, path, size)]

    with open(path, "rb") as stream:
        headers = readers(stream)
    rows = _check_headers(path, specs, headers)

    def read() -> Iterator[tuple[np.ndarray, ...]]:
        with open(path, "rb") as stream:
            yield from _fitted(readers(stream), specs, batch_size, limit, path)

    return python_dataset(read, signature, failure, path), rows


def _npz(
    path: str,
    specs: Sequence[InputSpec],
    batch_size: int,
    limit: int | None,
    signature: tuple[Any, ...],
    failure: Failure,
) -> tuple[Any, int]:
    """The arrays of a `.npz` keyed by input name, read a batch at a time (stored members
    and np.savez_compressed members alike), with the checks of `--input`."""
    size = open_checked(path, "--data")
    p = Path(path)

    def members(archive: zipfile.ZipFile) -> dict[str, str]:
        names = npz_members(archive, path)
        missing = [s.name for s in specs if s.name not in names]
        if missing:
            raise InputError(
                f"--data {path} has arrays {sorted(names)} but the model's inputs are "
                f"{[s.name for s in specs]}; missing: {', '.join(missing)}. Save one array per "
                "input name with np.savez(FILE, **{name: array}) (labels may go under 'y')"
            )
        return {s.name: names[s.name] for s in specs}

    def readers(archive: zipfile.ZipFile) -> list[NpyRows]:
        out = []
        for name, member in members(archive).items():
            info = archive.getinfo(member)
            stream = open_member(archive, info, p, "--data")
            out.append(NpyRows(stream, f"{path}, array {name!r},", info.file_size))
        return out

    with open_zip(p, size, "--data") as archive:
        rows = _check_headers(path, specs, _guarded(lambda: readers(archive), path))

    def read() -> Iterator[tuple[np.ndarray, ...]]:
        with open_zip(p, size, "--data") as archive:
            found = _guarded(lambda: readers(archive), path)
            yield from _guarded_rows(_fitted(found, specs, batch_size, limit, path), path)

    return python_dataset(read, signature, failure, path), rows


def _check_headers(path: str, specs: Sequence[InputSpec], headers: Sequence[NpyRows]) -> int:
    """Check each array's shape and dtype against its input and that all hold as many rows;
    return that number."""
    for spec, rows in zip(specs, headers, strict=True):
        where = f"--data {path}" + (f" array {spec.name!r}" if len(specs) > 1 or path.lower(
        ).endswith(".npz") else "")  # fmt: skip
        check_fits(rows.shape, rows.dtype, spec, where)
    counts = {s.name: r.rows for s, r in zip(specs, headers, strict=True)}
    if len(set(counts.values())) > 1:
        listed = ", ".join(f"{k}: {v}" for k, v in counts.items())
        raise InputError(
            f"--data {path}: the inputs have different numbers of rows ({listed}); give every "
            "input the same number of samples"
        )
    return next(iter(counts.values()))


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


def _guarded_rows(rows: Iterator[T], path: str) -> Iterator[T]:
    while True:
        item = _guarded(lambda: next(rows, None), path)
        if item is None:
            return
        yield item


def _fitted(
    readers: Sequence[NpyRows],
    specs: Sequence[InputSpec],
    batch_size: int,
    limit: int | None,
    path: str,
) -> Iterator[tuple[np.ndarray, ...]]:
    """Batches of rows, each array checked and cast by `inputs.fit_array` as `--input` is:
    integers outside the input's dtype and floats that overflow it are refused."""
    done = 0
    for part in _chunks(readers, batch_size, limit):
        where = f"--data {path}: rows {done}-{done + len(part[0]) - 1}"
        yield tuple(fit_array(a, s, where) for a, s in zip(part, specs, strict=True))
        done += len(part[0])


def _chunks(
    readers: Sequence[NpyRows], batch_size: int, limit: int | None
) -> Iterator[list[np.ndarray]]:
    left = readers[0].rows if limit is None else min(readers[0].rows, limit)
    while left > 0:
        n = min(batch_size, left)
        yield [r.read(n) for r in readers]
        left -= n


def _images(
    path: str, specs: Sequence[InputSpec], batch_size: int, limit: int | None
) -> tuple[Any, int, Callable[[int], str | None]]:
    """Decode and resize as Keras's `image_dataset_from_directory` does (pixels 0-255), each
    entry checked first (`data/images`); also a function naming the image a batch failed on."""
    spec = specs[0] if len(specs) == 1 else None
    shape = spec.shape if spec is not None else ()
    if spec is None or len(shape) != 3 or None in shape[:2] or shape[2] not in (1, 3, 4):
        got = ", ".join(f"{s.name} {s.shape}" for s in specs)
        raise InputError(
            f"--data {path} is a folder of images, which needs a model with one image input "
            f"(height, width, 1, 3 or 4 channels); this model's inputs are {got}; pass the "
            "images as a .npy or through FILE.py:function instead"
        )
    files = images.list_images(path)
    if not files:
        raise InputError(
            f"--data {path} is a folder with no images: no {', '.join(IMAGE_FORMATS)} files in "
            "it or its sub-folders; pass a folder of images, or a .npy / .npz file"
        )
    if limit is not None:
        files = files[:limit]
    channels = int(shape[2])
    size = (int(shape[0]), int(shape[1]))  # type: ignore[arg-type]
    dataset = images.image_dataset(files, size, channels, tf_dtype(spec.dtype))
    find = images.locate_failure(path, files, channels)

    def explain(batch: int) -> str | None:
        return find(batch * batch_size, (batch + 1) * batch_size)

    return dataset.batch(batch_size), len(files), explain


def open_labels(
    path: str | os.PathLike[str],
    outputs: Sequence[str],
    batch_size: int,
    limit: int | None = None,
) -> DataStream | None:
    """The labels stored with `--data` in a `.npz`, batched like its inputs: `y` for a model
    with one output (or no output names, as a Sequential model), `y:NAME` per output name;
    None when the data holds no labels.

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
                name: NpyRows(
                    archive.open(member),
                    f"{text} array {name!r}",
                    archive.getinfo(member).file_size,
                )
                for name, member in chosen.items()
            }
            rows = {r.rows for r in headers.values()}
            inputs = {
                NpyRows(archive.open(m), text, archive.getinfo(m).file_size).rows
                for k, m in members.items()
                if k not in held
            }
    except DAMAGE as exc:
        raise InputError(
            f"--data {text} is not a readable .npz file ({exc}); write it with np.savez"
        ) from None
    if len(rows | inputs) > 1:
        raise InputError(
            f"--data {text}: the labels and the inputs have different numbers of rows "
            f"({sorted(rows | inputs)}); give every array the same number of samples"
        )
    specs = [InputSpec(n, tuple(r.shape[1:]), str(r.dtype)) for n, r in headers.items()]
    return open_data(text, specs, batch_size, limit)
