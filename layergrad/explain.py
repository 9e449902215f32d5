"""Find where a gradient is lost, zeroed or broken, and why, from a full-model trace.

One extra forward and backward pass (`probe.run_trace`) watches every layer call. Walking the
layers on the path from `--from` to `--to`, the gradient is good at `--to` and bad at
`--from`; the layer whose output gradient is good while the gradients of all (for none and
zero) or any (for non-finite) of its inputs are bad is where it went wrong. That layer's ops,
activation values and dtype say why.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from layergrad.diagnose import integer_cause
from layergrad.graph import ModelGraph
from layergrad.inputs import ProbeBatch
from layergrad.layer_refs import Site, iter_layers
from layergrad.probe import Activation, Trace, run_probe, run_trace
from layergrad.results import Cause
from layergrad.tf_ops import blocking_ops, layer_op_types, unsafe_backward_ops

Key = tuple[str, int]
SATURATION_EPS = 1e-6


class Explainer:
    """Dynamic causes for non-ok results of one model and probe batch (traces are cached)."""

    def __init__(
        self, model: Any, batch: ProbeBatch, graph: ModelGraph | None, training: bool, reduce: str
    ) -> None:
        self.model, self.batch, self.graph = model, batch, graph
        self.training, self.reduce = training, reduce
        self.layers = dict(iter_layers(model))
        self._traces: dict[Key, Trace] = {}
        self._ops_cache: dict[Key, list[tuple[str, Any]] | None] = {}

    def adopt(self, target: Site, trace: Trace) -> None:
        """Use an existing trace for `target` (scan has one already) instead of running one."""
        self._traces[_key(target)] = trace

    def causes(self, status: str, source: Activation, target: Activation) -> list[Cause]:
        """Ranked causes for a `none`, `zero` or `nonfinite` gradient of target wrt source."""
        trace = self._trace(target.site)
        path = _PathView(trace, self.graph, _key(source.site), _key(target.site))
        other = self._other_output(trace, source, target)
        if other:
            return [other]
        forward = self._nonfinite_forward(trace, path)
        if status == "nonfinite" or (forward and status == "zero"):
            return forward or self._nonfinite_backward(trace, path)
        if status == "none":
            return self._none(trace, path)
        return self._zero(trace, path, source, target)

    def _other_output(self, trace: Trace, source: Activation, target: Activation) -> Cause | None:
        """The target depends on another output of a multi-output source (LSTM states...)."""
        i = trace.index(*_key(source.site))
        if i is None or trace.gradients[i] is None or trace.activations[i].output == source.output:
            return None
        k, src, dst = trace.activations[i].output, source.site.ref, target.site.ref
        return Cause(
            "not_downstream",
            src,
            f"{dst!r} depends on output {k} of {src!r}, not on output {source.output}, the one "
            "layergrad probes for a layer with several outputs",
            f"take --from the layer that consumes output {k} of {src!r}",
        )

    def _trace(self, site: Site) -> Trace:
        key = _key(site)
        if key not in self._traces:
            self._traces[key] = run_trace(
                self.model, self.batch, site, training=self.training, reduce=self.reduce
            )
        return self._traces[key]

    # --- none ---------------------------------------------------------------------------
    def _none(self, trace: Trace, path: _PathView) -> list[Cause]:
        causes = []
        for key in path.nodes:
            act = path.activation(key)
            if act is not None and not act.is_float:
                causes.append(integer_cause(act))
                break
        for key in path.blockers(lambda g: g is None, need_all=True):
            causes.extend(self._blocked_at(trace, path, key))
        return causes

    def _blocked_at(self, trace: Trace, path: _PathView, key: Key) -> list[Cause]:
        ref = _ref(key)
        ops = self._ops(trace, key)
        findings = blocking_ops(ops or [])
        if any(f.op == "StopGradient" for f in findings):
            return [
                Cause(
                    "stop_gradient",
                    ref,
                    f"the gradient reaches the output of {ref!r} but not its input: "
                    "it calls tf.stop_gradient",
                    f"remove tf.stop_gradient from {ref!r} if the gradient should flow, or take "
                    "--from after it",
                    op="StopGradient",
                )
            ]
        causes = [
            Cause(
                "non_differentiable_op",
                ref,
                f"the gradient reaches the output of {ref!r} but not its input: {f.reason}",
                "replace the op with a differentiable relaxation (softmax instead of argmax, "
                "x + tf.stop_gradient(tf.round(x) - x) as a straight-through round), or take "
                f"--from after {ref!r}",
                op=f.op,
            )
            for f in findings[:1]
        ]
        if any(f.op.startswith("Cast to") or f.op in ("ArgMax", "ArgMin") for f in findings):
            causes.append(
                Cause(
                    "integer_path",
                    ref,
                    f"{ref!r} turns its input into integers inside the layer",
                    "keep the values floating-point on the path you differentiate",
                )
            )
        if not causes:
            listed = ", ".join(sorted({t for t, _ in ops or []})) or "could not be traced"
            causes.append(
                Cause(
                    "unknown",
                    ref,
                    f"the gradient reaches the output of {ref!r} but not its input; its ops "
                    f"({listed}) include no known blocker",
                    f"read the call() of {ref!r} for numpy calls, casts or tf.stop_gradient",
                )
            )
        return causes

    # --- zero ---------------------------------------------------------------------------
    def _zero(
        self, trace: Trace, path: _PathView, source: Activation, target: Activation
    ) -> list[Cause]:
        causes: list[Cause] = []
        if self.training and self._ok_in_inference(source.site, target.site):
            causes.append(
                Cause(
                    "training_mode",
                    _first_of(path, self.layers, ("BatchNormalization", "Dropout")),
                    "the gradient is zero with --training and non-zero in inference: batch "
                    "statistics (BatchNormalization) or dropout change the function",
                    "probe in inference mode (drop --training), or differentiate a target that "
                    "is not a batch sum of batch-normalised values",
                )
            )
        for key in path.blockers(lambda g: g is None or not np.any(g), need_all=True):
            causes.extend(self._zeroed_at(path, key))
        return causes

    def _ok_in_inference(self, source: Site, target: Site) -> bool:
        run = run_probe(self.model, self.batch, [source], [target], reduce=self.reduce)
        grad = run.gradients[0][0]
        return grad is not None and bool(np.any(grad)) and bool(np.all(np.isfinite(grad)))

    def _zeroed_at(self, path: _PathView, key: Key) -> list[Cause]:
        ref, layer, act = _ref(key), self.layers.get(key[0]), path.activation(key)
        kind = activation_name(layer)
        causes = []
        if act is not None and "float16" in {act.dtype, *(p.dtype for p in path.inputs_of(key))}:
            causes.append(
                Cause(
                    "float16_underflow",
                    ref,
                    f"{ref!r} computes in float16 and the gradient below it is smaller than "
                    "float16 can hold (about 6e-8), so it rounds to 0",
                    "use loss scaling (keras.optimizers.LossScaleOptimizer) or a float32 policy "
                    f"for {ref!r}",
                )
            )
        dead = _dead_fraction(act.value) if act is not None and kind == "relu" else 0.0
        if dead > 0:
            causes.append(
                Cause(
                    "dead_relu",
                    ref,
                    f"{dead:.0%} of the ReLU units of {ref!r} output 0 for every sample in the "
                    "batch, so no gradient passes them",
                    "check the bias and initialisation of the layer before it, lower the "
                    "learning rate, or use LeakyReLU / GELU",
                )
            )
        if act is not None and kind in ("sigmoid", "tanh", "softmax"):
            pinned = _saturated_fraction(act.value, kind)
            causes.append(
                Cause(
                    "saturated",
                    ref,
                    f"{pinned:.0%} of the {kind} outputs of {ref!r} are pinned at their bounds, "
                    "where the derivative is 0",
                    "normalise the inputs of this layer (BatchNormalization / LayerNormalization) "
                    "or scale down its weights",
                )
            )
        return causes

    # --- nonfinite ----------------------------------------------------------------------
    def _nonfinite_forward(self, trace: Trace, path: _PathView) -> list[Cause]:
        """The first activation the target depends on whose forward value is NaN/Inf."""
        for act in trace.activations:
            if not path.feeds_target(_key(act.site)):
                continue
            if act.is_float and not np.all(np.isfinite(act.value)):
                ref = _ref(_key(act.site))
                bad = int(act.value.size - np.count_nonzero(np.isfinite(act.value)))
                return [
                    Cause(
                        "nonfinite_forward",
                        ref,
                        f"the forward pass is already non-finite at {ref!r} ({bad} of "
                        f"{act.value.size} values NaN/Inf), the first layer where it appears",
                        f"check the weights of {ref!r} (`layergrad layers MODEL` shows weight "
                        "health) and the probe input",
                    )
                ]
        return []

    def _nonfinite_backward(self, trace: Trace, path: _PathView) -> list[Cause]:
        causes = []
        for key in path.blockers(lambda g: g is not None and not np.all(np.isfinite(g))):
            ops = self._ops(trace, key)
            findings = unsafe_backward_ops(ops or [])
            reason = findings[0].reason if findings else "its backward pass produced NaN/Inf"
            causes.append(
                Cause(
                    "nonfinite_backward",
                    _ref(key),
                    f"the forward pass is finite, but the gradient turns NaN/Inf going back "
                    f"through {_ref(key)!r}: {reason}",
                    "add a small epsilon inside the op (tf.sqrt(x + 1e-12), tf.math.log(x + "
                    "eps)) or use a safe form (tf.math.divide_no_nan)",
                    op=findings[0].op if findings else None,
                )
            )
        return causes

    def _ops(self, trace: Trace, key: Key) -> list[tuple[str, Any]] | None:
        if key not in self._ops_cache:
            layer, i = self.layers.get(key[0]), trace.index(*key)
            inputs = None if i is None else trace.inputs[i]
            self._ops_cache[key] = (
                None
                if layer is None or inputs is None
                else layer_op_types(layer, inputs[0], inputs[1], self.training)
            )
        return self._ops_cache[key]


class _PathView:
    """The calls between source and target in a trace, with their graph predecessors."""

    def __init__(self, trace: Trace, graph: ModelGraph | None, source: Key, target: Key) -> None:
        self.trace, self.graph, self.source, self.target = trace, graph, source, target
        self.index = {_key(a.site): i for i, a in enumerate(trace.activations)}
        self.nodes = self._nodes()

    def _nodes(self) -> list[Key]:
        """Calls on some chain from source to target (target included), in execution order."""
        if self.graph is None or not self.graph.known or not self.graph.preds:
            lo, hi = self.index.get(self.source), self.index.get(self.target)
            if lo is None or hi is None:
                return []
            return [_key(a.site) for a in self.trace.activations[lo + 1 : hi + 1]]
        ancestors = _closure([self.target], lambda n: self.graph.preds.get(n, ()))  # type: ignore[union-attr]
        reached: set[Key] = {self.source}
        for node in self.graph.order:
            if any(p in reached for p in self.graph.preds.get(node, ())):
                reached.add(node)
        on_path = (ancestors | {self.target}) & (reached - {self.source})
        return sorted((n for n in on_path if n in self.index), key=self.index.__getitem__)

    def feeds_target(self, key: Key) -> bool:
        """Whether the target depends on the call `key` (or is it); by order without a graph."""
        i, t = self.index.get(key), self.index.get(self.target)
        if i is None or t is None or i > t:
            return False
        if key == self.target or self.graph is None or not self.graph.known:
            return True
        depends = self.graph.depends(self.target[0], key[0], self.target[1], key[1])
        return depends is not False

    def activation(self, key: Key) -> Activation | None:
        i = self.index.get(key)
        return None if i is None else self.trace.activations[i]

    def preds(self, key: Key) -> list[Key]:
        """Captured calls (or the source) feeding `key`, looking through uncaptured graph nodes."""
        if self.graph is None or not self.graph.preds:
            pos = self.nodes.index(key) if key in self.nodes else 0
            return [self.nodes[pos - 1]] if pos > 0 else [self.source]
        found, stack, seen = [], list(self.graph.preds.get(key, ())), set()
        while stack:
            node = stack.pop()
            if node in seen:
                continue
            seen.add(node)
            if node == self.source or node in self.nodes:
                found.append(node)
            elif node not in self.index:
                stack.extend(self.graph.preds.get(node, ()))
        return found

    def inputs_of(self, key: Key) -> list[Activation]:
        return [a for p in self.preds(key) if (a := self.activation(p)) is not None]

    def blockers(
        self, bad: Callable[[np.ndarray | None], bool], need_all: bool = False
    ) -> list[Key]:
        """Calls whose output gradient is good while all (or any) of their inputs' are bad."""
        out = []
        for key in self.nodes:
            i = self.index[key]
            preds = self.preds(key)
            if bad(self.trace.gradients[i]) or not preds:
                continue
            flags = [bad(self._grad(p)) for p in preds]
            if all(flags) if need_all else any(flags):
                out.append(key)
        return out

    def _grad(self, key: Key) -> np.ndarray | None:
        i = self.index.get(key)
        return None if i is None else self.trace.gradients[i]


def _closure(start: Iterable[Key], step: Callable[[Key], Sequence[Key]]) -> set[Key]:
    seen: set[Key] = set()
    stack = [p for s in start for p in step(s)]
    while stack:
        node = stack.pop()
        if node not in seen:
            seen.add(node)
            stack.extend(step(node))
    return seen


def _key(site: Site) -> Key:
    return (site.path, site.call)


def _ref(key: Key) -> str:
    return f"{key[0]}@{key[1]}" if key[1] else key[0]


def activation_name(layer: Any) -> str | None:
    """'relu', 'sigmoid', 'tanh', 'softmax' for layers that apply one, else None."""
    if layer is None:
        return None
    class_name = type(layer).__name__
    if class_name in ("ReLU", "Softmax"):
        return class_name.lower()
    fn = getattr(layer, "activation", None)
    name = getattr(fn, "__name__", None)
    return name if name in ("relu", "sigmoid", "tanh", "softmax") else None


def _dead_fraction(value: np.ndarray) -> float:
    units = value.reshape(-1, value.shape[-1]) if value.ndim else value.reshape(1, 1)
    return float(np.mean(np.all(units == 0, axis=0)))


def _saturated_fraction(value: np.ndarray, kind: str) -> float:
    if kind == "sigmoid":
        pinned = (value <= SATURATION_EPS) | (value >= 1 - SATURATION_EPS)
    elif kind == "tanh":
        pinned = np.abs(value) >= 1 - SATURATION_EPS
    else:
        pinned = np.max(value, axis=-1) >= 1 - SATURATION_EPS
    return float(np.mean(pinned))


def _first_of(path: _PathView, layers: dict[str, Any], classes: Sequence[str]) -> str | None:
    for key in path.nodes:
        if type(layers.get(key[0])).__name__ in classes:
            return _ref(key)
    return None
