"""The per-batch step: forward, capture, watch, backward and statistics, in one function.

`capture` watches the chosen layer calls so that the backward pass reduces each gradient
where it is produced; the step packs those reductions into a few tensors (`summaries`). For
the probe batch (a source of one batch) it runs eagerly (no tracing cost). Over a data set it
is a `tf.function` traced once (the batch axis is None, so the last partial batch reuses
it), run by the one loop over batches (`step_calls.over_batches`) under a `tf.distribute`
strategy, one compiled call per batch, and the packs add up in `accumulators.Accumulators`
on each replica. `Step.result` unpacks the totals per layer: where each layer's share of the
packed summaries is (`Layout`, known once the step is traced), read back by `Unpack`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np

from layergrad.core.probe_options import Progress
from layergrad.core.tf_runtime import tf
from layergrad.core.tf_types import KerasModel, Strategy, Tensor
from layergrad.data.devices import is_multi_worker
from layergrad.data.stats import reductions
from layergrad.data.stats.accumulators import POSITION
from layergrad.data.stats.aggregates import ForwardTotals, GradientTotals, first_batch
from layergrad.engine import step_calls
from layergrad.engine.capture import Plan, Record, forward_pass, installed
from layergrad.engine.layer_calls import Probed, call_groups, is_float, to_numpy
from layergrad.engine.weight_gradients import WeightTotals
from layergrad.model.layer_refs import Site

if TYPE_CHECKING:
    from layergrad.data.sources import DataStream

__all__ = ["Plan", "Probed", "StreamRun", "run_stream"]


@dataclass(frozen=True)
class StreamRun:
    """What the step found over every batch.

    `activations` are the captured calls in execution order (model inputs first);
    `gradients[t][i]` is d reduce(target t) / d activations[i] added up over the batches, or
    None when the tape found no path; `forward[i]` the forward values of activations[i].
    """

    activations: tuple[Probed, ...]
    gradients: tuple[tuple[GradientTotals | None, ...], ...]
    forward: tuple[ForwardTotals | None, ...]
    targets: tuple[Probed | None, ...]
    samples: int
    batches: int
    replicas: int
    data: bool = False  # went over a data set (per-sample distributions were kept)
    traces: int = 0  # times the step was traced, per replica (1: the last batch reused it)
    # one batch only: per float model output, (largest spread of a value across the batch,
    # largest |value|), to tell an output that is the same for every sample
    output_spread: tuple[tuple[float, float], ...] = ()
    # with `plan.keep` (one batch): `arrays[t][i]`, the whole gradient of `gradients[t][i]`
    arrays: tuple[tuple[np.ndarray | None, ...], ...] = ()
    # per site of `plan.alive`, per unit: 1 when its output is not 0 on some sample, else 0
    alive: tuple[np.ndarray, ...] = ()
    weights: WeightTotals | None = None  # with `plan.weights`


@dataclass
class Layout:
    """Where each layer's share is in the packed summaries (known once traced)."""

    records: list[Record] = field(default_factory=list)
    grads: list[tuple[int, str]] = field(default_factory=list)  # (target, output name)
    forward: list[str] = field(default_factory=list)
    open_dims: list[str] = field(default_factory=list)


class Unpack:
    """One layer's share of the packed totals."""

    def __init__(self, layout: Layout, totals: dict[str, np.ndarray], scale: float) -> None:
        self.totals, self.scale = totals, scale
        self.grads = {entry: p for p, entry in enumerate(layout.grads)}
        self.fwd = {name: q for q, name in enumerate(layout.forward)}
        widths = [int(w) for w in totals.get("usizes", [])]
        self.offsets = np.concatenate([[0], np.cumsum([2 * w for w in widths])]).astype(int)
        self.widths = widths
        self.open: dict[str, slice] = {}  # where each output's sizes after the batch axis are
        start = 0
        for name in layout.open_dims:
            r, i = (int(part) for part in name.split("."))
            output = layout.records[r].outputs[i]
            count = len(output.shape) - 1 if output is not None else 0
            self.open[name] = slice(start, start + count)
            start += count

    def gradient(self, t: int, name: str) -> GradientTotals | None:
        p = self.grads.get((t, name))
        if p is None:
            return None
        tot, w = self.totals, self.widths[p]
        dist = None
        if "dist" in tot:
            dist = np.concatenate([tot["dist"][p], [tot["dmin"][p], tot["dmax"][p]]])
        return GradientTotals(
            fields=tot["grad"][p],
            max_abs=float(tot["gmax"][p]),
            units=tot["units"][self.offsets[p] : self.offsets[p] + 2 * w].reshape(2, w),
            first_nonfinite=first_batch(float(tot["grad/first"][p])),
            dist=dist,
            hist=tot["hist"][p] if "hist" in tot else None,
            scale=self.scale,
        )

    def forward(self, name: str) -> ForwardTotals | None:
        q = self.fwd.get(name)
        if q is None:
            return None
        nonfinite, sum_abs, elements = (float(v) for v in self.totals["fwd"][q])
        first = first_batch(float(self.totals["fwd/first"][q]))
        return ForwardTotals(int(nonfinite), sum_abs / elements if elements else 0.0, first)

    def dims(self, name: str) -> list[int]:
        """The largest sizes seen after the batch axis of output `name`, when the model
        leaves some of them open ([] when every size is known)."""
        where = self.open.get(name)
        return [] if where is None else [int(d) for d in self.totals["dims"][where]]


class Step:
    """The per-batch computation for a model and a plan; `compute(inputs)` returns summaries.

    Use inside `capture.installed(step.groups)`, which wraps the layers' `call` for the whole
    run, so that every trace of the compiled step sees them.
    """

    def __init__(self, model: KerasModel, plan: Plan) -> None:
        self.model, self.plan = model, plan
        self.layout = Layout()  # filled while tracing (or running eagerly)
        self.traces = 0  # calls of `compute` in Python: traces, or eager runs
        self.arrays: dict[tuple[int, str], Tensor] = {}  # `plan.keep`: the whole gradients
        self.groups = call_groups(model, plan.sites, plan.every_leaf)

    def compute(
        self, inputs: Sequence[Tensor], samples: Tensor | None = None, labels: Sequence[Tensor] = ()
    ) -> dict[str, Tensor]:
        """Forward and backward on one batch (a tuple of tensors in the model's input order);
        `samples` are the batch's sample indices in the data (for the default target and the
        random labels of `plan.weights`), `labels` its own labels if the stream has them."""
        self.traces += 1
        weights = self.plan.weights
        tape = tf.GradientTape(persistent=len(self.plan.targets) + (weights is not None) > 1)
        rec, outputs, scalars, loss = forward_pass(
            self.model, self.plan, tape, inputs, samples, labels
        )
        names = list(rec.anchors)
        anchors = [rec.anchors[n] for n in names]
        layout = Layout(rec.records, forward=list(rec.forward), open_dims=list(rec.open_dims))
        vectors, widths = [], []
        for t, scalar in enumerate(scalars):
            rec.target = t
            found = tape.gradient(scalar, anchors) if scalar is not None and anchors else []
            for name, vector in zip(names, found, strict=True):
                if vector is not None:
                    layout.grads.append((t, name))
                    vectors.append(vector)
                    widths.append(rec.widths[name])
        summaries = reductions.pack_gradients(vectors, widths, self.plan.data) if vectors else {}
        if rec.forward:
            summaries["fwd"] = reductions.pack_forward(list(rec.forward.values()))
        if rec.open_dims:
            summaries["dims"] = tf.cast(tf.concat(list(rec.open_dims.values()), 0), tf.float64)
        if weights is not None:
            grads = tape.gradient(loss, list(weights.variables))
            summaries.update(weights.summaries(grads, tf.shape(inputs[0])[0]))
        summaries["samples"] = tf.reshape(
            tf.cast(reductions.samples_in(inputs[0]), tf.float64), [1]
        )
        for i, site in enumerate(self.plan.alive):
            units = rec.captured[site.key]
            units = tf.reshape(units, [-1, tf.shape(units)[-1]])
            summaries[f"alive{i}/gmax"] = tf.reduce_max(tf.cast(units != 0, tf.float64), axis=0)
        floats = [o for o in tf.nest.flatten(outputs) if is_float(o)]
        if not self.plan.data and self.plan.every_leaf and floats:  # scan's one batch: is an
            # output the same for every sample?
            summaries["spread"] = tf.stack([reductions.output_spread(o) for o in floats])
        self.layout, self.arrays = layout, rec.arrays
        return summaries

    def result(
        self, totals: dict[str, np.ndarray], samples: int, batches: int, replicas: int
    ) -> StreamRun:
        """Unpack the summed summaries into one entry per captured activation."""
        scale = 1.0 / samples if self.plan.reduce == "mean" and self.plan.data and samples else 1.0
        unpack = Unpack(self.layout, totals, scale)
        records = self.layout.records
        targets: list[Probed | None] = []
        keys = [rec.site.key for rec in records]
        for target in self.plan.targets:
            r = keys.index(target.key) if target is not None and target.key in keys else None
            targets.append(None if r is None else self._probed(r, 0, unpack, samples, target))
        chosen = {s.key for s in self.plan.sources}
        every = self.plan.every_leaf
        keep = [r for r, rec in enumerate(records) if every or rec.site.key in chosen]
        activations, forward = [], []
        gradients: list[list[GradientTotals | None]] = [[] for _ in self.plan.targets]
        arrays: list[list[np.ndarray | None]] = [[] for _ in self.plan.targets]
        for r in keep:
            k = self._chosen_output(r, unpack)
            activations.append(self._probed(r, k, unpack, samples))
            forward.append(unpack.forward(f"{r}.{k}"))
            for t, column in enumerate(gradients):
                column.append(unpack.gradient(t, f"{r}.{k}"))
                whole = self.arrays.get((t, f"{r}.{k}"))
                arrays[t].append(None if whole is None else to_numpy(whole))
        spread = totals.get("spread")
        return StreamRun(
            output_spread=() if spread is None else tuple((float(a), float(b)) for a, b in spread),
            activations=tuple(activations),
            gradients=tuple(tuple(c) for c in gradients),
            forward=tuple(forward),
            targets=tuple(targets),
            samples=samples,
            batches=batches,
            replicas=replicas,
            data=self.plan.data,
            traces=self.traces // max(replicas, 1),
            arrays=tuple(tuple(a) for a in arrays) if self.plan.keep else (),
            alive=tuple(totals[f"alive{i}/gmax"] for i in range(len(self.plan.alive))),
        )

    def _chosen_output(self, r: int, unpack: Unpack) -> int:
        """The first output the (first) target depends on, else the first tensor output."""
        outputs = self.layout.records[r].outputs
        tensors = [i for i, o in enumerate(outputs) if o is not None]
        found = [i for i in tensors if (0, f"{r}.{i}") in unpack.grads]
        return found[0] if found else (tensors[0] if tensors else 0)

    def _probed(
        self, r: int, k: int, unpack: Unpack, samples: int, site: Site | None = None
    ) -> Probed:
        rec = self.layout.records[r]
        out, site = rec.outputs[k], site or rec.site
        if out is None:
            return Probed(site, (), "object", k)
        seen = unpack.dims(f"{r}.{k}")
        rest = tuple(
            int(d) if d is not None else (seen[j] if j < len(seen) else 0)
            for j, d in enumerate(out.shape[1:])
        )
        batch = samples if self.plan.data or out.shape[:1] == (None,) else out.shape[0]
        shape = (int(batch or 0), *rest) if out.shape else ()
        return Probed(site, shape, out.dtype, k)


def run_stream(
    model: KerasModel,
    plan: Plan,
    stream: DataStream,
    strategy: Strategy | None = None,
    on_progress: Progress | None = None,
) -> StreamRun:
    """The compiled step of `plan` (`plan.data` True) over every sample of `stream`, under
    `strategy` (None: the default one, one device; the model's variables created under its
    scope): the batches, the errors and `on_progress` are as in `step_calls.over_batches`."""
    strategy = strategy or tf.distribute.get_strategy()
    step = Step(model, plan)
    size = float(getattr(stream, "batch_size", 0) or 0)
    base = float(getattr(stream, "first_sample", 0) or 0)
    replicas, workers = int(strategy.num_replicas_in_sync), is_multi_worker(strategy)
    # a replica's share of a batch may be empty (the weights' all-reduce takes it as it is)
    spread = not step_calls.is_default(strategy) and (workers or plan.weights is None)
    n_inputs = len(stream.specs)

    def replica_step(batch: tuple[Tensor, ...]) -> dict[str, Tensor]:
        inputs, labels, samples = batch[:n_inputs], batch[n_inputs:-1], batch[-1]
        empty = tf.equal(tf.size(samples), 0)
        if spread:
            inputs, fed = step_calls.pad_if_empty(inputs, samples, empty)
            labels, _ = step_calls.pad_if_empty(labels, samples, empty)
            summaries = step_calls.masked(step.compute(inputs, fed, labels), empty)
        else:
            summaries = step.compute(inputs, samples, labels)
        if size:  # the batch's index in the data, from its first sample's (inf: empty)
            first = tf.cast(tf.reduce_min(samples), tf.float64)
            inf = tf.constant(math.inf, tf.float64)
            summaries[POSITION] = tf.where(empty, inf, tf.floor((first - base) / size))
        return summaries

    kept = step_calls.moving_statistics_kept(model, plan.training)
    with kept, installed(step.groups):  # the trace happens here, once; the batch axis is None
        summed = step_calls.over_batches(stream, strategy, replica_step, on_progress, model)
    local = len(strategy.extended.worker_devices) if workers else replicas  # this worker's
    run = step.result(summed.totals, summed.samples, summed.batches, local)
    weights = None if plan.weights is None else plan.weights.result(summed.totals, replicas)
    return replace(run, replicas=replicas, weights=weights)
