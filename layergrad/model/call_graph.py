"""Expand a model config into call nodes: one node per call of each layer in one run.

Node ``(path, k)`` is call k of the layer at ``path``. A nested model is transparent: its
inputs are fed by what feeds it and its consumers read its inner outputs. Called n times,
it runs its inner layers n times: inner call ``i * m + k`` is call k (of m) during its call
i. A reference to a nested model counts its calls from 0 in Keras 3 inbound nodes but from 1
in a Functional parent's ``input_layers``/``output_layers`` when the nested model is
Functional, and from 1 everywhere in Keras 2 files.

The expansion is as large as the number of calls, which nested models multiply; the caller
(`ModelGraph`) checks that number against a budget first.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from layergrad.core import json_types as js
from layergrad.model.config import (
    Ref,
    is_container,
    is_functional,
    layer_name,
    structure_refs,
    tensor_refs,
)

NodeId = tuple[str, int]
Feeds = Sequence[Sequence[Sequence[NodeId]]]  # per call, per input: the feeding nodes
Outs = list[list[NodeId]]  # per call: the output nodes


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
            self.preds[node] = []
        known = set(self.preds[node])
        for p in preds:
            if p not in known:
                known.add(p)
                self.preds[node].append(p)
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
        members = js.members(js.member(cfg, "config")["layers"], "layers")
        prev = [[n for group in feeds[i] for n in group] for i in range(calls)]
        for member in members:
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
        self.inner = js.member(cfg, "config")
        self.by_name = {layer_name(m): m for m in js.members(self.inner["layers"], "layers")}
        self.outs: dict[NodeId, list[NodeId]] = {}  # nested-model call -> its inner outputs
        self.nested: dict[str, list[list[NodeId]]] = {}  # nested model -> outputs per call

    def n_own(self, name: str) -> int:
        member = self.by_name.get(name, {})
        return max(len(js.listed(member.get("inbound_nodes") or [], "inbound_nodes")), 1)

    def expand(self, feeds: Feeds) -> Outs:
        input_refs = structure_refs(self.inner.get("input_layers"))
        for member in js.members(self.inner["layers"], "layers"):
            for i in range(self.calls):
                self.add_calls(member, i, input_refs, feeds[i])
        return [
            [
                self.resolve(ref, i, boundary=True)
                for ref in structure_refs(self.inner.get("output_layers"))
            ]
            for i in range(self.calls)
        ]

    def add_calls(
        self,
        member: Mapping[str, object],
        i: int,
        input_refs: list[Ref],
        feeds: Sequence[Sequence[NodeId]],
    ) -> None:
        name = layer_name(member)
        path = self.prefix + name
        nodes = js.listed(member.get("inbound_nodes") or [], "inbound_nodes")
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
                self.b.node(
                    (path, g), [self.resolve(r, i, legacy) for r in tensor_refs(node, legacy)]
                )

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
        n = self.n_own(name)
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
