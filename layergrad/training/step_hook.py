"""What the monitored training step computes, inside Keras's compiled `train_function`.

Three wrappers, installed for one `model.fit` and removed after it:

- each layer's `call` hands its float outputs to the step (no op is added);
- `model.compute_loss` hands the step's loss to the step, and there, with the forward pass
  done, the step measures every layer's NaN/Inf outputs and dead units, and the weights;
- the optimizer's `_all_reduce_sum_gradients` (the TensorFlow optimizer's one place where the
  gradients of every replica have been summed, before any update) reduces the gradients.

The wrappers only act while a monitored `train_step` runs in the same thread, i.e. while
Keras traces it (once per replica under `MirroredStrategy`); they add graph ops, never Python
work per step. The step is traced twice (`train_functions`), and the callback picks the one
to run before each execution:

- **measuring** (a checkpoint is due): every reduction: per layer NaN/Inf outputs, dead
  units and a gradient histogram; per variable gradient L2, dead units and the weight norm,
  and its NaN/Inf gradient values when a norm is NaN/Inf; the learning rate. The callback
  reads the rows of up to `KEPT` measured steps at once (`step_reductions.py`).
- **ordinary**: watches its loss, and notes whether its batch's float inputs hold NaN/Inf
  (a sum per gradient on every step cost about 9% of a small MLP's step); on the fit's
  first step whose loss is NaN/Inf it measures the forward pass, the weights and the
  inputs, in one `unlowered_cond`. A NaN/Inf only in a step's gradients leaves NaN/Inf in
  the weights its update writes: the next step's loss shows it, and that step's branch
  counts them (or, a ReLU hiding them from the loss, the next measuring step does: it
  counts the weights' NaN/Inf too, and flags them). An ordinary step whose loss the
  monitor does not see (a custom `train_step`) keeps one sum per gradient, and measures the
  gradients on its first NaN/Inf.

Both write each step's loss and NaN/Inf flag into the ring of losses and count the step, and
whether it was non-finite, in one update, into `StepResults` (`step_reductions.py`). The loss
is written, and the step counted, outside the optimizer: a `LossScaleOptimizer` skips the
gradients' part on a step whose scaled gradients overflow (that part then counts its NaN/Inf
in its branch).
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from layergrad.core.tf_runtime import keras, tf
from layergrad.core.tf_types import (
    KerasLayer,
    KerasModel,
    KerasOptimizer,
    KerasVariable,
    Tensor,
    TensorTree,
    TFOperation,
)
from layergrad.engine.layer_calls import capturing
from layergrad.model.layer_refs import input_names, variable_names
from layergrad.training import step_reductions as reductions
from layergrad.training.step_reductions import GRAD_NONFINITE, StepResults, put, unlowered_cond

TrainFunction = Callable[[object], object]

_active = threading.local()  # the step being traced in this thread, if any


@dataclass(frozen=True)
class LayerVariables:
    """A layer the monitor reports on: its path, and the indices of its trainable variables."""

    path: str
    layer: KerasLayer
    variables: tuple[int, ...]


class _Trace:
    """What one trace of the monitored step collects (per replica thread)."""

    def __init__(self, layers: int, measuring: bool) -> None:
        self.measuring = measuring  # the step that reduces everything, or the ordinary one
        self.loss: Tensor = None
        self.counts: Tensor = None  # the fit's counts before the step (`StepResults.counts`)
        self.count: Tensor = None  # the step's number in this fit, from 0
        self.ring_row: Tensor = None  # its row in the ring of losses
        self.total: Tensor = None  # its loss, summed (float32)
        self.loss_bad: Tensor = None  # whether its loss is NaN/Inf
        self.batch_bad: Tensor = None  # whether a float input of its batch holds NaN/Inf
        self.clean: Tensor = None  # whether no step of the fit before it was non-finite
        self.found: Tensor = None  # whether a gradient value of the step is NaN/Inf
        self.written: TFOperation = None  # the ring's write of its loss
        self.graph: object = None  # the graph of the step (not of a branch in it)
        self.outputs: list[list[Tensor]] = [[] for _ in range(layers)]  # float outputs, every call
        self.order: list[int] = []
        self.forward: TFOperation = None  # the forward statistics' op
        self.writes: list[TFOperation] = []  # the writes the step's count comes after
        self.recorded = False  # whether the optimizer handed the step's gradients over
        self.inputs: list[Tensor] = []  # the float inputs of the step's batch

    def done(self) -> list[TFOperation]:
        """The step's writes in the graph being built (a branch's stay in the branch); none
        when the step runs eagerly (`model.compile(run_eagerly=True)`: each has run)."""
        if tf.executing_eagerly():
            return []
        graph = tf.compat.v1.get_default_graph()
        ops = [*self.writes, *(op for op in (self.written, self.forward) if op is not None)]
        return [op for op in ops if getattr(op, "op", op).graph is graph]  # (a write: its op)


class StepHook:
    """The graph side of `GradientMonitor`: variables, wrappers, and the step's reductions."""

    def __init__(
        self,
        model: KerasModel,
        layers: Sequence[LayerVariables],
        variables: Sequence[KerasVariable],
        histograms: bool,
        rows: int = 1,
    ) -> None:
        self.model, self.layers, self.variables = model, tuple(layers), tuple(variables)
        self.histograms, self.rows = histograms, max(1, int(rows))  # rows: steps per execution
        self.forward_order: list[int] = []  # layer indices in the order the trace called them
        self.optimizer = applying_optimizer(model)
        self._keys = {self.optimizer._var_key(v): i for i, v in enumerate(variables)}
        self._train_steps: dict[bool, Callable[[TensorTree], dict[str, Tensor]]] = {}
        # what the traced train_step let the monitor see (True until a trace says otherwise):
        # its loss through model.compute_loss, its gradients through the optimizer
        self.sees_loss = self.sees_gradients = True
        self.input_names: list[str] = []  # the float inputs' names, as the trace found them
        self.results = StepResults(model, len(self.layers), len(self.variables), self.rows)
        owner = {i: e.path for e in self.layers for i in e.variables}
        owned = [(v, owner.get(i, "")) for i, v in enumerate(self.variables)]
        # each variable's name, layer and shape, as every checkpoint names it
        self.named: list[tuple[str, str, tuple[int, ...]]] = [
            (f"{path}/{name}", path, tuple(int(d) for d in v.shape))
            for (v, path), name in zip(owned, variable_names(owned), strict=True)
        ]

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        """Wrap the model's step, loss, layer calls and optimizer for the block."""
        model, optimizer = self.model, self.optimizer
        index = {entry.path: i for i, entry in enumerate(self.layers)}
        groups = [(entry.layer, entry.path, None) for entry in self.layers]
        original_step, original_loss = model.train_step, model.compute_loss
        original_reduce = optimizer._all_reduce_sum_gradients

        def traced(measuring: bool) -> Callable[[TensorTree], dict[str, Tensor]]:
            @functools.wraps(original_step)
            def train_step(data: TensorTree) -> dict[str, Tensor]:
                trace = _Trace(len(self.layers), measuring)
                trace.graph = tf.compat.v1.get_default_graph()
                trace.inputs, self.input_names = _float_inputs(model, data)
                _active.trace = trace
                try:
                    logs = original_step(data)
                    # the step counts itself (and a NaN/Inf loss or gradient), last, whatever
                    # the optimizer did
                    flags = [f for f in (trace.loss_bad, trace.found) if f is not None]
                    bad = tf.reduce_any(tf.stack(flags)) if flags else tf.constant(False)
                    with tf.control_dependencies(trace.done()):
                        self.results.counts.assign_add(tf.stack([1.0, tf.cast(bad, tf.float64)]))
                    self.sees_loss, self.sees_gradients = trace.loss is not None, trace.recorded
                    return logs
                finally:
                    _active.trace = None
                    self.forward_order = trace.order

            return train_step

        @functools.wraps(original_loss)
        def compute_loss(*args: object, **kwargs: object) -> Tensor:
            loss = original_loss(*args, **kwargs)
            trace = getattr(_active, "trace", None)
            if trace is not None and trace.loss is None:
                trace.loss = loss
                self._forward(trace, loss)
            return loss

        def all_reduce(
            grads_and_vars: list[tuple[Tensor, KerasVariable]],
        ) -> list[tuple[Tensor, KerasVariable]]:
            reduced = original_reduce(grads_and_vars)
            trace = getattr(_active, "trace", None)
            if trace is None:
                return reduced
            # The reading comes first in program order, so TensorFlow's automatic control
            # dependencies make the update of each variable wait for its read.
            trace.recorded = True
            self._record(trace, list(reduced))
            return reduced

        def on_outputs(key: tuple[str, int], flat: list[Tensor], _args: TensorTree) -> list[Tensor]:
            trace = getattr(_active, "trace", None)
            if trace is not None:
                self._observe(trace, index[key[0]], flat)
            return flat

        self._train_steps = {True: traced(True), False: traced(False)}
        patches = [
            (model, "train_step", self._train_steps[False]),
            (model, "compute_loss", compute_loss),
            (optimizer, "_all_reduce_sum_gradients", all_reduce),
        ]
        saved = [(owner, name, owner.__dict__.get(name)) for owner, name, _ in patches]
        with capturing(groups, on_outputs):
            for owner, name, wrapper in patches:
                setattr(owner, name, wrapper)
            try:
                yield
            finally:
                for owner, name, previous in saved:  # the instance's own attribute, if any
                    owner.__dict__.pop(name, None)
                    if previous is not None:
                        setattr(owner, name, previous)
                model.train_function = None  # the next fit traces the plain step again

    def train_functions(self) -> tuple[TrainFunction, TrainFunction]:
        """Keras's train function of the monitored step: (measuring, ordinary), each traced
        on its first call. Only inside `installed()`."""
        made = []
        for measuring in (True, False):
            self.model.train_step = self._train_steps[measuring]
            self.model.make_train_function(force=True)
            made.append(self.model.train_function)
        return made[0], made[1]

    def called(self) -> list[int]:
        """The layers' indices in the order the step called them, then the uncalled ones with
        variables."""
        seen = set(self.forward_order)
        rest = [i for i, e in enumerate(self.layers) if i not in seen and e.variables]
        return [*self.forward_order, *rest]

    def order(self) -> list[str]:
        """The layers' paths in the order of `called()`."""
        return [self.layers[i].path for i in self.called()]

    def _observe(self, trace: _Trace, layer: int, outputs: list[Tensor]) -> None:
        """Keep a call's float outputs for `_forward_stats` (no op is added here)."""
        floats = [t for t in outputs if getattr(getattr(t, "dtype", None), "is_floating", False)]
        trace.outputs[layer].extend(floats)
        if floats and layer not in trace.order:
            trace.order.append(layer)

    def _forward(self, trace: _Trace, loss: Tensor) -> None:
        """Once the loss exists (the forward pass is done, its activations all alive): the
        forward statistics of a measuring step, or of an ordinary step's first non-finite
        loss or batch. (Measured later, the activations would live on through the backward
        pass.)"""
        # the step's loss into the ring now: an optimizer may skip the gradients' part (a
        # LossScaleOptimizer does when the scaled gradients overflow)
        trace.total = total = tf.cast(tf.reduce_sum(loss), tf.float32)
        trace.loss_bad = ~tf.math.is_finite(total)
        flag = tf.cast(trace.loss_bad, tf.float32)
        trace.written = put(self.results.losses, self._ring_row(trace), self._ring(trace, flag))
        if trace.measuring:
            trace.forward = self._forward_stats(trace, self._row(trace))
            return
        remade = reductions.remade_outputs(trace.outputs)
        trace.forward = unlowered_cond(
            tf.logical_and(trace.loss_bad, self._clean(trace)),
            lambda: self._forward_stats(trace, self.results.spare, remade(), weights=True),
            lambda: tf.constant(False),
        )

    def _forward_stats(
        self,
        trace: _Trace,
        row: Tensor | int,
        outputs: list[list[Tensor]] | None = None,
        weights: bool = False,
    ) -> TFOperation:
        """Each layer's NaN/Inf outputs and dead units (of `outputs`, by default the
        trace's), and the learning rate, into `row`; with `weights`, each variable's NaN/Inf
        values (a measuring step counts them with its gradients, in `_record`)."""
        counts, dead = reductions.forward_stats(trace.outputs if outputs is None else outputs)
        writes = [
            put(self.results.activations, row, counts),
            put(self.results.dead, row, dead),
            # here, not with the gradients, which an optimizer may skip
            put(self.results.learning_rate, row, self.model.optimizer.learning_rate),
            put(self.results.forward_at, row, self._count(trace)),
            put(self.results.inputs, row, reductions.input_stats(trace.inputs)),
        ]
        if weights:
            writes.append(
                put(self.results.weights, row, reductions.weights_nonfinite(self.variables))
            )
        with tf.control_dependencies(writes):
            return tf.constant(True)

    def _ring(self, trace: _Trace, flag: Tensor) -> Tensor:
        """The step's row of the ring of losses: its NaN/Inf flag, its loss (NaN: not seen),
        and whether its batch holds a NaN/Inf. The batch's is only noted: a model may take
        NaN/Inf inputs by design (a mask of -inf), and a NaN/Inf that a ReLU hides from the
        loss shows later as NaN/Inf weights, which the callback then traces to the batch."""
        if trace.batch_bad is None:
            finite = [tf.reduce_all(tf.math.is_finite(t)) for t in trace.inputs]
            trace.batch_bad = ~tf.reduce_all(tf.stack(finite)) if finite else tf.constant(False)
        loss = tf.constant(float("nan")) if trace.total is None else trace.total
        return tf.stack([tf.cast(flag, tf.float32), loss, tf.cast(trace.batch_bad, tf.float32)])

    def _clean(self, trace: _Trace) -> Tensor:
        """Whether no step of this fit before this one was non-finite."""
        if trace.clean is None:
            self._count(trace)  # reads the counts
            trace.clean = tf.equal(trace.counts[1], 0.0)
        return trace.clean

    def _count(self, trace: _Trace) -> Tensor:
        """The step's number in this fit. `counts` is read once per step, before the step
        counts itself, and outside any branch (a tensor made in one stays there)."""
        if trace.count is None:
            trace.counts = self.results.counts.read_value()
            trace.count = trace.counts[0]
        return trace.count

    def _ring_row(self, trace: _Trace) -> Tensor:
        """The step's row in the ring of losses."""
        if trace.ring_row is None:
            trace.ring_row = tf.math.floormod(self._count(trace), self.results.ring)
        return trace.ring_row

    def _row(self, trace: _Trace) -> Tensor:
        """The row of a measuring step's results: its number modulo the rows kept."""
        return tf.math.floormod(tf.cast(self._count(trace), tf.int32), self.results.kept)

    def _record(self, trace: _Trace, reduced: list[tuple[Tensor, KerasVariable]]) -> None:
        """The step's gradient reductions, and its NaN/Inf flag in the ring of losses; sets
        `trace.found`, whether a gradient value is NaN/Inf (counted by the step, last).

        An ordinary step whose loss the monitor sees reduces nothing here: a NaN/Inf only in
        its gradients leaves NaN/Inf in the weights its update writes, which the next step's
        loss shows, and that step's branch counts them (`_forward_stats`)."""
        if not trace.measuring and trace.written is not None:
            return
        grads: list[Tensor | None] = [None] * len(self.variables)
        weights: list[Tensor | None] = [None] * len(self.variables)
        for g, v in reduced:
            i = self._keys.get(self.optimizer._var_key(v))  # its key, mirrored or not
            if i is not None and g is not None:
                # an Embedding's IndexedSlices stay sparse on ordinary steps
                grads[i] = reductions.shaped(g, self.named[i][2])
                weights[i] = v
        # One sum per gradient: a NaN or Inf anywhere makes the total non-finite (an overflow
        # of huge finite values too: the full reductions' exact counts then say which).
        sums = [
            tf.reduce_sum(tf.cast(reductions.values(g), tf.float32)) for g in grads if g is not None
        ]
        if trace.total is not None:  # a custom train_step may compute its loss elsewhere
            sums.append(trace.total)
        bad = ~tf.math.is_finite(tf.add_n(sums) if sums else tf.constant(0.0))
        if trace.measuring and trace.forward is None:  # no loss: measure the outputs here
            trace.forward = self._forward_stats(trace, self._row(trace))
        if trace.measuring:  # the weights' NaN/Inf (left by an update), from their norms
            halves = reductions.half_squares(grads, weights)
            held = reductions.weights_nonfinite(weights, halves)
            trace.writes.append(put(self.results.weights, self._row(trace), held))
            held_bad = tf.reduce_any(held > 0)
            bad = tf.logical_or(bad, held_bad)
        count, row = self._count(trace), self._ring_row(trace)
        flag = self._ring(trace, bad)
        # Whether a gradient value is NaN/Inf: the sum's word, unless the step counted them
        # (a sum of huge finite values can overflow; the next NaN must still be measured).
        if trace.measuring or trace.written is None:  # (no loss seen: the row is written here)
            trace.writes.append(put(self.results.losses, row, flag))
        if trace.measuring:  # (its NaN/Inf weights count as found)
            found = tf.logical_or(self._reduce(self._row(trace), count, grads, halves), held_bad)
        else:  # the gradients, into the spare row, on the fit's first non-finite step only
            dense = reductions.half_squares(grads, weights, sparse=False)  # (see there)

            def first_nonfinite() -> Tensor:
                # its flag too: an ordinary step's row holds its loss's (`_forward`), and the
                # callback looks further only at the fit's first non-finite step
                writes = [] if trace.written is None else [put(self.results.losses, row, flag)]
                sparse = reductions.half_squares(grads, weights, sparse=True)
                halves = [d if d is not None else s for d, s in zip(dense, sparse, strict=True)]
                with tf.control_dependencies(writes):
                    return self._reduce(self.results.spare, count, grads, halves, trace.inputs)

            found = unlowered_cond(
                tf.logical_and(bad, self._clean(trace)),
                first_nonfinite,
                lambda: tf.identity(bad),
            )
        if tf.compat.v1.get_default_graph() is trace.graph:  # counted with the step, once
            trace.found = found
        else:  # in a branch of the optimizer's (a LossScaleOptimizer's): counted here
            with tf.control_dependencies(trace.done()):
                self.results.counts.assign_add(tf.stack([0.0, tf.cast(found, tf.float64)]))

    def _reduce(
        self,
        row: Tensor | int,
        count: Tensor,
        grads: list[Tensor | None],
        halves: list[Tensor | None],
        inputs: list[Tensor] | None = None,
    ) -> Tensor:
        """Write the gradient rows (and histograms), and the `inputs`' NaN/Inf counts, into
        `row`; whether a gradient value is NaN/Inf."""
        rows = reductions.gradient_rows(grads, halves)
        writes = [put(self.results.grads, row, rows), put(self.results.reduced_at, row, count)]
        if inputs is not None:  # an ordinary step's first non-finite one: was it the data?
            writes.append(put(self.results.inputs, row, reductions.input_stats(inputs)))
        if self.histograms:
            counts, ranges = reductions.histograms([e.variables for e in self.layers], grads)
            writes += [
                put(self.results.histogram, row, counts),
                put(self.results.ranges, row, ranges),
            ]
        with tf.control_dependencies(writes):
            return tf.reduce_any(rows[:, GRAD_NONFINITE] > 0)


def applying_optimizer(model: KerasModel) -> KerasOptimizer:
    """The optimizer that applies the gradients: a `LossScaleOptimizer`'s inner one.

    Raises:
        TypeError: it is not Keras's TensorFlow optimizer (the monitor reads the gradients
            where that optimizer sums them over replicas).
    """
    optimizer = getattr(model, "optimizer", None)
    optimizer = getattr(optimizer, "inner_optimizer", optimizer)
    if not hasattr(optimizer, "_all_reduce_sum_gradients"):
        raise TypeError(
            f"GradientMonitor needs a compiled model with a Keras optimizer on the TensorFlow "
            f"backend; got optimizer {type(optimizer).__name__}: call model.compile(optimizer=...)"
        )
    return optimizer


def _float_inputs(model: KerasModel, data: TensorTree) -> tuple[list[Tensor], list[str]]:
    """The float tensors of a batch's inputs, and their names (the model's input names, a
    dict's keys, else `input N`)."""
    x = keras.utils.unpack_x_y_sample_weight(data)[0] if isinstance(data, tuple) else data
    flat = keras.tree.flatten(x)
    if isinstance(x, dict):
        names = sorted(str(k) for k in x)
    else:
        names = input_names(model)
        if len(names) != len(flat):
            names = [f"input {i}" for i in range(len(flat))]
    pairs = [
        (t, n) for t, n in zip(flat, names, strict=False)
        if getattr(getattr(t, "dtype", None), "is_floating", False)
    ]  # fmt: skip
    return [t for t, _ in pairs], [n for _, n in pairs]


def trace_key(
    model: KerasModel, variables: Sequence[KerasVariable], rows: int, histograms: bool
) -> tuple[object, ...]:
    """The model's compilation (Keras makes a new config at each `compile`), the variables
    watched, the steps per execution and whether histograms are written."""
    compiled = getattr(model, "_compile_config", None)
    return (
        id(model),
        id(compiled),
        id(model.optimizer),
        tuple(id(v) for v in variables),
        rows,
        histograms,
        bool(getattr(model, "run_eagerly", False)),
        getattr(model, "jit_compile", None),
    )
