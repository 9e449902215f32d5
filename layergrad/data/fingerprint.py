"""What identifies a `--data` source: the SHA-256 of its content, recorded in a scan's probe
(`probe.data_sha256`) so that `check --baseline --data` can tell the same data from other data.

A `.npy` or `.npz` file is hashed whole; an image folder by every image file in path order
(its path relative to the folder and its bytes); a `FILE.py:function` or `module:function`
by the source file of its code and the function's name (the values it yields are not read
twice). Files are read in blocks, so memory stays small whatever their size.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os

from layergrad.data.images import image_paths

BLOCK = 1 << 20


def data_sha256(source: str | os.PathLike[str]) -> str:
    """The hex SHA-256 that identifies the data of `--data source` (see the module docstring).

    Example:
        >>> import tempfile, pathlib
        >>> d = pathlib.Path(tempfile.mkdtemp())
        >>> (d / "a.npy").write_bytes(b"abc") and data_sha256(d / "a.npy")[:16]
        'ba7816bf8f01cfea'
    """
    text = os.fspath(source)
    digest = hashlib.sha256()
    if os.path.isfile(text):
        _add_file(digest, text)
    elif os.path.isdir(text):
        for rel in sorted(os.path.relpath(p, text) for p in image_paths(text)):
            digest.update(rel.encode("utf-8") + b"\0")
            _add_file(digest, os.path.join(text, rel))
    else:  # FILE.py:function or module:function
        target, _, name = text.rpartition(":")
        digest.update(f"function {name}\0".encode())
        found = _code_file(target)
        if found is not None:
            _add_file(digest, found)
    return digest.hexdigest()


def _add_file(digest: hashlib._Hash, path: str) -> None:
    with open(path, "rb") as handle:
        while block := handle.read(BLOCK):
            digest.update(block)


def _code_file(target: str) -> str | None:
    """The file of a data function's code: FILE.py itself, or where `module` is found."""
    if target.endswith(".py"):
        return target if os.path.isfile(target) else None
    try:
        spec = importlib.util.find_spec(target)
    except (ImportError, ValueError):
        return None
    origin = getattr(spec, "origin", None)
    return origin if origin and os.path.isfile(origin) else None
