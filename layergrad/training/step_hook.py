"""What the monitored training step computes, inside Keras's compiled `train_function`.

Three wrappers, installed for one `model.fit` and removed after it:

- each layer's `call` hands its float outputs to the step (no op is added);
- `model.compute_loss` hands the step's loss to the step; there, with the forward pass done,
  one `tf.cond` measures every layer's NaN/Inf outputs and dead units on a checkpoint step
  or when the loss is non-finite;
- the optimizer's `_all_reduce_sum_gradients` (the TensorFlow optimizer's one place where the
  gradients of every replica have been summed, before any update) reduces the gradients.

The wrappers only act while the monitored `train_step` runs in the same thread, i.e. while
Keras traces it (once per replica under `MirroredStrategy`); they add graph ops, never Python
work per step. Every step writes two scalars: whether the loss or a gradient is non-finite
(one sum per gradient), and the loss. On a checkpoint step (`due`, set by the callback) or a
non-finite one, a `tf.cond` branch also reduces every gradient: L2, non-finite count, dead
units, the weight norm, a histogram per layer. The results live in sync-on-read variables,
the kind Keras metrics use, so `tf.distribute` sums (activations, loss) or takes the first
replica's value (the gradients, already all-reduced) when the callback reads them.

With `steps_per_execution = k` Keras runs k steps in one call and calls the callback once
after them, so every result has k rows: step number s of the fit (counted by the step itself,
in `steps`) writes row s mod k, and `due` holds k flags, one per row. The callback reads the
rows of every step of the execution: each step's loss and its own gradients.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass

from layergrad.core.keras_backend import quiet_import
from layergrad.core.tf_types import (
    KerasLayer,
    KerasModel,
    KerasOptimizer,
    KerasVariable,
    Tensor,
    TensorTree,
    TFOperation,
    TFVariable,
)
from layergrad.engine.layer_calls import capturing

BINS = 30  # histogram buckets per layer gradient (TensorBoard's default)
# Columns of the per-variable statistics: squared gradient norm, non-finite gradient values,
# dead units (last-axis slices whose gradient is exactly 0), units, squared weight norm.
GRAD_SQ, GRAD_NONFINITE, DEAD, UNITS, WEIGHT_SQ = range(5)
COLUMNS = 5

_active = threading.local()  # the step being traced in this thread, if any


@dataclass(frozen=True)
class LayerVariables:
    """A layer the monitor reports on: its path, and the indices of its trainable variables."""

    path: str
    layer: KerasLayer
    variables: tuple[int, ...]


class _Trace:
    """What one trace of the monitored step collects (per replica thread)."""

    def __init__(self, layers: int) -> None:
        self.loss: Tensor = None
        self.count: Tensor = None  # the step's number in this fit (from 0), and its row
        self.row: Tensor = None
        self.outputs: list[list[Tensor]] = [[] for _ in range(layers)]  # float outputs, every call
        self.order: list[int] = []
        self.forward: TFOperation = None  # the forward statistics' op


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
        tf, _ = quiet_import()
        self.model, self.layers, self.variables = model, tuple(layers), tuple(variables)
        self.histograms, self.rows = histograms, max(1, int(rows))  # rows: steps per execution
        self.forward_order: list[int] = []  # layer indices in the order the trace called them
        self._keys = {_var_key(model, v): i for i, v in enumerate(variables)}
        on_read = tf.VariableSynchronization.ON_READ
        total, first = tf.VariableAggregation.SUM, tf.VariableAggregation.ONLY_FIRST_REPLICA
        n_layers, n_vars = len(self.layers), len(self.variables)
        with model.distribute_strategy.scope():

            def state(
                shape: Sequence[int], aggregation: object, name: str, fill: float = 0.0
            ) -> TFVariable:
                dtype = tf.float64 if fill else tf.float32  # step numbers: exact in float64
                return tf.Variable(
                    tf.fill([self.rows, *shape], tf.constant(fill, dtype)),
                    trainable=False,
                    synchronization=on_read,
                    aggregation=aggregation,
                    name=f"layergrad_{name}",
                )

            self.due = tf.Variable(tf.zeros([self.rows], tf.bool), trainable=False,
                                   name="layergrad_due")  # fmt: skip
            self.step = state([2], total, "step")  # [replicas that saw a NaN/Inf, loss]
            self.activations = state([n_layers], total, "activation_nonfinite")
            self.dead = state([n_layers, 2], first, "dead_units")
            # the step number the two above are from (-1: none yet)
            self.measured_at = state([], first, "measured_at", fill=-1.0)
            self.grads = state([n_vars, COLUMNS], first, "gradients")
            self.learning_rate = state([], first, "learning_rate")
            self.histogram = state([n_layers, BINS], first, "histogram")
            self.ranges = state([n_layers, 2], first, "histogram_range")
            self.steps = tf.Variable(  # the steps this fit has run (each counts itself)
                tf.constant(0.0, tf.float64),
                trainable=False,
                synchronization=on_read,
                aggregation=first,
                name="layergrad_steps",
            )

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        """Wrap the model's step, loss, layer calls and optimizer for the block."""
        model, optimizer = self.model, applying_optimizer(self.model)
        index = {entry.path: i for i, entry in enumerate(self.layers)}
        groups = [(entry.layer, entry.path, None) for entry in self.layers]
        saved = {
            "train_step": model.__dict__.get("train_step"),
            "compute_loss": model.__dict__.get("compute_loss"),
        }
        reduce_saved = optimizer.__dict__.get("_all_reduce_sum_gradients")
        original_step, original_loss = model.train_step, model.compute_loss
        original_reduce = optimizer._all_reduce_sum_gradients

        @functools.wraps(original_step)
        def train_step(data: TensorTree) -> dict[str, Tensor]:
            trace = _Trace(len(self.layers))
            _active.trace = trace
            try:
                return original_step(data)
            finally:
                _active.trace = None
                self.forward_order = trace.order

        @functools.wraps(original_loss)
        def compute_loss(*args: object, **kwargs: object) -> Tensor:
            loss = original_loss(*args, **kwargs)
            trace = getattr(_active, "trace", None)
            if trace is not None and trace.loss is None:
                trace.loss = loss
                self._forward_stats(trace, loss)
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
            self._record(trace, list(reduced))
            return reduced

        def on_outputs(key: tuple[str, int], flat: list[Tensor], _args: TensorTree) -> list[Tensor]:
            trace = getattr(_active, "trace", None)
            if trace is not None:
                self._observe(trace, index[key[0]], flat)
            return flat

        with capturing(groups, on_outputs):
            model.train_step, model.compute_loss = train_step, compute_loss
            optimizer._all_reduce_sum_gradients = all_reduce
            try:
                yield
            finally:
                for name, previous in saved.items():
                    model.__dict__.pop(name, None)
                    if previous is not None:
                        setattr(model, name, previous)
                optimizer.__dict__.pop("_all_reduce_sum_gradients", None)
                if reduce_saved is not None:
                    optimizer._all_reduce_sum_gradients = reduce_saved
                model.train_function = None  # the next fit traces the plain step again

    def _observe(self, trace: _Trace, layer: int, outputs: list[Tensor]) -> None:
        """Keep a call's float outputs for `_forward_stats` (no op is added here)."""
        floats = [t for t in outputs if getattr(getattr(t, "dtype", None), "is_floating", False)]
        trace.outputs[layer].extend(floats)
        if floats and layer not in trace.order:
            trace.order.append(layer)

    def _forward_stats(self, trace: _Trace, loss: Tensor) -> None:
        """Once the loss exists (the forward pass is done, its activations all alive): on a
        checkpoint step or a non-finite loss, each layer's NaN/Inf outputs and dead units.

        One `tf.cond` for the whole forward pass, so an ordinary step pays nothing per layer
        and no activation outlives the backward pass that needs it anyway."""
        tf, _ = quiet_import()
        finite = tf.math.is_finite(tf.reduce_sum(tf.cast(loss, tf.float32)))
        row = self._row(trace)

        def measure() -> TFOperation:
            counts, dead = [], []
            for outputs in trace.outputs:
                counts.append(
                    tf.add_n([_nonfinite(t) for t in outputs]) if outputs else tf.constant(0.0)
                )
                dead.append(_dead_units(outputs[0]) if outputs else tf.constant([0.0, 0.0]))
            writes = [
                self._put(self.activations, row, tf.stack(counts) if counts else tf.zeros([0])),
                self._put(self.dead, row, tf.stack(dead) if dead else tf.zeros([0, 2])),
                self._put(self.measured_at, row, trace.count),  # tells stale rows apart
            ]
            with tf.control_dependencies(writes):
                return tf.constant(True)

        trace.forward = tf.cond(
            tf.logical_or(self.due[row], ~finite), measure, lambda: tf.constant(False)
        )

    def _row(self, trace: _Trace) -> Tensor:
        """The step's row in the results: its number in this fit modulo the rows (read once
        per step, before the step counts itself)."""
        tf, _ = quiet_import()
        if trace.row is None:
            trace.count = tf.identity(self.steps.read_value())
            trace.row = tf.math.floormod(tf.cast(trace.count, tf.int32), self.rows)
        return trace.row

    def _put(self, variable: TFVariable, row: Tensor, value: Tensor) -> TFOperation:
        """Write `value` into row `row` of a result variable."""
        tf, _ = quiet_import()
        value = tf.cast(value, variable.dtype)
        if self.rows == 1:
            return variable.assign(tf.expand_dims(value, 0))
        rows = tf.tensor_scatter_nd_update(variable.read_value(), [[row]], value[None])
        return variable.assign(rows)

    def _record(self, trace: _Trace, reduced: list[tuple[Tensor, KerasVariable]]) -> TFOperation:
        """The step's writes: the scalars every step, the gradient reductions when due."""
        tf, _ = quiet_import()
        grads: list[Tensor | None] = [None] * len(self.variables)
        weights: list[Tensor | None] = [None] * len(self.variables)
        for g, v in reduced:
            i = self._keys.get(_var_key(self.model, v))
            if i is not None and g is not None:
                grads[i] = g  # an Embedding's IndexedSlices stay sparse on ordinary steps
                weights[i] = v
        loss = tf.constant(float("nan")) if trace.loss is None else trace.loss
        loss = tf.cast(tf.reduce_sum(loss), tf.float32)
        # One sum per gradient: a NaN or Inf anywhere makes the total non-finite (an overflow
        # of huge finite values too: the checkpoint's exact counts then say which).
        sums = [tf.reduce_sum(tf.cast(_values(g), tf.float32)) for g in grads if g is not None]
        total = tf.add_n(sums) if sums else tf.constant(0.0)
        if trace.loss is not None:  # a custom train_step may compute its loss elsewhere
            total = total + loss
        bad = ~tf.math.is_finite(total)
        row = self._row(trace)
        writes = [self._put(self.step, row, tf.stack([tf.cast(bad, tf.float32), loss]))]
        if trace.forward is not None:
            writes.append(trace.forward)
        full = tf.cond(
            tf.logical_or(self.due[row], bad),
            lambda: self._reduce(row, grads, weights),
            lambda: tf.constant(False),
        )
        with tf.control_dependencies([*writes, full]):  # the step counts itself, last
            return self.steps.assign_add(tf.constant(1.0, tf.float64))

    def _reduce(
        self, row: Tensor, grads: list[Tensor | None], weights: list[Tensor | None]
    ) -> TFOperation:
        tf, _ = quiet_import()
        rows = []
        for g, v in zip(grads, weights, strict=True):
            if g is None:
                rows.append(tf.constant([0.0, 0.0, 0.0, 0.0, -1.0]))  # -1: no gradient
                continue
            g32 = tf.cast(tf.convert_to_tensor(g), tf.float32)
            units = (
                tf.reshape(g32, [-1, g32.shape[-1]]) if g32.shape.rank else tf.reshape(g32, [1, 1])
            )
            dead = tf.reduce_sum(tf.cast(tf.reduce_all(tf.equal(units, 0.0), axis=0), tf.float32))
            w = tf.cast(tf.convert_to_tensor(v), tf.float32)
            rows.append(
                tf.stack(
                    [
                        tf.reduce_sum(tf.square(g32)),  # NaN/Inf when a value is
                        _nonfinite(g32),
                        dead,
                        tf.cast(tf.shape(units)[1], tf.float32),
                        tf.reduce_sum(tf.square(w)),
                    ]
                )
            )
        writes = [
            self._put(self.grads, row, tf.stack(rows) if rows else tf.zeros([0, COLUMNS])),
            self._put(self.learning_rate, row, self.model.optimizer.learning_rate),
        ]
        if self.histograms:
            writes += self._histograms(row, grads)
        with tf.control_dependencies(writes):
            return tf.constant(True)

    def _histograms(self, row: Tensor, grads: list[Tensor | None]) -> list[TFOperation]:
        tf, _ = quiet_import()
        counts, ranges = [], []
        for entry in self.layers:
            parts = [
                tf.reshape(tf.cast(tf.convert_to_tensor(grads[i]), tf.float32), [-1])
                for i in entry.variables
                if grads[i] is not None
            ]
            if not parts:
                counts.append(tf.zeros([BINS]))
                ranges.append(tf.zeros([2]))
                continue
            values = tf.concat(parts, axis=0)
            values = tf.boolean_mask(values, tf.math.is_finite(values))
            low = tf.reduce_min(tf.concat([values, [0.0]], 0))
            high = tf.reduce_max(tf.concat([values, [0.0]], 0))
            high = tf.where(high > low, high, low + 1e-12)
            counts.append(
                tf.cast(tf.histogram_fixed_width(values, [low, high], nbins=BINS), tf.float32)
            )
            ranges.append(tf.stack([low, high]))
        return [
            self._put(self.histogram, row, tf.stack(counts)),
            self._put(self.ranges, row, tf.stack(ranges)),
        ]


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


def _values(gradient: Tensor) -> Tensor:
    """The values of a gradient: a tensor, or the rows an IndexedSlices holds."""
    return gradient.values if hasattr(gradient, "indices") else gradient


def _nonfinite(tensor: Tensor) -> Tensor:
    tf, _ = quiet_import()
    return tf.reduce_sum(tf.cast(~tf.math.is_finite(tensor), tf.float32))


def _dead_units(tensor: Tensor) -> Tensor:
    """[units of the last axis exactly 0 for every sample, units] (zeros below rank 2)."""
    tf, _ = quiet_import()
    rank = tensor.shape.rank
    if rank is None or rank < 2:
        return tf.constant([0.0, 0.0])
    zero = tf.reduce_all(tf.equal(tensor, 0), axis=list(range(rank - 1)))
    units = tf.cast(tf.shape(tensor)[-1], tf.float32)
    return tf.stack([tf.reduce_sum(tf.cast(zero, tf.float32)), units])


def _var_key(model: KerasModel, variable: KerasVariable) -> Hashable:
    """The optimizer's own key of a variable (Keras or tf.Variable, mirrored or not)."""
    key: Callable[[KerasVariable], Hashable] = applying_optimizer(model)._var_key
    return key(variable)
