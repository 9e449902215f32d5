"""Read `.npy` / `.npz` files (the `--input` probe batch) within what they really hold.

`np.load` trusts the header: a `.npy` that declares a huge shape allocates it, a `.npz`
member can be a decompression bomb, and an object array would need unpickling. Here every
header is read and checked first (its size, its dtype, the bytes it declares against the
bytes stored), archives are checked for bombs, and only then is the data read. Every
problem is an `InputError` naming the file and, in an archive, the member.
"""

from __future__ import annotations

import math
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import numpy as np

from layergrad.core.errors import InputError
from layergrad.core.limits import MAX_NPY_HEADER, human
from layergrad.files.guards import check_zip, require_regular

NPY_MAGIC = b"\x93NUMPY"
EXPECTED = "a .npy or .npz file written by np.save or np.savez"
_DAMAGE = (zipfile.BadZipFile, zlib.error, EOFError, ValueError, OSError, KeyError)


@dataclass(frozen=True)
class ArrayHeader:
    """What an array's header declares: shape, dtype, and the bytes its data takes."""

    name: str | None  # the key in a `.npz`, None for a `.npy`
    shape: tuple[int, ...]
    dtype: np.dtype[np.generic]
    fortran_order: bool

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize


def read_headers(path: str | Path) -> list[ArrayHeader]:
    """The checked headers of a `.npy` (one) or `.npz` (one per array); no data is read."""
    return _read(Path(path), data=False)[0]


def read_arrays(path: str | Path) -> tuple[list[ArrayHeader], list[np.ndarray]]:
    """The checked headers and the arrays of a `.npy` or `.npz` file.

    Raises:
        InputError: missing, special, empty, damaged, an object array, a header over
            MAX_NPY_HEADER, or data shorter than its header declares.
    """
    return _read(Path(path), data=True)


def _read(p: Path, data: bool) -> tuple[list[ArrayHeader], list[np.ndarray]]:
    size = require_regular(p, EXPECTED, _input_error).st_size
    if size == 0:
        raise InputError(f"--input {p} is empty (0 bytes); expected {EXPECTED}")
    with p.open("rb") as fh:
        head = fh.read(len(NPY_MAGIC))
        fh.seek(0)
        if head == NPY_MAGIC:
            header = _header(fh, p, None, size)
            return [header], ([_data(fh, p, header)] if data else [])
    if not head.startswith(b"PK"):
        raise InputError(
            f"--input {p} is neither a .npy nor a .npz file (starts with {head!r}); expected "
            f"{EXPECTED}"
        )
    try:
        with zipfile.ZipFile(p) as zf:
            check_zip(zf, p, size, _input_error)
            return _read_npz(zf, p, data)
    except InputError:
        raise
    except _DAMAGE as exc:
        raise _damaged(p, None, exc) from exc


def _read_npz(
    zf: zipfile.ZipFile, p: Path, data: bool
) -> tuple[list[ArrayHeader], list[np.ndarray]]:
    headers, arrays = [], []
    for info in zf.infolist():
        if not info.filename.endswith(".npy"):
            continue
        name = info.filename[: -len(".npy")]
        try:
            with zf.open(info) as member:
                header = _header(member, p, name, info.file_size)
                headers.append(header)
                if data:
                    arrays.append(_data(member, p, header))
        except InputError:
            raise
        except _DAMAGE as exc:
            raise _damaged(p, name, exc) from exc
    if not headers:
        raise InputError(f"--input {p} is a zip archive without arrays; expected {EXPECTED}")
    return headers, arrays


def _header(fh: IO[bytes], p: Path, name: str | None, size: int) -> ArrayHeader:
    """Read and check one array header; ``size`` is the bytes the array's file holds."""
    where = f"--input {p}" + (f", array {name!r}," if name is not None else "")
    try:
        shape, fortran, dtype = npy_header(fh)
    except ValueError as exc:
        text = " ".join(str(exc).split())
        if "max_header_size" in text or "large" in text:
            raise InputError(
                f"{where} has a header over {MAX_NPY_HEADER:,} bytes, which numpy refuses to "
                f"parse; expected {EXPECTED}"
            ) from None
        raise _damaged(p, name, exc) from exc
    header = ArrayHeader(name, tuple(shape), dtype, fortran)
    if dtype.hasobject:
        raise InputError(
            f"{where} holds Python objects (dtype {dtype}), which could run code when "
            "unpickled; expected numbers; save a numeric array (array.astype('float32'))"
        )
    if header.nbytes > size - fh.tell():
        raise InputError(
            f"{where} declares shape {header.shape} ({human(header.nbytes)}) but holds "
            f"{human(max(0, size - fh.tell()))} of data; the file is cut short or forged; "
            "save it again with np.save"
        )
    return header


def npy_header(fh: IO[bytes]) -> tuple[tuple[int, ...], bool, np.dtype]:
    """(shape, fortran order, dtype) from the magic and header of a `.npy` stream, within
    MAX_NPY_HEADER bytes (format versions 1, 2 and 3); ValueError when it is not one."""
    fmt = np.lib.format
    version = fmt.read_magic(fh)
    if version == (1, 0):
        return fmt.read_array_header_1_0(fh, max_header_size=MAX_NPY_HEADER)
    if version == (2, 0):
        return fmt.read_array_header_2_0(fh, max_header_size=MAX_NPY_HEADER)
    read = getattr(fmt, "_read_array_header", None)  # version 3 (utf-8 field names)
    if read is None:
        raise ValueError(f".npy format version {version} is not supported")
    return read(fh, version, max_header_size=MAX_NPY_HEADER)


def _data(fh: IO[bytes], p: Path, header: ArrayHeader) -> np.ndarray:
    """Read the data after a checked header: exactly ``header.nbytes`` bytes."""
    raw = bytearray(header.nbytes)
    view, got = memoryview(raw), 0
    while got < header.nbytes:
        n = fh.readinto(view[got:])  # type: ignore[attr-defined]
        if not n:
            raise _damaged(p, header.name, EOFError("the data is cut short"))
        got += n
    flat = np.frombuffer(raw, dtype=header.dtype)
    return flat.reshape(header.shape, order="F" if header.fortran_order else "C")


def _damaged(p: Path, name: str | None, exc: BaseException) -> InputError:
    what = f", array {name!r}," if name is not None else ""
    text = " ".join(str(exc).split())[:160] or type(exc).__name__
    return InputError(
        f"--input {p}{what} is damaged ({type(exc).__name__}: {text}); expected {EXPECTED}; "
        "write it again"
    )


def _input_error(message: str) -> InputError:
    return InputError(f"--input {message}")
