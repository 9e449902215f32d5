"""Accumulate the step's summaries over batches, on every replica, as Keras metrics do.

Each summary gets a variable created under the distribution strategy with
`synchronization=ON_READ`: every replica adds its own share on its own device, with no
traffic between devices during the run, exactly like the state of `keras.metrics`. Keras
metrics and `tf.distribute` only reduce by sum or mean, and max |g|, the per-sample minimum
and the first non-finite batch need max and min, so the replicas' copies are read with
`experimental_local_results` at the end and combined here, by the kind each field declares
(`totals.KINDS`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from layergrad.core.keras_backend import quiet_import
from layergrad.data import aggregates as tt


class Accumulators:
    """One variable per summary key (and a first-non-finite-batch index where tracked).

    Args:
        strategy: the tf.distribute strategy the step runs under (the default one for a
            single device).
        shapes: the shape of each summary of one step (`summary_shapes`).
    """

    def __init__(self, strategy: Any, shapes: dict[str, tuple[int, ...]]) -> None:
        tf, _ = quiet_import()
        self.kinds: dict[str, int] = {}
        self.vars: dict[str, Any] = {}
        with strategy.scope():
            for key, shape in shapes.items():
                self._add(tf, key, shape)
                if key.rsplit("/", 1)[-1] in tt.NONFINITE_FIELD:  # one per row of the pack
                    self._add(tf, f"{key}/first", shape[:-1])
            self.batches = self._variable(tf, np.zeros((), np.float64), "batches")

    def _add(self, tf: Any, key: str, shape: tuple[int, ...]) -> None:
        kind = tt.kind_of(key)
        self.kinds[key] = kind
        self.vars[key] = self._variable(tf, tt.initial(kind, shape), key)

    @staticmethod
    def _variable(tf: Any, value: np.ndarray, name: str) -> Any:
        return tf.Variable(
            value,
            dtype=tf.float64,
            trainable=False,
            name=name.replace(":", "_").replace("/", "_").replace(".", "_"),
            synchronization=tf.VariableSynchronization.ON_READ,
            aggregation=tf.VariableAggregation.SUM,
        )

    def update(self, summaries: dict[str, Any]) -> None:
        """Add one step's summaries (call in replica context, or eagerly on one device)."""
        tf, _ = quiet_import()
        index = self.batches.read_value()
        for key, value in summaries.items():
            var, kind = self.vars[key], self.kinds[key]
            if kind == tt.SUM:
                var.assign_add(value)
            else:
                var.assign((tf.maximum if kind == tt.MAX else tf.minimum)(var.read_value(), value))
            field = tt.NONFINITE_FIELD.get(key.rsplit("/", 1)[-1])
            if field is not None:
                first = self.vars[f"{key}/first"]
                inf = tf.constant(math.inf, tf.float64)
                seen = tf.where(value[..., field] > 0, index, inf)
                first.assign(tf.minimum(first.read_value(), seen))
        self.batches.assign_add(tf.constant(1.0, tf.float64))

    def totals(self, strategy: Any) -> dict[str, np.ndarray]:
        """Every summary added up over batches and replicas, as numpy arrays."""
        return {
            key: tt.combine(
                [np.asarray(v.numpy()) for v in strategy.experimental_local_results(var)],
                self.kinds[key],
            )
            for key, var in self.vars.items()
        }


def summary_shapes(strategy: Any, summaries: dict[str, Any]) -> dict[str, tuple[int, ...]] | None:
    """The shape of each summary (tensors, symbolic or not, or per-replica values), or None
    when one is not known yet (a summary over an axis the model leaves open)."""
    shapes = {}
    for key, value in summaries.items():
        shape = strategy.experimental_local_results(value)[0].shape
        if not shape.is_fully_defined():
            return None
        shapes[key] = tuple(int(d) for d in shape)
    return shapes


def single_totals(summaries: dict[str, Any]) -> dict[str, np.ndarray]:
    """The totals of a single batch (no variables): its summaries, and batch 0 as the first
    non-finite batch where a non-finite value was counted."""
    out = {key: np.asarray(value.numpy()) for key, value in summaries.items()}
    for key in list(out):
        field = tt.NONFINITE_FIELD.get(key.rsplit("/", 1)[-1])
        if field is not None:
            out[f"{key}/first"] = np.where(out[key][..., field] > 0, 0.0, math.inf)
    return out
