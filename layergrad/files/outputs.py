"""Write the files a user asked for (`--junit`, `--save-gradient`, `--plot`), never over what
they read.

Every output goes through `check_target` first (run before any work, so a bad target costs
a second) and is written atomically (a temporary file in the same folder, then a rename), so
an interrupted run leaves the old file or the new one, never half of one. Missing parent
folders are created, as pytest does for ``--junitxml``.

A target is refused (`OutputError`, exit code 2) when it is one of this run's inputs (a model
file, the ``--input`` batch, an ``--import`` module, the ``--data`` file or function file, or
anything inside a ``--data`` folder), a directory or special file, in a folder that cannot be
written (checked before the work), or an existing file layergrad did not write: a report
replaces only a layergrad JUnit report (recognised by its content), a chart only a PNG, SVG
or PDF file, a ``.npy`` only a ``.npy``, a ``.npz`` only an archive of arrays, a ``.keras``
only a copy ``fix`` wrote (its zip comment says so). ``force``
(``--force``) lifts that last rule, never the others. Replacing an existing file is said in
the one line that says what was written. (`--plot` keeps its own checks of the extension
and the folder, in `render/chart_files.check_plot_path`, and writes through `write_file`.)
"""

from __future__ import annotations

import contextlib
import os
import secrets
import zipfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO

import numpy as np

from layergrad.core.errors import OutputError
from layergrad.core.results import InspectReport
from layergrad.files.array_files import NPY_MAGIC
from layergrad.files.guards import special_kind

FIX_COPY_MARK = b"layergrad fix: a repaired copy"  # the zip comment of a copy `fix` wrote
INPUT_SUFFIXES = (".keras", ".h5", ".hdf5", ".npy", ".npz", ".py")
PathText = str | os.PathLike[str]
Inputs = Iterable[PathText | None]  # the files and folders a run reads


def check_target(
    path: PathText, option: str, kind: str, inputs: Inputs = (), *, force: bool = False
) -> Path:
    """Refuse ``path`` as the target of ``option`` before anything runs (see the module doc).

    ``kind`` is "xml", "npy", "npz", "chart", "fit", "keras" (`fix --output`: an existing
    model file is replaced only with ``force``) or "folder", a folder to write new files into
    (TensorBoard's ``log_dir``): a folder (or a link to one) that can be written, or absent
    with a writable folder above it; ``inputs`` are the files and folders this run reads (a
    folder protects everything inside it); ``force`` allows replacing an existing file
    layergrad did not write.

    Raises:
        OutputError: a target the module doc says is refused.
    """
    text = os.fspath(path)
    p = Path(text)
    folder = kind == "folder"
    if folder and not text.strip():
        raise OutputError(f"{option} is empty; expected a folder to write into")
    _refuse_inputs(p, text, option, inputs)
    if kind == "xml" and p.suffix.lower() in INPUT_SUFFIXES:
        raise OutputError(
            f"{option} {text}: a report named like a model or data file ({p.suffix}); refusing "
            "to write it; name the report .xml"
        )
    if folder and os.path.islink(p) and not os.path.isdir(p):
        raise OutputError(
            f"{option} {text} is a link to {os.readlink(p)}, which is not a folder; "
            "expected a folder to write into"
        )
    try:
        st = p.stat()
    except OSError:  # absent: the folder must be writable (checked now, not after the work)
        _require_writable_folder(p, option)
        return p
    if folder:
        if not os.path.isdir(p):
            what = special_kind(st.st_mode) or "a file"
            raise OutputError(
                f"{option} {text} is {what}, not a folder; expected a folder to write into"
            )
        if not _writable(p):
            raise OutputError(
                f"{option} {text}: the folder cannot be written (read-only or no permission); "
                "choose another place"
            )
        return p
    if os.path.isdir(p) or special_kind(st.st_mode):
        found = "a directory" if os.path.isdir(p) else special_kind(st.st_mode)
        raise OutputError(f"{option} {text} is {found}; expected a file name to write")
    _require_writable_folder(p, option)
    if not force and not _is_kind(p, kind):
        what = f" and is not {_KIND_NAMES[kind]}" if kind in _KIND_NAMES else ""
        raise OutputError(
            f"{option} {text} exists{what}; refusing to overwrite it; "
            "delete it, choose another file name, or pass --force"
        )
    return p


_KIND_NAMES = {
    "xml": "a JUnit report written by layergrad",
    "fit": "a training report written by layergrad (layergrad.fit/1 JSON or its HTML page)",
    "npy": "a .npy array",
    "npz": "a .npz archive of arrays",
    "chart": "a chart (PNG, SVG or PDF)",
}
_JUNIT_MARK = b'<testsuite name="layergrad.check"'
_CHART_MAGIC = (b"\x89PNG\r\n\x1a\n", b"%PDF-")
_FIT_JSON_MARK = b'"schema": "layergrad.fit/1"'
_HTML_MARK = b'<meta name="generator" content="layergrad">'


def _refuse_inputs(p: Path, text: str, option: str, inputs: Inputs) -> None:
    """Refuse a target that is one of this run's inputs, or inside a folder it reads."""
    for source in inputs:
        if source and _same_file(p, source):
            raise OutputError(
                f"{option} {text}: that is {source}, which this run reads; refusing to write "
                "over it; choose another name"
            )
        if source and os.path.isdir(source) and _inside(p, Path(source)):
            raise OutputError(
                f"{option} {text} is inside {source}, a folder this run reads (--data); "
                "refusing to write into it; choose a place outside that folder"
            )


def _inside(p: Path, folder: Path) -> bool:
    """Whether ``p`` (existing or not) would lie inside ``folder``, links resolved."""
    try:
        return Path(os.path.realpath(p)).is_relative_to(os.path.realpath(folder))
    except OSError:
        return False


def _require_writable_folder(p: Path, option: str) -> None:
    """Refuse a target whose folder (or its nearest existing ancestor) cannot be written."""
    folder = p.parent if str(p.parent) else Path(".")
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise OutputError(f"{option} {p}: {folder} is not a folder; choose another place")
    if not _writable(folder):
        raise OutputError(
            f"{option} {p}: the folder {folder} cannot be written (read-only or no permission); "
            "choose another place, before any work is done"
        )


def _writable(folder: Path) -> bool:
    """Whether files can be made in ``folder``: permission, and not a read-only mount."""
    try:
        read_only = os.statvfs(folder).f_flag & os.ST_RDONLY
    except OSError:
        read_only = False
    return os.access(folder, os.W_OK | os.X_OK) and not read_only


def _same_file(a: Path, b: PathText) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.abspath(a) == os.path.abspath(b)


def _is_kind(p: Path, kind: str) -> bool:
    """Whether an existing file holds what layergrad writes for ``kind``."""
    try:
        with p.open("rb") as fh:
            head = fh.read(4096)
        body = head.lstrip(b"\xef\xbb\xbf \t\r\n")
        if kind == "xml":  # what `check --junit` writes, not any file that begins with "<"
            return body.startswith(b"<?xml") and _JUNIT_MARK in body
        if kind == "npy":
            return head.startswith(NPY_MAGIC)
        if kind == "fit":  # what a monitored run writes: its JSON object or its HTML page
            json_report = body.startswith(b"{") and _FIT_JSON_MARK in body
            return json_report or (body.startswith(b"<!") and _HTML_MARK in body)
        if kind == "chart":
            svg = body.startswith((b"<?xml", b"<svg", b"<!DOCTYPE svg")) and b"<svg" in body
            return body.startswith(_CHART_MAGIC) or svg
        with zipfile.ZipFile(p) as zf:
            if kind == "keras":  # only a copy `fix` wrote (its zip comment says so)
                return zf.comment == FIX_COPY_MARK
            return all(name.endswith(".npy") for name in zf.namelist())
    except (OSError, zipfile.BadZipFile):
        return False


def write_file(
    path: str, option: str, kind: str, data: bytes, inputs: Inputs = (), *, force: bool = False
) -> bool:
    """Write ``data`` to ``path`` through `check_target` and a temporary file; True when it
    replaced an existing file."""
    p = check_target(path, option, kind, inputs, force=force)
    return _atomic_write(p, option, lambda fh: fh.write(data))


def write_report(
    path: str, text: str, option: str, what: str, inputs: Inputs = (), *, force: bool = False
) -> str:
    """Write a text report (JUnit XML) to ``path``; returns the line that says what was
    written."""
    existed = write_file(path, option, "xml", text.encode("utf-8"), inputs, force=force)
    return f"wrote {what} to {path}" + (" (replaced it)" if existed else "")


def save_gradients(
    report: InspectReport, path: str, inputs: Inputs = (), *, force: bool = False
) -> str:
    """Write the raw gradients of an inspect report: `.npy` for one result, `.npz` keyed by
    the `--to` reference (any name round-trips: ``file``, ``arr_0``, ``a/b``).

    A None gradient is not an array: a `.npy` is then not written and an `.npz` leaves it
    out; the line returned says so. A result whose gradient exists is always written. The
    command has checked the path first: it ends in `.npy` (for one `--to`, one result) or
    `.npz`.

    Raises:
        OutputError: a target refused by `check_target`, or a file that cannot be written.
    """
    option, kind, results = "--save-gradient", path[-3:], report.results
    p = check_target(path, option, kind, inputs, force=force)
    arrays: dict[str, np.ndarray] = {}
    for r in results:
        if r.array is not None and r.target.layer not in arrays:
            # bfloat16 would be saved as opaque void bytes: store it as float32
            arrays[r.target.layer] = (
                r.array if r.array.dtype.kind == "f" else r.array.astype(np.float32)
            )
    none = [r.target.layer for r in results if r.array is None]
    if not arrays:
        return f"{option} {path}: not written, the gradient of {', '.join(none)} is None"
    existed = _atomic_write(p, option, lambda fh: _write_arrays(fh, arrays, npz=kind == "npz"))
    message = f"wrote the gradient of {', '.join(arrays)} to {path}"
    if none:
        message += f" (left out {', '.join(none)}: the gradient is None)"
    return message + (" (replaced it)" if existed else "")


def _write_arrays(fh: IO[bytes], arrays: dict[str, np.ndarray], npz: bool) -> None:
    """One `.npy`, or an `.npz` as `np.savez` writes it (members ``NAME.npy``) for any key."""
    if not npz:
        np.lib.format.write_array(fh, next(iter(arrays.values())))
        return
    with zipfile.ZipFile(fh, "w", zipfile.ZIP_STORED, allowZip64=True) as zf:
        for name, array in arrays.items():
            with zf.open(f"{name}.npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.asanyarray(array), allow_pickle=False)


def _atomic_write(p: Path, option: str, write: Callable[[IO[bytes]], object]) -> bool:
    """Write through a temporary file beside ``p``, then rename it over ``p``; True when it
    replaced a file."""
    existed = p.exists()
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(
            f"{option} {p}: cannot create the folder {p.parent} ({exc.strerror or exc})"
        ) from None
    temp = p.with_name(f".{p.name}.{secrets.token_hex(4)}.tmp")
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # umask applies
        with os.fdopen(fd, "wb") as fh:
            write(fh)
        os.replace(temp, p)
        return existed
    except OSError as exc:
        raise OutputError(f"{option} {p}: cannot write it ({exc.strerror or exc})") from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            temp.unlink()


def protected_inputs(*groups: Iterable[PathText | None] | PathText | None) -> list[str]:
    """The files a run reads, flattened for `check_target`: model paths, the `--input` file,
    `--import` paths, baselines, what `--data` reads (`data_inputs`)."""
    out: list[str] = []
    for group in groups:
        if isinstance(group, (str, os.PathLike)):
            out.append(os.fspath(group))
        elif group:
            out.extend(os.fspath(g) for g in group if g)
    return out


def data_inputs(data: PathText | None) -> list[str]:
    """What `--data` reads, for `check_target`: the file or folder, or a function's `.py`."""
    if data is None:
        return []
    text = os.fspath(data)
    if os.path.exists(text):
        return [text]
    target, _, _ = text.rpartition(":")
    return [target] if target.endswith(".py") else []
