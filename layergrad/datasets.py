"""Resolve `--data PATH` into batches in the model's input order, read as they are used.

PATH is a `.npy` (one input), a `.npz` (one array per input name; `y`, the labels, is
ignored), a folder of images, or `FILE.py:function` / `module:function` returning a
`tf.data.Dataset` or any iterable of batches. Whatever the source yields is cut into batches
of `batch_size` rows (the last one partial). Files are read a batch at a time and nothing is
kept, so memory does not grow with the number of samples.

Every batch is checked against the model's inputs; a bad one stops the run with an
`InputError` that names the batch and the input. Errors inside the reading thread of
`tf.data` are kept and raised by `DataStream.raise_failure` when the stream ends.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import sys
import zipfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from layergrad._tf import quiet_import
from layergrad.errors import InputError
from layergrad.inputs import InputSpec, ProbeBatch, check_fits, fit_array
from layergrad.npy_rows import NpyLayout, NpyRows, npy_layout, npz_layouts, npz_members

IMAGE_FORMATS = (".bmp", ".gif", ".jpeg", ".jpg", ".png")  # what Keras decodes
_FUNCTION = re.compile(r"^(?P<target>.+):(?P<name>[A-Za-z_]\w*)$")
_MODULE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
KINDS_HELP = "a .npy or .npz file, a folder of images, or FILE.py:function / module:function"


@dataclass
class _Failure:
    """An error met while `tf.data` pulled from a Python reader (raised when the stream ends)."""

    error: InputError | None = None


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
        failure: _Failure,
    ) -> None:
        self.source, self.specs, self.dataset = source, tuple(specs), dataset
        self.samples, self._failure = samples, failure

    def check_batch(self, index: int, parts: Sequence[Sequence[Any]]) -> int:
        """Check batch `index` (per input, its pieces on each replica); return its rows."""
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

    def raise_failure(self) -> None:
        """Raise the error that stopped a Python reader, if one did."""
        if self._failure.error is not None:
            raise self._failure.error

    def batch(self, index: int) -> ProbeBatch:
        """Batch `index` again, as arrays (the source is read again up to it)."""
        for i, tensors in enumerate(self.dataset):
            if i == index:
                arrays = tuple(np.asarray(t.numpy()) for t in tensors)
                return ProbeBatch(arrays, tuple(s.name for s in self.specs), self.source, None)
        self.raise_failure()
        raise InputError(f"--data {self.source} has no batch {index}")


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

    Example:
        >>> stream = open_data("x.npy", input_specs(model), batch_size=32)
        >>> stream.samples
        20000
    """
    text = os.fspath(path)
    if batch_size < 1:
        raise InputError(f"--batch-size must be at least 1: batch_size={batch_size}")
    if limit is not None and limit < 1:
        raise InputError(f"--limit must be at least 1: limit={limit}")
    tf, _ = quiet_import()
    failure = _Failure()
    signature = tuple(tf.TensorSpec((None, *s.shape), _np_dtype(s.dtype)) for s in specs)
    lowered = text.lower()
    rows: int | None
    if lowered.endswith((".npy", ".npz")):
        if not os.path.isfile(text):
            raise InputError(f"--data {text}: no such file; expected {KINDS_HELP}")
        if lowered.endswith(".npy"):
            dataset, rows = _npy(text, specs, batch_size, limit)
        else:
            dataset, rows = _npz(text, specs, batch_size, limit, signature, failure)
    elif os.path.isdir(text):
        dataset, rows = _images(text, specs, batch_size, limit)
    elif _is_function(text):
        dataset, rows = _function(text, specs, batch_size, limit, signature, failure)
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
    return DataStream(text, specs, dataset, samples, failure)


Reader = Callable[[], Iterator[tuple[np.ndarray, ...]]]


def _generated(read: Reader, signature: tuple[Any, ...], failure: _Failure, source: str) -> Any:
    """A tf.data.Dataset pulling from a Python reader; its errors are kept in `failure`."""
    tf, _ = quiet_import()

    def generate() -> Iterator[tuple[np.ndarray, ...]]:
        failure.error = None
        try:
            yield from read()
        except InputError as exc:
            failure.error = exc
        except Exception as exc:  # reading failed: keep it, TensorFlow would lose its type
            failure.error = InputError(
                f"--data {source}: reading failed: {type(exc).__name__}: {exc}"
            )

    return tf.data.Dataset.from_generator(generate, output_signature=signature)


def _npy(
    path: str, specs: Sequence[InputSpec], batch_size: int, limit: int | None
) -> tuple[Any, int]:
    if len(specs) != 1:
        raise InputError(
            f"--data {path} holds one array but the model has {len(specs)} inputs "
            f"({', '.join(s.name for s in specs)}); save them with "
            "np.savez(FILE, **{name: array}) and pass the .npz"
        )
    layout = npy_layout(path)
    check_fits(layout.shape, layout.dtype, specs[0], f"--data {path}")
    return _records([layout], specs, batch_size, limit), layout.shape[0]


def _npz(
    path: str,
    specs: Sequence[InputSpec],
    batch_size: int,
    limit: int | None,
    signature: tuple[Any, ...],
    failure: _Failure,
) -> tuple[Any, int]:
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
        return [
            NpyRows(archive.open(member), f"{path} array {name!r}")
            for name, member in members(archive).items()
        ]

    try:
        with zipfile.ZipFile(path) as archive:
            headers = readers(archive)
            layouts = npz_layouts(path, archive, members(archive))
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
    total = next(iter(counts.values()))
    stored = [layouts[s.name] for s in specs]
    if all(stored):  # np.savez: tf.data reads the rows in place
        return _records(stored, specs, batch_size, limit), total

    def read() -> Iterator[tuple[np.ndarray, ...]]:  # np.savez_compressed: inflate as we go
        with zipfile.ZipFile(path) as archive:
            for part in _chunks(readers(archive), batch_size, limit):
                yield tuple(
                    fit_array(a, s, f"--data {path}") for a, s in zip(part, specs, strict=True)
                )

    return _generated(read, signature, failure, path), total


# numpy kinds and sizes that tf.io.decode_raw reads (bool is read as uint8)
_RAW = {"f2", "f4", "f8", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", "b1"}


def _records(
    layouts: Sequence[NpyLayout], specs: Sequence[InputSpec], batch_size: int, limit: int | None
) -> Any:
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

    def decode(*raw: Any) -> tuple[Any, ...]:
        return tuple(_decode(r, lay, s) for r, lay, s in zip(raw, layouts, specs, strict=True))

    return dataset.batch(batch_size).map(decode, num_parallel_calls=tf.data.AUTOTUNE)


def _decode(raw: Any, layout: NpyLayout, spec: InputSpec) -> Any:
    tf, _ = quiet_import()
    dtype = layout.dtype
    little = dtype.byteorder == "<" or (dtype.byteorder in "=|" and sys.byteorder == "little")
    read_as = tf.uint8 if dtype.kind == "b" else tf.as_dtype(dtype.newbyteorder("="))
    values = tf.io.decode_raw(raw, read_as, little_endian=little)
    values = tf.reshape(values, [-1, *layout.shape[1:]])
    return tf.cast(values, _np_dtype(spec.dtype))


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
) -> tuple[Any, int]:
    """Decode and resize with Keras's `image_dataset_from_directory` (pixels 0-255)."""
    tf, keras = quiet_import()
    spec = specs[0] if len(specs) == 1 else None
    shape = spec.shape if spec is not None else ()
    if spec is None or len(shape) != 3 or None in shape[:2] or shape[2] not in (1, 3, 4):
        got = ", ".join(f"{s.name} {s.shape}" for s in specs)
        raise InputError(
            f"--data {path} is a folder of images, which needs a model with one image input "
            f"(height, width, 1, 3 or 4 channels); this model's inputs are {got}; pass the "
            "images as a .npy or through FILE.py:function instead"
        )
    files = sum(
        1 for _, _, names in os.walk(path) for name in names if name.lower().endswith(IMAGE_FORMATS)
    )
    if not files:
        raise InputError(
            f"--data {path} is a folder with no images: no {', '.join(IMAGE_FORMATS)} files in "
            "it or its sub-folders; pass a folder of images, or a .npy / .npz file"
        )
    dataset = keras.utils.image_dataset_from_directory(
        path,
        labels=None,
        color_mode={1: "grayscale", 3: "rgb", 4: "rgba"}[int(shape[2])],
        batch_size=batch_size,
        image_size=(shape[0], shape[1]),
        shuffle=False,
        verbose=False,
    )
    if limit is not None:
        dataset = dataset.unbatch().take(limit).batch(batch_size)
    dtype = _np_dtype(spec.dtype)
    return dataset.map(lambda x: (tf.cast(x, dtype),)), files


def _is_function(text: str) -> bool:
    match = _FUNCTION.match(text)
    if match is None:
        return False
    target = match["target"]
    return target.endswith(".py") or bool(_MODULE.match(target))


def _function(
    ref: str,
    specs: Sequence[InputSpec],
    batch_size: int,
    limit: int | None,
    signature: tuple[Any, ...],
    failure: _Failure,
) -> tuple[Any, int | None]:
    """Batches from a user function: a tf.data.Dataset, or an iterable read in Python."""
    tf, _ = quiet_import()
    function = _load_function(ref)

    def call() -> Any:
        try:
            return function()
        except Exception as exc:
            raise InputError(
                f"--data {ref}: the function raised {type(exc).__name__}: {exc}"
            ) from exc

    first = [call()]
    result = first[0]
    if isinstance(result, tf.data.Dataset):
        return _from_tf_dataset(result, ref, specs, batch_size, limit)
    if isinstance(result, (dict, str, bytes)) or not isinstance(result, Iterable):
        raise InputError(
            f"--data {ref}: the function returned {type(result).__name__}, not batches; return "
            "a tf.data.Dataset or an iterable (generator, list) of batches: arrays, (x, y) "
            "tuples or dicts keyed by input name"
        )

    def read() -> Iterator[tuple[np.ndarray, ...]]:
        items = first.pop() if first else call()  # the first pass uses the first call
        yield from _rebatched(_parts(items, ref, specs), batch_size, limit)

    rows = len(result) if isinstance(result, np.ndarray) else None  # an array of samples
    return _generated(read, signature, failure, ref), rows


def _load_function(ref: str) -> Callable[[], Any]:
    match = _FUNCTION.match(ref)
    if match is None:
        raise InputError(f"--data {ref}: expected FILE.py:function or module:function")
    target, name = match["target"], match["name"]
    try:
        if target.endswith(".py"):
            module = _import_file(Path(target), ref)
        else:
            sys.path.insert(0, os.getcwd())  # as `python -m` would, for a module beside the data
            try:
                module = importlib.import_module(target)
            finally:
                sys.path.remove(os.getcwd())
    except InputError:
        raise
    except ModuleNotFoundError as exc:
        raise InputError(
            f"--data {ref}: no module named {exc.name!r}; pass FILE.py:function with the path "
            "to the file, or install the module"
        ) from exc
    except Exception as exc:
        raise InputError(
            f"--data {ref}: importing {target} raised {type(exc).__name__}: {exc}"
        ) from exc
    function = getattr(module, name, None)
    if not callable(function):
        found = sorted(k for k, v in vars(module).items() if callable(v) and not k.startswith("_"))
        raise InputError(
            f"--data {ref}: {target} has no function {name!r}; it defines "
            f"{', '.join(found[:8]) or 'no public functions'}"
        )
    return function


def _import_file(path: Path, ref: str) -> Any:
    if not path.is_file():
        raise InputError(f"--data {ref}: no such file {path}; pass FILE.py:function")
    spec = importlib.util.spec_from_file_location(f"_layergrad_data_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise InputError(f"--data {ref}: {path} is not an importable Python file")
    module = importlib.util.module_from_spec(spec)
    folder = str(path.resolve().parent)
    sys.path.insert(0, folder)  # so the file can import its neighbours
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(folder)
    return module


def _parts(
    items: Iterable[Any], ref: str, specs: Sequence[InputSpec]
) -> Iterator[tuple[np.ndarray, ...]]:
    """Each element of a user iterable as checked arrays in input order (samples get a batch
    axis of 1)."""
    iterator = iter(items)
    index = 0
    while True:
        where = f"--data {ref}: batch {index}"
        try:
            element = next(iterator)
        except StopIteration:
            return
        except Exception as exc:
            raise InputError(f"{where}: the batches raised {type(exc).__name__}: {exc}") from exc
        names = [s.name for s in specs]
        arrays = [np.asarray(_pick(element, p)) for p in _locate(element, names, where)]
        arrays = [
            a[np.newaxis] if a.ndim == len(s.shape) else a
            for a, s in zip(arrays, specs, strict=True)
        ]
        fitted = tuple(fit_array(a, s, where) for a, s in zip(arrays, specs, strict=True))
        rows = [len(a) for a in fitted]
        if len(set(rows)) > 1:
            sizes = ", ".join(f"{n}: {r}" for n, r in zip(names, rows, strict=True))
            raise InputError(
                f"{where}: the inputs have different batch sizes ({sizes}); give every input "
                "the same number of rows"
            )
        yield fitted
        index += 1


def _rebatched(
    parts: Iterable[tuple[np.ndarray, ...]], batch_size: int, limit: int | None
) -> Iterator[tuple[np.ndarray, ...]]:
    """Cut a stream of row blocks into batches of `batch_size` rows, up to `limit` rows."""
    pending: list[tuple[np.ndarray, ...]] = []
    held = emitted = 0
    for part in parts:
        if limit is not None:
            part = tuple(a[: limit - emitted - held] for a in part)
        if not len(part[0]):
            if limit is not None and emitted + held >= limit:
                break
            continue
        pending.append(part)
        held += len(part[0])
        while held >= batch_size:
            joined = _join(pending)
            yield tuple(a[:batch_size] for a in joined)
            emitted, held = emitted + batch_size, held - batch_size
            pending = [tuple(a[batch_size:] for a in joined)] if held else []
        if limit is not None and emitted + held >= limit:
            break
    if held:
        yield _join(pending)


def _join(parts: list[tuple[np.ndarray, ...]]) -> tuple[np.ndarray, ...]:
    if len(parts) == 1:
        return parts[0]
    return tuple(np.concatenate(column) for column in zip(*parts, strict=True))


def _from_tf_dataset(
    dataset: Any, ref: str, specs: Sequence[InputSpec], batch_size: int, limit: int | None
) -> tuple[Any, int | None]:
    """Select and cast the inputs of a user's tf.data.Dataset, and cut it into batches."""
    tf, _ = quiet_import()
    where = f"--data {ref}"
    element = dataset.element_spec
    paths = _locate(element, [s.name for s in specs], where)
    leaves = [_pick(element, p) for p in paths]
    batched = []
    for leaf, spec in zip(leaves, specs, strict=True):
        if not isinstance(leaf, tf.TensorSpec):
            raise InputError(
                f"{where}: input {spec.name!r} is a {type(leaf).__name__}; expected dense "
                "tensors (convert ragged or sparse values with .to_tensor())"
            )
        rank = leaf.shape.rank
        is_batch = rank is None or rank == len(spec.shape) + 1
        shape = tuple(leaf.shape) if is_batch and rank is not None else (None, *leaf.shape)
        check_fits(shape if rank is not None else (None,) * (len(spec.shape) + 1),
                   leaf.dtype.as_numpy_dtype, spec, where)  # fmt: skip
        batched.append(is_batch)
    if len(set(batched)) > 1:
        raise InputError(
            f"{where}: some inputs have a batch axis and some do not; give them all one"
        )
    tuple_element = isinstance(element, tuple)
    dtypes = [_np_dtype(s.dtype) for s in specs]

    def select(*args: Any) -> tuple[Any, ...]:
        value = args if tuple_element else args[0]
        picked = [_pick(value, p) for p in paths]
        if len(picked) > 1:  # unbatch would fail with a message that names no input
            rows = [tf.shape(t)[0] for t in picked]
            for t in rows[1:]:
                tf.debugging.assert_equal(
                    t, rows[0], message="the inputs have different batch sizes"
                )
        return tuple(tf.cast(t, d) for t, d in zip(picked, dtypes, strict=True))

    out = dataset.map(select)
    if batched and batched[0]:
        out = out.unbatch()
        rows = None
    else:
        cardinality = int(dataset.cardinality())
        rows = cardinality if cardinality >= 0 else None
    if limit is not None:
        out = out.take(limit)
    return out.batch(batch_size), rows


def _locate(element: Any, names: list[str], where: str) -> list[tuple[Any, ...]]:
    """Where each model input is inside one element: a dict by input name, `(x, y)` with x
    an array / list / dict, a list of arrays in input order, or one array."""
    if isinstance(element, dict):
        return _by_name(element, names, (), where)
    if isinstance(element, (tuple, list)):
        if not element:
            raise InputError(f"{where} is an empty {type(element).__name__}, not a batch")
        first = element[0]
        if isinstance(first, dict):
            return _by_name(first, names, (0,), where)
        if isinstance(first, (tuple, list)) and len(first) == len(names):
            return [(0, i) for i in range(len(names))]
        if len(names) == 1:
            return [(0,)]
        if len(element) == len(names):
            return [(i,) for i in range(len(names))]
        raise InputError(
            f"{where} holds {len(element)} values but the model has {len(names)} inputs "
            f"({', '.join(names)}); give one array per input, in that order, or a dict keyed "
            "by input name"
        )
    if len(names) == 1:
        return [()]
    raise InputError(
        f"{where} is one {type(element).__name__} but the model has {len(names)} inputs "
        f"({', '.join(names)}); give a dict keyed by input name or a tuple of arrays in that order"
    )


def _by_name(
    mapping: dict[str, Any], names: list[str], prefix: tuple[Any, ...], where: str
) -> list[tuple[Any, ...]]:
    missing = [n for n in names if n not in mapping]
    if missing:
        raise InputError(
            f"{where} has keys {sorted(map(str, mapping))} but the model's inputs are {names}; "
            f"missing: {', '.join(missing)}"
        )
    return [(*prefix, n) for n in names]


def _pick(element: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        element = element[step]
    return element


def _np_dtype(dtype: str) -> str:
    return "float32" if dtype == "bfloat16" else dtype
