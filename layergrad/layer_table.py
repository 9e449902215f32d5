"""The `layers` listing: one row per layer of a model file, as a rich table, JSON or markdown.

Everything here is a pure function of a :class:`~layergrad.fileinfo.FileInfo`, which is read
with zipfile, json and h5py only, so listing a model never imports TensorFlow. Rows are the
layers Keras lists in ``model.layers`` (nested models expanded as ``outer/inner``): exactly
the names ``--from`` and ``--to`` accept. Functional operations (``a + b``, ``keras.ops.*``)
are not layers Keras can address: they are not rows, but an inbound column names one
(marked ``(op)``) where it feeds a layer, and the JSON lists them with their own inputs.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rich import box
from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from layergrad.fileinfo import FileInfo
from layergrad.graph import LayerEntry, ModelGraph
from layergrad.report import md_table, render
from layergrad.weight_health import WeightHealth

LAYERS_SCHEMA = "layergrad.layers/1"
COLUMNS = ("#", "layer", "class", "inbound", "params", "dtype", "trainable", "weights")
NONFINITE_STYLE = "bold magenta"
ZERO_STYLE = "bold yellow"


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
    def problem(self) -> str | None:
        """Why the stored weights need a look (NaN/Inf, all zero, no such layer), else None."""
        w = self.weights
        if self.unmatched:
            return "weights stored for a layer the config does not have (wrong weight file?)"
        if w is None:
            return None
        if w.nan or w.inf:
            return f"{_nonfinite(w)} in its stored weights"
        if w.tensors and w.zero_tensors == w.tensors:
            return f"every stored tensor is all zero ({w.tensors} of {w.tensors})"
        return None


@dataclass(frozen=True)
class ModelInput:
    """One input of the model: its name (a valid --from), shape with batch axis, dtype."""

    name: str
    shape: tuple[int | None, ...] | None
    dtype: str | None


@dataclass(frozen=True)
class LayerListing:
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
    notes: tuple[str, ...] = ()

    @property
    def total_params(self) -> int:
        """Scalars in all stored weights (each shared layer counted once)."""
        return sum(r.weights.params for r in self.rows if r.weights is not None)


def build_listing(info: FileInfo, warnings: Sequence[str] = ()) -> LayerListing:
    """The rows of `layergrad layers` for a file read with `fileinfo.read_file_info`.

    `warnings` are the audit findings accepted with `--unsafe`; they are kept in the JSON.

    Example:
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
    rows += [_orphan(w, graph.known) for w in info.weights if w.layer not in known]
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
    return LayerRow(
        position=position,
        path=entry.path,
        parent=entry.parent,
        class_name=entry.class_name,
        inbound=_inbound(graph, entry.inbound),
        calls=entry.num_calls,
        params=params,
        dtype=dtype_policy(entry.config.get("dtype")),
        trainable=trainable if isinstance(trainable, bool) else None,
        is_model=entry.is_model,
        unmatched=False,
        weights=health.get(entry.path),
    )


def _model_input(graph: ModelGraph, name: str) -> ModelInput:
    entry = graph.get(name)
    config = entry.config if entry is not None else {}
    shape = config.get("batch_shape", config.get("batch_input_shape"))
    dims = (
        tuple(d if isinstance(d, int) else None for d in shape) if isinstance(shape, list) else None
    )
    return ModelInput(name, dims, dtype_policy(config.get("dtype")))


def _orphan(w: WeightHealth, graph_known: bool) -> LayerRow:
    """A weight group the config has no layer for (or a subclassed model's attribute)."""
    return LayerRow((), w.layer, None, "?", (), 0, w.params, None, None, False, graph_known, w)


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


def dtype_policy(value: Any) -> str | None:
    """The dtype policy name in a layer config (`"float32"`, `"mixed_float16"`), or None.

    Keras 3 stores a serialized ``DTypePolicy`` (name in its config), input layers and Keras
    2 files a plain dtype string, older mixed-precision files a ``Policy`` object.
    """
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        inner = value.get("config")
        if isinstance(inner, Mapping) and isinstance(inner.get("name"), str):
            return str(inner["name"])
        return str(value.get("class_name")) if value.get("class_name") else None
    return None


# ----- text ------------------------------------------------------------------------------------


def layers_text(listing: LayerListing, *, color: bool = False, width: int = 100) -> str:
    """The `layers` table: a header, one row per layer, weight problems, and the totals."""
    return render(_renderables(listing), color=color, width=width)


def _renderables(listing: LayerListing) -> list[RenderableType]:
    version = f"Keras {listing.keras_version}" if listing.keras_version else "unknown Keras"
    header = Text.assemble(
        (listing.path, "bold"),
        f"  {listing.class_name} {listing.name!r}, {listing.format}, saved by {version}",
    )
    if listing.inputs:
        header.append(f"\ninputs: {', '.join(map(_input_text, listing.inputs))}")
    header.append(_uniform_line(listing.rows))
    items: list[RenderableType] = [header]
    if not listing.graph_known:
        items.append(
            Text(
                "the config describes no layer graph (a subclassed model): the rows below are "
                "the weight file's groups, which --from/--to may not accept",
                style="yellow",
            )
        )
    items.append(_table(listing))
    flagged = [r for r in listing.rows if r.problem]
    if flagged:
        items.append(_problems(flagged))
    items.append(Text(_footer(listing)))
    return items


def _input_text(i: ModelInput) -> str:
    """`ids (None, 6) int32`."""
    parts = [i.name]
    if i.shape is not None:
        parts.append("(" + ", ".join("None" if d is None else str(d) for d in i.shape) + ")")
    if i.dtype:
        parts.append(i.dtype)
    return " ".join(parts)


def _shared_values(rows: Sequence[LayerRow]) -> dict[str, set[Any]]:
    """The dtype policies and trainable flags of the layers (an input's dtype is in the header)."""
    return {
        "dtype": {r.dtype for r in rows if r.dtype is not None and r.class_name != "InputLayer"},
        "trainable": {r.trainable for r in rows if r.trainable is not None},
    }


def _uniform_line(rows: Sequence[LayerRow]) -> str:
    """What the table leaves out because every layer has the same value."""
    values = _shared_values(rows)
    parts = []
    if len(values["dtype"]) == 1:
        parts.append(f"every layer's dtype policy is {next(iter(values['dtype']))}")
    if len(values["trainable"]) == 1:
        parts.append(f"every layer is {'' if values['trainable'] == {True} else 'not '}trainable")
    return "\n" + "; ".join(parts) if parts else ""


def _table(listing: LayerListing) -> Table:
    """The rows; the dtype and trainable columns only when layers differ in them."""
    values = _shared_values(listing.rows)
    columns = [c for c in COLUMNS if len(values.get(c, "many")) > 1]
    ops = {op.path for op in listing.operations}
    table = Table(box=box.SIMPLE_HEAVY, pad_edge=False, collapse_padding=True)
    for name in columns:
        table.add_column(
            name,
            justify="right" if name in ("#", "params") else "left",
            no_wrap=name in ("#", "params", "weights"),
            overflow="fold",  # a narrow terminal wraps a long name; it never cuts it short
        )
    for r in listing.rows:
        cells: dict[str, RenderableType] = {
            "#": _index_text(r),
            "layer": Text(r.path, style="bold" if r.is_model else ""),
            "class": Text.assemble(r.class_name, (_calls_text(r), "dim")),
            "inbound": _inbound_text(r, ops),
            "params": _params_text(r),
            "dtype": r.dtype or "",
            "trainable": _yes_no(r.trainable),
            "weights": _health_cell(r),
        }
        table.add_row(*(cells[c] for c in columns))
    return table


def _inbound_text(r: LayerRow, ops: set[str]) -> str:
    return ", ".join(f"{p} (op)" if p in ops else p for p in r.inbound)


def _index_text(r: LayerRow) -> str:
    return ".".join(map(str, r.position)) or "?"


def _calls_text(r: LayerRow) -> str:
    return f" ({r.calls} calls)" if r.calls > 1 else ""


def _params_text(r: LayerRow) -> str:
    return f"{r.params:,}" if r.params or r.weights is not None or r.is_model else ""


def _yes_no(flag: bool | None) -> str:
    return "" if flag is None else "yes" if flag else "no"


def _health_cell(r: LayerRow) -> Text:
    w = r.weights
    if w is None:
        return Text("")
    parts = [_nonfinite(w)] if w.nan or w.inf else []
    if w.zero_tensors:
        parts.append(f"{w.zero_tensors}/{w.tensors} zero")
    if w.unchecked:
        parts.append(f"{w.unchecked}/{w.tensors} not scanned")
    style = ""
    if w.nan or w.inf:
        style = NONFINITE_STYLE
    elif w.tensors and w.zero_tensors == w.tensors:
        style = ZERO_STYLE
    return Text(", ".join(parts) or "ok", style=style)


def _nonfinite(w: WeightHealth) -> str:
    counts = [(w.nan, "NaN"), (w.inf, "Inf")]
    return ", ".join(f"{n:,} {what}" for n, what in counts if n)


def _problems(rows: Iterable[LayerRow]) -> Text:
    text = Text("weights that need a look:", style="bold")
    for r in rows:
        w = r.weights
        style = NONFINITE_STYLE if w is not None and (w.nan or w.inf) else ZERO_STYLE
        text.append(f"\n  {r.path}: ")
        text.append(str(r.problem), style=style)
    return text


def _footer(listing: LayerListing) -> str:
    stored = sum(1 for r in listing.rows if r.weights is not None)
    lines = [
        f"{len(listing.rows)} layers, {stored} with stored weights; "
        f"total params {listing.total_params:,} (from the stored weight shapes)"
    ]
    ops = listing.operations
    if ops:
        shown = ", ".join(f"{op.path} ({', '.join(op.inbound)})" for op in ops[:5])
        more = f" and {len(ops) - 5} more (see --json)" if len(ops) > 5 else ""
        lines.append(
            f"{len(ops)} functional operations are not layers, so --from/--to cannot address "
            f"them; inbound marks them (op). Each with its inputs: {shown}{more}"
        )
    lines += [f"weights not scanned: {note}" for note in listing.notes]
    return "\n".join(lines)


# ----- JSON ------------------------------------------------------------------------------------


def layers_json(listing: LayerListing) -> str:
    """The `layergrad.layers/1` JSON document (one object, keys as in the README)."""
    doc = {
        "schema": LAYERS_SCHEMA,
        "model": {
            "path": listing.path,
            "format": listing.format,
            "class": listing.class_name,
            "name": listing.name,
            "keras_version": listing.keras_version,
            "inputs": [
                {
                    "name": i.name,
                    "shape": None if i.shape is None else list(i.shape),
                    "dtype": i.dtype,
                }
                for i in listing.inputs
            ],
            "graph": listing.graph_known,
        },
        "total_params": listing.total_params,
        "layers": [_row_json(r) for r in listing.rows],
        "operations": [
            {"path": op.path, "class": op.class_name, "inbound": list(op.inbound)}
            for op in listing.operations
        ],
        "warnings": list(listing.warnings),
        "notes": list(listing.notes),
    }
    return json.dumps(doc, indent=2, allow_nan=False)


def _row_json(r: LayerRow) -> dict[str, Any]:
    w = r.weights
    return {
        "index": r.position[-1] if r.position else None,
        "path": r.path,
        "parent": r.parent,
        "class": r.class_name,
        "inbound": list(r.inbound),
        "calls": r.calls,
        "params": r.params,
        "dtype": r.dtype,
        "trainable": r.trainable,
        "is_model": r.is_model,
        "weights": None
        if w is None
        else {
            "tensors": w.tensors,
            "nan": w.nan,
            "inf": w.inf,
            "zero_tensors": w.zero_tensors,
            "unchecked": w.unchecked,
        },
        "problem": r.problem,
    }


# ----- markdown --------------------------------------------------------------------------------


def layers_markdown(listing: LayerListing) -> str:
    """The listing as a markdown table, for a pull-request comment."""
    version = listing.keras_version or "unknown"
    head = (
        f"**layergrad layers** `{listing.path}`: {listing.class_name} `{listing.name}`, "
        f"{listing.format}, Keras {version}\n\n"
    )
    ops = {op.path for op in listing.operations}
    rows = []
    for r in listing.rows:
        health = _health_cell(r).plain
        rows.append(
            [
                _index_text(r),
                f"`{r.path}`",
                r.class_name + _calls_text(r),
                ", ".join(f"`{p}` (op)" if p in ops else f"`{p}`" for p in r.inbound),
                _params_text(r),
                r.dtype or "",
                _yes_no(r.trainable),
                f"**{health}**" if r.problem else health,
            ]
        )
    out = head + md_table(list(COLUMNS), rows) + "\n"
    out += "".join(f"- `{r.path}`: **{r.problem}**\n" for r in listing.rows if r.problem)
    return out + "".join(f"{line}\n" for line in _footer(listing).splitlines())
