"""Accumulate the step's summaries over batches, on every replica, as Keras metrics do.

Each summary gets a variable created under the distribution strategy with
`synchronization=ON_READ`: every replica adds its own share on its own device, with no
traffic between devices during the run, like the state of `keras.metrics`. Max |g|, the
per-sample minimum and the first non-finite batch need max and min, which `tf.distribute`
does not reduce by, so the replicas' copies are read at the end and combined here by the kind
each field declares (`aggregates.KINDS`); over several workers, after one collective
all-gather (`gather`); `gather_workers` carries totals of any shape (as JSON).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import TypeVar

import numpy as np

from layergrad.core.errors import InputError, describe
from layergrad.core.tf_runtime import tf
from layergrad.core.tf_types import Strategy, Tensor, TFVariable
from layergrad.data.devices import is_multi_worker
from layergrad.data.stats import aggregates

P = TypeVar("P")  # a JSON payload: dicts, lists, strings, numbers, None

POSITION = "at"  # a step's output that is not added up: its batch's index in the data


class Accumulators:
    """One variable per summary key (and a first-non-finite-batch index where tracked), made
    under the step's `strategy` (the default one for a single device) in the `shapes` of one
    step's summaries (`summary_shapes`: `POSITION` is not one)."""

    def __init__(self, strategy: Strategy, shapes: dict[str, tuple[int, ...]]) -> None:
        self.kinds: dict[str, int] = {}
        self.vars: dict[str, TFVariable] = {}
        with strategy.scope():
            for key, shape in shapes.items():
                self._add(key, shape)
                if key.rsplit("/", 1)[-1] in aggregates.NONFINITE_FIELD:  # one per row of the pack
                    self._add(f"{key}/first", shape[:-1])
            self.batches = self._variable(np.zeros((), np.float64), "batches")

    def _add(self, key: str, shape: tuple[int, ...]) -> None:
        kind = aggregates.kind_of(key)
        self.kinds[key] = kind
        self.vars[key] = self._variable(aggregates.initial(kind, shape), key)

    @staticmethod
    def _variable(value: np.ndarray, name: str) -> TFVariable:
        return tf.Variable(
            value,
            dtype=tf.float64,
            trainable=False,
            name=name.replace(":", "_").replace("/", "_").replace(".", "_"),
            synchronization=tf.VariableSynchronization.ON_READ,
            aggregation=tf.VariableAggregation.SUM,
        )

    def update(self, summaries: dict[str, Tensor]) -> None:
        """Add one step's summaries (call in replica context, or eagerly on one device).

        The first non-finite batch is the batch's index in the data (`POSITION`, when the
        step gives it), else the number of steps so far."""
        index = summaries.get(POSITION)
        index = self.batches.read_value() if index is None else index
        for key, value in added(summaries, index, lambda k: self.vars[k].read_value()).items():
            self.vars[key].assign(value)
        self.batches.assign_add(tf.constant(1.0, tf.float64))

    def totals(self, strategy: Strategy) -> dict[str, np.ndarray]:
        """Every summary added up over batches and replicas (of every worker), as numpy."""
        if is_multi_worker(strategy):
            everyone = gather(strategy, lambda: {k: v.read_value() for k, v in self.vars.items()})
        else:
            local = strategy.experimental_local_results
            everyone = {k: np.stack([c.numpy() for c in local(v)]) for k, v in self.vars.items()}
        return {k: aggregates.combine(list(everyone[k]), self.kinds[k]) for k in self.vars}


class OneStep(Accumulators):
    """What `Accumulators` hold after one step on one device, without variables (the probe
    batch: creating them, full weight gradients included, costs more than the step)."""

    def __init__(self) -> None:  # no variables
        self.held: dict[str, np.ndarray] = {}

    def update(self, summaries: dict[str, Tensor]) -> None:
        index = summaries.get(POSITION, tf.constant(0.0, tf.float64))
        start = lambda k: tf.constant(aggregates.initial(aggregates.kind_of(k), ()), tf.float64)  # noqa: E731
        self.held = {k: np.asarray(v.numpy()) for k, v in added(summaries, index, start).items()}

    def totals(self, strategy: Strategy) -> dict[str, np.ndarray]:
        return self.held


def added(
    summaries: dict[str, Tensor], index: Tensor, current: Callable[[str], Tensor]
) -> dict[str, Tensor]:
    """Each accumulator's value once one step's `summaries` are added to its `current` one:
    summed, or the maximum or minimum; a pack's first non-finite batch, `index` if this one."""
    add = {aggregates.SUM: tf.add, aggregates.MAX: tf.maximum, aggregates.MIN: tf.minimum}
    out = {}
    for key, value in summaries.items():
        if key == POSITION:
            continue
        out[key] = add[aggregates.kind_of(key)](current(key), value)
        field = aggregates.NONFINITE_FIELD.get(key.rsplit("/", 1)[-1])
        if field is not None:
            seen = tf.where(value[..., field] > 0, index, tf.constant(math.inf, tf.float64))
            out[f"{key}/first"] = tf.minimum(current(f"{key}/first"), seen)
    return out


def gather(strategy: Strategy, local: Callable[[], dict[str, Tensor]]) -> dict[str, np.ndarray]:
    """Every replica's values of `local()` (a dict of tensors, read in replica context),
    stacked on a new first axis, on every worker: one collective all-gather per key."""

    def replica() -> dict[str, Tensor]:
        context = tf.distribute.get_replica_context()
        return {k: context.all_gather(tf.expand_dims(v, 0), axis=0) for k, v in local().items()}

    try:
        out = strategy.run(tf.function(replica, autograph=False))
        return {k: np.asarray(strategy.experimental_local_results(v)[0]) for k, v in out.items()}
    except tf.errors.OpError as exc:  # a worker that stopped (its own error says why)
        raise InputError(
            f"the totals could not be combined over the workers ({describe(exc)}); when "
            "another worker of the cluster stopped, its error says why"
        ) from exc


def gather_workers(strategy: Strategy, payload: P) -> list[P]:
    """Every worker's `payload` (anything JSON holds: numbers, strings, lists, None; floats
    round-trip exactly, NaN and Inf included), in the order of the workers (the chief
    first), on every worker; `[payload]` in one process: totals whose shapes may differ
    between workers. Two collectives: the lengths, then the padded bytes."""
    if not is_multi_worker(strategy):
        return [payload]
    data = json.dumps(payload, separators=(",", ":")).encode()
    lengths = _one_per_worker(strategy, np.array([len(data)], np.int64))
    longest = int(max(int(n[0]) for n in lengths))
    words = -(-longest // 8)
    padded = np.frombuffer(data.ljust(words * 8, b" "), np.int64)
    out: list[P] = []
    for n, row in zip(lengths, _one_per_worker(strategy, padded), strict=True):
        out.append(json.loads(row.astype(np.int64).tobytes()[: int(n[0])].decode()))
    return out


def _one_per_worker(strategy: Strategy, value: np.ndarray) -> list[np.ndarray]:
    """`value` (the same shape and dtype on every worker) of every worker, chief first: one
    replica of each worker gives it (the first of its devices), the others are left out."""
    local = max(len(strategy.extended.worker_devices), 1)

    def mine() -> dict[str, Tensor]:
        replica = tf.distribute.get_replica_context().replica_id_in_sync_group
        first = tf.cast(tf.equal(replica % local, 0), tf.int64)
        return {"v": tf.constant(value), "first": tf.reshape(first, [1])}

    everyone = gather(strategy, mine)
    return [v for v, first in zip(everyone["v"], everyone["first"], strict=True) if first[0]]


def summary_shapes(
    strategy: Strategy, summaries: dict[str, Tensor]
) -> dict[str, tuple[int, ...]] | None:
    """The shape of each summary (tensors, symbolic or not, or per-replica values), or None
    when one is not known yet (a summary over an axis the model leaves open)."""
    shapes = {}
    for key, value in summaries.items():
        if key == POSITION:
            continue
        shape = strategy.experimental_local_results(value)[0].shape
        if not shape.is_fully_defined():
            return None
        shapes[key] = tuple(int(d) for d in shape)
    return shapes
