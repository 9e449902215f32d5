"""Read a `.keras` zip or legacy `.h5` model file with zipfile, json and h5py (never TensorFlow).

Weight layout (Keras 3.15): a `.keras` zip holds `model.weights.h5` where each
entry of a model's ``.layers`` has a group under ``layers/`` named after its
class in snake case, made unique per model (``dense``, ``dense_1``,
``functional``), *not* after the layer name; its variables are datasets
``vars/0``, ``vars/1``... and recent versions put the layer name in the
``vars`` group's ``name`` attribute. A nested model's group holds its own
``layers/`` group. A shared layer is stored once. A legacy `.h5` file has a
``model_weights`` group with one group per top-level layer name (attribute
``layer_names``); a nested model's group holds all its inner weights, listed in
its ``weight_names`` attribute as paths ending ``<layer>/<variable>``.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from layergrad.errors import LoadError
from layergrad.graph import LayerEntry, ModelGraph

ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")
HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"
KERAS_PACKAGES = ("keras", "keras_hub", "keras_cv", "keras_nlp")
_CHUNK = 1 << 22  # elements per read when scanning a large tensor


@dataclass(frozen=True)
class WeightHealth:
    """Stored weights of one layer: counts of tensors, scalars, NaN/Inf and all-zero tensors."""

    layer: str
    tensors: int
    params: int
    nan: int
    inf: int
    zero_tensors: int


@dataclass(frozen=True)
class Finding:
    """One static-audit finding: something that would run code when Keras deserializes."""

    layer: str
    class_name: str
    reason: str


@dataclass(frozen=True)
class FileInfo:
    """What can be read from a model file without TensorFlow."""

    path: str
    format: str
    keras_version: str | None
    config: Mapping[str, Any] = field(hash=False, repr=False)
    graph: ModelGraph = field(hash=False, repr=False)
    weights: tuple[WeightHealth, ...] = ()
    # how the model was compiled: `compile_config` of a .keras file, `training_config` of an
    # .h5 file (its `loss` and `loss_weights` are what `scan --wrt weights` uses); {} if none
    compile_config: Mapping[str, Any] = field(default_factory=dict, hash=False, repr=False)


def read_file_info(path: str | os.PathLike[str], *, read_weights: bool = True) -> FileInfo:
    """Read config, layer graph and (optionally) weight health; raise LoadError on any failure."""
    p = Path(path)
    fmt = sniff_format(p)
    try:
        if fmt == "keras":
            return _read_keras(p, read_weights)
        return _read_h5(p, read_weights)
    except LoadError:
        raise
    except Exception as exc:  # zip, HDF5 and malformed-config errors of every kind
        kind = "a .keras zip" if fmt == "keras" else "an HDF5 file"
        raise LoadError(
            f"{p} is {kind} but is truncated or damaged ({type(exc).__name__}: {_short(exc)}); "
            "expected an intact model file; re-save or re-download it"
        ) from exc


def sniff_format(p: Path) -> str:
    """Return "keras" (zip) or "h5" (HDF5) from the file's first bytes, whatever its name."""
    if not p.exists():
        raise LoadError(
            f"{p}: no such file; expected a Keras model file (.keras or .h5); check the path"
        )
    if p.is_dir():
        if (p / "saved_model.pb").exists():
            raise LoadError(
                f"{p} is a TensorFlow SavedModel directory; expected a .keras or .h5 file, "
                "because Keras 3 cannot address the layers of a SavedModel; re-save it with "
                'model.save("model.keras") from the code that built it'
            )
        raise LoadError(f"{p} is a directory; expected a .keras or .h5 file; pass the model file")
    try:
        with p.open("rb") as fh:
            head = fh.read(8)
            offsets = [o for o in (512, 1024, 2048) if fh.seek(o) == o and fh.read(8) == HDF5_MAGIC]
    except OSError as exc:
        raise LoadError(
            f"{p}: cannot open ({_short(exc)}); expected a readable file; check its permissions"
        ) from exc
    if not head:
        raise LoadError(f"{p} is empty (0 bytes); expected a .keras or .h5 model; re-save it")
    if head.startswith(ZIP_MAGIC):
        return "keras"
    if head == HDF5_MAGIC or offsets:
        return "h5"
    raise LoadError(
        f"{p} is neither a zip (.keras) nor an HDF5 (.h5) file (starts with {head[:8]!r}); "
        'expected a model saved with model.save("model.keras"); re-save the model'
    )


def _short(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:160] or type(exc).__name__


def _read_keras(p: Path, read_weights: bool) -> FileInfo:
    with zipfile.ZipFile(p, "r") as zf:
        names = zf.namelist()
        if "config.json" not in names:
            found = ", ".join(names[:5]) or "nothing"
            raise LoadError(
                f"{p} is a zip archive without config.json (it holds {found}); expected a "
                '.keras model; save the model with model.save("model.keras")'
            )
        config = _parse_json(zf.read("config.json"), p, "config.json")
        meta = (
            _parse_json(zf.read("metadata.json"), p, "metadata.json")
            if ("metadata.json" in names)
            else {}
        )
        graph = ModelGraph.from_config(config)
        weights: tuple[WeightHealth, ...] = ()
        if read_weights and "model.weights.h5" in names:
            with _member(p, zf, "model.weights.h5") as member, h5py.File(member, "r") as h5:
                weights = _health(_keras_weight_groups(h5, graph), graph)
    version = meta.get("keras_version") if isinstance(meta, Mapping) else None
    compiled = config.get("compile_config")
    compiled = compiled if isinstance(compiled, Mapping) else {}
    return FileInfo(str(p), "keras", _text(version), config, graph, weights, compiled)


@contextlib.contextmanager
def _member(p: Path, zf: zipfile.ZipFile, name: str) -> Iterator[io.RawIOBase | io.BytesIO]:
    """A seekable view of one zip member for h5py.

    Keras stores members uncompressed: then the view reads the member's bytes in place, which
    for a 100 MB weight file is several times faster than ``zf.read`` (a copy plus a CRC pass)
    followed by h5py's reads from a BytesIO. A compressed member is decompressed into memory.
    """
    info = zf.getinfo(name)
    if info.compress_type != zipfile.ZIP_STORED:
        yield io.BytesIO(zf.read(name))
        return
    with p.open("rb", buffering=0) as raw:
        raw.seek(info.header_offset)
        local = raw.read(30)  # local file header: name and extra lengths at bytes 26-29
        if len(local) < 30 or not local.startswith(ZIP_MAGIC[0]):
            raise zipfile.BadZipFile(f"bad local header for {name}")
        start = info.header_offset + 30 + int.from_bytes(local[26:28], "little")
        start += int.from_bytes(local[28:30], "little")
        if start + info.file_size > p.stat().st_size:
            raise zipfile.BadZipFile(f"{name} is cut short")
        yield _Window(raw, start, info.file_size)


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

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        want = max(0, min(len(view), self._size - self._pos))
        self._raw.seek(self._start + self._pos)
        got = self._raw.readinto(view[:want]) or 0
        self._pos += got
        return got


def _read_h5(p: Path, read_weights: bool) -> FileInfo:
    with h5py.File(p, "r") as h5:
        raw = h5.attrs.get("model_config")
        if raw is None:
            raise LoadError(
                f"{p} is an HDF5 file without a model config (a weights-only file?); expected "
                'a whole model; save it with model.save("model.keras")'
            )
        config = _normalise(_parse_json(_text(raw) or "", p, "model_config"))
        graph = ModelGraph.from_config(config)
        weights: tuple[WeightHealth, ...] = ()
        group = h5.get("model_weights", h5)
        if read_weights and isinstance(group, h5py.Group):
            weights = _health(_legacy_weight_groups(group, graph), graph)
        version = _text(h5.attrs.get("keras_version") or group.attrs.get("keras_version"))
        compiled = _training_config(h5.attrs.get("training_config"))
    return FileInfo(str(p), "h5", version, config, graph, weights, compiled)


def _training_config(raw: Any) -> Mapping[str, Any]:
    """The JSON `training_config` attribute of a legacy .h5 file ({} when absent or bad)."""
    try:
        value = json.loads(_text(raw) or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, Mapping) else {}


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def _parse_json(raw: bytes | str, p: Path, what: str) -> Any:
    try:
        value = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise LoadError(
            f"{p}: {what} is not valid JSON ({_short(exc)}); expected the model's saved "
            "config; re-save the model"
        ) from exc
    if what != "metadata.json" and not (isinstance(value, dict) and "class_name" in value):
        raise LoadError(
            f"{p}: {what} holds no model config (no class_name at the top); expected a "
            "Keras model config; re-save the model"
        )
    return value


def _normalise(config: dict[str, Any]) -> dict[str, Any]:
    """Old Keras 2 Sequential configs are a bare list of layers: wrap them in a dict."""
    inner = config.get("config")
    if isinstance(inner, list):
        return {**config, "config": {"name": config.get("name", "sequential"), "layers": inner}}
    return config


# ----- weights -------------------------------------------------------------------------------


def _datasets(obj: h5py.Group | h5py.Dataset) -> list[h5py.Dataset]:
    """Every dataset at or below ``obj``."""
    found: list[h5py.Dataset] = [obj] if isinstance(obj, h5py.Dataset) else []
    if isinstance(obj, h5py.Group):
        obj.visititems(lambda _n, o: found.append(o) if isinstance(o, h5py.Dataset) else None)
    return found


def _snake(name: str) -> str:
    name = re.sub(r"\W+", "", name)
    name = re.sub("(.)([A-Z][a-z]+)", r"\1_\2", name)
    return re.sub("([a-z])([A-Z])", r"\1_\2", name).lower()


def _children(graph: ModelGraph, parent: str | None) -> list[LayerEntry]:
    return sorted((e for e in graph.layers if e.parent == parent), key=lambda e: e.index)


def _group_names(children: list[LayerEntry]) -> dict[str, LayerEntry]:
    """Keras names each saved layer group after its class, made unique per model."""
    used: dict[str, int] = {}
    out: dict[str, LayerEntry] = {}
    for entry in children:
        base = _snake(entry.class_name)
        used[base] = used.get(base, -1) + 1
        out[f"{base}_{used[base]}" if used[base] else base] = entry
    return out


def _keras_weight_groups(h5: h5py.Group, graph: ModelGraph) -> dict[str, list[h5py.Dataset]]:
    found: dict[str, list[h5py.Dataset]] = {}
    layers = h5.get("layers")
    if graph.known and isinstance(layers, h5py.Group):
        _walk_keras(layers, graph, None, "", found)
        return found
    for key, group in h5.items():  # subclassed model: one group per layer attribute
        if isinstance(group, h5py.Group) and key not in ("vars", "optimizer"):
            own = _datasets(group)
            if own:
                found.setdefault(_saved_name(group) or key, []).extend(own)
    return found


def _saved_name(group: h5py.Group) -> str | None:
    """The layer name recent Keras versions store on a layer's ``vars`` group."""
    vars_group = group.get("vars")
    return _text(vars_group.attrs.get("name")) if isinstance(vars_group, h5py.Group) else None


def _walk_keras(
    layers: h5py.Group,
    graph: ModelGraph,
    parent: str | None,
    prefix: str,
    found: dict[str, list[h5py.Dataset]],
) -> None:
    children = _children(graph, parent)
    by_group = _group_names(children)
    by_name = {e.name: e for e in children}
    for key, group in layers.items():
        if not isinstance(group, h5py.Group):
            continue
        entry = by_name.get(_saved_name(group) or "") or by_group.get(key)
        path = entry.path if entry else prefix + key
        inner = group.get("layers")
        if entry is not None and entry.is_model and isinstance(inner, h5py.Group):
            _walk_keras(inner, graph, entry.path, entry.path + "/", found)
            own = [d for k, g in group.items() if k != "layers" for d in _datasets(g)]
        else:
            own = _datasets(group)
        if own:
            found.setdefault(path, []).extend(own)


def _legacy_weight_groups(root: h5py.Group, graph: ModelGraph) -> dict[str, list[h5py.Dataset]]:
    found: dict[str, list[h5py.Dataset]] = {}
    names = [_text(n) or "" for n in root.attrs.get("layer_names", list(root.keys()))]
    for name in names:
        group = root.get(name)
        if name == "top_level_model_weights" or not isinstance(group, h5py.Group):
            continue
        entry = graph.get(name)
        weight_names = [_text(w) or "" for w in group.attrs.get("weight_names", [])]
        for wname in weight_names or [d.name for d in _datasets(group)]:
            ds = group.get(wname) if wname in group else None
            if not isinstance(ds, h5py.Dataset):
                continue
            path = _legacy_owner(graph, entry, wname) if entry and entry.is_model else name
            found.setdefault(path, []).append(ds)
    return found


def _legacy_owner(graph: ModelGraph, container: LayerEntry, weight_name: str) -> str:
    """The leaf layer inside ``container`` that a legacy weight name such as
    ``outer/sub/dense/kernel:0`` belongs to (rightmost matching name wins)."""
    parts = weight_name.split("/")[:-1]
    leaves = [e for e in graph.layers if e.path.startswith(container.path + "/") and not e.is_model]
    for part in reversed(parts):
        matches = [e for e in leaves if e.name == part]
        if len(matches) > 1:
            matches = [e for e in matches if set(e.path.split("/")) <= set(parts)] or matches
        if matches:
            return matches[0].path
    return container.path


def _health(groups: dict[str, list[h5py.Dataset]], graph: ModelGraph) -> tuple[WeightHealth, ...]:
    rank = {e.path: i for i, e in enumerate(graph.layers)}
    ordered = sorted(groups, key=lambda path: (rank.get(path, len(rank)), path))
    return tuple(_layer_health(path, groups[path]) for path in ordered)


def _layer_health(path: str, datasets: list[h5py.Dataset]) -> WeightHealth:
    unique = list({ds.name: ds for ds in datasets}.values())
    stats = [[_chunk_stats(chunk, ds) for chunk in _chunks(ds)] for ds in unique]
    nan = sum(c[0] for tensor in stats for c in tensor)
    inf = sum(c[1] for tensor in stats for c in tensor)
    zeros = sum(
        1 for ds, t in zip(unique, stats, strict=True) if ds.size and not any(c[2] for c in t)
    )
    return WeightHealth(path, len(unique), sum(int(ds.size) for ds in unique), nan, inf, zeros)


def _chunks(ds: h5py.Dataset) -> Iterator[np.ndarray]:
    if ds.shape == () or ds.size <= _CHUNK or not ds.shape:
        yield np.asarray(ds[()])
        return
    step = max(1, _CHUNK // max(1, int(ds.size // ds.shape[0])))
    for start in range(0, ds.shape[0], step):
        yield np.asarray(ds[start : start + step])


def _chunk_stats(arr: np.ndarray, ds: h5py.Dataset) -> tuple[int, int, bool]:
    """(NaN count, Inf count, any nonzero) of one chunk; bfloat16 is stored as uint16 bits."""
    if arr.dtype == np.uint16 and _text(ds.attrs.get("dtype")) == "bfloat16":
        exponent, mantissa = (arr & 0x7F80) == 0x7F80, (arr & 0x007F) != 0
        return (
            int((exponent & mantissa).sum()),
            int((exponent & ~mantissa).sum()),
            bool((arr & 0x7FFF).any()),
        )
    if np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.complexfloating):
        # One pass for the common case: NaN and Inf propagate into the sum, so a finite sum
        # means there are none (an overflowing sum of finite values just takes the slow path).
        if np.isfinite(arr.sum(dtype=np.float32 if arr.dtype == np.float16 else None)):
            return 0, 0, bool(arr.any())
        return int(np.isnan(arr).sum()), int(np.isinf(arr).sum()), bool(np.any(arr != 0))
    if arr.dtype.kind in "biu":
        return 0, 0, bool(np.any(arr != 0))
    return 0, 0, True


# ----- audit ---------------------------------------------------------------------------------


def audit(info: FileInfo, allowed_modules: Sequence[str] = ()) -> tuple[Finding, ...]:
    """Findings for everything in the config that would run code when Keras deserializes it.

    Looks at every serialized object at any depth (nested models included):
    Lambda layers carrying Python bytecode, TFSMLayer, and classes from modules
    that are neither Keras nor in ``allowed_modules`` (module names, registered
    packages, or ``.py`` paths whose stem is the module name).
    """
    allowed = tuple(Path(a).stem if a.endswith(".py") else a for a in allowed_modules)
    out: list[Finding] = []
    top = info.config
    _scan(top, info.graph.name, str(top.get("class_name", "")), "", allowed, out)
    return tuple(dict.fromkeys(out))


def _scan(
    obj: Any, layer: str, cls: str, prefix: str, allowed: tuple[str, ...], out: list[Finding]
) -> None:
    if isinstance(obj, list):
        for value in obj:
            _scan(value, layer, cls, prefix, allowed, out)
        return
    if not isinstance(obj, Mapping):
        return
    out.extend(_check(obj, layer, cls, allowed))
    for key, value in obj.items():
        if key == "layers" and isinstance(value, list) and "class_name" not in obj:
            for member in value:
                if isinstance(member, Mapping):
                    name = str(member.get("name") or member.get("config", {}).get("name", "?"))
                    path = prefix + name
                    _scan(member, path, str(member.get("class_name")), path + "/", allowed, out)
        else:
            _scan(value, layer, cls, prefix, allowed, out)


def _check(obj: Mapping[str, Any], layer: str, cls: str, allowed: tuple[str, ...]) -> list[Finding]:
    name = obj.get("class_name")
    if not isinstance(name, str):
        return []
    inner = obj.get("config")
    if name == "__lambda__":
        what = "Lambda layer" if cls == "Lambda" else f"{cls} layer"
        return [Finding(layer, cls, f"{what} carries Python bytecode (a serialized lambda)")]
    if name == "Lambda" and isinstance(inner, Mapping) and _legacy_bytecode(inner):
        return [Finding(layer, cls, "Lambda layer carries Python bytecode (a serialized lambda)")]
    if name == "TFSMLayer":
        return [Finding(layer, cls, "TFSMLayer loads and runs a TensorFlow SavedModel")]
    module = obj.get("module")
    registered = obj.get("registered_name")
    if isinstance(module, str):
        if _allowed_module(module, registered, allowed):
            return []
        return [
            Finding(
                layer,
                cls,
                f"{name} comes from module '{module}', which is neither "
                "Keras nor named with --import",
            )
        ]
    if ">" in name and name.split(">", 1)[0] not in allowed:
        return [
            Finding(
                layer,
                cls,
                f"{name} is a custom class from package "
                f"'{name.split('>', 1)[0]}', which is not named with --import",
            )
        ]
    return []


def _legacy_bytecode(config: Mapping[str, Any]) -> bool:
    """Keras 2 Lambda: ``function_type`` "lambda", function as [bytecode, defaults, closure]."""
    return config.get("function_type") == "lambda" or isinstance(config.get("function"), list)


def _allowed_module(module: str, registered: Any, allowed: tuple[str, ...]) -> bool:
    if module == "builtins" or module.split(".", 1)[0] in KERAS_PACKAGES:
        return True
    package = (
        registered.split(">", 1)[0] if isinstance(registered, str) and ">" in registered else None
    )
    return any(module == a or module.startswith(a + ".") or package == a for a in allowed)
