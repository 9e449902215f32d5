"""The `layers` listing: one row per layer of a model file, read without TensorFlow.

Rows are the layers Keras lists in ``model.layers`` (nested models expanded as
``outer/inner``): exactly the names ``--from`` and ``--to`` accept. Functional operations
(``a + b``, ``keras.ops.*``) are not layers Keras can address: they are not rows, but an
inbound column names one where it feeds a layer, and the listing keeps them with their inputs.
Everything here is a pure function of a :class:`~layergrad.files.file_info.FileInfo`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from layergrad.core.display import NotebookDisplay
from layergrad.files.audit import check_safety, module_name
from layergrad.files.file_info import FileInfo, WeightHealth, read_file_info
from layergrad.model.config import batch_shape
from layergrad.model.graph import LayerEntry, ModelGraph


@dataclass(frozen=True)
class LayerRow:
    """One layer of the listing.

    ``position`` is the index path through the models that hold it: ``(3,)`` is
    ``model.layers[3]``, ``(1, 0)`` is the first layer of the nested model at index 1, ``()``
    a weight group that matches no layer of the config. ``unmatched`` marks such a group when
    the config has a layer graph (with none, as for a subclassed model, every row is a weight
    group). ``params`` counts the stored weights (a nested model: all of its layers');
    ``weights`` is the health of the layer's own stored tensors, None when it stores none.
    ``parent`` is the path of the nested model that holds it, None at the top level.
    """

    position: tuple[int, ...]
    path: str
    parent: str | None
    class_name: str
    inbound: tuple[str, ...]
    calls: int
    params: int
    dtype: str | None
    trainable: bool | None
    is_model: bool
    unmatched: bool
    weights: WeightHealth | None

    @property
    def index(self) -> int | None:
        """Its index among its siblings (None for a weight file's group)."""
        return self.position[-1] if self.position else None

    @property
    def problem(self) -> str | None:
        """Why the stored weights need a look (NaN/Inf, all zero, no such layer), else None."""
        w = self.weights
        if self.unmatched:
            return "weights stored for a layer the config does not have (wrong weight file?)"
        if w is None:
            return None
        if w.nan or w.inf:
            return f"{nonfinite_text(w)} in its stored weights"
        if w.tensors and w.zero_tensors == w.tensors:
            return f"every stored tensor is all zero ({w.tensors} of {w.tensors})"
        return None


@dataclass(frozen=True)
class ModelInput:
    """One input of the model: its name (a valid --from), shape with batch axis, dtype."""

    name: str
    shape: tuple[int | None, ...] | None
    dtype: str | None


@dataclass(frozen=True, repr=False)
class LayerListing(NotebookDisplay):
    """Everything `layergrad layers` shows about one model file."""

    path: str
    format: str
    class_name: str
    name: str
    keras_version: str | None
    inputs: tuple[ModelInput, ...]
    graph_known: bool
    rows: tuple[LayerRow, ...]
    operations: tuple[LayerRow, ...]
    warnings: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()  # stored tensors weight health did not scan, and why

    @property
    def total_params(self) -> int:
        """Scalars in all stored weights (each shared layer counted once)."""
        return sum(r.weights.params for r in self.rows if r.weights is not None)


def build_listing(info: FileInfo, warnings: Sequence[str] = ()) -> LayerListing:
    """The rows of `layergrad layers` for a file read with `fileinfo.read_file_info`.

    `warnings` are the audit findings accepted with `--unsafe`; they are kept in the JSON.

    Example:
        >>> from layergrad.files.file_info import read_file_info
        >>> listing = build_listing(read_file_info("sample_models/nested.keras"))
        >>> [r.path for r in listing.rows]
        ['x', 'encoder', 'encoder/dense', 'encoder/dense_1', 'head']
    """
    graph = info.graph
    health = {w.layer: w for w in info.weights}
    positions: dict[str, tuple[int, ...]] = {}
    rows = []
    for entry in graph.layers:
        parent = positions.get(entry.parent or "", ())
        positions[entry.path] = (*parent, entry.index)
        rows.append(_row(entry, positions[entry.path], graph, health))
    known = {e.path for e in graph.layers}
    # a weight group the config has no layer for (or a subclassed model's attribute)
    rows += [LayerRow((), w.layer, None, "?", (), 0, w.params, None, None, False, graph.known, w)
             for w in info.weights if w.layer not in known]  # fmt: skip
    ops = tuple(
        _row(e, (e.index,), graph, health) for e in graph.unlisted if e.class_name != "InputLayer"
    )
    return LayerListing(
        path=info.path,
        format=info.format,
        class_name=graph.class_name,
        name=graph.name,
        keras_version=info.keras_version,
        inputs=tuple(_model_input(graph, name) for name in graph.input_names),
        graph_known=graph.known,
        rows=tuple(rows),
        operations=ops,
        warnings=tuple(warnings),
        notes=info.notes,
    )


def _row(
    entry: LayerEntry,
    position: tuple[int, ...],
    graph: ModelGraph,
    health: Mapping[str, WeightHealth],
) -> LayerRow:
    inside = entry.path + "/"
    params = sum(w.params for p, w in health.items() if p == entry.path or p.startswith(inside))
    trainable = entry.config.get("trainable")
    return LayerRow(position, entry.path, entry.parent, entry.class_name,
                    _inbound(graph, entry.inbound), entry.num_calls, params,
                    entry.dtype,
                    trainable if isinstance(trainable, bool) else None, entry.is_model,
                    False, health.get(entry.path))  # fmt: skip


def _model_input(graph: ModelGraph, name: str) -> ModelInput:
    entry = graph.get(name)
    config = entry.config if entry is not None else {}
    shape = batch_shape(config)
    dims = None if shape is None else tuple(d if isinstance(d, int) else None for d in shape)
    return ModelInput(name, dims, entry.dtype if entry is not None else None)


def _inbound(graph: ModelGraph, inbound: Sequence[str]) -> tuple[str, ...]:
    """Inbound paths without the input layer of a nested Sequential (Keras lists it nowhere).

    A top-level Sequential's input stays: its name is a model input that --from accepts.
    """
    return tuple(
        p
        for p in inbound
        if not ((e := graph.get(p)) and e.class_name == "InputLayer" and not e.listed)
        or p in graph.input_names
    )


def nonfinite_text(w: WeightHealth) -> str:
    """`3 NaN, 2 Inf`."""
    counts = [(w.nan, "NaN"), (w.inf, "Inf")]
    return ", ".join(f"{n:,} {what}" for n, what in counts if n)


def list_layers(
    path: str | os.PathLike[str], *, imports: Sequence[str] = (), unsafe: bool = False
) -> LayerListing:
    """Read and audit a model file, and list its layers (never imports TensorFlow).

    `imports` only marks those modules' classes as trusted by the audit; nothing is imported.

    Raises:
        LoadError: the file is unreadable or malformed; UnsafeModelError when the audit
            refuses it (unless `unsafe`, which lists it with the findings as warnings).
    """
    info = read_file_info(path)
    accepted = check_safety(info, [module_name(spec) for spec in imports], unsafe)
    return build_listing(info, accepted)
