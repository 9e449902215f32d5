"""Check `--data` and `--input` against the model's config before TensorFlow loads (it takes
seconds to import): what `--data` is (`source_kind`), and the `.npy`/`.npz` headers against
the inputs the config declares, where it declares them; the streams of `data/sources.py`
read them here too. The same checks run again on the loaded model.
"""

from __future__ import annotations

import os
import zipfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

import numpy as np

from layergrad.core.errors import InputError
from layergrad.core.probe_options import DataSet, OneBatch
from layergrad.data import images
from layergrad.data.probe_input import array_keys, input_keys, peek_rows
from layergrad.data.user_code import is_function
from layergrad.data.value_checks import InputSpec, check_fits, tf_dtype
from layergrad.files.array_files import (
    DAMAGE,
    NpyLayout,
    NpyRows,
    npy_layout,
    npz_layouts,
    npz_members,
    open_checked,
    open_member,
    open_zip,
)
from layergrad.files.guards import require_regular
from layergrad.model.graph import ModelGraph

KINDS_HELP = "a .npy or .npz file, a folder of images, or FILE.py:function / module:function"
T = TypeVar("T")


def check_before_loading(graph: ModelGraph, source: OneBatch | DataSet) -> None:
    """Raise InputError for a `source` (`--data` or `--input`) that cannot feed `graph`'s model.

    Paths are always checked; keys, shapes and dtypes when the config declares every input's
    name, shape and dtype (a Keras 3 file always does).
    """
    specs = config_specs(graph)
    if isinstance(source, DataSet):
        check_source(source.path, specs)
    elif source.input_file is not None:
        peek_rows(source.input_file, specs)  # the file is there, sound, with rows that fit


def config_specs(graph: ModelGraph) -> tuple[InputSpec, ...] | None:
    """The model's inputs as its config declares them; None when it does not say it all."""
    if not graph.known or not graph.input_names:
        return None
    specs = []
    for name in graph.input_names:
        entry = graph.get(name)
        if entry is None:
            return None
        config, dtype = entry.config, entry.dtype  # the dtype its config names
        shape = config.get("batch_shape", config.get("batch_input_shape"))
        if not isinstance(shape, list) or not shape or not isinstance(dtype, str):
            return None
        if not all(d is None or (type(d) is int and d >= 0) for d in shape):
            return None
        try:
            if dtype != "string":  # text: unicode or bytes arrays (`value_checks.check_fits`)
                np.dtype(tf_dtype(dtype))
        except TypeError:
            return None
        specs.append(InputSpec(name=name, shape=tuple(shape[1:]), dtype=dtype))
    return tuple(specs)


def source_kind(path: str) -> str:
    """What `--data PATH` is: "npy", "npz", "images" (a folder) or "function".

    Raises:
        InputError: the file, folder or `FILE.py` does not exist, or is of no kind read here.
    """
    lowered = path.lower()
    if lowered.endswith((".npy", ".npz")):
        if not os.path.isfile(path):
            raise InputError(f"--data {path}: no such file; expected {KINDS_HELP}.")
        return lowered[-3:]
    if os.path.isdir(path):
        return "images"
    if is_function(path):
        target = path.rsplit(":", 1)[0]
        if target.endswith(".py") and not os.path.isfile(target):
            raise InputError(f"--data {path}: no such file {target}; pass FILE.py:function.")
        return "function"
    if not os.path.exists(path):
        raise InputError(f"--data {path}: no such file or folder; expected {KINDS_HELP}.")
    raise InputError(f"--data {path}: not a kind of data layergrad reads; expected {KINDS_HELP}.")


def check_source(path: str | os.PathLike[str], specs: Sequence[InputSpec] | None) -> None:
    """Check `--data PATH` as far as the files' headers go, without TensorFlow: each file is
    a regular file (links followed), headers and archives are sound, each image's size within
    budget, and it exists; with the model's inputs `specs` (None: not known yet), a `.npy` or
    `.npz` holds an array of the right shape and dtype for every input.

    Raises:
        InputError: as `open_data` would, for the same fault.
    """
    text = os.fspath(path)
    lowered = text.lower()  # special files, forged headers, archive members: first
    if lowered.endswith(".npy") and os.path.lexists(text):
        size = open_checked(text, "--data")
        with open(text, "rb") as stream:
            NpyRows(stream, text, size)
    elif lowered.endswith(".npz") and os.path.lexists(text):
        size = open_checked(text, "--data")
        with open_zip(Path(text), size, "--data") as archive:
            for name, member in guarded(lambda: npz_members(archive, text), text).items():
                info = archive.getinfo(member)
                with open_member(archive, info, Path(text), "--data") as stream:
                    guarded(lambda s=stream, n=name, i=info: NpyRows(  # type: ignore[misc]
                        s, f"{text}, array {n!r},", i.file_size), text)  # fmt: skip
    elif os.path.isdir(text):
        images.list_images(text)
    elif is_function(text):
        target = text.rpartition(":")[0]
        if target.endswith(".py") and os.path.lexists(target):
            require_regular(Path(target), "a Python file", lambda m: InputError(f"--data {m}"))
    kind = source_kind(text)
    if specs is None:
        return
    if kind == "npy":
        npy_input_layout(text, specs)
    elif kind == "npz":
        input_layouts(text, specs)


def npy_input_layout(path: str, specs: Sequence[InputSpec]) -> NpyLayout:
    array_keys([None], [s.name for s in specs], f"--data {path}")
    layout = npy_layout(path)
    check_fits(layout.shape, layout.dtype, specs[0], f"--data {path}")
    return layout


def input_members(
    archive: zipfile.ZipFile, path: str, specs: Sequence[InputSpec]
) -> dict[str, str]:
    """Input name -> the archive member holding its array (`probe_input.input_keys`)."""
    names = npz_members(archive, path)
    keys = input_keys(names, [s.name for s in specs], f"--data {path}")
    return {s.name: names[keys[s.name]] for s in specs}


def input_readers(archive: zipfile.ZipFile, path: str, specs: Sequence[InputSpec]) -> list[NpyRows]:
    """Each input's rows, named in messages by the array's key in the file (`x`)."""
    return [
        NpyRows(archive.open(member), f"{path} array {member.removesuffix('.npy')!r}")
        for member in input_members(archive, path, specs).values()
    ]


def input_layouts(
    path: str, specs: Sequence[InputSpec], kind: str = "inputs"
) -> tuple[list[NpyLayout | None], int]:
    """Where each input's rows lie (None: compressed) and how many rows there are, checked
    against `specs` from the headers (`kind`: what they are, inputs or labels)."""

    def read() -> tuple[list[NpyRows], dict[str, NpyLayout | None]]:
        with zipfile.ZipFile(path) as archive:
            members = input_members(archive, path, specs)
            return input_readers(archive, path, specs), npz_layouts(path, archive, members)

    headers, layouts = guarded(read, path)
    for spec, rows in zip(specs, headers, strict=True):
        check_fits(rows.shape, rows.dtype, spec, f"--data {rows.label}")
    counts = {s.name: r.rows for s, r in zip(specs, headers, strict=True)}
    if len(set(counts.values())) > 1:
        listed = ", ".join(f"{k}: {v}" for k, v in counts.items())
        raise InputError(
            f"--data {path}: the {kind} have different numbers of rows ({listed}); give every "
            f"{kind[:-1]} the same number of samples"
        )
    return [layouts[s.name] for s in specs], next(iter(counts.values()))


def guarded(make: Callable[[], T], path: str) -> T:
    """Run ``make``; a damaged archive (zipfile's many errors) is one InputError."""
    try:
        return make()
    except InputError:
        raise
    except DAMAGE as exc:
        raise InputError(
            f"--data {path} is not a readable .npz file ({type(exc).__name__}: "
            f"{' '.join(str(exc).split())[:160]}); write it with np.savez"
        ) from None
