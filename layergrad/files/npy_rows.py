"""Read a `.npy` array (a file, or a member of a `.npz`) a few rows at a time, for `--data`.

`np.load` reads a whole `.npz` member into memory, and a memory-mapped `.npy` counts every
page it touches in the process's resident memory; both grow with the number of rows. Here
the header is read and checked by `array_files.read_header` (the same checks as `--input`:
its size, its shape, its dtype, the bytes it declares against the bytes the file or member
holds), then `NpyRows` reads the rows it is asked for with plain reads (a compressed member
is inflated as it is read). Memory stays at a batch whatever the file holds.
"""

from __future__ import annotations

import math
import os
import struct
import zipfile
from dataclasses import dataclass
from typing import IO

import numpy as np

from layergrad.core.errors import InputError
from layergrad.core.limits import MAX_FORTRAN_BYTES, human
from layergrad.files.array_files import read_header


class NpyRows:
    """Rows of one `.npy` stream, read in order.

    Args:
        stream: a binary file object positioned at the start of the `.npy` data.
        label: how errors name it (`x.npy`, `data.npz, array 'a',`).
        size: the bytes the stream holds from its start (the file's or the member's size);
            without it a short stream is found when its rows are read.

    An array saved in Fortran order (its rows are not contiguous) is read whole at the
    first `read`, up to `MAX_FORTRAN_BYTES`, and served in row order from memory.

    Raises:
        InputError: what `array_files.read_header` refuses, a Fortran-order array over
        `MAX_FORTRAN_BYTES`, or a 0-d array (no rows).

    Example (not run)::

        rows = NpyRows(open("x.npy", "rb"), "x.npy", os.path.getsize("x.npy"))
        rows.read(32).shape  # (32, 28, 28, 1)
    """

    def __init__(self, stream: IO[bytes], label: str, size: int | None = None) -> None:
        self.stream, self.label = stream, label
        header = read_header(stream, f"--data {label}", None, _HUGE if size is None else size)
        if not header.shape:
            raise InputError(
                f"--data {label} is a single value (shape ()); expected rows = samples"
            )
        self.shape: tuple[int, ...] = header.shape
        self.dtype = header.dtype
        self.row_bytes = self.dtype.itemsize * math.prod(self.shape[1:])
        self.rows_left = self.shape[0]
        self.fortran = bool(header.fortran_order) and len(header.shape) > 1
        self._whole: np.ndarray | None = None  # a Fortran-order array, in row order
        if self.fortran and self.rows * self.row_bytes > MAX_FORTRAN_BYTES:
            raise InputError(
                f"--data {label} is saved in Fortran order and holds "
                f"{human(self.rows * self.row_bytes)}: its rows are not contiguous, so it is "
                f"read whole, up to {human(MAX_FORTRAN_BYTES)}; save "
                "np.ascontiguousarray(array) instead"
            )

    @property
    def rows(self) -> int:
        """Rows (samples) the header declares."""
        return self.shape[0]

    def read(self, n: int) -> np.ndarray:
        """The next `min(n, rows left)` rows; an empty array at the end."""
        n = min(n, self.rows_left)
        if self.fortran:
            if self._whole is None:
                flat = self._take(self.rows * self.row_bytes)
                data = np.frombuffer(flat, dtype=self.dtype).reshape(self.shape, order="F")
                self._whole = np.ascontiguousarray(data)
            start = self.rows - self.rows_left
            self.rows_left -= n
            return self._whole[start : start + n]
        raw = self._take(n * self.row_bytes)
        self.rows_left -= n
        return np.frombuffer(raw, dtype=self.dtype).reshape((n, *self.shape[1:]))

    def _take(self, want: int) -> bytes:
        """The next `want` bytes of the stream (refused when it ends before them)."""
        chunks, got = [], 0
        while got < want:  # a zip member may return less than asked
            chunk = self.stream.read(want - got)
            if not chunk:
                raise InputError(
                    f"--data {self.label} is truncated: its header declares {self.rows} rows "
                    f"of shape {self.shape[1:]}, but the data ends after "
                    f"{self._rows_held(got)} rows; write it again"
                )
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks) if len(chunks) != 1 else chunks[0]

    def _rows_held(self, got: int) -> int:
        if self.fortran:  # column after column: no whole row before the end
            return 0
        return self.rows - self.rows_left + got // max(self.row_bytes, 1)


def npz_members(archive: zipfile.ZipFile, path: str) -> dict[str, str]:
    """Array name -> member name of the `.npy` files in a `.npz` archive."""
    return {
        name[: -len(".npy")]: name for name in archive.namelist() if name.endswith(".npy")
    } or _no_arrays(archive, path)


def _no_arrays(archive: zipfile.ZipFile, path: str) -> dict[str, str]:
    held = ", ".join(archive.namelist()[:5]) or "nothing"
    raise InputError(
        f"--data {path} is a zip archive without .npy arrays (it holds {held}); write it "
        "with np.savez(FILE, **{input_name: array})"
    )


_HUGE = 1 << 62  # no size given: rows are checked as they are read


@dataclass(frozen=True)
class NpyLayout:
    """Where the rows of an uncompressed `.npy` array lie in a file, and what they are."""

    path: str
    shape: tuple[int, ...]
    dtype: np.dtype
    offset: int  # bytes before the first row
    footer: int  # bytes after the last row (the rest of a .npz)
    fortran: bool = False  # saved in Fortran order: its rows are not records

    @property
    def row_bytes(self) -> int:
        return self.dtype.itemsize * math.prod(self.shape[1:])


def npy_layout(path: str) -> NpyLayout:
    """The layout of a `.npy` file (its header is checked as `NpyRows` checks it)."""
    with open(path, "rb") as stream:
        rows = NpyRows(stream, path, os.path.getsize(path))
        offset = stream.tell()
    return _layout(path, rows, offset, label=path)


def npz_layouts(
    path: str, archive: zipfile.ZipFile, members: dict[str, str]
) -> dict[str, NpyLayout | None]:
    """Array name -> NpyLayout for the members stored without compression (np.savez); a
    compressed member (np.savez_compressed) maps to None."""
    out: dict[str, NpyLayout | None] = {}
    with open(path, "rb") as raw:
        for name, member in members.items():
            info = archive.getinfo(member)
            if info.compress_type != zipfile.ZIP_STORED:
                out[name] = None
                continue
            raw.seek(info.header_offset)
            local = raw.read(30)  # the local file header: its name and extra field lengths
            if len(local) < 30 or local[:4] != b"PK\x03\x04":
                out[name] = None
                continue
            name_len, extra_len = struct.unpack("<HH", local[26:30])
            raw.seek(info.header_offset + 30 + name_len + extra_len)
            # the member's own size: a header that declares more rows than it holds is refused
            rows = NpyRows(raw, f"{path} array {name!r}", info.compress_size)
            layout = _layout(path, rows, raw.tell(), label=f"{path} array {name!r}")
            out[name] = None if rows.fortran else layout  # read by NpyRows, not as records
    return out


def _layout(path: str, rows: NpyRows, offset: int, label: str) -> NpyLayout:
    end = offset + rows.rows * rows.row_bytes
    size = os.path.getsize(path)
    if end > size:
        raise InputError(
            f"--data {label} is truncated: its header declares {rows.rows} rows of shape "
            f"{rows.shape[1:]}, but the file ends before them; write it again"
        )
    return NpyLayout(path, rows.shape, rows.dtype, offset, size - end, rows.fortran)
