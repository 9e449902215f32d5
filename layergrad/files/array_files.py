"""Read `.npy` / `.npz` files (`--input`, and `--data` a batch at a time) within what they hold.

`np.load` trusts the header: a `.npy` that declares a huge shape allocates it, a `.npz`
member can be a decompression bomb, and an object array would need unpickling. Here every
header is read and checked first (its size, its dtype, the bytes it declares against the
bytes stored), archives are checked for bombs, and only then is the data read. Every
problem is an `InputError` naming the file and, in an archive, the member. `read_header` is
the one check of a header, shared by `--input` (whole arrays) and `--data` (`npy_rows`).
"""

from __future__ import annotations

import math
import struct
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
DAMAGE = (
    zipfile.BadZipFile, zlib.error, EOFError, ValueError, OSError, KeyError, NotImplementedError,
    RuntimeError, OverflowError, IndexError, struct.error,
)  # fmt: skip


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


HEADER_DAMAGE = (ValueError, EOFError, OverflowError, struct.error, SyntaxError, RecursionError)


def open_checked(path: str | Path, option: str) -> int:
    """Check that ``path`` is a regular, non-empty file (links followed) before it is opened;
    returns its size. ``option`` (`--input`, `--data`) starts the message."""
    p = Path(path)

    def error(message: str) -> InputError:
        return InputError(f"{option} {message}")

    size = require_regular(p, EXPECTED, error).st_size
    if size == 0:
        raise InputError(f"{option} {p} is empty (0 bytes); expected {EXPECTED}")
    return size


def open_zip(p: Path, size: int, option: str) -> zipfile.ZipFile:
    """Open an `.npz` as a zip, checked for bombs and overlapping members."""
    try:
        zf = zipfile.ZipFile(p)
    except DAMAGE as exc:
        raise _damaged(p, None, exc, option) from exc
    try:
        check_zip(zf, p, size, lambda message: InputError(f"{option} {message}"))
    except InputError:
        zf.close()
        raise
    return zf


def _read(p: Path, data: bool) -> tuple[list[ArrayHeader], list[np.ndarray]]:
    size = open_checked(p, "--input")
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
        with open_zip(p, size, "--input") as zf:
            return _read_npz(zf, p, data)
    except InputError:
        raise
    except DAMAGE as exc:
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
            with open_member(zf, info, p, "--input") as member:
                header = _header(member, p, name, info.file_size)
                headers.append(header)
                if data:
                    arrays.append(_data(member, p, header))
        except InputError:
            raise
        except DAMAGE as exc:
            raise _damaged(p, name, exc) from exc
    if not headers:
        raise InputError(f"--input {p} is a zip archive without arrays; expected {EXPECTED}")
    return headers, arrays


def open_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo, p: Path, option: str) -> IO[bytes]:
    """Open one `.npz` member; an encrypted member or an unknown compression is one clear
    error (zipfile raises RuntimeError / NotImplementedError)."""
    name = info.filename[: -len(".npy")]
    if info.flag_bits & 0x1:
        raise InputError(
            f"{option} {p}, array {name!r}, is encrypted; layergrad reads no passwords; "
            "save it with np.savez"
        )
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        raise InputError(
            f"{option} {p}, array {name!r}, is compressed with zip method "
            f"{info.compress_type}, not stored or deflated as np.savez and "
            "np.savez_compressed write; save it again with np.savez"
        )
    try:
        return zf.open(info)
    except DAMAGE as exc:
        raise _damaged(p, name, exc, option) from exc


def _header(fh: IO[bytes], p: Path, name: str | None, size: int) -> ArrayHeader:
    """Read and check one array header; ``size`` is the bytes the array's file holds."""
    where = f"--input {p}" + (f", array {name!r}," if name is not None else "")
    return read_header(fh, where, name, size)


def read_header(fh: IO[bytes], where: str, name: str | None, size: int) -> ArrayHeader:
    """Read and check one array header: its size, version, shape (non-negative integers),
    dtype (no objects), and the bytes it declares against ``size``, the bytes the array's
    file (or zip member) holds from its start. ``where`` starts every message."""
    start = fh.tell()
    try:
        shape, fortran, dtype = npy_header(fh)
    except HEADER_DAMAGE as exc:
        text = " ".join(str(exc).split())
        if "max_header_size" in text or "large" in text:
            raise InputError(
                f"{where} has a header over {MAX_NPY_HEADER:,} bytes, far more than an array "
                f"needs, so it is not parsed; expected {EXPECTED}"
            ) from None
        raise InputError(
            f"{where} has a damaged .npy header ({_short(exc)}); expected {EXPECTED}; write "
            "it again"
        ) from None
    header = ArrayHeader(name, tuple(shape), dtype, fortran)
    if dtype.hasobject:
        raise InputError(
            f"{where} holds Python objects (dtype {dtype}), which could run code when "
            "unpickled; expected numbers or text; save a numeric array "
            "(array.astype('float32')), or text as str (array.astype(str))"
        )
    held = size - (fh.tell() - start)
    if header.nbytes > held:
        raise InputError(
            f"{where} declares shape {header.shape} ({human(header.nbytes)}) but holds "
            f"{human(max(0, held))} of data; the file is cut short or forged; "
            "save it again with np.save"
        )
    return header


def npy_header(fh: IO[bytes]) -> tuple[tuple[int, ...], bool, np.dtype]:
    """(shape, fortran order, dtype) from the magic and header of a `.npy` stream, within
    MAX_NPY_HEADER bytes (format versions 1, 2 and 3); ValueError when it is not one,
    including a shape that is not a tuple of non-negative integers."""
    shape, fortran, dtype = _npy_header(fh)
    if not isinstance(shape, tuple) or not all(
        isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
    ):
        raise ValueError(f"the header's shape {str(shape)[:60]} is not non-negative integers")
    if not isinstance(fortran, bool):
        raise ValueError(f"the header's fortran_order {str(fortran)[:20]} is not true or false")
    return shape, fortran, dtype


def _npy_header(fh: IO[bytes]) -> tuple[object, object, np.dtype]:
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


def _damaged(p: Path, name: str | None, exc: BaseException, option: str = "--input") -> InputError:
    what = f", array {name!r}," if name is not None else ""
    return InputError(
        f"{option} {p}{what} is damaged ({_short(exc)}); expected {EXPECTED}; write it again"
    )


def _short(exc: BaseException) -> str:
    """The exception's type and first 160 characters, without numpy's advice to unpickle."""
    text = " ".join(str(exc).split())
    text = text.split("allow_pickle")[0].split("max_header_size")[0].rstrip(" ,;:(")[:160]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
