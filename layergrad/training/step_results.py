"""Where the monitored training step leaves its results, and how the callback reads them.

Sync-on-read variables, the kind Keras metrics use, so `tf.distribute` sums (activations,
loss) or takes the first replica's value (the gradients, already all-reduced) when the
callback reads them. A measuring step s writes its reductions into row s mod `kept` (KEPT
rows, or `steps_per_execution` when that is more), and an ordinary execution's first
non-finite step into the extra row `kept` (`spare`); every step writes its loss and NaN/Inf
flag into row s mod `ring` of `losses`. The callback reads them only every so often: with
`every=1`, once per KEPT steps rather than after each (two reads, 0.3 ms, a step).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from layergrad.core.tf_runtime import tf
from layergrad.core.tf_types import KerasModel, Tensor, TFOperation, TFVariable
from layergrad.training.step_reductions import BINS, COLUMNS, MAX_INPUTS

RING = 64  # loss rows per step of an execution: the callback reads them at least this often
KEPT = 16  # rows of measured steps: the callback reads them at least this often


class StepResults:
    """The variables one monitored fit writes (made in the model's distribution strategy)."""

    def __init__(self, model: KerasModel, layers: int, variables: int, rows: int = 1) -> None:
        self.rows = max(1, int(rows))  # steps per execution
        self.kept = max(self.rows, KEPT)  # the rows of measured steps
        self.spare = self.kept  # the row of an ordinary execution's first non-finite step
        self.ring = RING * self.rows  # the rows of per-step losses
        on_read = tf.VariableSynchronization.ON_READ
        total, first = tf.VariableAggregation.SUM, tf.VariableAggregation.ONLY_FIRST_REPLICA
        slots = self.kept + 1
        with model.distribute_strategy.scope():

            def state(
                shape: Sequence[int], aggregation: object, name: str, fill: float | None = None
            ) -> TFVariable:
                dtype = tf.float32 if fill is None else tf.float64  # step numbers: exact
                return tf.Variable(
                    tf.fill(list(shape), tf.constant(fill or 0.0, dtype)),
                    trainable=False,
                    synchronization=on_read,
                    aggregation=aggregation,
                    name=f"layergrad_{name}",
                )

            # per step: [replicas that saw a NaN/Inf, loss], in row s mod ring
            self.losses = state([self.ring, 2], total, "losses")
            self.activations = state([slots, layers], total, "activation_nonfinite")
            self.dead = state([slots, layers, 3], first, "dead_units")
            self.grads = state([slots, variables, COLUMNS], first, "gradients")
            self.learning_rate = state([slots], first, "learning_rate")
            self.histogram = state([slots, layers, BINS], first, "histogram")
            self.ranges = state([slots, layers, 2], first, "histogram_range")
            # per model input: [NaN/Inf values in the step's batch, the first row with one]
            self.inputs = state([slots, MAX_INPUTS, 2], first, "inputs_nonfinite")
            # the steps the rows of the forward and of the gradient statistics are from
            self.forward_at = state([slots], first, "forward_at", fill=-1.0)
            self.reduced_at = state([slots], first, "reduced_at", fill=-1.0)
            # [steps this fit has run, of them non-finite]: each step counts itself, last
            self.counts = state([2], first, "counts", fill=0.0)
        self._readers: dict[bool, Callable[[], dict[str, Tensor]]] = {}  # `read_rows`

    def reset(self) -> None:
        """Start a new fit: no step run, nothing non-finite seen, no row measured."""
        self.counts.assign(tf.zeros([2], tf.float64))
        for at in (self.forward_at, self.reduced_at):
            at.assign(tf.fill(at.shape, tf.constant(-1.0, tf.float64)))

    def read_counts(self) -> tuple[int, int]:
        """The steps this fit has run, and of them the non-finite ones (one read)."""
        run, nonfinite = self.counts.read_value().numpy()
        return int(run), int(nonfinite)

    def read_losses(self) -> np.ndarray:
        """[ring, 2]: each row's NaN/Inf flag and loss (one read)."""
        return np.asarray(self.losses.read_value().numpy())

    def read_rows(self, histograms: bool) -> dict[str, np.ndarray]:
        """Every row of the reductions (one call reads every variable: eager reads cost about
        0.1 ms each, a measured step of a small model a few)."""
        reader = self._readers.get(histograms)
        if reader is None:
            found = {
                "grads": self.grads,
                "activations": self.activations,
                "dead": self.dead,
                "forward_at": self.forward_at,
                "reduced_at": self.reduced_at,
                "learning_rate": self.learning_rate,
                "inputs": self.inputs,
            }
            if histograms:
                found |= {"histogram": self.histogram, "ranges": self.ranges}
            reader = self._readers[histograms] = tf.function(
                lambda: {k: v.read_value() for k, v in found.items()}
            )
        return {k: np.asarray(v.numpy(), np.float64) for k, v in reader().items()}


def put(variable: TFVariable, row: Tensor | int, value: Tensor) -> TFOperation:
    """Write `value` into row `row` of a result variable (graph code)."""
    value = tf.cast(value, variable.dtype)
    index = tf.reshape(tf.cast(row, tf.int32), [1, 1])
    try:
        return variable.scatter_nd_update(index, value[None])  # in place
    except NotImplementedError:  # a strategy's sync-on-read variable: write it whole
        return variable.assign(
            tf.tensor_scatter_nd_update(variable.read_value(), index, value[None])
        )
