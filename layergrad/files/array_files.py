"""Read `.npy` / `.npz` files (`--input`, and `--data` a batch at a time) within what they hold.

`np.load` trusts the header: a `.npy` that declares a huge shape allocates it, a `.npz`
member can be a decompression bomb, and an object array would need unpickling. Here every
header is read and checked first (its size, its dtype, the bytes it declares against the
bytes stored), archives are checked for bombs, and only then is the data read. Every
problem is an `InputError` naming the file and, in an archive, the member. `read_header` is
the one check of a header, shared by `--input` (whole arrays) and `--data`.

For `--data`, `NpyRows` reads the rows it is asked for with plain reads after that check (a
compressed `.npz` member is inflated as it is read), and `NpyLayout` says where the rows of
an uncompressed array lie for tf.data to read in place: memory stays at a batch whatever the
file holds (`np.load` reads a whole member, and a memory-mapped `.npy` counts every page it
touches in the process's resident memory).
"""

from __future__ import annotations

import math
import os
import stat
import struct
import tokenize
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import numpy as np

from layergrad.core.errors import InputError
from layergrad.core.limits import MAX_FORTRAN_BYTES, MAX_NPY_HEADER, human
from layergrad.files.guards import check_zip, member_data_start, require_regular

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


def read_arrays(path: str | Path, data: bool = True) -> tuple[list[ArrayHeader], list[np.ndarray]]:
    """The checked headers of a `.npy` (one) or `.npz` (one per array) and, with `data`, its
    arrays (without, no data is read and the list of arrays is empty).

    Raises:
        InputError: missing, special, empty, damaged, an object array, a header over
            MAX_NPY_HEADER, or data shorter than its header declares.
    """
    p = Path(path)
    size = open_checked(p, "--input")
    with p.open("rb") as fh:
        head = fh.read(len(NPY_MAGIC))
        fh.seek(0)
        if head == NPY_MAGIC:
            header = read_header(fh, _where(p, None), None, size)
            return [header], ([_data(fh, p, header)] if data else [])
    if not head.startswith(b"PK"):
        raise InputError(
            f"--input {p} is neither a .npy nor a .npz file (starts with {head!r}); expected "
            f"{EXPECTED}"
        )
    try:
        with open_zip(p, size, "--input") as zf:
            return _read_npz(zf, p, data)
    except DAMAGE as exc:
        raise _damaged(p, None, exc) from exc


HEADER_DAMAGE = (ValueError, EOFError, OverflowError, struct.error, SyntaxError, RecursionError)


def open_checked(path: str | Path, option: str) -> int:
    """Check that ``path`` is a regular, non-empty file (links followed) before it is opened;
    returns its size. ``option`` (`--input`, `--data`) starts the message."""
    p = Path(path)
    st = require_regular(p, EXPECTED, lambda message: InputError(f"{option} {message}"))
    if stat.S_ISDIR(st.st_mode):
        raise InputError(f"{option} {p} is a folder, not a file; expected {EXPECTED}")
    size = st.st_size
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
                header = read_header(member, _where(p, name), name, info.file_size)
                headers.append(header)
                if data:
                    arrays.append(_data(member, p, header))
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


def read_header(fh: IO[bytes], where: str, name: str | None, size: int) -> ArrayHeader:
    """Read and check one array header: its size, version, shape (non-negative integers),
    dtype (no objects), and the bytes it declares against ``size``, the bytes the array's
    file (or zip member) holds from its start. ``where`` starts every message."""
    start = fh.tell()
    try:
        shape, fortran, dtype = _npy_header(fh)
    except HEADER_DAMAGE as exc:
        text = " ".join(str(exc).split())
        if "max_header_size" in text or "large" in text:
            raise InputError(
                f"{where} has a header over {MAX_NPY_HEADER:,} bytes, far more than an array "
                f"needs, so it is not parsed; expected {EXPECTED}"
            ) from None
        raise InputError(
            f"{where} has a damaged .npy header ({short_error(exc)}); expected {EXPECTED}; write "
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


def _npy_header(fh: IO[bytes]) -> tuple[tuple[int, ...], bool, np.dtype]:
    """(shape, fortran order, dtype) from the magic and header of a `.npy` stream, within
    MAX_NPY_HEADER bytes (format versions 1, 2 and 3); ValueError when it is not one,
    including a shape that is not a tuple of non-negative integers."""
    fmt = np.lib.format
    version = fmt.read_magic(fh)
    read = {(1, 0): fmt.read_array_header_1_0, (2, 0): fmt.read_array_header_2_0}.get(version)
    try:
        if read is not None:
            shape, fortran, dtype = read(fh, max_header_size=MAX_NPY_HEADER)
        elif (read_any := getattr(fmt, "_read_array_header", None)) is not None:  # version 3
            shape, fortran, dtype = read_any(fh, version, max_header_size=MAX_NPY_HEADER)
        else:
            raise ValueError(f".npy format version {version} is not supported")
    except tokenize.TokenError as exc:  # numpy reads a header it cannot parse again as tokens
        raise ValueError(f"the header ends inside its dict ({exc.args[0]})") from None
    if not isinstance(shape, tuple) or not all(
        isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
    ):
        raise ValueError(f"the header's shape {str(shape)[:60]} is not non-negative integers")
    if not isinstance(fortran, bool):
        raise ValueError(f"the header's fortran_order {str(fortran)[:20]} is not true or false")
    return shape, fortran, dtype


def _data(fh: IO[bytes], p: Path, header: ArrayHeader) -> np.ndarray:
    """Read the data after a checked header: exactly ``header.nbytes`` bytes (a buffered file
    and a zip member fill the buffer unless they end first)."""
    raw = bytearray(header.nbytes)
    if (fh.readinto(raw) or 0) < header.nbytes:  # type: ignore[attr-defined]
        raise _damaged(p, header.name, EOFError("the data is cut short"))
    flat = np.frombuffer(raw, dtype=header.dtype)
    return flat.reshape(header.shape, order="F" if header.fortran_order else "C")


def _where(p: Path, name: str | None, option: str = "--input") -> str:
    """How a message names a file, and the array in a `.npz`: `--input x.npz, array 'a',`."""
    return f"{option} {p}" + (f", array {name!r}," if name is not None else "")


def _damaged(p: Path, name: str | None, exc: BaseException, option: str = "--input") -> InputError:
    return InputError(
        f"{_where(p, name, option)} is damaged ({short_error(exc)}); expected {EXPECTED}; "
        "write it again"
    )


def short_error(exc: BaseException, typed: bool = True) -> str:
    """The exception's (`typed`: type and) first 160 characters, without numpy's advice to
    unpickle."""
    text = " ".join(str(exc).split())
    text = text.split("allow_pickle")[0].split("max_header_size")[0].rstrip(" ,;:(")[:160]
    if not text:
        return type(exc).__name__
    return f"{type(exc).__name__}: {text}" if typed else text


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
    found = {name[:-4]: name for name in archive.namelist() if name.endswith(".npy")}
    if not found:
        held = ", ".join(archive.namelist()[:5]) or "nothing"
        raise InputError(
            f"--data {path} is a zip archive without .npy arrays (it holds {held}); write it "
            "with np.savez(FILE, **{input_name: array})"
        )
    return found


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
            stored = info.compress_type == zipfile.ZIP_STORED
            start = member_data_start(raw, info) if stored else None
            if start is None:
                out[name] = None
                continue
            raw.seek(start)
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
