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
import zipfile
from typing import IO

import numpy as np

from layergrad.core.errors import InputError
from layergrad.files.array_files import read_header


class NpyRows:
    """Rows of one `.npy` stream, read in order.

    Args:
        stream: a binary file object positioned at the start of the `.npy` data.
        label: how errors name it (`x.npy`, `data.npz, array 'a',`).
        size: the bytes the stream holds from its start (the file's or the member's size).

    Raises:
        InputError: what `array_files.read_header` refuses, Fortran order (rows are not
        contiguous), or a 0-d array (no rows).

    Example (not run)::

        rows = NpyRows(open("x.npy", "rb"), "x.npy", os.path.getsize("x.npy"))
        rows.read(32).shape  # (32, 28, 28, 1)
    """

    def __init__(self, stream: IO[bytes], label: str, size: int) -> None:
        self.stream, self.label = stream, label
        header = read_header(stream, f"--data {label}", None, size)
        if not header.shape:
            raise InputError(
                f"--data {label} is a single value (shape ()); expected rows = samples"
            )
        if header.fortran_order and len(header.shape) > 1:
            raise InputError(
                f"--data {label} is saved in Fortran order, so its rows cannot be read one "
                "batch at a time; save np.ascontiguousarray(array) instead"
            )
        self.shape: tuple[int, ...] = header.shape
        self.dtype = header.dtype
        self.row_bytes = self.dtype.itemsize * math.prod(self.shape[1:])
        self.rows_left = self.shape[0]

    @property
    def rows(self) -> int:
        """Rows (samples) the header declares."""
        return self.shape[0]

    def read(self, n: int) -> np.ndarray:
        """The next `min(n, rows left)` rows; an empty array at the end."""
        n = min(n, self.rows_left)
        want = n * self.row_bytes
        chunks, got = [], 0
        while got < want:  # a zip member may return less than asked
            chunk = self.stream.read(want - got)
            if not chunk:
                raise InputError(
                    f"--data {self.label} is truncated: its header declares {self.rows} rows "
                    f"of shape {self.shape[1:]}, but the data ends after "
                    f"{self.rows - self.rows_left + got // max(self.row_bytes, 1)} rows; "
                    "write it again"
                )
            chunks.append(chunk)
            got += len(chunk)
        self.rows_left -= n
        data = b"".join(chunks) if len(chunks) != 1 else chunks[0]
        return np.frombuffer(data, dtype=self.dtype).reshape((n, *self.shape[1:]))


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
