"""Classify each gradient (ok / none / zero / nonfinite) and name its likely causes.

The graph in the file says whether the target depends on the source at all. When it does and
the gradient is still not ok, one more traced pass (`trace.run_trace`) finds *where* it went
wrong (`locate.PathView`); the ops, activation values and dtype of that layer say *what* it is
(`causes.py` puts it into words). The extra pass runs only for non-ok results.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from layergrad.core.gradient_stats import dead_fraction, status_of
from layergrad.core.results import ConstantOutput, Reason
from layergrad.core.tf_types import KerasLayer, KerasModel
from layergrad.core.vocab import Finding, Status
from layergrad.data.probe_input import ProbeBatch
from layergrad.diagnose import causes as why
from layergrad.diagnose.activations import activation_name, saturated_fraction
from layergrad.diagnose.forward_findings import is_constant, reason, unscaled_input
from layergrad.diagnose.locate import PathView
from layergrad.engine.layer_calls import Activation
from layergrad.engine.tf_ops import (
    OpFinding,
    TracedCall,
    blocking_ops,
    trace_call,
    trace_operation,
    unsafe_backward_ops,
)
from layergrad.engine.trace import Trace, run_probe, run_trace
from layergrad.model.graph import ModelGraph
from layergrad.model.layer_refs import (
    LOGITS,
    CallKey,
    Site,
    has_fused_activation,
    iter_layers,
    ref_of,
    resolve,
)

VANISHING_GAIN, EXPLODING_GAIN, MOSTLY_ZERO = 1e-7, 1e6, 0.5
F16_TINY = 2.0**-14  # float16's smallest normal value: below it, float16 loses the gradient
DEAD_MARK = " (dead)"  # how a warning says that most units of the `from` layer are dead
ZERO_SHARE = " is exactly zero"  # how the warning for a gradient mostly exactly zero reads
_MODAL = ("BatchNormalization", "Dropout")  # layers that act otherwise in training mode


class Diagnoser:
    """Causes for non-ok gradients of one model and probe batch (traces are cached)."""

    def __init__(
        self,
        model: KerasModel,
        batch: ProbeBatch,
        graph: ModelGraph | None,
        training: bool,
        reduce: str,
    ) -> None:
        self.model, self.batch, self.graph = model, batch, graph
        self.training, self.reduce = training, reduce
        self.layers = dict(iter_layers(model))
        self._traces: dict[CallKey, Trace] = {}
        self._calls: dict[CallKey, TracedCall | None] = {}  # layer calls and operations

    def adopt(self, target: Site, trace: Trace) -> None:
        """Use an existing trace for `target` (scan has one already) instead of running one."""
        self._traces[target.key] = trace

    def causes(self, status: str, source: Activation, target: Activation) -> list[Reason]:
        """Ranked causes for a `none`, `zero` or `nonfinite` gradient of target wrt source."""
        trace = self._trace(target.site)
        path = PathView(trace, self.graph, source.site.key, target.site.key)
        other = _other_output(trace, source, target)
        if other:
            return [other]
        forward = path.first_nonfinite_forward()
        if status == Status.NONFINITE or (forward and status == Status.ZERO):
            if forward is not None:
                bad = int(forward.value.size - np.count_nonzero(np.isfinite(forward.value)))
                size = forward.value.size
                data = forward.site.input_index is not None  # the batch, before any layer
                rule = "nonfinite_input" if data else "nonfinite_forward"
                return [why.cause(rule, forward.site.ref, bad=bad, size=size)]
            return self._nonfinite_backward(trace, path)
        if status == Status.NONE:
            return self._none(trace, path)
        return self._zero(path, source, target)

    def _trace(self, site: Site) -> Trace:
        if site.key not in self._traces:
            self._traces[site.key] = run_trace(
                self.model, self.batch, site, training=self.training, reduce=self.reduce
            )
        return self._traces[site.key]

    def _none(self, trace: Trace, path: PathView) -> list[Reason]:
        acts = [path.activation(key) for key in path.nodes]
        causes = [_integer_path(a) for a in acts if a is not None and not a.is_float][:1]
        for key in path.blockers(lambda g: g is None, need_all=True):
            inputs = path.inputs_of(key)
            if inputs and not any(a.is_float for a in inputs):
                # integer inputs (ids into an Embedding) have no gradient: the integer path is
                # the cause, not the layer's own index ops (a comparison, a gather)
                causes.append(_integer_path(inputs[0]))
                continue
            causes.extend(self._blocked_at(trace, path, key))
        return causes

    def _blocked_at(self, trace: Trace, path: PathView, key: CallKey) -> list[Reason]:
        ref = ref_of(key)
        traced = self._traced(trace, key)
        unused = _unused_from_source(trace, path, key, traced)
        if unused is not None:
            return [unused]
        ops = traced.ops if traced else None
        findings = blocking_ops(ops or [])
        if any(f.op == "StopGradient" for f in findings):
            return [why.cause("stop_gradient", ref)]
        causes = [why.cause("non_differentiable_op", ref, why=f.reason, op=f.op)
                  for f in findings[:1]]  # fmt: skip
        if any(f.op.startswith("Cast to") or f.op in ("ArgMax", "ArgMin") for f in findings):
            causes.append(why.cause("integer_inside", ref))
        if not causes:
            before = self._operations_before(key, path.source)
            if before:
                name, found = before[0]
                return [why.cause("non_differentiable_op/operation", ref, operation=name,
                                  why=found.reason, op=found.op)]  # fmt: skip
            types = ", ".join(sorted({t for t, _ in ops or []})) or "could not be traced"
            causes.append(why.cause("unknown_at", ref, ops=types))
        return causes

    def output_blocker(self, source: CallKey) -> Reason | None:
        """Why no output gets a gradient from `source`, when a functional operation at the
        model's end (`keras.ops.round(head)` as its output) stops it; None otherwise."""
        graph = self.graph
        if graph is None or not graph.known:
            return None
        reached = graph.descendants({source})
        fed = {p for preds in graph.preds.values() for p in preds}
        for end in (n for n in graph.order if n in reached and n not in fed):
            found = self._operations_before(end, source, including=True)
            if found:
                name, op = found[0]
                return why.cause("non_differentiable_op/output", None, operation=name,
                                 why=op.reason, op=op.op)  # fmt: skip
        return None

    def _operations_before(
        self, key: CallKey, source: CallKey, including: bool = False
    ) -> list[tuple[str, OpFinding]]:
        """The blocking ops of the functional operations (`keras.ops` calls between layers,
        which no layer's `call` holds) that feed the call `key` (`including` it) on a path
        from `source`, nearest first, each with the operation's name (through a nested
        model's input)."""
        graph = self.graph
        found: list[tuple[str, OpFinding]] = []
        if graph is None or not graph.known:
            return found
        reached = graph.descendants({source})
        queue, seen = [key] if including else list(graph.preds.get(key, ())), set()
        while queue:
            node = queue.pop(0)
            entry = graph.get(node[0])
            if node in seen or node not in reached or entry is None:
                continue  # off the path from the source
            seen.add(node)
            if entry.class_name == "InputLayer":  # a nested model's input: go on past it
                queue += graph.preds.get(node, ())
                continue
            if entry.listed:
                continue  # a layer: the operations between end there
            if node not in self._calls:  # traced once, whichever row asks (scan: every row)
                parent = self.model if entry.parent is None else self.layers.get(entry.parent)
                operations = getattr(parent, "operations", None) or []
                operation = next((o for o in operations if o.name == entry.name), None)
                self._calls[node] = (
                    None if operation is None else trace_operation(operation, node[1])
                )
            traced = self._calls[node]
            found += [(entry.name, f) for f in blocking_ops(traced.ops if traced else [])]
            queue += graph.preds.get(node, ())
        return found

    def _zero(self, path: PathView, source: Activation, target: Activation) -> list[Reason]:
        causes: list[Reason] = []
        if self.training and self._ok_in_inference(source.site, target.site):
            modal = [k for k in path.nodes if type(self.layers.get(k[0])).__name__ in _MODAL]
            causes.append(why.cause("training_mode", ref_of(modal[0]) if modal else None))
        for key in path.blockers(lambda g: g is None or not np.any(g), need_all=True):
            causes.extend(self._zeroed_at(path, key))
        return causes

    def _ok_in_inference(self, source: Site, target: Site) -> bool:
        # sites from a trace name their calls without the layer object run_probe wraps
        src, dst = (resolve(self.model, s.ref) if s.layer is None else s for s in (source, target))
        run = run_probe(self.model, self.batch, [src], [dst], reduce=self.reduce)
        return status_of(run.gradients[0][0]) == Status.OK

    def _zeroed_at(self, path: PathView, key: CallKey) -> list[Reason]:
        """Why the gradient is zero below `key`: float16, dead or saturated units, a constant."""
        ref, act = ref_of(key), path.activation(key)
        if act is None:
            return []
        why_constant = reason(act, self.layers) if is_constant(act) else None
        if why_constant == "softmax_one_unit":  # not saturation: the function is constant
            return [why.constant_output(ConstantOutput(ref, ref, why_constant))]
        causes = []
        if "float16" in {act.dtype, *(p.dtype for p in path.inputs_of(key))}:
            causes.append(why.cause("float16_underflow", ref))
        kind = activation_name(self.layers.get(key[0]))
        pinned = 0.0
        if kind == "relu":
            pinned = dead_fraction(act.value)
            causes += [why.cause("dead_relu", ref, fraction=pinned)] if pinned else []
        elif kind is not None:
            pinned = saturated_fraction(act.value, kind)
            causes += [why.cause("saturated", ref, kind=kind, fraction=pinned)] if pinned else []
        if why_constant is not None:
            causes.append(why.constant_output(ConstantOutput(ref, ref, why_constant)))
        scale = unscaled_input(path.trace, self.graph, self.layers, False) if pinned else None
        if scale is not None:  # the units are pinned because the inputs are not scaled
            causes.insert(0, why.input_range(scale))
        return causes

    def _nonfinite_backward(self, trace: Trace, path: PathView) -> list[Reason]:
        out = []
        for key in path.blockers(lambda g: g is not None and not np.all(np.isfinite(g))):
            traced = self._traced(trace, key)
            found = [*unsafe_backward_ops(traced.ops if traced else []), None][0]
            said = found.reason if found else "its backward pass produced NaN/Inf"
            op = found.op if found else None
            out.append(why.cause("nonfinite_backward", ref_of(key), why=said, op=op))
        return out

    def _traced(self, trace: Trace, key: CallKey) -> TracedCall | None:
        """The ops of one call of a layer, traced on arguments shaped like that call's."""
        if key not in self._calls:
            layer, i = self.layers.get(key[0]), trace.index(*key)
            args = None if i is None or i >= len(trace.args) else trace.args[i]
            self._calls[key] = None if layer is None else trace_call(layer, args, self.training)
        return self._calls[key]


def _unused_from_source(
    trace: Trace, path: PathView, key: CallKey, traced: TracedCall | None
) -> Reason | None:
    """`unused_input` when the input of `key` that comes from the source is never used."""
    i = trace.index(*key)
    if traced is None or not traced.unused or i is None or i >= len(trace.arg_sources):
        return None
    sources = trace.arg_sources[i]
    on_path = {path.index[n] for n in (path.source, *path.nodes) if n in path.index}
    for position in traced.unused:
        feeding = sources[position] if position < len(sources) else None
        if feeding is not None and feeding in on_path:
            name = trace.activations[feeding].site.ref
            return why.cause("unused_input", ref_of(key), position=position, feeding=name)
    return None


def _other_output(trace: Trace, source: Activation, target: Activation) -> Reason | None:
    """The target depends on another output of a multi-output source (LSTM states...)."""
    i = trace.index(*source.site.key)
    if i is None or trace.gradients[i] is None or trace.activations[i].output == source.output:
        return None
    return why.cause("other_output", source.site.ref, target=target.site.ref,
                     used=trace.activations[i].output, probed=source.output)  # fmt: skip


def static_causes(
    source: Activation, target: Activation, graph: ModelGraph | None
) -> tuple[Reason, ...]:
    """Causes visible without another pass: the graph's connectivity and integer dtypes."""
    causes: list[Reason] = []
    if graph is not None:
        src, dst = source.site, target.site
        if graph.depends(dst.path, src.path, to_call=dst.call, frm_call=src.call) is False:
            reverse = graph.depends(src.path, dst.path, to_call=src.call, frm_call=dst.call)
            said = "reversed_order" if reverse else "not_downstream"
            causes.append(why.cause(said, dst.ref, source=src.ref))
    return (*causes, *(_integer_path(a) for a in (source, target) if not a.is_float))


def _integer_path(act: Activation) -> Reason:
    """`integer_path` at an activation that is not floating-point."""
    return why.cause("integer_path", act.site.ref, dtype=act.dtype)


def dedupe(causes: list[Reason]) -> tuple[Reason, ...]:
    """The first cause of each (code, layer)."""
    first: dict[tuple[str, str | None], Reason] = {}
    for cause in causes:
        first.setdefault((cause.code, cause.layer), cause)
    return tuple(first.values())


def structural_zeros(
    src: Site, dst: Site, graph: ModelGraph | None, layers: Mapping[str, KerasLayer], training: bool
) -> tuple[str, ...]:
    """The layers between `src` and `dst` that give exact zeros by design, each with the
    share of zeros it is expected to give: max pooling, ReLU, masking, Dropout in training."""
    if graph is None:
        return ()
    found = []
    for path in graph.between(src.path, dst.path, src.call, dst.call):
        layer = layers.get(path)
        kind = type(layer).__name__
        if kind.startswith("MaxPool"):
            size = np.prod(np.atleast_1d(getattr(layer, "pool_size", 2)))
            found.append(f"max pooling at '{path}' passes the gradient to one position of each "
                         f"window ({1 - 1 / size:.0%} zeros expected)")  # fmt: skip
        elif kind == "Dropout" and training:
            found.append(f"Dropout at '{path}' in training mode zeroes a share of "
                         f"{getattr(layer, 'rate', 0):.0%}")  # fmt: skip
        elif kind == "Masking" or (kind == "Embedding" and getattr(layer, "mask_zero", False)):
            found.append(f"masking at '{path}' zeroes the masked time steps")
        elif activation_name(layer) == "relu":
            found.append(f"ReLU at '{path}' passes no gradient where its input is negative "
                         "(about half of the units for a random probe)")  # fmt: skip
    return tuple(found)


def gradient_warnings(
    zero_fraction: float,
    max_abs: float,
    source_size: float,
    src: str,
    dst: str,
    structural: Sequence[str] = (),
    dead_units: float | None = None,
    float16: bool = False,
) -> tuple[str, ...]:
    """Warnings for an `ok` gradient of `dst` with respect to `src` that still looks wrong.

    Vanishing: max |g| below 1e-7 per unit of the `from` activation's mean size
    (`source_size`: a change of `from` by its own size moves sum(to) by less than that).
    Exploding: above 1e6. Mostly zero: more than half of the values are exactly 0; units with
    no gradient for any sample are dead, or, when the gradient is `float16` (of a float16
    `src`) and all of it below float16's smallest normal value, float16 may have rounded it.
    """
    out = []
    if zero_fraction > MOSTLY_ZERO:
        units = f"{dead_units or 0:.0%} of the units of {src}"
        if dead_units is not None and dead_units > MOSTLY_ZERO and float16 and max_abs < F16_TINY:
            what = (f": {units} get zero gradient for every sample{DEAD_MARK}, or float16 "
                    "rounded it to 0 (the whole gradient is below float16's normal range, "
                    "6e-5): compute this path in float32 to tell")  # fmt: skip
        elif dead_units is not None and dead_units > MOSTLY_ZERO:
            what = f": {units} get zero gradient for every sample{DEAD_MARK}"
        elif structural:
            what = ", by design: " + "; ".join(structural[:3])
        else:
            what = ": inactive paths between the two layers"
        out.append(f"{zero_fraction:.0%} of d {dst} / d {src}{ZERO_SHARE}{what}")
    gain = max_abs * (source_size if source_size > 0 else 1.0)
    for flag, found, effect in (
        (Finding.VANISHING, gain < VANISHING_GAIN, f"moving {src} barely moves {dst}"),
        (Finding.EXPLODING, gain > EXPLODING_GAIN,
         f"a small change of {src} moves {dst} enormously"),
    ):  # fmt: skip
        out += [f"{flag}: max |g| x mean |{src}| = {gain:.1e}; {effect}"] if found else []
    return tuple(out)


def magnitude_flags(warnings: Sequence[str]) -> set[Finding]:
    """The flags a result's warnings (as `gradient_warnings` words them) raise: dead,
    vanishing, exploding, as a scan row's flags."""
    found = {flag for flag in (Finding.VANISHING, Finding.EXPLODING) for w in warnings
             if w.startswith(f"{flag}: ")}  # fmt: skip
    return found | ({Finding.DEAD} if any(DEAD_MARK in w for w in warnings) else set())


def softmax_before(target: Site) -> str | None:
    """When the target applies softmax (its sum is 1 per sample, so its gradient is ~0), the
    target to take instead: `--to LAYER:logits` when the softmax is the layer's fused
    activation, else the layer before it; None for any other target (`:logits` included)."""
    if target.logits or activation_name(target.layer) != "softmax":
        return None
    if has_fused_activation(target.layer):
        return f"--to {target.ref}{LOGITS} (its output before the softmax)"
    return "--to the layer before it"


def softmax_target_note(target: Site, fix: str) -> str | None:
    """A note when the target applies softmax (`softmax_before`); `fix` says what to do
    instead, with `{before}` standing for the target to take."""
    before = softmax_before(target)
    if before is None:
        return None
    return (
        f"{target.ref} ends in softmax: the sum of its outputs is 1 for every sample, so the "
        f"gradient of that sum is zero up to rounding; {fix.format(before=before)}"
    )
