"""Open a model file the way Keras will, and read its parts within limits (no TensorFlow).

Keras 3.15 (`keras.saving.load_model`) decides the format from the *name*: a path ending in
``.keras`` that `zipfile.is_zipfile` accepts (an end-of-archive record near the end of the
file) is a zip archive; a path ending in ``.h5`` or ``.hdf5`` is opened with h5py (which
finds the HDF5 signature at byte 0, 512, 1024, 2048...); anything else is refused. layergrad
decides the same way, so the file it reads and audits is the file Keras loads, and it refuses
a file that is valid as both (a zip appended to an HDF5 file): what one reader sees is not
what the other sees.
"""

from __future__ import annotations

import contextlib
import io
import shutil
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING

import h5py

from layergrad.core.errors import LoadError
from layergrad.core.limits import MAX_CONFIG_BYTES, human
from layergrad.core.tf_types import H5Object
from layergrad.files import guards
from layergrad.files.array_files import NPY_MAGIC

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")
HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"
KERAS_SUFFIX = ".keras"
HDF5_SUFFIXES = (".h5", ".hdf5")
WEIGHTS_MEMBER = "model.weights.h5"
EXPECTED = "a Keras model file (.keras or .h5)"
NUMPY_SUFFIXES = (".npz", ".npy")  # data, which a user may pass where the model goes
Checked = tuple[H5Object, tuple[guards.StoredDataset, ...]]  # an open HDF5 file, its datasets


def model_format(p: Path) -> str:
    """Return "keras" or "h5" for a model file, deciding as `keras.saving.load_model` does.

    Raises:
        LoadError: missing, a directory, a special file, empty, a polyglot, or a name that does
            not match the contents (with the rename that fixes it).
    """
    if p.is_dir() and (p / "saved_model.pb").exists():
        raise LoadError(
            f"{p} is a TensorFlow SavedModel directory; expected a .keras or .h5 file, because "
            "Keras 3 cannot address the layers of a SavedModel; re-save it with "
            'model.save("model.keras") from the code that built it'
        )
    if p.is_dir():
        raise LoadError(f"{p} is a directory; expected a .keras or .h5 file; pass the model file")
    size = guards.require_regular(p, EXPECTED, LoadError).st_size
    if size == 0:
        raise LoadError(f"{p} is empty (0 bytes); expected a .keras or .h5 model; re-save it")
    try:
        with p.open("rb") as fh:
            head = fh.read(8)
            is_hdf5 = _has_hdf5_signature(fh, size)
        is_zip = zipfile.is_zipfile(p)
    except OSError as exc:
        raise LoadError(
            f"{p}: cannot open ({exc.strerror or exc}); expected a readable file; check its "
            "permissions"
        ) from exc
    if is_zip and is_hdf5:
        raise LoadError(
            f"{p} is both a zip archive and an HDF5 file (a polyglot); Keras would load one part "
            "and an audit could read the other, so layergrad refuses it; expected a file saved "
            'by model.save("model.keras"); re-save the model'
        )
    name = str(p)
    if name.endswith(KERAS_SUFFIX):
        if is_zip:
            return "keras"
        if head.startswith(ZIP_MAGIC):  # a zip cut short: its end-of-archive record is gone
            raise damaged(p, "a .keras zip", "no end-of-archive record")
        if is_hdf5:
            raise _renamed(p, "an HDF5 (.h5) file", ".h5")
    elif name.endswith(HDF5_SUFFIXES):
        if is_hdf5:
            return "h5"
        if is_zip or head.startswith(ZIP_MAGIC):
            raise _renamed(p, "a zip (.keras) archive", ".keras")
    elif name.endswith(NUMPY_SUFFIXES) or head.startswith(NPY_MAGIC):
        raise LoadError(
            f"{p} is a NumPy data file, not a model; expected {EXPECTED}; pass the model file, "
            f"and the data with --data {p}"
        )
    elif is_zip or is_hdf5 or head.startswith(ZIP_MAGIC):
        kind, suffix = ("an HDF5 file", ".h5") if is_hdf5 else ("a zip archive", ".keras")
        raise LoadError(
            f"{p} is {kind} but its name ends in neither .keras nor .h5, and Keras picks the "
            f"format from the name; expected {EXPECTED}; rename it to end in {suffix}"
        )
    raise LoadError(
        f"{p} is neither a zip (.keras) nor an HDF5 (.h5) file (starts with {head[:8]!r}); "
        'expected a model saved with model.save("model.keras"); re-save the model'
    )


def _has_hdf5_signature(fh: IO[bytes], size: int) -> bool:
    """Whether the HDF5 signature is at byte 0 or 512 * 2**k, where h5py looks for it."""
    offset = 0
    while offset + len(HDF5_MAGIC) <= size:
        fh.seek(offset)
        if fh.read(len(HDF5_MAGIC)) == HDF5_MAGIC:
            return True
        offset = 512 if offset == 0 else offset * 2
    return False


def _renamed(p: Path, kind: str, suffix: str) -> LoadError:
    return LoadError(
        f"{p} is {kind} under another extension, and Keras picks the format from the name; "
        f"expected the name to match the contents; rename it to end in {suffix}"
    )


def damaged(p: Path, kind: str, detail: str) -> LoadError:
    return LoadError(
        f"{p} is {kind} but is truncated or damaged ({detail}); expected an intact model file; "
        "re-save or re-download it"
    )


@contextlib.contextmanager
def open_zip(p: Path) -> Iterator[zipfile.ZipFile]:
    """The `.keras` archive, its central directory checked against bombs."""
    with zipfile.ZipFile(p, "r") as zf:
        guards.check_zip(zf, p, p.stat().st_size, LoadError)
        yield zf


def member(zf: zipfile.ZipFile, p: Path, name: str) -> bytes | None:
    """`config.json` or `metadata.json`, read within MAX_CONFIG_BYTES; None when absent."""
    try:
        info = zf.getinfo(name)
    except KeyError:
        return None
    too_big = (
        f"{p}: member {name!r} declares {human(info.file_size)}, more than the "
        f"{human(MAX_CONFIG_BYTES)} layergrad reads; refusing it; expected a file written by Keras"
    )
    if info.file_size > MAX_CONFIG_BYTES:
        raise LoadError(too_big)
    with zf.open(info) as handle:
        data = handle.read(MAX_CONFIG_BYTES + 1)  # zipfile stops at the declared size; cap it
    if len(data) > MAX_CONFIG_BYTES:
        raise LoadError(too_big)
    return data


@contextlib.contextmanager
def open_weights(p: Path, zf: zipfile.ZipFile) -> Iterator[Checked]:
    """``model.weights.h5`` of a `.keras` archive as an open h5py File (None when absent) and
    its datasets.

    Keras stores members uncompressed: then h5py reads the member's bytes in place, which for
    a 100 MB weight file is several times faster than inflating a copy. A compressed member
    is inflated into an anonymous file in the system temp directory, never into memory and
    never beside the model. Links and storage outside the member are refused.
    """
    if WEIGHTS_MEMBER not in zf.namelist():
        yield None, ()
        return
    info = zf.getinfo(WEIGHTS_MEMBER)
    with contextlib.ExitStack() as stack:
        if info.compress_type == zipfile.ZIP_STORED:
            raw = stack.enter_context(p.open("rb", buffering=0))
            start = guards.member_data_start(raw, info)
            if start is None:
                raise zipfile.BadZipFile(f"bad local header for {info.filename}")
            if start + info.file_size > p.stat().st_size:
                raise zipfile.BadZipFile(f"{info.filename} is cut short")
            view: IO[bytes] | _Window = _Window(raw, start, info.file_size)
        else:
            view = stack.enter_context(tempfile.TemporaryFile(prefix="layergrad-"))
            with zf.open(info) as src:
                shutil.copyfileobj(src, view, 1 << 20)  # zipfile stops at the declared size
            view.seek(0)
        h5 = stack.enter_context(h5py.File(view, "r"))
        yield h5, guards.check_hdf5(h5, f"{p}: {WEIGHTS_MEMBER}", LoadError)


class _Window(io.RawIOBase):
    """Read-only, seekable bytes ``[start, start + size)`` of an open binary file."""

    def __init__(self, raw: io.FileIO, start: int, size: int):
        super().__init__()
        self._raw, self._start, self._size, self._pos = raw, start, size, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buffer: WriteableBuffer) -> int:
        view = memoryview(buffer).cast("B")
        want = max(0, min(len(view), self._size - self._pos))
        self._raw.seek(self._start + self._pos)
        got = self._raw.readinto(view[:want]) or 0
        self._pos += got
        return got


@contextlib.contextmanager
def open_hdf5(p: Path) -> Iterator[Checked]:
    """A legacy `.h5` model file as an open h5py File, links and outside storage refused, and
    its datasets."""
    with h5py.File(p, "r") as h5:
        yield h5, guards.check_hdf5(h5, str(p), LoadError)


def hdf5_attribute(h5: H5Object, p: Path, name: str) -> bytes | str | None:
    """A text attribute of a legacy `.h5` file (``model_config``, ``training_config``), refused
    beyond MAX_CONFIG_BYTES; None when absent.

    A fixed-size attribute is measured before it is read; a variable-length string (what
    Keras writes) lives in the file's heap, so reading it costs at most what the file holds.
    """
    if name not in h5.attrs:
        return None
    size = h5.attrs.get_id(name).get_storage_size()
    value = h5.attrs[name] if size <= MAX_CONFIG_BYTES else None
    if value is not None and not isinstance(value, (bytes, str)):
        value = str(value)
    if value is None or len(value) > MAX_CONFIG_BYTES:
        raise LoadError(
            f"{p}: its {name} attribute holds {human(max(size, len(value or '')))}, more than "
            f"the {human(MAX_CONFIG_BYTES)} layergrad reads; refusing it; expected a file "
            "written by Keras"
        )
    return value
