"""Where a gradient is lost, zeroed or broken: the calls between two layers in a full trace.

A trace (`trace.run_trace`) holds every layer call's activation and the gradient of the target
with respect to it. Walking the calls on the path from the source to the target, the gradient
is good at the target and bad at the source; a call whose output gradient is good while the
gradients of all (for none and zero) or any (for non-finite) of its inputs are bad is where it
went wrong. *What* to call it is `diagnoser.py`'s job.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

from layergrad.engine.layer_calls import Activation
from layergrad.engine.trace import Trace
from layergrad.model.graph import ModelGraph
from layergrad.model.layer_refs import CallKey

BadGradient = Callable[[np.ndarray | None], bool]


class PathView:
    """The calls between a source and a target in a trace, with their graph predecessors."""

    def __init__(
        self, trace: Trace, graph: ModelGraph | None, source: CallKey, target: CallKey
    ) -> None:
        self.trace, self.graph, self.source, self.target = trace, graph, source, target
        self.index = {a.site.key: i for i, a in enumerate(trace.activations)}
        self.nodes = self._nodes()

    def _nodes(self) -> list[CallKey]:
        """Calls on some chain from source to target (target included), in execution order."""
        graph = self.graph
        if graph is None or not graph.known or not graph.preds:
            lo, hi = self.index.get(self.source), self.index.get(self.target)
            if lo is None or hi is None:
                return []
            return [a.site.key for a in self.trace.activations[lo + 1 : hi + 1]]
        on_path = (graph.ancestors(self.target) | {self.target}) & graph.descendants({self.source})
        return sorted((n for n in on_path if n in self.index), key=self.index.__getitem__)

    def feeds_target(self, key: CallKey) -> bool:
        """Whether the target depends on the call `key` (or is it); by order without a graph."""
        i, t = self.index.get(key), self.index.get(self.target)
        if i is None or t is None or i > t:
            return False
        if key == self.target or self.graph is None or not self.graph.known:
            return True
        depends = self.graph.depends(self.target[0], key[0], self.target[1], key[1])
        return depends is not False

    def activation(self, key: CallKey) -> Activation | None:
        i = self.index.get(key)
        return None if i is None else self.trace.activations[i]

    def preds(self, key: CallKey) -> list[CallKey]:
        """Captured calls (or the source) feeding `key`, looking through uncaptured graph nodes."""
        graph = self.graph
        if graph is None or not graph.preds:
            pos = self.nodes.index(key) if key in self.nodes else 0
            return [self.nodes[pos - 1]] if pos > 0 else [self.source]
        on_path = {self.source, *self.nodes}
        return nearest_preds(graph, key, on_path.__contains__, lambda n: n not in self.index)

    def inputs_of(self, key: CallKey) -> list[Activation]:
        """The captured activations feeding `key`."""
        return [a for p in self.preds(key) if (a := self.activation(p)) is not None]

    def blockers(self, bad: BadGradient, need_all: bool = False) -> list[CallKey]:
        """Calls whose output gradient is good while all (or any) of their inputs' are bad.

        Only inputs on the path from the source count: a layer that also reads another branch
        (with a good gradient) still blocks the source's.
        """
        out = []
        for key in self.nodes:
            preds = [p for p in self.preds(key) if p == self.source or p in self.nodes]
            if bad(self.gradient(key)) or not preds:
                continue
            flags = [bad(self.gradient(p)) for p in preds]
            if all(flags) if need_all else any(flags):
                out.append(key)
        return out

    def gradient(self, key: CallKey) -> np.ndarray | None:
        """d target / d the activation of `key` (None when it has none or was not captured)."""
        i = self.index.get(key)
        return None if i is None else self.trace.gradients[i]

    def first_nonfinite_forward(self) -> Activation | None:
        """The first activation the target depends on whose forward value is NaN / Inf."""
        bad = (a for a in self.trace.activations if a.is_float and not finite(a.value))
        return next((a for a in bad if self.feeds_target(a.site.key)), None)


def finite(value: np.ndarray) -> bool:
    """Whether every value of an array is finite."""
    return bool(np.all(np.isfinite(value)))


def nearest_preds(
    graph: ModelGraph,
    key: CallKey,
    stop: Callable[[CallKey], bool],
    through: Callable[[CallKey], bool] | None = None,
) -> list[CallKey]:
    """The graph predecessors of `key` where `stop` holds, walking on through the nodes where
    `through` holds (by default every node where `stop` does not)."""
    found, stack, seen = [], list(graph.preds.get(key, ())), set()
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        if stop(node):
            found.append(node)
        elif through is None or through(node):
            stack.extend(graph.preds.get(node, ()))
    return found


def trunk(graph: ModelGraph | None, ends: Iterable[CallKey]) -> set[CallKey] | None:
    """The calls every path from the model's inputs to `ends` passes through.

    In a residual network these are the stream between blocks, not the layers inside a block:
    a block's branch may carry a tiny gradient by design (LayerScale, zero-initialised last
    BatchNormalization) while the skip carries the rest. None when the graph is unknown.
    Paths are counted exactly (Python integers), in one pass each way: linear in the graph.
    """
    if graph is None or not graph.known or not graph.preds:
        return None
    ends = set(ends)
    into: dict[CallKey, int] = {}
    succ: dict[CallKey, list[CallKey]] = {}
    for node in graph.order:
        preds = graph.preds.get(node, ())
        into[node] = sum(into.get(p, 0) for p in preds) if preds else 1
        for p in preds:
            succ.setdefault(p, []).append(node)
    out: dict[CallKey, int] = {}
    for node in reversed(graph.order):
        out[node] = int(node in ends) + sum(out.get(s, 0) for s in succ.get(node, ()))
    total = sum(into.get(e, 0) for e in ends)
    return {n for n in graph.order if total and into[n] * out[n] == total}


def sinks(graph: ModelGraph | None) -> list[CallKey]:
    """The calls nothing reads: the model's outputs (and dead ends), from the graph."""
    if graph is None or not graph.known:
        return []
    read = {p for preds in graph.preds.values() for p in preds}
    return [n for n in graph.order if n not in read]
