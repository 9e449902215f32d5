"""`.npy` and `.npz` files as `--data`: rows read in place by tf.data, a batch at a time.

A `.npy`, and a `.npz` written with `np.savez`, hold their rows as fixed-length records that
`tf.data.FixedLengthRecordDataset` reads straight from the file, decoded and cast in the graph
(unsigned 32- and 64-bit integers read as signed and bitcast), the values checked as `--input`
checks them (`data/value_checks.py`). Text, Fortran-ordered arrays and members of
`np.savez_compressed` are read in Python, a batch at a time. A worker's part is a contiguous
range of rows, cut as header and footer bytes (`in_place`).
"""

from __future__ import annotations

import sys
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import replace

import numpy as np

from layergrad.core.errors import InputError
from layergrad.core.tf_runtime import tf
from layergrad.core.tf_types import Dataset, Tensor
from layergrad.data.functions import Failure, python_dataset
from layergrad.data.preflight import input_layouts, input_readers, npy_input_layout
from layergrad.data.shards import Part, Reading, part_rows
from layergrad.data.value_checks import (
    InputSpec,
    fit_array,
    fitted_cast,
    text_budget,
)
from layergrad.files.array_files import NpyLayout, NpyRows


def in_place(
    how: Reading, layouts: Sequence[NpyLayout], specs: Sequence[InputSpec], rows: int
) -> tuple[Dataset, int, Part | None]:
    """Arrays read in place (`records`), and this worker's part of them: the records outside
    it are skipped as header and footer bytes, so nothing else is read."""
    batch_size, limit = how.batch_size, how.limit
    whole = records(layouts, specs, batch_size, limit)
    if how.shard is None:
        return whole, rows, None
    total = rows if limit is None else min(rows, limit)
    start, stop = part_rows(total, batch_size, how.shard)
    cut = [
        replace(
            lay,
            shape=(stop - start, *lay.shape[1:]),
            offset=lay.offset + start * lay.row_bytes,
            footer=lay.footer + (rows - stop) * lay.row_bytes,
        )
        for lay in layouts
    ]
    dataset = records(cut, specs, batch_size, None, start).prefetch(tf.data.AUTOTUNE)
    return whole, rows, Part(dataset, stop - start, offset=start, first_batch=start // batch_size)


def array_batches(
    how: Reading, failure: Failure, labels: Sequence[InputSpec] = ()
) -> tuple[Dataset, int, Part | None]:
    """The inputs' rows of a `.npy` or `.npz` in batches; with `labels` (a `.npz`'s, specs
    named by their keys, `y` or `y:NAME`), each batch followed by the labels of the same rows.
    Read in place by tf.data, or a batch at a time in Python by `NpyRows`: text, an array
    saved in Fortran order (its rows not records) and the members of `np.savez_compressed`."""
    path, specs, columns = how.text, how.specs, [*how.specs, *labels]
    npy = path.lower().endswith(".npy")
    if npy:
        layout = npy_input_layout(path, specs)
        stored, total = [None if layout.fortran else layout], layout.shape[0]
    else:
        stored, total = input_layouts(path, specs)
    if labels:
        held, rows = input_layouts(path, labels, "labels")
        if rows != total:
            raise InputError(
                f"--data {path}: the labels and the inputs have different numbers of rows "
                f"({sorted({rows, total})}); give every array the same number of samples"
            )
        stored = [*stored, *held]
    held_in_place = [s for s in stored if s is not None and s.dtype.kind not in TEXT]
    if len(held_in_place) == len(stored):  # tf.data reads the rows in place
        return in_place(how, held_in_place, columns, total)

    def read() -> Iterator[tuple[np.ndarray, ...]]:
        if npy:
            with open(path, "rb") as stream:
                end = layout.offset + total * layout.row_bytes
                yield from _fitted([NpyRows(stream, path, end)], columns, how)
            return
        with zipfile.ZipFile(path) as archive:  # np.savez_compressed: inflate as we go
            readers = input_readers(archive, path, specs)
            readers += input_readers(archive, path, labels) if labels else []
            yield from _fitted(readers, columns, how)

    return python_dataset(read, columns, failure, path), total, None


TEXT = "US"  # numpy kinds of text: read in Python, a batch at a time (tf.data cannot decode them)
# numpy kinds and sizes that tf.io.decode_raw reads (bool is read as uint8); unsigned 32 and 64
# bits, which it does not read, are read as the signed integers of their size and bitcast
_RAW = {"f2", "f4", "f8", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", "b1"}
_SIGNED = {"u4": "int32", "u8": "int64"}


def records(
    layouts: Sequence[NpyLayout],
    specs: Sequence[InputSpec],
    batch_size: int,
    limit: int | None,
    first_row: int = 0,
) -> Dataset:
    """Rows read by tf.data as fixed-length records, in batches, decoded and cast; the values
    checked as `fit_array` checks them, a refusal naming the sample (`first_row`: the file's
    row of the first record)."""
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

    def decode(index: Tensor, raw: Tensor | tuple[Tensor, ...]) -> tuple[Tensor, ...]:
        first = first_row + index * batch_size  # the file's row of the batch's first sample
        raws = raw if isinstance(raw, tuple) else (raw,)
        return tuple(
            _decode(r, lay, s, first) for r, lay, s in zip(raws, layouts, specs, strict=True)
        )

    batches = dataset.batch(batch_size).enumerate()
    return batches.map(decode, num_parallel_calls=tf.data.AUTOTUNE)


def _decode(raw: Tensor, layout: NpyLayout, spec: InputSpec, first: Tensor) -> Tensor:
    dtype = layout.dtype
    little = dtype.byteorder == "<" or (dtype.byteorder in "=|" and sys.byteorder == "little")
    native = tf.uint8 if dtype.kind == "b" else tf.as_dtype(dtype.newbyteorder("="))
    signed = _SIGNED.get(f"{dtype.kind}{dtype.itemsize}")
    values = tf.io.decode_raw(raw, tf.as_dtype(signed) if signed else native, little_endian=little)
    if signed:
        values = tf.bitcast(values, native)
    values = tf.reshape(values, [-1, *layout.shape[1:]])
    return fitted_cast(values, layout.path, spec, first)


def _fitted(
    readers: Sequence[NpyRows], columns: Sequence[InputSpec], how: Reading
) -> Iterator[tuple[np.ndarray, ...]]:
    """Batches of rows of each reader, read in Python, each array checked against its column
    (`fit_array`)."""
    left = readers[0].rows if how.limit is None else min(readers[0].rows, how.limit)
    start = 0
    while left > 0:
        n = min(how.batch_size, left)
        for r in readers:
            if r.dtype.kind in TEXT:
                text_budget(f"--data {r.label}: a batch of {n} rows of text", n * r.row_bytes, n,
                            r.dtype)  # fmt: skip
        part = [r.read(n) for r in readers]
        yield tuple(
            fit_array(a, s, f"--data {how.text}", start) for a, s in zip(part, columns, strict=True)
        )
        left -= n
        start += n
