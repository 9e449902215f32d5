"""Which stored tensors belong to which layer, and their health: NaN, Inf, all-zero tensors.

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

Reading is bounded by what the file stores, not by what it declares: Keras writes plain
contiguous datasets, so a dataset whose storage was never written holds only its fill value
and is not read; a chunked dataset is read only where chunks are stored, each chunk at most
MAX_HDF5_CHUNK_BYTES and at most MAX_INFLATION times its stored size; and once
WEIGHT_SCAN_BUDGET bytes were read, the remaining tensors are counted but not scanned.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import h5py
import numpy as np

from layergrad.core.limits import (
    MAX_HDF5_CHUNK_BYTES,
    MAX_HDF5_CHUNKS,
    MAX_INFLATION,
    WEIGHT_SCAN_BUDGET,
    MiB,
    human,
)
from layergrad.core.tf_types import H5Object
from layergrad.files.guards import StoredDataset
from layergrad.model.graph import LayerEntry, ModelGraph

_SLAB = 1 << 22  # elements per read when scanning a large tensor


@dataclass(frozen=True)
class WeightHealth:
    """Stored weights of one layer: counts of tensors, scalars, NaN/Inf and all-zero tensors.

    ``unchecked`` counts the tensors that were not scanned (over a budget or a shape bomb);
    their values are not in ``nan``, ``inf`` or ``zero_tensors``.
    """

    layer: str
    tensors: int
    params: int
    nan: int
    inf: int
    zero_tensors: int
    unchecked: int = 0


@dataclass(frozen=True)
class StoredWeights:
    """What Keras will read when it loads the weights: declared bytes, and datasets that
    declare far more than they store (Keras would allocate the declared size)."""

    declared_bytes: int = 0
    hollow: tuple[str, ...] = ()


def datasets(obj: H5Object) -> list[H5Object]:
    """Every dataset at or below ``obj`` (hard links only; links were refused on open)."""
    found: list[H5Object] = [obj] if isinstance(obj, h5py.Dataset) else []
    if isinstance(obj, h5py.Group):
        obj.visititems(lambda _n, o: found.append(o) if isinstance(o, h5py.Dataset) else None)
    return found


def inventory(found: tuple[StoredDataset, ...]) -> StoredWeights:
    """Declared bytes of every dataset in the file and the hollow ones, from metadata only
    (`guards.check_hdf5` lists them)."""
    hollow = [
        f"{ds.name} declares {human(ds.declared)} but stores {human(ds.stored)}"
        for ds in found
        if ds.declared > max(MiB, MAX_INFLATION * ds.stored)
    ]
    return StoredWeights(sum(ds.declared for ds in found), tuple(hollow))


def as_text(value: object, errors: str = "strict") -> str | None:
    """An HDF5 attribute's text (bytes decoded as UTF-8, `errors` as `bytes.decode`); None
    when absent. Strict by default: a name that is not UTF-8 marks a damaged file."""
    if value is None:
        return None
    return value.decode("utf-8", errors) if isinstance(value, bytes) else str(value)


# ----- which tensors belong to which layer ----------------------------------------------------


def _snake(name: str) -> str:
    name = re.sub(r"\W+", "", name)
    name = re.sub("(.)([A-Z][a-z]+)", r"\1_\2", name)
    return re.sub("([a-z])([A-Z])", r"\1_\2", name).lower()


def _group_names(children: list[LayerEntry]) -> dict[str, LayerEntry]:
    """Keras names each saved layer group after its class, made unique per model."""
    used: dict[str, int] = {}
    out: dict[str, LayerEntry] = {}
    for entry in children:
        base = _snake(entry.class_name)
        used[base] = used.get(base, -1) + 1
        out[f"{base}_{used[base]}" if used[base] else base] = entry
    return out


def keras_weight_groups(h5: H5Object, graph: ModelGraph) -> dict[str, list[H5Object]]:
    """Layer path -> its datasets, in a `.keras` archive's ``model.weights.h5``."""
    found: dict[str, list[H5Object]] = {}
    layers = h5.get("layers")
    if graph.known and isinstance(layers, h5py.Group):
        _walk_keras(layers, graph, None, "", found)
        return found
    for key, group in h5.items():  # subclassed model: one group per layer attribute
        if isinstance(group, h5py.Group) and key not in ("vars", "optimizer"):
            _walk_attributes(key, group, "", found)
    return found


def _walk_attributes(
    key: str, group: H5Object, prefix: str, found: dict[str, list[H5Object]]
) -> None:
    """A subclassed model's attribute: a layer (its own ``vars``, named by their ``name``
    attribute, then the layers it holds), or a container of layers (a list such as
    ``layers``, its items named after their class: ``layers/dense_1``), walked through."""
    own_vars = group.get("vars")
    own = datasets(own_vars) if isinstance(own_vars, h5py.Group) else []
    name = _saved_name(group) or prefix + key
    if own:
        found.setdefault(name, []).extend(own)
    inner = prefix + key + "/" if not own else name + "/"
    for child_key, child in group.items():
        if isinstance(child, h5py.Group) and child_key != "vars":
            _walk_attributes(child_key, child, inner, found)


def _saved_name(group: H5Object) -> str | None:
    """The layer name recent Keras versions store on a layer's ``vars`` group."""
    vars_group = group.get("vars")
    return as_text(vars_group.attrs.get("name")) if isinstance(vars_group, h5py.Group) else None


def _walk_keras(
    layers: H5Object,
    graph: ModelGraph,
    parent: str | None,
    prefix: str,
    found: dict[str, list[H5Object]],
) -> None:
    children = sorted((e for e in graph.layers if e.parent == parent), key=lambda e: e.index)
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
            own = [d for k, g in group.items() if k != "layers" for d in datasets(g)]
        else:
            own = datasets(group)
        if own:
            found.setdefault(path, []).extend(own)


def legacy_weight_groups(root: H5Object, graph: ModelGraph) -> dict[str, list[H5Object]]:
    """Layer path -> its datasets, in a legacy `.h5` file's ``model_weights`` group."""
    found: dict[str, list[H5Object]] = {}
    names = [as_text(n) or "" for n in root.attrs.get("layer_names", list(root.keys()))]
    for name in names:
        group = root.get(name)
        if name == "top_level_model_weights" or not isinstance(group, h5py.Group):
            continue
        entry = graph.get(name)
        weight_names = [as_text(w) or "" for w in group.attrs.get("weight_names", [])]
        for wname in weight_names or [d.name for d in datasets(group)]:
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


# ----- health ---------------------------------------------------------------------------------


@dataclass
class _Budget:
    """Bytes left to read in this file, and the notes on what was not read."""

    left: int
    notes: list[str] = field(default_factory=list)
    over_budget: int = 0

    def take(self, size: int) -> bool:
        if size > self.left:
            self.over_budget += 1
            return False
        self.left -= size
        return True


def health(
    groups: dict[str, list[H5Object]], graph: ModelGraph, budget: int = WEIGHT_SCAN_BUDGET
) -> tuple[tuple[WeightHealth, ...], tuple[str, ...]]:
    """Weight health per layer in graph order, and notes on the tensors that were not scanned."""
    rank = {e.path: i for i, e in enumerate(graph.layers)}
    ordered = sorted(groups, key=lambda path: (rank.get(path, len(rank)), path))
    left = _Budget(budget)
    out = tuple(_layer_health(path, groups[path], left) for path in ordered)
    notes = list(left.notes)
    if left.over_budget:
        notes.append(
            f"{left.over_budget} tensors were not scanned: weight health reads at most "
            f"{human(budget)} of weights per file"
        )
    return out, tuple(notes)


def _layer_health(path: str, tensors: list[H5Object], budget: _Budget) -> WeightHealth:
    unique = list({ds.name: ds for ds in tensors}.values())
    nan = inf = zeros = unchecked = 0
    for ds in unique:
        stats = _tensor_stats(ds, budget)
        if stats is None:
            unchecked += 1
            continue
        nan, inf = nan + stats[0], inf + stats[1]
        zeros += 1 if ds.size and not stats[2] else 0
    params = sum(int(ds.size or 0) for ds in unique)
    return WeightHealth(path, len(unique), params, nan, inf, zeros, unchecked)


Stats = tuple[int, int, bool]  # NaN count, Inf count, any nonzero


def _tensor_stats(ds: H5Object, budget: _Budget) -> Stats | None:
    """Health of one dataset, or None when it was not scanned (a note says why)."""
    if ds.dtype.kind not in "biufc" or not ds.size:
        return 0, 0, ds.dtype.kind not in "biufc"
    declared = math.prod(ds.shape) * ds.dtype.itemsize  # a dataset with no shape has no size
    stored = ds.id.get_storage_size()
    if ds.chunks is None:
        if stored < declared:  # storage never written: every value is the fill value
            return _fill_stats(ds, int(ds.size))
        if not budget.take(declared):
            return None
        return _combine(_stats(ds[idx], ds) for idx in _slabs(ds.shape, _SLAB))
    return _chunked_stats(ds, budget)


def _chunked_stats(ds: H5Object, budget: _Budget) -> Stats | None:
    chunk_bytes = math.prod(ds.chunks) * ds.dtype.itemsize
    if chunk_bytes > MAX_HDF5_CHUNK_BYTES:
        budget.notes.append(
            f"{ds.name}: chunks of {human(chunk_bytes)} (more than "
            f"{human(MAX_HDF5_CHUNK_BYTES)}); not scanned"
        )
        return None
    stored: list[tuple[tuple[int, ...], int]] = []

    def collect(info: H5Object) -> int | None:
        stored.append((tuple(info.chunk_offset), int(info.size)))
        return 1 if len(stored) > MAX_HDF5_CHUNKS else None  # non-None stops the iteration

    ds.id.chunk_iter(collect)
    if len(stored) > MAX_HDF5_CHUNKS:
        budget.notes.append(f"{ds.name}: more than {MAX_HDF5_CHUNKS:,} chunks; not scanned")
        return None
    if any(chunk_bytes > max(MiB, MAX_INFLATION * size) for _, size in stored):
        budget.notes.append(
            f"{ds.name}: a chunk inflates more than {MAX_INFLATION}x (a decompression bomb); "
            "not scanned"
        )
        return None
    if not budget.take(chunk_bytes * len(stored)):
        return None
    parts, seen = [], 0
    for offset, _ in stored:
        ends = zip(offset, ds.chunks, ds.shape, strict=True)
        idx = tuple(slice(o, min(o + c, n)) for o, c, n in ends)
        arr = np.asarray(ds[idx])
        seen += arr.size
        parts.append(_stats(arr, ds))
    if seen < ds.size:  # chunks never stored read as the fill value
        parts.append(_fill_stats(ds, int(ds.size) - seen))
    return _combine(parts)


def _slabs(shape: tuple[int, ...], limit: int) -> Iterator[tuple[int | slice, ...]]:
    """Index tuples that cover ``shape`` in row-major slabs of at most ``limit`` elements."""
    inner, k = 1, len(shape)
    while k > 0 and inner * shape[k - 1] <= limit:
        inner *= shape[k - 1]
        k -= 1
    if k == 0:
        yield ()
        return
    step = max(1, limit // inner)
    for outer in np.ndindex(*shape[: k - 1]):
        for start in range(0, shape[k - 1], step):
            yield (*outer, slice(start, start + step))


def _fill_stats(ds: H5Object, count: int) -> Stats:
    fill = np.asarray(ds.fillvalue if ds.fillvalue is not None else 0)
    nan, inf, nonzero = _stats(fill.reshape(1), ds)
    return nan * count, inf * count, nonzero


def _combine(parts: Iterable[Stats]) -> Stats:
    nan, inf, nonzero = zip(*parts, strict=True)
    return sum(nan), sum(inf), any(nonzero)


def _stats(arr: np.ndarray, ds: H5Object) -> Stats:
    """(NaN count, Inf count, any nonzero) of one slab; bfloat16 is stored as uint16 bits."""
    arr = np.asarray(arr)
    if arr.dtype == np.uint16 and as_text(ds.attrs.get("dtype")) == "bfloat16":
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
    return 0, 0, bool(np.any(arr != 0))
