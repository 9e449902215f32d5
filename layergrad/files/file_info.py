"""What a model file says about itself, read without TensorFlow: config, layer graph, weights.

`read_file_info` opens the file as Keras will (`archive`), parses and checks the config,
builds the layer graph (`graph`) and reads the stored weights' health (`weight_health`).
Every failure is a `LoadError` that says what is wrong. `training_steps` reads whether the
file records training: the optimizer's step count saved with it.
"""

from __future__ import annotations

import json
import os
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

import h5py
import numpy as np

from layergrad.core.errors import LayergradError, LoadError
from layergrad.files import archive
from layergrad.files.array_files import short_error
from layergrad.files.weight_health import (
    StoredWeights,
    WeightHealth,
    as_text,
    health,
    inventory,
    keras_weight_groups,
    legacy_weight_groups,
)
from layergrad.model.graph import ModelGraph

__all__ = ["FileInfo", "WeightHealth", "read_file_info", "training_steps"]

STEPS_AT = ("", "inner_optimizer/")  # where a .keras archive keeps an optimizer's step count


@dataclass(frozen=True)
class FileInfo:
    """What can be read from a model file without TensorFlow.

    ``stored`` sums what the weight datasets declare (what Keras will allocate when it loads
    them); ``notes`` say which stored tensors weight health did not scan, and why.
    ``compile_config`` is how the model was compiled: `compile_config` of a .keras file,
    `training_config` of an .h5 file (its `loss` and `loss_weights` are what `scan --wrt
    weights` uses); {} if none.
    """

    path: str
    format: str
    keras_version: str | None
    config: Mapping[str, object] = field(hash=False, repr=False)
    graph: ModelGraph = field(hash=False, repr=False)
    weights: tuple[WeightHealth, ...] = ()
    stored: StoredWeights = field(default_factory=StoredWeights)
    notes: tuple[str, ...] = ()
    compile_config: Mapping[str, object] = field(default_factory=dict, hash=False, repr=False)
    # the file's modification time (ns) and size when it was read: a file written since (by an
    # `--import` that trains and saves) is not the file the audit read
    stamp: tuple[int, int] | None = field(default=None, compare=False, repr=False)


def file_stamp(path: str | os.PathLike[str]) -> tuple[int, int] | None:
    """What tells that a file was written (modification time in ns, size); None when gone."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


def read_file_info(path: str | os.PathLike[str], *, read_weights: bool = True) -> FileInfo:
    """Read config, layer graph, the weights' inventory and (optionally) their health.

    Raises:
        LoadError: the file is missing, special, hostile, damaged or malformed.
    """
    p = Path(path)
    stamp = file_stamp(p)
    fmt = archive.model_format(p)
    try:
        read = _read_keras(p, read_weights) if fmt == "keras" else _read_h5(p, read_weights)
        return replace(read, stamp=stamp)
    except LoadError:
        raise
    except RecursionError as exc:
        raise LoadError(
            f"{p}: its config is nested too deeply to read; expected a Keras model config; "
            "re-save the model"
        ) from exc
    except Exception as exc:  # zip and HDF5 errors of every kind
        kind = "a .keras zip" if fmt == "keras" else "an HDF5 file"
        raise archive.damaged(p, kind, short_error(exc)) from exc


def _read_keras(p: Path, read_weights: bool) -> FileInfo:
    with archive.open_zip(p) as zf:
        raw = archive.member(zf, p, "config.json")
        if raw is None:
            found = ", ".join(zf.namelist()[:5]) or "nothing"
            raise LoadError(
                f"{p} is a zip archive without config.json (it holds {found}); expected a "
                '.keras model; save the model with model.save("model.keras")'
            )
        config = _parse_config(raw, p, "config.json")
        meta_raw = archive.member(zf, p, "metadata.json")
        meta = _parse_json(meta_raw, p, "metadata.json") if meta_raw is not None else {}
        graph = _graph(config, p, "config.json")
        with archive.open_weights(p, zf) as (h5, listed):
            stored = inventory(listed)
            groups = keras_weight_groups(h5, graph) if h5 is not None and read_weights else {}
            weights, notes = health(groups, graph)
    version = as_text(meta.get("keras_version") if isinstance(meta, Mapping) else None, "replace")
    compiled = config.get("compile_config")
    compiled = compiled if isinstance(compiled, Mapping) else {}
    return FileInfo(str(p), "keras", version, config, graph, weights, stored, notes, compiled)


def _read_h5(p: Path, read_weights: bool) -> FileInfo:
    with archive.open_hdf5(p) as (h5, listed):
        raw = archive.hdf5_attribute(h5, p, "model_config")
        if raw is None:
            raise LoadError(
                f"{p} is an HDF5 file without a model config (a weights-only file?); expected "
                'a whole model; save it with model.save("model.keras")'
            )
        config = _normalise(_parse_config(raw, p, "model_config"))
        graph = _graph(config, p, "model_config")
        group = h5.get("model_weights", h5)
        stored = inventory(listed)
        legacy = read_weights and isinstance(group, h5py.Group)
        weights, notes = health(legacy_weight_groups(group, graph) if legacy else {}, graph)
        version = as_text(
            h5.attrs.get("keras_version") or group.attrs.get("keras_version"), "replace"
        )
        compiled = _training_config(archive.hdf5_attribute(h5, p, "training_config"))
    return FileInfo(str(p), "h5", version, config, graph, weights, stored, notes, compiled)


def _training_config(raw: object) -> Mapping[str, object]:
    """The JSON `training_config` attribute of a legacy .h5 file ({} when absent or bad)."""
    try:
        value = json.loads(as_text(raw, "replace") or "{}")
    except (ValueError, RecursionError):
        return {}
    return value if isinstance(value, Mapping) else {}


def _parse_json(raw: bytes | str, p: Path, what: str) -> object:
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise LoadError(
            f"{p}: {what} is not valid JSON ({short_error(exc, typed=False)}); expected the "
            "model's saved config; re-save the model"
        ) from exc


def _parse_config(raw: bytes | str, p: Path, what: str) -> dict[str, object]:
    value = _parse_json(raw, p, what)
    if not (isinstance(value, dict) and isinstance(value.get("class_name"), str)):
        raise LoadError(
            f"{p}: {what} holds no model config (no class_name at the top); expected a "
            "Keras model config; re-save the model"
        )
    _check_members(value, p, what, "the model")
    return value


def _normalise(config: dict[str, object]) -> dict[str, object]:
    """Old Keras 2 Sequential configs are a bare list of layers: wrap them in a dict."""
    inner = config.get("config")
    if isinstance(inner, list):
        return {**config, "config": {"name": config.get("name", "sequential"), "layers": inner}}
    return config


def _graph(config: Mapping[str, object], p: Path, what: str) -> ModelGraph:
    try:
        return ModelGraph.from_config(config)
    except (TypeError, AttributeError, KeyError, IndexError, ValueError) as exc:
        raise _malformed(p, what, f"its layer graph ({short_error(exc)})") from exc


def _malformed(p: Path, what: str, detail: str) -> LoadError:
    return LoadError(
        f"{p}: {what} is malformed: {detail}; expected a config written by Keras; re-save the model"
    )


_KINDS = {dict: "an object", list: "a list", str: "a string", bool: "a boolean",
          int: "a number", float: "a number", type(None): "null"}  # fmt: skip


def _kind(value: object) -> str:
    return _KINDS.get(type(value), type(value).__name__)


def _check_members(model: Mapping[str, object], p: Path, what: str, where: str) -> None:
    """Check the parts of a model config that the graph and the audit walk.

    Each member of a model's ``layers`` must be an object whose ``class_name`` is a string,
    whose ``config`` (if any) is an object and whose ``inbound_nodes`` (if any) is a list;
    nested models are checked the same way. The message names the member.
    """
    inner = model.get("config")
    if isinstance(inner, list):  # a Keras 2 Sequential: a bare list of layers
        inner = {"layers": inner}
    if not isinstance(inner, Mapping):
        return
    members = inner.get("layers")
    if members is None:
        return
    if not isinstance(members, list):
        raise _malformed(p, what, f"the layers of {where} are {_kind(members)}, not a list")
    for i, member in enumerate(members):
        label = f"layer #{i} of {where}"
        if not isinstance(member, Mapping):
            raise _malformed(p, what, f"{label} is {_kind(member)}, not an object")
        name = member.get("name")
        config = member.get("config")
        if isinstance(config, Mapping) and name is None:
            name = config.get("name")
        label = f"layer {name!r}" if isinstance(name, str) else label
        if not isinstance(member.get("class_name"), str):
            raise _malformed(p, what, f"{label} has no class_name string")
        if config is not None and not isinstance(config, (Mapping, list)):
            raise _malformed(p, what, f"{label} has a config that is {_kind(config)}")
        nodes = member.get("inbound_nodes")
        if nodes is not None and not (
            isinstance(nodes, list) and all(isinstance(n, (list, Mapping)) for n in nodes)
        ):
            raise _malformed(p, what, f"{label} has inbound_nodes that are not a list of calls")
        _check_members(member, p, what, label)


def training_steps(path: str | os.PathLike[str]) -> int | None:
    """The optimizer steps a model file records (`.keras`: `optimizer/vars/0` of its weights,
    `.h5`: `optimizer_weights/<name>/iteration`), read within the same guards as the model;
    None when it holds no optimizer state (saved without one, never compiled) or cannot be
    read. Reads two small datasets, never the weights."""
    p = Path(path)
    try:
        if archive.model_format(p) == "keras":
            with archive.open_zip(p) as zf, archive.open_weights(p, zf) as (weights, _):
                if weights is None:
                    return None
                # a LossScaleOptimizer (mixed precision) keeps its own counter first, reset
                # whenever the scale grows; the optimizer it wraps counts the steps
                counts = [_scalar(weights.get(f"optimizer/{inner}vars/0")) for inner in STEPS_AT]
                return max((c for c in counts if c is not None), default=None)
        with archive.open_hdf5(p) as (weights, _):
            group = weights.get("optimizer_weights")
            inner = [group[name] for name in group] if isinstance(group, h5py.Group) else []
            for keys in (g for g in inner if isinstance(g, h5py.Group)):
                for key in keys:  # `iteration`, `iter`, `iterations:0`, ...
                    found = _scalar(keys[key]) if key.startswith("iter") else None
                    if found is not None:
                        return found
    except (LayergradError, OSError, KeyError, ValueError, zipfile.BadZipFile, RuntimeError):
        return None
    return None


def _scalar(dataset: object) -> int | None:
    if not isinstance(dataset, h5py.Dataset) or dataset.shape not in ((), (1,)):
        return None
    if dataset.dtype.kind not in "iuf":
        return None
    value = np.asarray(dataset[()]).reshape(-1)
    return int(value[0]) if value.size and np.isfinite(value[0]) else None
