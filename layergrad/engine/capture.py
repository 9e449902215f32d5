"""Capture during one forward pass: which layer calls are seen, watched and summarised.

As in `probe`, each chosen layer's `call` is wrapped, and a watched output is handed on
through an identity whose gradient is the gradient with respect to that output (a fresh copy:
paths around the layer do not count). Here the identity also *reduces* that gradient where
the backward pass produces it (`reductions.gradient_summary`) and returns the result as the
gradient of a small "anchor" tensor. `tape.gradient(target, anchors)` therefore gives a few
numbers per layer instead of whole arrays, and no gradient outlives its reduction. A None
gradient still means that the tape found no path.

With `Plan.whole` (`trace.replay`) a watched output is a copy `tape.watch`-ed whole instead,
nothing is summarised, and each call is kept with its tensors and arguments. Either way the
pass is `forward_pass`, the one place in the engine that runs the model.

The wrappers stay in place for a whole run (`installed`), so every trace of a compiled step
sees them; each forward pass has its own `Recorder`, found through a thread-local (replicas
of a distributed step trace in threads of their own).
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from layergrad.core.tf_runtime import tf
from layergrad.core.tf_types import GradientTape, KerasLayer, KerasModel, Tensor, TensorTree
from layergrad.data.stats import reductions
from layergrad.engine.layer_calls import (
    Handler,
    check_all_called,
    check_input_calls,
    forward,
    guarded,
    is_float,
    masked_as,
    wrapped,
)
from layergrad.engine.projection import project
from layergrad.engine.weight_gradients import WeightPlan
from layergrad.model.layer_refs import CallKey, Site, input_names

_LOCAL = threading.local()  # the recorder of the forward pass running in this thread


@dataclass(frozen=True)
class Plan:
    """What one step captures and differentiates.

    `sources` are watched; each of `targets` (None: the seeded projection of the model's
    outputs, see `projection.py`) is reduced and differentiated. With `every_leaf`, every
    leaf-layer call and model input is watched (scan). `data` marks a run over many
    batches: per-sample distributions are kept, and `reduce="mean"` means the mean over
    every sample, applied when the totals are read.
    """

    sources: tuple[Site, ...] = ()
    targets: tuple[Site | None, ...] = (None,)
    every_leaf: bool = False
    training: bool = False
    reduce: str = "sum"
    data: bool = False
    seed: int = 0  # of the default target's projection
    keep: bool = False  # one eager batch: keep each watched gradient whole (`Recorder.arrays`)
    # sources whose units' activity is kept: per unit of the last axis, 1 when its output is
    # not 0 on some sample (`check`'s dead layers over the data)
    alive: tuple[Site, ...] = ()
    weights: WeightPlan | None = None  # also the loss's gradient for the trainable variables
    # one eager replay (`trace.replay`): watch whole copies on the tape, keep each recorded
    # call's tensors and arguments, record every call handed over, summarise nothing
    whole: bool = False
    objective: Callable[[TensorTree], Tensor] | None = None  # the None target, instead of the
    # projection: this function of the model's outputs (a loss)

    @property
    def sites(self) -> list[Site]:
        """The sources, then the targets that are layers."""
        return [*self.sources, *(t for t in self.targets if t is not None)]


@dataclass
class Output:
    """One output of a recorded call, as traced: dtype and static shape."""

    dtype: str
    shape: tuple[int | None, ...]


@dataclass
class Record:
    """One recorded call (or model input) and its outputs (None: not a tensor); with
    `Plan.whole` also its flattened outputs as passed on and its positional arguments (None
    for a model input)."""

    site: Site
    outputs: list[Output | None]
    tensors: list[Tensor] = field(default_factory=list)
    args: TensorTree = None


@dataclass
class Recorder:
    """One forward pass: the calls seen, the anchors, the forward summaries.

    Names are `"{record}.{output}"`; `anchors`, `widths` (units of the last axis) and
    `forward` are keyed by them, in the order the outputs were produced.
    """

    plan: Plan
    tape: GradientTape
    calls: dict[str, int] = field(default_factory=dict)
    records: list[Record] = field(default_factory=list)
    captured: dict[CallKey, Tensor] = field(default_factory=dict)
    anchors: dict[str, Tensor] = field(default_factory=dict)
    widths: dict[str, Tensor] = field(default_factory=dict)
    forward: dict[str, Tensor] = field(default_factory=dict)
    open_dims: dict[str, Tensor] = field(default_factory=dict)  # sizes the model leaves open
    samples: Tensor | None = None  # the batch's sample indices in the data (None: 0, 1, ... )
    # with `plan.keep`: (target, name) -> the whole gradient, as the backward pass made it
    arrays: dict[tuple[int, str], Tensor] = field(default_factory=dict)
    target: int = 0  # the target being differentiated

    def __post_init__(self) -> None:
        self.sources = {s.key: s for s in self.plan.sources}
        self.targets = {t.key: t for t in self.plan.targets if t is not None}

    def on_call(self, k: CallKey, flat: list[Tensor], args: TensorTree = ()) -> list[Tensor]:
        """A wrapped layer produced `flat` from `args` on call `k` (path, index): record it if
        planned (any call, with `plan.whole`); return what to pass on."""
        if self.plan.every_leaf:
            return self._record(Site.of_call(k), flat, args)
        site = self.sources.get(k) or self.targets.get(k)
        site = site or (Site.of_call(k) if self.plan.whole else None)
        return flat if site is None else self._record(site, flat, args)

    def inputs(self, model: KerasModel, tensors: list[Tensor]) -> list[Tensor]:
        """Record (and watch, as planned) the model inputs; return what the model is fed."""
        check_input_calls(self.plan.sites)
        planned = {s.input_index: s for s in self.plan.sites if s.input_index is not None}
        out = list(tensors)
        for i, name in enumerate(input_names(model)[: len(tensors)]):
            chosen = planned.get(i)
            if self.plan.every_leaf:
                chosen = Site(ref=name, path=name, call=0, input_index=i)
            if chosen is not None:
                out[i] = self._record(chosen, [tensors[i]])[0]
        return out

    def _record(self, site: Site, flat: list[Tensor], args: TensorTree = None) -> list[Tensor]:
        r, k, whole = len(self.records), site.key, self.plan.whole
        outputs: list[Output | None] = []
        passed = []
        for i, tensor in enumerate(flat):
            if not (hasattr(tensor, "dtype") and hasattr(tensor, "shape")):
                outputs.append(None)
                passed.append(tensor)
                continue
            floating = is_float(tensor)
            watch = floating and (self.plan.every_leaf or (i == 0 and k in self.sources))
            name = f"{r}.{i}"
            if watch and whole:  # a copy watched whole: other uses of the original (a skip
                # connection around a layer that returns its input) stay outside the gradient
                tensor = masked_as(tensor, tf.identity(tensor))
                self.tape.watch(tensor)
            elif watch:
                tensor = self._watch(name, tensor)
            if floating and not whole and (watch or (i == 0 and k in self.targets)):
                self._summarise_forward(name, tensor)
            outputs.append(Output(tensor.dtype.name, tuple(tensor.shape)))
            passed.append(tensor)
        self.records.append(Record(site, outputs, passed, args) if whole else Record(site, outputs))
        if k in self.targets or (k in self.sources and not self.plan.every_leaf):
            self.captured.setdefault(k, passed[0])
        return passed

    def _summarise_forward(self, name: str, tensor: Tensor) -> None:
        with self.tape.stop_recording():  # else the tape would keep |x| of every x
            if name not in self.forward:  # a watched output's came with its anchor (`_watch`)
                self.forward[name] = self._summary(reductions.forward_summary)(tensor)
            if None in tuple(tensor.shape)[1:]:
                self.open_dims[name] = tf.shape(tensor)[1:]

    def _summary(self, function: Callable[..., TensorTree]) -> Callable[..., TensorTree]:
        """`function` shared by every layer (`reductions.shared`), but run as it is for the
        few calls of a plan that is not every leaf's on one eager batch (`inspect`'s probe
        batch), where compiling it would cost more than the pass."""
        if self.plan.every_leaf or not tf.executing_eagerly():
            return reductions.shared(function)
        return function

    def _watch(self, name: str, tensor: Tensor) -> Tensor:
        """Hand `tensor` on through an identity whose gradient is summarised into an anchor;
        the forward summary (`_summarise_forward`) comes with the anchor, in one call."""
        one_unit = self.plan.data
        with self.tape.stop_recording():
            self.forward[name], anchor = self._summary(reductions.watch_summary)(tensor, one_unit)
        self.tape.watch(anchor)

        def grad(dy: Tensor) -> tuple[Tensor, Tensor]:
            if self.plan.keep:
                self.arrays[(self.target, name)] = dy
            return dy, self._summary(reductions.gradient_summary)(dy, one_unit)

        self.anchors[name] = anchor
        self.widths[name] = reductions.unit_width(tensor, one_unit)
        record = _eager_record() if tf.executing_eagerly() else None
        if record is None:
            watched = tf.custom_gradient(lambda x, _anchor: (tf.identity(x), grad))
            return masked_as(tensor, watched(tensor, anchor))
        # what `tf.custom_gradient` records eagerly, without its checks (~0.3 ms a layer)
        out = tf.identity(tensor)
        record("watched", [out], [tensor, anchor], grad)
        return masked_as(tensor, out)

    def target_scalar(self, target: Site | None, outputs: TensorTree) -> Tensor:
        """reduce(target activation), or `plan.objective` / the projection of every float
        model output; None if not float."""
        if target is None and self.plan.objective is not None:
            return self.plan.objective(outputs)
        if target is None:
            floats = [o for o in tf.nest.flatten(outputs) if is_float(o)]
            if not floats:
                return None
            samples = tf.range(tf.shape(floats[0])[0]) if self.samples is None else self.samples
            return project(outputs, samples, self.plan.seed, self._reduce)
        check_all_called([target], self.captured, self.calls)
        tensor = self.captured[target.key]
        return self._reduce(tensor) if is_float(tensor) else None

    def _reduce(self, tensor: Tensor) -> Tensor:
        if self.plan.reduce == "sum":
            return tf.reduce_sum(tensor)
        if not self.plan.data:
            return tf.reduce_mean(tensor)
        # the mean over all samples is (sum / size per sample) / samples; the division by
        # the samples of the whole data set is applied to the totals (GradientTotals.scale)
        size = tf.cast(tf.size(tensor), tensor.dtype)
        return tf.reduce_sum(tensor) * tf.cast(reductions.samples_in(tensor), tensor.dtype) / size


def forward_pass(
    model: KerasModel,
    plan: Plan,
    tape: GradientTape,
    inputs: Sequence[Tensor],
    samples: Tensor | None = None,
    labels: Sequence[Tensor] = (),
    guard: str | None = None,
) -> tuple[Recorder, TensorTree, list[Tensor | None], Tensor | None]:
    """The engine's one forward pass, for the measured step (`data_step.Step.compute`) and the
    replay (`trace.replay`): `inputs` recorded and the model run under `tape`, the calls
    `installed` wraps reporting to a new `Recorder` (this thread's, for the pass). Returns it,
    the outputs, each target's scalar (None: not float) and `plan.weights`' loss (or None).
    With `guard`, the model's own failure on the batch is `layer_calls.guarded`'s one-line
    error naming it (the targets and the objective fail as they are)."""
    rec = _LOCAL.recorder = Recorder(plan, tape, samples=samples)
    try:
        with tape:
            fed = rec.inputs(model, list(inputs))
            if guard is None:
                outputs = forward(model, fed, plan.training)
            else:
                outputs = guarded(lambda: forward(model, fed, plan.training), guard)
            check_all_called(plan.sources, rec.captured, rec.calls)
            scalars = [rec.target_scalar(t, outputs) for t in plan.targets]
            weights = plan.weights
            loss = None if weights is None else weights.objective(outputs, labels or None, samples)
    finally:
        del _LOCAL.recorder
    return rec, outputs, scalars, loss


def installed(
    groups: Sequence[tuple[KerasLayer, str, set[int] | None]],
) -> contextlib.AbstractContextManager[None]:
    """Wrap `call` of each `(layer, path, calls)` for the block (`layer_calls.wrapped`): each
    call reports to the recorder of this thread's `forward_pass`, if any."""

    def route() -> tuple[Handler, dict[str, int]] | None:
        rec: Recorder | None = getattr(_LOCAL, "recorder", None)
        return None if rec is None else (rec.on_call, rec.calls)

    return wrapped(groups, route)


@functools.cache
def _eager_record() -> Callable[..., None] | None:
    """TensorFlow's own eager `record_operation` (what `tf.custom_gradient` calls), or None
    where this TensorFlow does not have it there (then `tf.custom_gradient` itself is used)."""
    try:
        from tensorflow.python.eager import record
    except ImportError:
        return None
    return getattr(record, "record_operation", None)
