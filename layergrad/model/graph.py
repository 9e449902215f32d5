"""The layer graph of a saved Keras model, built from its config alone (no TensorFlow).

The graph works at *call* granularity: node ``(path, k)`` is call k of the layer at ``path``
(its k-th inbound node); `expand` expands them. Facts about the formats (Keras 3.15):
``model.layers`` of a Sequential model leaves out its ``InputLayer``; a Functional model lists
its input layers but not its operations (``a + b``, ``keras.ops.add``). Those are kept in
:attr:`ModelGraph.unlisted` so that dependency flows through them; :attr:`LayerEntry.index`
counts only listed layers.

The entries are built in one pass over the config, so reading a file is linear in its
config's size; the call nodes are expanded only when a query needs them, within
MAX_GRAPH_CALLS (`expand`: the expansion is as large as the number of calls, which nested
models multiply).

In the expansion a nested model is transparent: its inputs are fed by what feeds it and its
consumers read its inner outputs. Called n times, it runs its inner layers n times: inner call
``i * m + k`` is call k (of m) during its call i. A reference to a nested model counts its calls
from 0 in Keras 3 inbound nodes but from 1 in a Functional parent's
``input_layers``/``output_layers`` when the nested model is Functional, and from 1 everywhere in
Keras 2 files.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

from layergrad.core import json_types as js
from layergrad.core.errors import LoadError
from layergrad.core.limits import MAX_GRAPH_CALLS
from layergrad.model.config import (
    Ref,
    inbound_nodes,
    is_container,
    is_functional,
    is_operation,
    layer_name,
    members,
    options,
    serialized_name,
    structure_refs,
    tensor_refs,
)

NodeId = tuple[str, int]
Feeds = Sequence[Sequence[Sequence[NodeId]]]  # per call, per input: the feeding nodes
Outs = list[list[NodeId]]  # per call: the output nodes


@dataclass(frozen=True)
class LayerEntry:
    """One layer (or nested model, or functional operation) of a saved model.

    ``inbound`` is the config-level view: the paths, in the same enclosing model, of the layers
    whose outputs this layer's calls consume (the previous member for a Sequential member). The
    input layer (or first member) inside a nested model has no inbound entries: what feeds the
    nested model is only in the call graph that :meth:`ModelGraph.depends` walks. ``num_calls``
    counts calls during one run of the whole model. ``listed`` is False for entries Keras does
    not report in the parent's ``.layers`` (functional operations, a Sequential's
    ``InputLayer``); their ``index`` is the position in the parent's config. ``dtype`` is the
    dtype (or dtype policy) its config names, read once here (None: it names none).
    """

    path: str
    name: str
    class_name: str
    module: str | None
    registered_name: str | None
    config: Mapping[str, object] = field(hash=False, repr=False)
    parent: str | None
    index: int
    depth: int
    inbound: tuple[str, ...]
    num_calls: int
    is_model: bool
    listed: bool = True
    dtype: str | None = None


@dataclass(frozen=True)
class ModelGraph:
    """Layers of a saved model and the call graph between them.

    ``layers`` holds what Keras lists in ``.layers`` (recursively, depth-first, parents before
    children, config order); ``unlisted`` holds the other graph entries (operations, Sequential
    input layers). ``known`` is False when the config describes no graph (a subclassed model).
    ``preds`` maps each call node ``(path, call)`` to the nodes it reads; ``order`` lists every
    node in execution (topological) order, both expanded on first use (see the module doc).
    """

    class_name: str
    name: str
    layers: tuple[LayerEntry, ...]
    input_names: tuple[str, ...]
    known: bool
    unlisted: tuple[LayerEntry, ...] = ()
    source: Mapping[str, object] = field(
        default_factory=dict, repr=False, compare=False, hash=False
    )

    @classmethod
    def from_config(cls, config: Mapping[str, object]) -> ModelGraph:
        """Build the graph from a model config (``config.json`` or h5 ``model_config``)."""
        class_name, name = str(config.get("class_name", "")), str(options(config).get("name", ""))
        if not is_container(config):
            return cls(class_name, name, (), (), known=False)
        entries: list[LayerEntry] = []
        _add_entries(entries, config, "", 1)
        listed = tuple(e for e in entries if e.listed)
        unlisted = tuple(e for e in entries if not e.listed)
        return cls(class_name, name, listed, _input_names(config), True, unlisted, config)

    @property
    def calls(self) -> int:
        """Call nodes in one run of the model: the sum of every entry's ``num_calls``."""
        return sum(e.num_calls for e in (*self.layers, *self.unlisted))

    def require_expandable(self) -> None:
        """Raise LoadError when the call nodes would number more than MAX_GRAPH_CALLS."""
        if self.calls > MAX_GRAPH_CALLS:
            raise LoadError(
                f"model {self.name!r} runs its layers {self.calls:,} times in one pass (nested "
                f"models called many times multiply their layers' calls); layergrad follows at "
                f"most {MAX_GRAPH_CALLS:,} layer calls; expected a model of ordinary size"
            )

    @cached_property
    def _nodes(self) -> tuple[dict[NodeId, tuple[NodeId, ...]], tuple[NodeId, ...]]:
        if not self.known:
            return {}, ()
        self.require_expandable()
        return expand(self.source)

    @property
    def preds(self) -> Mapping[NodeId, tuple[NodeId, ...]]:
        """Each call node ``(path, call)`` -> the nodes it reads (expanded on first use)."""
        return self._nodes[0]

    @property
    def order(self) -> tuple[NodeId, ...]:
        """Every call node in execution (topological) order (expanded on first use)."""
        return self._nodes[1]

    @cached_property
    def _by_path(self) -> dict[str, LayerEntry]:
        return {e.path: e for e in (*self.layers, *self.unlisted)}

    def get(self, path: str) -> LayerEntry | None:
        """The entry at ``path`` (``"dense"``, ``"encoder/dense_1"``), listed or not."""
        return self._by_path.get(path)

    def depends(self, to: str, frm: str, to_call: int = 0, frm_call: int = 0) -> bool | None:
        """Whether call ``to_call`` of ``to`` depends on call ``frm_call`` of ``frm``.

        True when a chain of tensors leads from one to the other (through adds, concatenations,
        nested models and shared layers). A call does not depend on itself. None when the graph
        is unknown or a path/call is not in it.
        """
        sources = self._sources(frm, frm_call)
        target = self._node(to, to_call)
        if sources is None or target is None:
            return None
        return bool(self.ancestors(target) & sources)

    def between(
        self, frm: str, to: str, frm_call: int = 0, to_call: int = 0, *, include_ops: bool = False
    ) -> tuple[str, ...]:
        """Leaf layers strictly after ``frm`` and up to ``to`` on any chain, in execution order.

        Each path appears once, at its first call on a chain. Nested-model containers and input
        layers (which Keras never calls) are left out, and so are operations unless
        ``include_ops``. Empty when ``to`` does not depend on ``frm``.
        """
        sources, target = self._sources(frm, frm_call), self._node(to, to_call)
        before = self.ancestors(target) if target is not None else set()
        if sources is None or target is None or not before & sources:
            return ()
        on_path = (before | {target}) & self.descendants(sources)
        out: list[str] = []
        for node in self.order:
            entry = self.get(node[0])
            if node not in on_path or entry is None or entry.is_model or node[0] in out:
                continue
            if entry.class_name != "InputLayer" and (entry.listed or include_ops):
                out.append(node[0])
        return tuple(out)

    def _node(self, path: str, call: int) -> NodeId | None:
        entry = self.get(path) if self.known else None
        if entry is None or not 0 <= call < entry.num_calls:
            return None
        return (path, call)

    def _sources(self, path: str, call: int) -> set[NodeId] | None:
        node = self._node(path, call)
        if node is None:
            return None
        entry = self.get(path)
        if entry is not None and entry.is_model and self.preds.get(node):
            return set(self.preds[node])  # a nested model's output = its inner outputs
        return {node}

    def ancestors(self, node: NodeId) -> set[NodeId]:
        """Every call node that ``node`` reads, directly or through others."""
        seen: set[NodeId] = set()
        stack = list(self.preds.get(node, ()))
        while stack:
            cur = stack.pop()
            if cur not in seen:
                seen.add(cur)
                stack.extend(self.preds.get(cur, ()))
        return seen

    def descendants(self, sources: set[NodeId]) -> set[NodeId]:
        """Every call node that reads one of ``sources``, directly or through others."""
        reached: set[NodeId] = set()
        for node in self.order:
            if any(p in sources or p in reached for p in self.preds.get(node, ())):
                reached.add(node)
        return reached


def _input_names(cfg: Mapping[str, object]) -> tuple[str, ...]:
    inner = js.member(cfg, "config")
    if is_functional(cfg):
        return tuple(ref[0] for ref in structure_refs(inner.get("input_layers")))
    layers = members(cfg)
    first = layers[0] if layers else {}
    return (layer_name(first),) if first.get("class_name") == "InputLayer" else ()


def _add_entries(out: list[LayerEntry], cfg: Mapping[str, object], prefix: str, calls: int) -> None:
    """Append the entries of a model's members (paths start with ``prefix``), depth first; a
    nested model's members once, their ``num_calls`` multiplied by its calls."""
    entries = members(cfg)
    if is_functional(cfg):
        by_name = {layer_name(m): m for m in entries}
        listed = 0
        for pos, member in enumerate(entries):
            nodes = inbound_nodes(member)
            is_listed = not is_operation(member)
            own = calls * max(len(nodes), 1)
            inbound = _functional_inbound(member, prefix, by_name)
            index = listed if is_listed else pos
            out.append(_entry(member, prefix, index, inbound, own, is_listed))
            listed += is_listed
            if is_container(member) and nodes:
                _add_entries(out, member, prefix + layer_name(member) + "/", calls * len(nodes))
        return
    skip = 1 if entries and entries[0].get("class_name") == "InputLayer" else 0
    last: str | None = None
    for pos, member in enumerate(entries):
        listed = pos >= skip
        index, inbound = (pos - skip if listed else pos), ((last,) if last else ())
        out.append(_entry(member, prefix, index, inbound, calls, listed))
        if is_container(member):
            _add_entries(out, member, prefix + layer_name(member) + "/", calls)
        last = prefix + layer_name(member)


def _entry(
    cfg: Mapping[str, object],
    prefix: str,
    index: int,
    inbound: tuple[str, ...],
    num_calls: int,
    listed: bool,
) -> LayerEntry:
    """One layer of the model whose members' paths start with ``prefix``."""
    name = layer_name(cfg)
    module, registered = (v if isinstance(v := cfg.get(k), str) else None
                          for k in ("module", "registered_name"))  # fmt: skip
    inner = options(cfg)
    return LayerEntry(prefix + name, name, str(cfg.get("class_name", "")), module, registered,
                      inner, prefix.rstrip("/") or None,
                      index, prefix.count("/"), inbound, num_calls, is_container(cfg),
                      listed, serialized_name(inner.get("dtype")))  # fmt: skip


def _functional_inbound(
    member: Mapping[str, object], prefix: str, by_name: Mapping[str, object]
) -> tuple[str, ...]:
    out: list[str] = []
    for node in inbound_nodes(member):
        for ref in tensor_refs(node, isinstance(node, list)):
            path = prefix + ref[0]
            if ref[0] in by_name and path not in out:
                out.append(path)
    return tuple(out)


def expand(
    config: Mapping[str, object],
) -> tuple[dict[NodeId, tuple[NodeId, ...]], tuple[NodeId, ...]]:
    """The call nodes of a model config: each node's predecessors, and a topological order."""
    builder = _Builder()
    builder.add_model(config, "", 1, [[]])
    order = _topological(builder.nodes, builder.preds)
    return {k: tuple(v) for k, v in builder.preds.items()}, order


class _Builder:
    """Mutable state while expanding a config into call nodes."""

    def __init__(self) -> None:
        self.nodes: list[NodeId] = []
        self.preds: dict[NodeId, list[NodeId]] = {}

    def node(self, node: NodeId, preds: Iterable[NodeId]) -> NodeId:
        if node not in self.preds:
            self.nodes.append(node)
        self.preds[node] = list(dict.fromkeys([*self.preds.get(node, ()), *preds]))
        return node

    def add_model(self, cfg: Mapping[str, object], prefix: str, calls: int, feeds: Feeds) -> Outs:
        """Expand a model's members (paths start with ``prefix``); return its outputs per call.

        ``feeds[i][j]`` lists the nodes feeding input j during call i of the model.
        """
        if is_functional(cfg):
            return _Functional(self, cfg, prefix, calls).expand(feeds)
        return self.add_sequential(cfg, prefix, calls, feeds)

    def add_sequential(
        self, cfg: Mapping[str, object], prefix: str, calls: int, feeds: Feeds
    ) -> Outs:
        prev = [[n for group in feeds[i] for n in group] for i in range(calls)]
        for member in members(cfg):
            path = prefix + layer_name(member)
            if is_container(member):
                outs = self.add_model(member, path + "/", calls, [[p] for p in prev])
                prev = [[self.node((path, i), outs[i])] for i in range(calls)]
            else:
                prev = [[self.node((path, i), prev[i])] for i in range(calls)]
        return prev


class _Functional:
    """Expansion of one Functional config (its own scope of layer names)."""

    def __init__(self, b: _Builder, cfg: Mapping[str, object], prefix: str, calls: int) -> None:
        self.b, self.prefix, self.calls = b, prefix, calls
        self.inner, self.members = js.member(cfg, "config"), members(cfg)
        self.by_name = {layer_name(m): m for m in self.members}
        self.outs: dict[NodeId, list[NodeId]] = {}  # nested-model call -> its inner outputs
        self.nested: dict[str, list[list[NodeId]]] = {}  # nested model -> outputs per call

    def expand(self, feeds: Feeds) -> Outs:
        input_refs = structure_refs(self.inner.get("input_layers"))
        for member in self.members:
            for i in range(self.calls):
                self.add_calls(member, i, input_refs, feeds[i])
        outputs = structure_refs(self.inner.get("output_layers"))
        return [[self.resolve(ref, i, boundary=True) for ref in outputs] for i in range(self.calls)]

    def add_calls(
        self,
        member: Mapping[str, object],
        i: int,
        input_refs: list[Ref],
        feeds: Sequence[Sequence[NodeId]],
    ) -> None:
        name = layer_name(member)
        path = self.prefix + name
        nodes = inbound_nodes(member)
        if not nodes:  # an input layer: fed by what feeds this model
            positions = [p for p, ref in enumerate(input_refs) if ref[0] == name]
            fed = [n for p in positions if p < len(feeds) for n in feeds[p]]
            self.b.node((path, i), fed)
            return
        for k, node in enumerate(nodes):
            g = i * len(nodes) + k
            if is_container(member):
                if g == 0:
                    total = self.calls * len(nodes)
                    per_call = [self.call_feeds(member, c) for c in range(total)]
                    self.nested[path] = self.b.add_model(member, path + "/", total, per_call)
                self.outs[(path, g)] = self.nested[path][g]
                self.b.node((path, g), self.nested[path][g])
            else:
                legacy = isinstance(node, list)
                reads = [self.resolve(r, i, legacy) for r in tensor_refs(node, legacy)]
                self.b.node((path, g), reads)

    def call_feeds(self, member: Mapping[str, object], g: int) -> list[list[NodeId]]:
        """The nodes feeding each input of nested model ``member`` during its call ``g``."""
        nodes = js.listed(member["inbound_nodes"], "inbound_nodes")
        i, k = divmod(g, len(nodes))
        node = nodes[k]
        legacy = isinstance(node, list)
        srcs = [self.resolve(r, i, legacy) for r in tensor_refs(node, legacy)]
        if not is_functional(member):
            return [srcs]
        inputs = js.member(member, "config").get("input_layers")
        n_inputs = len(structure_refs(inputs))
        args = node.get("args") if isinstance(node, Mapping) else None
        first = args[0] if isinstance(args, list) and args else None
        if isinstance(first, Mapping) and isinstance(inputs, Mapping):
            keyed = [[self.resolve(r, i) for r in tensor_refs(first.get(k), False)] for k in inputs]
            if all(keyed):
                return keyed
        if len(srcs) == n_inputs:
            return [[s] for s in srcs]
        return [list(srcs) for _ in range(n_inputs)]

    def resolve(self, ref: Ref, i: int, legacy: bool = False, boundary: bool = False) -> NodeId:
        """The node a tensor reference points at, during call ``i`` of this model."""
        name, node_index, tensor = ref
        member = self.by_name.get(name)
        path = self.prefix + name
        if member is None:
            return (path, node_index)
        n = max(len(inbound_nodes(member)), 1)
        shifted = legacy or (boundary and (is_functional(member) or node_index >= n))
        if is_container(member) and node_index > 0 and shifted:
            node_index -= 1
        g = i * n + min(node_index, n - 1)
        outs = self.outs.get((path, g))
        if outs is not None and 0 <= tensor < len(outs):
            return outs[tensor]
        return (path, g)


def _topological(
    nodes: Sequence[NodeId], preds: Mapping[NodeId, list[NodeId]]
) -> tuple[NodeId, ...]:
    """Depth-first topological order, ties broken by creation order; cycles are cut."""
    order: list[NodeId] = []
    done: set[NodeId] = set()
    for root in nodes:
        stack: list[tuple[NodeId, int]] = [(root, 0)]
        active: set[NodeId] = {root}
        while stack:
            node, idx = stack.pop()
            parents = preds.get(node, [])
            if idx < len(parents):
                stack.append((node, idx + 1))
                parent = parents[idx]
                if parent not in done and parent not in active:
                    active.add(parent)
                    stack.append((parent, 0))
            elif node not in done:
                done.add(node)
                order.append(node)
    return tuple(order)
