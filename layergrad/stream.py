"""The per-batch step: forward, capture, watch, backward and statistics, in one function.

Capture works as in `probe`: each chosen layer's `call` is wrapped, and its output is handed
on through an identity whose gradient is the gradient with respect to that output (a fresh
copy: paths around the layer do not count). Here the identity also *reduces* that gradient
where the backward pass produces it (`summaries.gradient_summary`) and hands the result back
as the gradient of small "anchor" tensors. `tape.gradient(target, anchors)` therefore returns
a few numbers per layer instead of whole arrays, and no gradient outlives its reduction:
memory stays that of a plain forward and backward pass. A None gradient still means no path.

Over a data set the step is a `tf.function` traced once (the batch axis is None, so the last
partial batch reuses it) and runs under a `tf.distribute` strategy; its summaries add up in
`accumulate.Accumulators` on each replica. For one batch it runs eagerly (no tracing cost).
"""

from __future__ import annotations

import contextlib
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np

from layergrad import summaries as sm
from layergrad._tf import quiet_import
from layergrad.accumulate import Accumulators, single_totals, summary_shapes
from layergrad.errors import InputError, describe
from layergrad.layer_refs import Site, input_names, iter_layers
from layergrad.probe import _check_all_called, _check_input_call, _site_groups, _unique_leaves

Key = tuple[str, int]
Progress = Callable[[int, "int | None"], None]
_LOCAL = threading.local()  # the recorder of the forward pass running in this thread


@dataclass(frozen=True)
class Plan:
    """What one step captures and differentiates.

    `sources` are watched; each of `targets` (None: the sum of the model's float outputs) is
    reduced and differentiated. With `every_leaf`, every leaf-layer call and model input is
    watched (scan). `data` marks a run over many batches: per-sample distributions are kept,
    and `reduce="mean"` means the mean over every sample, applied when the totals are read.
    """

    sources: tuple[Site, ...] = ()
    targets: tuple[Site | None, ...] = (None,)
    every_leaf: bool = False
    training: bool = False
    reduce: str = "sum"
    data: bool = False


@dataclass(frozen=True)
class Probed:
    """A captured activation: where it came from, its shape (batch axis = samples), dtype."""

    site: Site
    shape: tuple[int, ...]
    dtype: str
    output: int = 0  # which output of a multi-output layer (flattened order)

    @property
    def is_float(self) -> bool:
        return self.dtype == "bfloat16" or np.dtype(self.dtype).kind == "f"


@dataclass(frozen=True)
class StreamRun:
    """What the step found over every batch.

    `activations` are the captured calls in execution order (model inputs first);
    `gradients[t][i]` is d reduce(target t) / d activations[i] added up over the batches, or
    None when the tape found no path; `forward[i]` the forward values of activations[i].
    """

    activations: tuple[Probed, ...]
    gradients: tuple[tuple[sm.GradientTotals | None, ...], ...]
    forward: tuple[sm.ForwardTotals | None, ...]
    targets: tuple[Probed | None, ...]
    samples: int
    batches: int
    replicas: int
    data: bool = False  # went over a data set (per-sample distributions were kept)
    traces: int = 0  # times the step was traced, per replica (1: the last batch reused it)

    def index(self, path: str, call: int = 0) -> int | None:
        """Position of the activation of `path` call `call`, or None if it was not captured."""
        for i, act in enumerate(self.activations):
            if act.site.path == path and act.site.call == call:
                return i
        return None


@dataclass
class _Output:
    dtype: str
    shape: tuple[int | None, ...]
    watched: bool


@dataclass
class _Record:
    site: Site
    outputs: list[_Output | None]  # None for an output that is not a tensor


@dataclass
class _Recorder:
    """The state of one forward pass: the calls seen, the anchors and forward summaries."""

    plan: Plan
    tape: Any
    calls: dict[str, int] = field(default_factory=dict)
    records: list[_Record] = field(default_factory=list)
    captured: dict[Key, Any] = field(default_factory=dict)
    anchors: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    summaries: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.sources = {_key(s): s for s in self.plan.sources}
        self.targets = {_key(t): t for t in self.plan.targets if t is not None}

    def on_call(self, path: str, index: int, flat: list[Any]) -> list[Any]:
        key = (path, index)
        site = self.sources.get(key) or self.targets.get(key)
        if site is None and not self.plan.every_leaf:
            return flat
        if site is None or self.plan.every_leaf:
            site = Site(ref=f"{path}@{index}" if index else path, path=path, call=index)
        return self._record(site, flat)

    def inputs(self, model: Any, tensors: list[Any]) -> list[Any]:
        """Record (and watch, as planned) the model inputs; return what the model is fed."""
        by_index = {
            s.input_index: s
            for s in (*self.plan.sources, *(t for t in self.plan.targets if t is not None))
            if s.input_index is not None
        }
        for planned in by_index.values():
            _check_input_call(planned)
        out = list(tensors)
        for i, name in enumerate(input_names(model)[: len(tensors)]):
            site = by_index.get(i)
            if self.plan.every_leaf:
                site = Site(ref=name, path=name, call=0, input_index=i)
            if site is not None:
                out[i] = self._record(site, [tensors[i]])[0]
        return out

    def _record(self, site: Site, flat: list[Any]) -> list[Any]:
        r, key = len(self.records), _key(site)
        outputs: list[_Output | None] = []
        passed = []
        for i, tensor in enumerate(flat):
            if not (hasattr(tensor, "dtype") and hasattr(tensor, "shape")):
                outputs.append(None)
                passed.append(tensor)
                continue
            floating = _is_float(tensor)
            watch = floating and (self.plan.every_leaf or (i == 0 and key in self.sources))
            if watch:
                tensor = self._watch(f"{r}.{i}", tensor)
            if floating and (watch or (i == 0 and key in self.targets)):
                with self.tape.stop_recording():  # else the tape would keep |x| for each x
                    fields, dims = sm.forward_summary(tensor)
                self.summaries[f"f:{r}.{i}/fwd"], self.summaries[f"f:{r}.{i}/dims"] = fields, dims
            outputs.append(_Output(tensor.dtype.name, tuple(tensor.shape), watch))
            passed.append(tensor)
        self.records.append(_Record(site, outputs))
        if key in self.targets or (key in self.sources and not self.plan.every_leaf):
            self.captured.setdefault(key, passed[0])
        return passed

    def _watch(self, name: str, tensor: Any) -> Any:
        """Hand `tensor` on through an identity whose gradient is summarised into anchors."""
        tf, _ = quiet_import()
        one_unit = self.plan.data
        anchors = (  # shaped like what gradient_summary returns
            tf.zeros([len(sm.GRAD_FIELDS)], tf.float64),
            tf.zeros([1], tf.float64),
            tf.zeros(tf.stack([2, sm.unit_width(tensor, one_unit)]), tf.float64),
            tf.zeros(tf.reshape(sm.samples_in(tensor), [1]), tf.float64),
        )
        for anchor in anchors:
            self.tape.watch(anchor)

        @tf.custom_gradient
        def watched(x: Any, *_anchors: Any) -> Any:
            def grad(dy: Any) -> Any:
                return (dy, *sm.gradient_summary(dy, one_unit))

            return tf.identity(x), grad

        out = watched(tensor, *anchors)
        mask = getattr(tensor, "_keras_mask", None)
        if mask is not None:
            out._keras_mask = mask
        self.anchors[name] = anchors
        return out

    def target_scalar(self, target: Site | None, outputs: Any) -> Any:
        """reduce(target activation), or of every float model output; None if not float."""
        tf, _ = quiet_import()
        if target is None:
            floats = [o for o in tf.nest.flatten(outputs) if _is_float(o)]
            return tf.add_n([self._reduce(o) for o in floats]) if floats else None
        if _key(target) not in self.captured:
            _check_all_called([target], self.captured, self.calls)
        tensor = self.captured[_key(target)]
        return self._reduce(tensor) if _is_float(tensor) else None

    def _reduce(self, tensor: Any) -> Any:
        tf, _ = quiet_import()
        if self.plan.reduce == "sum":
            return tf.reduce_sum(tensor)
        if not self.plan.data:
            return tf.reduce_mean(tensor)
        # the mean over all samples is (sum / size per sample) / samples; the division by
        # the samples of the whole data set is applied to the totals (GradientTotals.scale)
        per_sample = tf.cast(tf.size(tensor), tensor.dtype) / tf.cast(
            sm.samples_in(tensor), tensor.dtype
        )
        return tf.reduce_sum(tensor) / per_sample


class Step:
    """The per-batch computation for a model and a plan; `compute(inputs)` returns summaries.

    Use inside `installed()`, which wraps the layers' `call` for the whole run, so that
    every trace of the compiled step sees them.
    """

    def __init__(self, model: Any, plan: Plan) -> None:
        self.model, self.plan = model, plan
        self.records: list[_Record] = []  # the layout, filled while tracing (or eagerly)
        self.traces = 0  # calls of `compute` in Python: traces, or eager runs
        if plan.every_leaf:
            self.groups: list[tuple[Any, str]] = [
                (layer, path) for layer, path, _ in _unique_leaves(iter_layers(model))
            ]
        else:
            sites = [*plan.sources, *(t for t in plan.targets if t is not None)]
            self.groups = [(layer, path) for layer, path, _ in _site_groups(sites)]

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        """Wrap each captured layer's `call` for the block (restored in `finally`)."""
        wrapped: list[tuple[Any, Any]] = []
        try:
            for layer, path in self.groups:
                previous = layer.__dict__.get("call")
                layer.call = _dispatching(layer.call, path)
                wrapped.append((layer, previous))
            yield
        finally:
            for layer, previous in wrapped:
                del layer.call
                if previous is not None:
                    layer.call = previous

    def compute(self, inputs: Sequence[Any]) -> dict[str, Any]:
        """Forward and backward on one batch (a tuple of tensors in the model's input order)."""
        tf, _ = quiet_import()
        self.traces += 1
        targets = self.plan.targets
        tape = tf.GradientTape(persistent=len(targets) > 1)
        rec = _Recorder(self.plan, tape)
        _LOCAL.recorder = rec
        try:
            with tape:
                fed = rec.inputs(self.model, list(inputs))
                outputs = _call_model(self.model, fed, self.plan.training)
                for site in self.plan.sources:
                    if _key(site) not in rec.captured:
                        _check_all_called([site], rec.captured, rec.calls)
                scalars = [rec.target_scalar(t, outputs) for t in targets]
        finally:
            del _LOCAL.recorder
        names = list(rec.anchors)
        flat = [a for name in names for a in rec.anchors[name]]
        for t, scalar in enumerate(scalars):
            grads = tape.gradient(scalar, flat) if scalar is not None and flat else []
            size = len(rec.anchors[names[0]]) if names else 0
            for n, name in enumerate(names):
                got = grads[size * n : size * (n + 1)] if grads else [None]
                if got[0] is None:
                    continue
                key = f"g{t}:{name}"
                for suffix, value in zip(("grad", "gmax", "units"), got, strict=False):
                    rec.summaries[f"{key}/{suffix}"] = value
                if self.plan.data:  # per-sample L2 norms -> their distribution
                    for suffix, value in sm.distribution_summary(got[3]).items():
                        rec.summaries[f"{key}/{suffix}"] = value
        rec.summaries["samples"] = tf.reshape(tf.cast(sm.samples_in(inputs[0]), tf.float64), [1])
        self.records = rec.records
        return rec.summaries

    def result(
        self, totals: dict[str, np.ndarray], samples: int, batches: int, replicas: int
    ) -> StreamRun:
        """Build the run's result from the summed summaries."""
        scale = 1.0 / samples if self.plan.reduce == "mean" and self.plan.data and samples else 1.0
        targets: list[Probed | None] = []
        for target in self.plan.targets:
            r = None if target is None else self._record_of(_key(target))
            targets.append(None if r is None else self._probed(r, 0, totals, samples, target))
        keep = [r for r, rec in enumerate(self.records) if self._kept(rec)]
        activations, forward = [], []
        gradients: list[list[sm.GradientTotals | None]] = [[] for _ in self.plan.targets]
        for r in keep:
            k = self._chosen_output(r, totals)
            activations.append(self._probed(r, k, totals, samples))
            forward.append(_forward_totals(totals, f"f:{r}.{k}"))
            for t, column in enumerate(gradients):
                column.append(_gradient_totals(totals, f"g{t}:{r}.{k}", scale))
        return StreamRun(
            activations=tuple(activations),
            gradients=tuple(tuple(c) for c in gradients),
            forward=tuple(forward),
            targets=tuple(targets),
            samples=samples,
            batches=batches,
            replicas=replicas,
            data=self.plan.data,
            traces=self.traces // max(replicas, 1),
        )

    def _kept(self, rec: _Record) -> bool:
        return self.plan.every_leaf or _key(rec.site) in {_key(s) for s in self.plan.sources}

    def _record_of(self, key: Key) -> int | None:
        return next((r for r, rec in enumerate(self.records) if _key(rec.site) == key), None)

    def _chosen_output(self, r: int, totals: dict[str, np.ndarray]) -> int:
        """The first output the (first) target depends on, else the first tensor output."""
        outputs = self.records[r].outputs
        tensors = [i for i, o in enumerate(outputs) if o is not None]
        found = [i for i in tensors if f"g0:{r}.{i}/grad" in totals]
        return found[0] if found else (tensors[0] if tensors else 0)

    def _probed(
        self,
        r: int,
        k: int,
        totals: dict[str, np.ndarray],
        samples: int,
        site: Site | None = None,
    ) -> Probed:
        rec = self.records[r]
        out, site = rec.outputs[k], site or rec.site
        if out is None:
            return Probed(site, (), "object", k)
        dims = totals.get(f"f:{r}.{k}/dims")
        rest = tuple(
            int(d) if d is not None else int(dims[j]) if dims is not None else 0
            for j, d in enumerate(out.shape[1:])
        )
        batch = samples if self.plan.data or out.shape[:1] == (None,) else out.shape[0]
        shape = (int(batch or 0), *rest) if out.shape else ()
        return Probed(site, shape, out.dtype, k)


def _dispatching(call: Callable[..., Any], path: str) -> Callable[..., Any]:
    """`call`, handing its outputs to the recorder of the forward pass running in this thread
    (replicas trace in threads of their own) and counting the calls it makes."""
    tf, _ = quiet_import()

    def probed_call(*args: Any, **kwargs: Any) -> Any:
        rec: _Recorder | None = getattr(_LOCAL, "recorder", None)
        if rec is None:
            return call(*args, **kwargs)
        index = rec.calls.get(path, 0)
        rec.calls[path] = index + 1
        outputs = call(*args, **kwargs)
        flat = tf.nest.flatten(outputs)
        passed = rec.on_call(path, index, flat)
        if any(a is not b for a, b in zip(passed, flat, strict=True)):
            outputs = tf.nest.pack_sequence_as(outputs, passed)
        return outputs

    return probed_call


def run_batch(model: Any, plan: Plan, inputs: Sequence[np.ndarray]) -> StreamRun:
    """The step on one batch, eagerly: what `scan` needs without keeping any gradient."""
    tf, _ = quiet_import()
    step = Step(model, plan)
    tensors = [tf.convert_to_tensor(a) for a in inputs]
    with step.installed():
        summaries = _guarded(lambda: step.compute(tensors), "the probe batch")
    samples = int(sm.samples_in(tensors[0])) if tensors else 0
    return step.result(single_totals(summaries), samples, batches=1, replicas=1)


def run_stream(
    model: Any,
    plan: Plan,
    stream: Any,
    strategy: Any,
    on_progress: Progress | None = None,
) -> StreamRun:
    """The compiled step over every batch of a `datasets.DataStream`, under `strategy`.

    Args:
        model: the loaded model (its variables created under `strategy.scope()`).
        plan: what to capture; `plan.data` should be True.
        stream: the batches, in the model's input order.
        strategy: a tf.distribute strategy (`tf.distribute.get_strategy()` for one device).
        on_progress: called after each batch with (samples done, samples expected or None).

    Returns:
        A StreamRun over every sample.

    Raises:
        InputError: a batch that cannot be read or that the model fails on (with its index),
        or a data set without samples.
    """
    tf, _ = quiet_import()
    step = Step(model, plan)
    replicas = int(strategy.num_replicas_in_sync)
    dataset = stream.dataset
    if not _is_default(strategy):
        dataset = strategy.experimental_distribute_dataset(dataset)
    signature = [dataset.element_spec]
    compute = tf.function(  # nothing to convert: autograph would only cost tracing time
        lambda batch: strategy.run(step.compute, args=(batch,)),
        input_signature=signature,
        autograph=False,
    )
    done = batches = 0
    with step.installed():  # the trace happens here, once; the batch axis is None
        concrete = _guarded(compute.get_concrete_function, "the data", stream.source)
        shapes = summary_shapes(strategy, concrete.structured_outputs)
        acc = None if shapes is None else Accumulators(strategy, shapes)
        fused = None if acc is None else _fused(strategy, concrete, acc, signature)
        iterator = iter(dataset)
        while True:
            try:
                batch = next(iterator)
            except StopIteration:
                break
            except tf.errors.OpError as exc:
                stream.raise_failure()
                raise InputError(
                    f"--data {stream.source}: batch {batches} could not be read: {describe(exc)}"
                ) from exc
            parts = [strategy.experimental_local_results(t) for t in batch]
            rows = stream.check_batch(batches, parts)
            if fused is not None:
                _guarded(partial(fused, batch), f"batch {batches}", stream.source)
            else:  # a summary's size is only known from the first batch (an open last axis)
                summaries = _guarded(partial(concrete, batch), f"batch {batches}", stream.source)
                acc = Accumulators(strategy, summary_shapes(strategy, summaries) or {})
                tf.function(lambda s, a=acc: strategy.run(a.update, args=(s,)), autograph=False)(
                    summaries
                )
                fused = _fused(strategy, concrete, acc, signature)
            done, batches = done + rows, batches + 1
            if on_progress is not None:
                on_progress(done, stream.samples)
    stream.raise_failure()
    if acc is None or not done:
        raise InputError(f"--data {stream.source} holds no samples; expected at least one row")
    return step.result(acc.totals(strategy), done, batches, replicas)


def _fused(strategy: Any, concrete: Any, acc: Accumulators, signature: list[Any]) -> Any:
    """One compiled call per batch: the traced step, then adding its summaries up (its
    concrete function: calling it skips the signature matching of each call)."""
    tf, _ = quiet_import()
    return tf.function(
        lambda batch: strategy.run(acc.update, args=(concrete(batch),)),
        input_signature=signature,
        autograph=False,
    ).get_concrete_function()


def _is_default(strategy: Any) -> bool:
    """Whether `strategy` is TensorFlow's default one (a single device, no distribution)."""
    return type(strategy).__name__ == "_DefaultDistributionStrategy"


class BatchFailed(InputError):
    """The model's own code failed on a batch (a shape it was not built for, an id out of
    range): an input error, which `check` records as the file's `error` finding."""


def _guarded(run: Callable[[], Any], what: str, source: str | None = None) -> Any:
    """Run the step; a failure of the model's own ops names the batch."""
    tf, _ = quiet_import()
    where = f"--data {source}: " if source else ""
    try:
        return run()
    except (tf.errors.OpError, ValueError, TypeError) as exc:
        detail = re.sub(r"\s*\[\[\{\{node [^]]*\]\]|\s*\[Op:[^]]*\]", "", describe(exc))
        raise BatchFailed(
            f"{where}the model failed on {what}: {detail}; check the values and shapes "
            "of the data (ids inside the vocabulary, the shape the model was built for)"
        ) from exc


def _call_model(model: Any, inputs: list[Any], training: bool) -> Any:
    """Call the model the way it was built to be called (one tensor, a list or a dict)."""
    _, keras = quiet_import()
    structure = getattr(model, "_inputs_struct", None)
    if structure is not None and len(keras.tree.flatten(structure)) == len(inputs):
        return model(keras.tree.pack_sequence_as(structure, inputs), training=training)
    return model(inputs[0] if len(inputs) == 1 else inputs, training=training)


def _gradient_totals(
    totals: dict[str, np.ndarray], key: str, scale: float
) -> sm.GradientTotals | None:
    if f"{key}/grad" not in totals:
        return None
    first = float(totals[f"{key}/grad/first"])
    dist = None
    if f"{key}/dist" in totals:
        dist = np.concatenate([totals[f"{key}/{k}"] for k in ("dist", "dmin", "dmax")])
    return sm.GradientTotals(
        fields=totals[f"{key}/grad"],
        max_abs=float(totals[f"{key}/gmax"][0]),
        units=totals[f"{key}/units"],
        first_nonfinite=None if np.isinf(first) else int(first),
        dist=dist,
        hist=totals.get(f"{key}/hist"),
        scale=scale,
    )


def _forward_totals(totals: dict[str, np.ndarray], key: str) -> sm.ForwardTotals | None:
    if f"{key}/fwd" not in totals:
        return None
    return sm.ForwardTotals.from_totals(
        totals[f"{key}/fwd"], totals[f"{key}/dims"], float(totals[f"{key}/fwd/first"])
    )


def _is_float(tensor: Any) -> bool:
    return getattr(getattr(tensor, "dtype", None), "is_floating", False)


def _key(site: Site) -> Key:
    return (site.path, site.call)
