"""Guards for reading untrusted files: only regular files, zip members within their declared
sizes, HDF5 files without links or storage outside themselves.

Each guard raises the error class its caller passes (`LoadError` for a model file,
`InputError` for an `--input` file), with a message that says what was found, what was
expected and what to do.
"""

from __future__ import annotations

import math
import os
import stat
import struct
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from h5py import h5d, h5l, h5o

from layergrad.core.errors import LayergradError
from layergrad.core.limits import INFLATION_ALLOWANCE, MAX_INFLATION, human
from layergrad.core.tf_types import H5Object

ErrorType = Callable[[str], LayergradError]

_SPECIAL = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def special_kind(mode: int) -> str | None:
    """What a file is when it is neither a regular file nor a directory, else None."""
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    return next((name for test, name in _SPECIAL if test(mode)), "not a regular file")


def require_regular(path: Path, expected: str, error: ErrorType) -> os.stat_result:
    """Stat ``path`` (following links) and refuse a FIFO, device or socket before opening it.

    Opening a FIFO blocks until a writer comes and ``/dev/zero`` never ends, so anything that
    is not a regular file or a directory is refused here. Returns the stat result.
    """
    try:
        st = path.stat()
    except FileNotFoundError:
        raise error(f"{path}: no such file; expected {expected}; check the path") from None
    except OSError as exc:
        raise error(
            f"{path}: cannot read it ({exc.strerror or exc}); expected {expected}; check the "
            "path and its permissions"
        ) from None
    kind = special_kind(st.st_mode)
    if kind is not None:
        raise error(
            f"{path} is {kind}, not a regular file; expected {expected}; layergrad reads only "
            "regular files, so copy the data to a file first"
        )
    return st


def check_zip(zf: zipfile.ZipFile, path: Path, file_size: int, error: ErrorType) -> None:
    """Refuse a zip whose members claim more than the file holds (a decompression bomb).

    Members may not overlap (their stored sizes add up to at most the file's size), and
    members that inflate more than MAX_INFLATION times may add up to at most
    INFLATION_ALLOWANCE bytes. Both read only the central directory.
    """
    infos = zf.infolist()
    stored = sum(i.compress_size for i in infos)
    if stored > file_size:
        raise error(
            f"{path}: its zip members claim {human(stored)} of stored data but the file holds "
            f"{human(file_size)} (members overlap, a zip bomb); refusing to read it; expected "
            "an archive written by Keras or numpy"
        )
    suspect = [i for i in infos if i.file_size > MAX_INFLATION * max(i.compress_size, 1)]
    if sum(i.file_size for i in suspect) > INFLATION_ALLOWANCE:
        worst = max(suspect, key=lambda i: i.file_size)
        raise error(
            f"{path}: member {worst.filename!r} declares {human(worst.file_size)} but stores "
            f"{human(worst.compress_size)} (a decompression bomb: more than {MAX_INFLATION}x); "
            "refusing to inflate it; expected an archive written by Keras or numpy"
        )


def member_data_start(raw: IO[bytes], info: zipfile.ZipInfo) -> int | None:
    """Where the bytes of a zip member begin in its archive (after its local header, whose
    name and extra lengths are at bytes 26-29); None when that header is not there."""
    raw.seek(info.header_offset)
    local = raw.read(30)
    if len(local) < 30 or local[:4] != b"PK\x03\x04":
        return None
    name_len, extra_len = struct.unpack("<HH", local[26:30])
    return int(info.header_offset + 30 + name_len + extra_len)


@dataclass(frozen=True)
class StoredDataset:
    """One dataset of an HDF5 file, from its metadata: what its shape and dtype declare, and
    what the file stores for it (bytes)."""

    name: str
    declared: int
    stored: int


def check_hdf5(h5: H5Object, where: str, error: ErrorType) -> tuple[StoredDataset, ...]:
    """Refuse HDF5 links and storage that point outside the file; return its datasets.

    External links, soft links, datasets with external storage and virtual datasets can make
    a read open ``/etc/passwd`` or a FIFO; Keras never writes them. One walk over the links
    (HDF5's own, no Python object per link) reads only the file's metadata; each object is
    opened once, however many hard links lead to it (hard-link cycles are walked once).
    """
    problem: list[str] = []
    seen: set[int] = set()
    found: list[StoredDataset] = []

    def refused(what: str, verb: str = "read", never: str = "has one") -> int:
        problem.append(
            f"{where}: HDF5 {what}; a Keras file never {never}; refusing to {verb} it "
            "(re-save the model)"
        )
        return 1  # a value stops the walk

    def visit(raw: bytes, link: H5Object) -> int | None:
        name = raw.decode("utf-8", "replace")
        if link.type == h5l.TYPE_EXTERNAL:
            target = os.fsdecode(h5.id.links.get_val(raw)[0])
            return refused(f"external link {name!r} points into {target!r}", "follow")
        if link.type == h5l.TYPE_SOFT:
            target = os.fsdecode(h5.id.links.get_val(raw))
            return refused(f"soft link {name!r} -> {target!r}", "follow")
        if link.type != h5l.TYPE_HARD:
            return refused(f"user-defined link {name!r}", "follow")
        if link.u in seen:
            return None
        seen.add(link.u)
        obj = h5o.open(h5.id, raw)
        if not isinstance(obj, h5d.DatasetID):
            return None
        plist = obj.get_create_plist()
        if plist.get_external_count():
            count = min(plist.get_external_count(), 3)
            files = ", ".join(repr(os.fsdecode(plist.get_external(i)[0])) for i in range(count))
            return refused(
                f"dataset {name!r} keeps its data in other files ({files})", "read", "does"
            )
        if plist.get_layout() == h5d.VIRTUAL:
            return refused(f"dataset {name!r} is a virtual dataset mapping other files")
        # its shape and type read as HDF5 states them (no numpy dtype); no shape: empty
        dims = obj.get_space().get_simple_extent_dims()
        declared = 0 if dims is None else math.prod(dims) * obj.get_type().get_size()
        found.append(StoredDataset("/" + name, declared, obj.get_storage_size()))
        return None

    # h5py turns an exception raised inside a visitor into a SystemError, so the visitor
    # keeps the message and the error is raised here.
    h5.id.links.visit(visit, info=True)
    if problem:
        raise error(problem[0])
    return tuple(found)
