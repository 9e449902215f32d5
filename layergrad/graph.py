"""The layer graph of a saved Keras model, built from its config alone (no TensorFlow).

The graph works at *call* granularity: node ``(path, k)`` is call k of the layer
at ``path`` (its k-th inbound node). Facts about the formats (Keras 3.15):

* ``model.layers`` of a Sequential model leaves out its ``InputLayer``; a
  Functional model lists its input layers but not its operations (``a + b``,
  ``keras.ops.add``), which the config holds as entries with module
  ``keras.src.ops.*`` (legacy ``.h5``: no module, no ``trainable`` in the
  config). Those are kept in :attr:`ModelGraph.unlisted` so that dependency
  flows through them; :attr:`LayerEntry.index` counts only listed layers.
* Keras 3 inbound nodes are ``{"args", "kwargs"}`` with ``__keras_tensor__``
  objects whose ``keras_history`` is ``[name, node, tensor]``; Keras 2 nodes are
  lists of ``[name, node, tensor, kwargs]`` (kwargs may hold more refs).
* A reference to a nested model counts its calls from 0 in Keras 3 inbound
  nodes but from 1 in a Functional parent's ``input_layers``/``output_layers``
  when the nested model is Functional, and from 1 everywhere in Keras 2 files.
* A nested model is transparent: its inputs are fed by what feeds it and its
  consumers read its inner outputs. Called n times, it runs its inner layers n
  times: inner call ``i * m + k`` is call k (of m) during its call i.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

NodeId = tuple[str, int]
Ref = tuple[str, int, int]
Feeds = Sequence[Sequence[Sequence[NodeId]]]  # per call, per input: the feeding nodes
Outs = list[list[NodeId]]  # per call: the output nodes

_OP_MODULES = ("keras.src.ops", "keras.ops")


@dataclass(frozen=True)
class LayerEntry:
    """One layer (or nested model, or functional operation) of a saved model.

    ``inbound`` is the config-level view: the paths, in the same enclosing
    model, of the layers whose outputs this layer's calls consume (the previous
    member for a Sequential member). The input layer (or first member) inside a
    nested model has no inbound entries: what feeds the nested model is only in
    the call graph that :meth:`ModelGraph.depends` walks. ``num_calls`` counts calls during one
    run of the whole model. ``listed`` is False for entries Keras does not report
    in the parent's ``.layers`` (functional operations, a Sequential's
    ``InputLayer``); their ``index`` is the position in the parent's config.
    """

    path: str
    name: str
    class_name: str
    module: str | None
    registered_name: str | None
    config: Mapping[str, Any] = field(hash=False, repr=False)
    parent: str | None
    index: int
    depth: int
    inbound: tuple[str, ...]
    num_calls: int
    is_model: bool
    listed: bool = True


@dataclass(frozen=True)
class ModelGraph:
    """Layers of a saved model and the call graph between them.

    ``layers`` holds what Keras lists in ``.layers`` (recursively, depth-first,
    parents before children, config order); ``unlisted`` holds the other graph
    entries (operations, Sequential input layers). ``known`` is False when the
    config describes no graph (a subclassed model). ``preds`` maps each call
    node ``(path, call)`` to the nodes it reads; ``order`` lists every node in
    execution (topological) order.
    """

    class_name: str
    name: str
    layers: tuple[LayerEntry, ...]
    input_names: tuple[str, ...]
    known: bool
    unlisted: tuple[LayerEntry, ...] = ()
    preds: Mapping[NodeId, tuple[NodeId, ...]] = field(
        default_factory=dict, repr=False, compare=False, hash=False
    )
    order: tuple[NodeId, ...] = field(default=(), repr=False, compare=False)

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> ModelGraph:
        """Build the graph from a model config (``config.json`` or h5 ``model_config``)."""
        inner = config.get("config")
        inner = inner if isinstance(inner, Mapping) else {}
        class_name = str(config.get("class_name", ""))
        name = str(inner.get("name", ""))
        if not _is_container(config):
            return cls(class_name, name, (), (), known=False)
        builder = _Builder()
        builder.add_model(config, "", 1, [[]])
        listed = tuple(e for e in builder.entries if e.listed)
        unlisted = tuple(e for e in builder.entries if not e.listed)
        order = _topological(builder.nodes, builder.preds)
        preds = {k: tuple(v) for k, v in builder.preds.items()}
        return cls(class_name, name, listed, _input_names(config), True, unlisted, preds, order)

    @cached_property
    def _by_path(self) -> dict[str, LayerEntry]:
        return {e.path: e for e in (*self.layers, *self.unlisted)}

    def get(self, path: str) -> LayerEntry | None:
        """The entry at ``path`` (``"dense"``, ``"encoder/dense_1"``), listed or not."""
        return self._by_path.get(path)

    def find(self, name: str) -> tuple[LayerEntry, ...]:
        """Every entry (at any depth) whose own name is ``name``."""
        return tuple(e for e in (*self.layers, *self.unlisted) if e.name == name)

    def depends(self, to: str, frm: str, to_call: int = 0, frm_call: int = 0) -> bool | None:
        """Whether call ``to_call`` of ``to`` depends on call ``frm_call`` of ``frm``.

        True when a chain of tensors leads from one to the other (through adds,
        concatenations, nested models and shared layers). A call does not depend
        on itself. None when the graph is unknown or a path/call is not in it.
        """
        sources = self._sources(frm, frm_call)
        target = self._node(to, to_call)
        if sources is None or target is None:
            return None
        return bool(self._ancestors(target) & sources)

    def between(
        self, frm: str, to: str, frm_call: int = 0, to_call: int = 0, *, include_ops: bool = False
    ) -> tuple[str, ...]:
        """Leaf layers strictly after ``frm`` and up to ``to`` on any chain, in execution order.

        Each path appears once, at its first call on a chain. Nested-model
        containers and input layers (which Keras never calls) are left out, and
        so are operations unless ``include_ops``. Empty when ``to`` does not
        depend on ``frm``.
        """
        if not self.depends(to, frm, to_call, frm_call):
            return ()
        sources = self._sources(frm, frm_call) or set()
        target = self._node(to, to_call)
        assert target is not None
        on_path = (self._ancestors(target) | {target}) & self._descendants(sources)
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

    def _ancestors(self, node: NodeId) -> set[NodeId]:
        seen: set[NodeId] = set()
        stack = list(self.preds.get(node, ()))
        while stack:
            cur = stack.pop()
            if cur not in seen:
                seen.add(cur)
                stack.extend(self.preds.get(cur, ()))
        return seen

    def _descendants(self, sources: set[NodeId]) -> set[NodeId]:
        reached: set[NodeId] = set()
        for node in self.order:
            if any(p in sources or p in reached for p in self.preds.get(node, ())):
                reached.add(node)
        return reached


def _is_container(cfg: Mapping[str, Any]) -> bool:
    inner = cfg.get("config")
    if not isinstance(inner, Mapping) or not isinstance(inner.get("layers"), list):
        return False
    return cfg.get("class_name") == "Sequential" or "input_layers" in inner


def _is_functional(cfg: Mapping[str, Any]) -> bool:
    return _is_container(cfg) and "input_layers" in cfg["config"]


def _is_operation(cfg: Mapping[str, Any]) -> bool:
    module = cfg.get("module")
    if isinstance(module, str):
        return module.startswith(_OP_MODULES)
    inner = cfg.get("config")
    plain = isinstance(inner, Mapping) and "trainable" not in inner and not _is_container(cfg)
    return plain and cfg.get("class_name") != "InputLayer"


def _layer_name(cfg: Mapping[str, Any]) -> str:
    inner = cfg.get("config")
    name = cfg.get("name") or (inner.get("name") if isinstance(inner, Mapping) else None)
    return str(name or cfg.get("class_name", "layer"))


def _is_ref(obj: Any) -> bool:
    shape_ok = isinstance(obj, list) and len(obj) in (3, 4) and isinstance(obj[0], str)
    return shape_ok and isinstance(obj[1], int) and isinstance(obj[2], int)


def _refs(obj: Any, legacy: bool) -> Iterator[Ref]:
    """Tensor references inside a node's args/kwargs, in order."""
    if isinstance(obj, Mapping):
        if obj.get("class_name") == "__keras_tensor__":
            hist = obj.get("config", {}).get("keras_history")
            if _is_ref(hist):
                yield (hist[0], hist[1], hist[2])
            return
        for value in obj.values():
            yield from _refs(value, legacy)
    elif legacy and _is_ref(obj):
        yield (obj[0], obj[1], obj[2])
        if len(obj) == 4:
            yield from _refs(obj[3], legacy)
    elif isinstance(obj, list):
        for value in obj:
            yield from _refs(value, legacy)


def _structure_refs(obj: Any) -> list[Ref]:
    """Flatten ``input_layers``/``output_layers`` (a ref, list or dict of refs)."""
    if _is_ref(obj):
        return [(obj[0], obj[1], obj[2])]
    values = obj.values() if isinstance(obj, Mapping) else obj if isinstance(obj, list) else []
    return [ref for value in values for ref in _structure_refs(value)]


def _input_names(cfg: Mapping[str, Any]) -> tuple[str, ...]:
    inner = cfg["config"]
    if _is_functional(cfg):
        return tuple(ref[0] for ref in _structure_refs(inner.get("input_layers")))
    first = inner["layers"][0] if inner["layers"] else {}
    return (_layer_name(first),) if first.get("class_name") == "InputLayer" else ()


class _Builder:
    """Mutable state while expanding a config into entries and call nodes."""

    def __init__(self) -> None:
        self.entries: list[LayerEntry] = []
        self.nodes: list[NodeId] = []
        self.preds: dict[NodeId, list[NodeId]] = {}

    def node(self, node: NodeId, preds: Iterable[NodeId]) -> NodeId:
        if node not in self.preds:
            self.nodes.append(node)
            self.preds[node] = []
        self.preds[node].extend(p for p in preds if p not in self.preds[node])
        return node

    def entry(self, cfg: Mapping[str, Any], prefix: str, **kw: Any) -> None:
        """Record one layer of the model whose members' paths start with ``prefix``."""
        inner = cfg.get("config")
        self.entries.append(
            LayerEntry(
                path=prefix + _layer_name(cfg),
                name=_layer_name(cfg),
                class_name=str(cfg.get("class_name", "")),
                module=cfg.get("module"),
                registered_name=cfg.get("registered_name"),
                config=inner if isinstance(inner, Mapping) else {},
                parent=prefix.rstrip("/") or None,
                depth=prefix.count("/"),
                is_model=_is_container(cfg),
                **kw,
            )
        )

    def add_model(self, cfg: Mapping[str, Any], prefix: str, calls: int, feeds: Feeds) -> Outs:
        """Expand a model's members (paths start with ``prefix``); return its outputs per call.

        ``feeds[i][j]`` lists the nodes feeding input j during call i of the model.
        """
        if _is_functional(cfg):
            return _Functional(self, cfg, prefix, calls).expand(feeds)
        return self.add_sequential(cfg, prefix, calls, feeds)

    def add_sequential(self, cfg: Mapping[str, Any], prefix: str, calls: int, feeds: Feeds) -> Outs:
        members = cfg["config"]["layers"]
        prev = [[n for group in feeds[i] for n in group] for i in range(calls)]
        skip = 1 if members and members[0].get("class_name") == "InputLayer" else 0
        last: str | None = None
        for pos, member in enumerate(members):
            path = prefix + _layer_name(member)
            listed = pos >= skip
            index, inbound = (pos - skip if listed else pos), ((last,) if last else ())
            self.entry(member, prefix, index=index, inbound=inbound, num_calls=calls, listed=listed)
            if _is_container(member):
                outs = self.add_model(member, path + "/", calls, [[p] for p in prev])
                prev = [[self.node((path, i), outs[i])] for i in range(calls)]
            else:
                prev = [[self.node((path, i), prev[i])] for i in range(calls)]
            last = path
        return prev


class _Functional:
    """Expansion of one Functional config (its own scope of layer names)."""

    def __init__(self, b: _Builder, cfg: Mapping[str, Any], prefix: str, calls: int) -> None:
        self.b, self.prefix, self.calls = b, prefix, calls
        self.inner = cfg["config"]
        self.by_name = {_layer_name(m): m for m in self.inner["layers"]}
        self.outs: dict[NodeId, list[NodeId]] = {}  # nested-model call -> its inner outputs
        self.nested: dict[str, list[list[NodeId]]] = {}  # nested model -> outputs per call

    def n_own(self, name: str) -> int:
        member = self.by_name.get(name, {})
        return max(len(member.get("inbound_nodes") or []), 1)

    def expand(self, feeds: Feeds) -> Outs:
        input_refs = _structure_refs(self.inner.get("input_layers"))
        listed = 0
        for pos, member in enumerate(self.inner["layers"]):
            name = _layer_name(member)
            is_listed = not _is_operation(member)
            index, calls = (listed if is_listed else pos), self.calls * self.n_own(name)
            kw = {"inbound": self.inbound(member), "num_calls": calls, "listed": is_listed}
            self.b.entry(member, self.prefix, index=index, **kw)
            listed += is_listed
            for i in range(self.calls):
                self.add_calls(member, i, input_refs, feeds[i])
        return [
            [
                self.resolve(ref, i, boundary=True)
                for ref in _structure_refs(self.inner.get("output_layers"))
            ]
            for i in range(self.calls)
        ]

    def inbound(self, member: Mapping[str, Any]) -> tuple[str, ...]:
        out: list[str] = []
        for node in member.get("inbound_nodes") or []:
            for ref in _refs(node, isinstance(node, list)):
                path = self.prefix + ref[0]
                if ref[0] in self.by_name and path not in out:
                    out.append(path)
        return tuple(out)

    def add_calls(
        self,
        member: Mapping[str, Any],
        i: int,
        input_refs: list[Ref],
        feeds: Sequence[Sequence[NodeId]],
    ) -> None:
        name = _layer_name(member)
        path = self.prefix + name
        nodes = member.get("inbound_nodes") or []
        if not nodes:  # an input layer: fed by what feeds this model
            positions = [p for p, ref in enumerate(input_refs) if ref[0] == name]
            fed = [n for p in positions if p < len(feeds) for n in feeds[p]]
            self.b.node((path, i), fed)
            return
        for k, node in enumerate(nodes):
            g = i * len(nodes) + k
            if _is_container(member):
                if g == 0:
                    total = self.calls * len(nodes)
                    per_call = [self.call_feeds(member, c) for c in range(total)]
                    self.nested[path] = self.b.add_model(member, path + "/", total, per_call)
                self.outs[(path, g)] = self.nested[path][g]
                self.b.node((path, g), self.nested[path][g])
            else:
                legacy = isinstance(node, list)
                self.b.node((path, g), [self.resolve(r, i, legacy) for r in _refs(node, legacy)])

    def call_feeds(self, member: Mapping[str, Any], g: int) -> list[list[NodeId]]:
        """The nodes feeding each input of nested model ``member`` during its call ``g``."""
        nodes = member["inbound_nodes"]
        i, k = divmod(g, len(nodes))
        node = nodes[k]
        legacy = isinstance(node, list)
        srcs = [self.resolve(r, i, legacy) for r in _refs(node, legacy)]
        if not _is_functional(member):
            return [srcs]
        inputs = member["config"].get("input_layers")
        n_inputs = len(_structure_refs(inputs))
        args = node.get("args") if isinstance(node, Mapping) else None
        first = args[0] if isinstance(args, list) and args else None
        if isinstance(first, Mapping) and isinstance(inputs, Mapping):
            keyed = [[self.resolve(r, i) for r in _refs(first.get(k), False)] for k in inputs]
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
        n = self.n_own(name)
        shifted = legacy or (boundary and (_is_functional(member) or node_index >= n))
        if _is_container(member) and node_index > 0 and shifted:
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
