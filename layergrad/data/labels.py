"""The labels that come with the data: summarised per output (`target_fit.LabelSummary`), and
read as batches beside the inputs (`open_labels`).

`y` (one output) or `y:NAME` (one per output) in an `--input` `.npz` or a `--data` `.npz`;
a `.npz` data set is read a chunk of rows at a time, so memory does not grow with its size.
"""

from __future__ import annotations

import os
import zipfile
from collections.abc import Mapping, Sequence

import numpy as np

from layergrad.core.errors import InputError
from layergrad.data.probe_input import InputSpec
from layergrad.data.shards import Shard
from layergrad.data.sources import DataStream, open_data
from layergrad.files.npy_rows import NpyRows, npz_members
from layergrad.model.target_fit import LabelSummary

CHUNK = 4096  # rows of labels read at a time


def label_keys(names: Sequence[str], keys: Sequence[str]) -> dict[str, str]:
    """{output name: array key} for the label arrays among `keys` (`y`, or `y:NAME`)."""
    if len(names) == 1 and "y" in keys:
        return {names[0]: "y"}
    return {n: f"y:{n}" for n in names if f"y:{n}" in keys}


def summarise_arrays(
    arrays: Mapping[str, np.ndarray], names: Sequence[str], ranks: Mapping[str, int]
) -> dict[str, LabelSummary]:
    """Summaries of labels held in memory (the `--input` batch)."""
    out = {}
    for name, key in label_keys(names, list(arrays)).items():
        summary = LabelSummary()
        summary.add(arrays[key], ranks.get(name))
        out[name] = summary
    return out


def summarise_npz(
    path: str, names: Sequence[str], ranks: Mapping[str, int], limit: int | None = None
) -> dict[str, LabelSummary]:
    """Summaries of the labels in a `.npz` data set, read in chunks (empty without labels)."""
    if not str(path).endswith(".npz"):
        return {}
    try:
        with zipfile.ZipFile(path) as archive:
            members = npz_members(archive, str(path))
            out = {}
            for name, key in label_keys(names, list(members)).items():
                info = archive.getinfo(members[key])
                rows = NpyRows(archive.open(info), f"{path} array {key!r}", info.file_size)
                summary = LabelSummary()
                left = rows.rows if limit is None else min(limit, rows.rows)
                while left > 0:
                    part = rows.read(min(CHUNK, left))
                    if not len(part):
                        break
                    summary.add(part, ranks.get(name))
                    left -= len(part)
                out[name] = summary
            return out
    except (zipfile.BadZipFile, OSError) as exc:
        raise InputError(f"--data {path}: its labels cannot be read ({exc})") from None


def first_labels(path: str, names: Sequence[str], rows: int) -> dict[str, np.ndarray]:
    """The first `rows` labels of a `.npz` data set, keyed as `--input` keys them."""
    if not str(path).endswith(".npz"):
        return {}
    try:
        with zipfile.ZipFile(path) as archive:
            members = npz_members(archive, str(path))
            keys = label_keys(names, list(members))
            infos = {key: archive.getinfo(members[key]) for key in keys.values()}
            return {
                key: NpyRows(archive.open(info), f"{path} array {key!r}", info.file_size).read(rows)
                for key, info in infos.items()
            }
    except (zipfile.BadZipFile, OSError) as exc:
        raise InputError(f"--data {path}: its labels cannot be read ({exc})") from None


def summarise_function(
    ref: str, names: Sequence[str], ranks: Mapping[str, int], inputs: int, limit: int | None
) -> dict[str, LabelSummary]:
    """Summaries of the labels a data function gives with its inputs (`(x, y)` or a dict
    with `y`; one output's labels, or a dict keyed by output name)."""
    from layergrad.data.functions import labels_of

    out: dict[str, LabelSummary] = {}
    for y in labels_of(ref, inputs, limit):
        parts = y if isinstance(y, Mapping) else {names[0]: y} if len(names) == 1 else {}
        for name, value in parts.items():
            if name in names:
                out.setdefault(name, LabelSummary()).add(np.asarray(value), ranks.get(name))
    return out


def open_labels(
    path: str | os.PathLike[str],
    outputs: Sequence[str],
    batch_size: int,
    limit: int | None = None,
    shard: Shard | None = None,
) -> DataStream | None:
    """The labels stored with `--data` in a `.npz`, batched like its inputs: `y` for a model
    with one output (or no output names, as a Sequential model), `y:NAME` per output name;
    None when the data holds no labels. With `shard`, `dataset` is this worker's part, cut
    as the inputs' part is.

    Raises:
        InputError: labels that do not match the outputs, or a row count unlike the inputs'.
    """
    text = os.fspath(path)
    if not text.lower().endswith(".npz") or not os.path.isfile(text):
        return None
    try:
        with zipfile.ZipFile(text) as archive:
            members = npz_members(archive, text)
            held = {k: v for k, v in members.items() if k == "y" or k.startswith("y:")}
            if not held:
                return None
            if "y" in held and len(outputs) <= 1:  # no output names: a Sequential model
                chosen = {"y": held["y"]}
            else:
                missing = [n for n in outputs if f"y:{n}" not in held]
                if missing or not outputs:
                    raise InputError(
                        f"the labels in --data {text} are {sorted(held)}, but the model has "
                        f"{len(outputs)} outputs ({', '.join(outputs)}); save one array per "
                        "output as `y:NAME` (or `y` for one output)"
                    )
                chosen = {f"y:{n}": held[f"y:{n}"] for n in outputs}
            headers = {
                name: NpyRows(archive.open(member), f"{text} array {name!r}")
                for name, member in chosen.items()
            }
            rows = {r.rows for r in headers.values()}
            inputs = {
                NpyRows(archive.open(m), text).rows for k, m in members.items() if k not in held
            }
    except (zipfile.BadZipFile, OSError) as exc:
        raise InputError(
            f"--data {text} is not a readable .npz file ({exc}); write it with np.savez"
        ) from None
    if len(rows | inputs) > 1:
        raise InputError(
            f"--data {text}: the labels and the inputs have different numbers of rows "
            f"({sorted(rows | inputs)}); give every array the same number of samples"
        )
    specs = [InputSpec(n, tuple(r.shape[1:]), str(r.dtype)) for n, r in headers.items()]
    return open_data(text, specs, batch_size, limit, shard)
