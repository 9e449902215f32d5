"""The reductions a monitored training step writes: graph code, called while Keras traces it.

Per layer output: NaN/Inf values and dead units; per trainable variable, the `COLUMNS` and
its NaN/Inf weights; per layer, a histogram of its gradient values; and `unlowered_cond`, the
branch an ordinary step takes only when something is non-finite.

Where the step leaves them (`StepResults`), and how the callback reads them: sync-on-read
variables, the kind Keras metrics use, so `tf.distribute` sums (activations, loss) or takes the
first replica's value (the gradients, already all-reduced) when the callback reads them. A
measuring step s writes its reductions into row s mod `kept` (KEPT rows, or
`steps_per_execution` when that is more), and an ordinary execution's first non-finite step
into the extra row `kept` (`spare`); every step writes its loss and NaN/Inf flag into row
s mod `ring` of `losses`. The callback reads them only every so often: with `every=1`, once
per KEPT steps rather than after each (two reads, 0.3 ms, a step, and a checkpoint's records
made from the rows read in one call).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from layergrad.core.tf_runtime import tf
from layergrad.core.tf_types import KerasModel, Tensor, TFOperation, TFVariable

BINS = 30  # histogram buckets per layer gradient (TensorBoard's default)
# Columns of the per-variable statistics: squared gradient norm, non-finite gradient values,
# dead units (last-axis slices whose gradient is exactly 0), units, squared weight norm.
GRAD_SQ, GRAD_NONFINITE, DEAD, UNITS, WEIGHT_SQ = range(5)
COLUMNS = 5
CONSTANT_SPREAD = 1e-6  # a unit whose values spread less than this share of their size


def unlowered_cond(
    predicate: Tensor, true_fn: Callable[[], Tensor], false_fn: Callable[[], Tensor]
) -> Tensor:
    """`tf.cond`, kept as one `If` op that runs only the branch it takes.

    TensorFlow lowers a `tf.cond` to switch and merge nodes, and then every op of the branch
    not taken is still visited on every run to pass its deadness on: a few hundred
    microseconds a step for a branch that reduces every gradient. An `If` op left as it is
    runs the other branch as a function call, so a step that skips it pays one op."""
    from tensorflow.core.framework import attr_value_pb2

    result = tf.cond(predicate, true_fn, false_fn)
    if tf.executing_eagerly():  # `model.compile(run_eagerly=True)`: the branch has run
        return result
    op = result.op
    while op.type not in ("If", "StatelessIf") and op.inputs:
        op = op.inputs[0].op  # the cond's output passes through an identity
    if op.type in ("If", "StatelessIf"):
        op._set_attr("_lower_using_switch_merge", attr_value_pb2.AttrValue(b=False))
    return result


def values(gradient: Tensor) -> Tensor:
    """The values of a gradient: a tensor, or the rows an IndexedSlices holds."""
    return gradient.values if hasattr(gradient, "indices") else gradient


def shaped(gradient: Tensor, shape: Sequence[int]) -> Tensor:
    """A gradient with its variable's static `shape`: summed over the replicas of a
    `MirroredStrategy`, an Embedding's IndexedSlices lose it (their dense shape becomes a
    tensor), and the reductions need its last axis."""
    if hasattr(gradient, "indices"):
        dense = tf.constant(list(shape), gradient.indices.dtype)
        values = tf.ensure_shape(gradient.values, [None, *shape[1:]])
        return tf.IndexedSlices(values, gradient.indices, dense)
    return tf.ensure_shape(gradient, shape) if not gradient.shape.is_fully_defined() else gradient


def nonfinite(tensor: Tensor) -> Tensor:
    return tf.reduce_sum(tf.cast(~tf.math.is_finite(tensor), tf.float32))


def weights_nonfinite(
    variables: Sequence[TFVariable | None], halves: Sequence[Tensor | None] | None = None
) -> Tensor:
    """[variables]: the NaN/Inf values each variable holds (0 for None), counted only when a
    squared norm is NaN/Inf: `halves` (`half_squares`, a measuring step's), else one `L2Loss`
    a variable."""
    if not variables:
        return tf.zeros([0])
    read = [None if v is None else tf.cast(tf.convert_to_tensor(v), tf.float32) for v in variables]
    if halves is None:
        halves = [None if w is None else tf.nn.l2_loss(w) for w in read]
    squares = [h for h in halves if h is not None]
    return unlowered_cond(
        tf.reduce_all(tf.math.is_finite(tf.stack(squares))) if squares else tf.constant(True),
        lambda: tf.zeros([len(read)]),
        lambda: tf.stack([tf.constant(0.0) if w is None else nonfinite(w) for w in read]),
    )


def forward_stats(outputs: Sequence[Sequence[Tensor]]) -> tuple[Tensor, Tensor]:
    """Per layer, from its float outputs (every call): ([NaN/Inf values], [[dead, units,
    constant]]). The values are counted only when an output holds one (a branch not taken
    otherwise: whether it does takes two ops over an output, the count four; a sum would
    take one, but it can overflow, which `tf.debugging.enable_check_numerics` refuses)."""
    if not outputs:
        return tf.zeros([0]), tf.zeros([0, 3])
    finite = [tf.reduce_all(tf.math.is_finite(t)) for layer in outputs for t in layer]
    counts = unlowered_cond(
        tf.reduce_all(tf.stack(finite)) if finite else tf.constant(True),
        lambda: tf.zeros([len(outputs)]),
        lambda: tf.stack(
            [tf.add_n([nonfinite(t) for t in layer]) if layer else 0.0 for layer in outputs]
        ),
    )
    dead = [dead_units(layer[0]) if layer else tf.constant([0.0, 0.0, 0.0]) for layer in outputs]
    return counts, tf.stack(dead)


# Keras computes a cross-entropy from the logits of a Softmax or Sigmoid output: its loss looks
# through the op, and a step that does not measure that output never computes it
_LOOKED_THROUGH = {"Softmax": "softmax", "Sigmoid": "sigmoid"}  # (their `tf.math` names)


def remade_outputs(outputs: Sequence[Sequence[Tensor]]) -> Callable[[], list[list[Tensor]]]:
    """The outputs, to be made inside a branch: a Softmax or Sigmoid output that nothing of
    the step reads (the loss looked through it) again from its logits, the others as they
    are. A branch that captured such an output would make every step compute it, taken or not
    (about 3% of a small MLP's step, measured with oneDNN). An output the step does read is
    captured itself: capturing its logits instead would keep oneDNN from fusing the layer's
    ops into one, and the fused kernel's last bits, so the training, would change."""

    def source(t: Tensor) -> tuple[Tensor, Callable[[Tensor], Tensor] | None]:
        op = None if tf.executing_eagerly() else getattr(t, "op", None)
        if op is None or op.type not in _LOOKED_THROUGH or len(op.inputs) != 1 or t.consumers():
            return t, None
        return op.inputs[0], getattr(tf.math, _LOOKED_THROUGH[op.type])

    sources = [[source(t) for t in layer] for layer in outputs]
    return lambda: [[t if again is None else again(t) for t, again in row] for row in sources]


MAX_INPUTS = 32  # model inputs whose NaN/Inf values a step counts (the first ones)


def input_stats(inputs: Sequence[Tensor]) -> Tensor:
    """[MAX_INPUTS, 2]: per float input of the step's batch, [NaN/Inf values, the first row
    holding one] (zeros for the rest)."""
    rows = []
    for t in list(inputs)[:MAX_INPUTS]:
        bad = ~tf.math.is_finite(t)
        per_row = tf.reduce_any(tf.reshape(bad, [tf.shape(t)[0], -1]), axis=1)
        first = tf.argmax(tf.cast(per_row, tf.int32), output_type=tf.int32)
        rows.append(tf.stack([tf.reduce_sum(tf.cast(bad, tf.float32)), tf.cast(first, tf.float32)]))
    rows += [tf.zeros([2])] * (MAX_INPUTS - len(rows))
    return tf.stack(rows)


def dead_units(tensor: Tensor) -> Tensor:
    """[units of the last axis exactly 0 for every sample, units, units whose value is the
    same for every sample] (zeros below rank 2; no constant unit in a batch of one)."""
    rank = tensor.shape.rank
    if rank is None or rank < 2:
        return tf.constant([0.0, 0.0, 0.0])
    axes = list(range(rank - 1))
    zero = tf.reduce_all(tf.equal(tensor, 0), axis=axes)
    units = tf.cast(tf.shape(tensor)[-1], tf.float32)
    high, low = tf.reduce_max(tensor, axis=axes), tf.reduce_min(tensor, axis=axes)
    spread, size = high - low, tf.maximum(high, -low)  # (size: the largest |value|)
    same = tf.logical_or(tf.equal(spread, 0), spread <= CONSTANT_SPREAD * size)
    rows = tf.reduce_prod(tf.shape(tensor)[:-1])
    constant = tf.reduce_sum(tf.cast(same, tf.float32)) * tf.cast(rows > 1, tf.float32)
    return tf.stack([tf.reduce_sum(tf.cast(zero, tf.float32)), units, constant])


def half_squares(
    grads: Sequence[Tensor | None],
    weights: Sequence[Tensor | None],
    sparse: bool | None = None,
) -> list[Tensor | None]:
    """Half of each variable's squared norm (one `L2Loss` op), of the weights its gradient is
    judged against (`touched`); None where there is no gradient. `sparse`: only the variables
    with a sparse gradient (True), only the others (False), or all (None).

    An ordinary step takes the dense ones outside its branch: an `If` holding the variables
    would make each update wait for it, and a read still held when an update runs makes
    TensorFlow copy the variable first, while a sum consumes its read at once. The sparse
    ones (an Embedding's rows) stay in the branch: outside, every step would go over the
    whole table."""
    return [
        None
        if g is None or v is None or sparse not in (None, hasattr(g, "indices"))
        else tf.nn.l2_loss(tf.cast(tf.convert_to_tensor(touched(g, v)), tf.float32))
        for g, v in zip(grads, weights, strict=True)
    ]


def gradient_rows(grads: Sequence[Tensor | None], halves: Sequence[Tensor | None]) -> Tensor:
    """[variables, COLUMNS]: each variable's statistics, its squared weight norm from
    `halves` (`half_squares`; -1 weight norm: no gradient).

    A few ops per variable (each op costs some microseconds, however small its tensor, and a
    small model's step runs only a few hundred): the squared norms as `L2Loss`, the dead units
    counted in one op over every variable's, and the NaN/Inf values counted only when a
    squared norm is NaN/Inf (a branch not taken otherwise)."""
    pairs = zip(grads, halves, strict=True)
    chosen = [i for i, (g, w) in enumerate(pairs) if g is not None and w is not None]
    missing = tf.tile(tf.constant([[0.0, 0.0, 0.0, 0.0, -1.0]]), [len(grads), 1])
    if not chosen:
        return missing
    dense = [tf.cast(tf.convert_to_tensor(grads[i]), tf.float32) for i in chosen]
    squares = 2.0 * tf.stack([tf.nn.l2_loss(g) for g in dense])  # NaN/Inf when a value is
    bad = unlowered_cond(
        tf.reduce_all(tf.math.is_finite(squares)),
        lambda: tf.zeros([len(dense)]),
        lambda: tf.stack([nonfinite(g) for g in dense]),
    )
    units = [tf.reshape(g, [-1, g.shape[-1]]) if g.shape.rank else tf.reshape(g, [1, 1])
             for g in dense]  # fmt: skip
    # dead units: last-axis slices whose gradient is exactly 0 everywhere
    live = [tf.cast(tf.reduce_any(tf.not_equal(u, 0.0), axis=0), tf.float32) for u in units]
    widths = [int(u.shape[-1]) for u in units]  # a variable's shape is known
    ids = np.repeat(np.arange(len(live)), widths).astype(np.int32)
    width = tf.constant(widths, tf.float32)
    dead = width - tf.math.unsorted_segment_sum(tf.concat(live, 0), ids, len(live))  # one op
    weights = 2.0 * tf.stack([halves[i] for i in chosen])
    rows = tf.stack([squares, bad, dead, width, weights], 1)
    return tf.tensor_scatter_nd_update(missing, [[i] for i in chosen], rows)


def touched(gradient: Tensor, variable: Tensor) -> Tensor:
    """The weights an update ratio is judged against: for a sparse gradient (an Embedding's
    IndexedSlices) the rows it touches, each once (`weight_rows.SPARSE_ROWS`); else all."""
    if not hasattr(gradient, "indices"):
        return variable
    v = tf.convert_to_tensor(variable)
    indices = gradient.indices
    rows = tf.cast(tf.shape(v)[:1], indices.dtype)
    hits = tf.scatter_nd(indices[:, None], tf.ones_like(indices, dtype=v.dtype), rows)
    mask = tf.cast(hits > 0, v.dtype)  # a static shape (XLA), each row once
    return v * tf.reshape(mask, tf.concat([tf.shape(mask), tf.ones([tf.rank(v) - 1], tf.int32)], 0))


def histograms(
    layers: Sequence[Sequence[int]], grads: Sequence[Tensor | None]
) -> tuple[Tensor, Tensor]:
    """Per layer (the indices of its variables): ([BINS] counts of its finite gradient
    values, [low, high] of their range)."""
    counts, ranges = [], []
    for indices in layers:
        parts = [
            tf.reshape(tf.cast(tf.convert_to_tensor(grads[i]), tf.float32), [-1])
            for i in indices
            if grads[i] is not None
        ]
        if not parts:
            counts.append(tf.zeros([BINS]))
            ranges.append(tf.zeros([2]))
            continue
        found = tf.concat(parts, axis=0)
        found = tf.boolean_mask(found, tf.math.is_finite(found))
        low = tf.reduce_min(tf.concat([found, [0.0]], 0))
        high = tf.reduce_max(tf.concat([found, [0.0]], 0))
        high = tf.where(high > low, high, low + 1e-12)
        counts.append(tf.cast(tf.histogram_fixed_width(found, [low, high], nbins=BINS), tf.float32))
        ranges.append(tf.stack([low, high]))
    return tf.stack(counts), tf.stack(ranges)


RING = 64  # loss rows per step of an execution: the callback reads them at least this often
KEPT = 16  # rows of measured steps: the callback reads them at least this often
# the variables a checkpoint is read from (`read_rows`), by their attribute names
ROWS = (
    "grads", "activations", "dead", "weights", "forward_at", "reduced_at", "learning_rate",
    "inputs",
)  # fmt: skip


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

            # per step: [replicas that saw a NaN/Inf, loss, replicas whose batch held one], in
            # row s mod ring
            self.losses = state([self.ring, 3], total, "losses")
            self.activations = state([slots, layers], total, "activation_nonfinite")
            self.dead = state([slots, layers, 3], first, "dead_units")
            self.grads = state([slots, variables, COLUMNS], first, "gradients")
            # per variable: its NaN/Inf values at the step's start (with the forward statistics)
            self.weights = state([slots, variables], first, "weights_nonfinite")
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

    def reset(self) -> None:
        """Start a new fit: no step run, nothing non-finite seen, no row measured."""
        self.counts.assign(tf.zeros([2], tf.float64))
        for at in (self.forward_at, self.reduced_at):
            at.assign(tf.fill(at.shape, tf.constant(-1.0, tf.float64)))

    def read_rows(self, histograms: bool) -> dict[str, np.ndarray]:
        """Every row of the reductions, a variable at a time (`value_now`: 0.03 ms a read, once
        per `kept` measured steps). One `tf.function` per fit would be traced again for each
        new model, and TensorFlow warns of retracing after the fifth."""
        names = ROWS + (("histogram", "ranges") if histograms else ())
        return {name: np.asarray(value_now(getattr(self, name)), np.float64) for name in names}


def value_now(variable: TFVariable) -> np.ndarray:
    """A result variable's value, read eagerly between steps: a plain variable's by the bare
    read op (a fifth of `read_value`'s 0.15 ms, which the steps of a small model feel when read
    after each), a strategy's by `read_value`, which aggregates its replicas."""
    if isinstance(variable, tf.distribute.DistributedValues):
        return variable.read_value().numpy()
    return tf.raw_ops.ReadVariableOp(resource=variable.handle, dtype=variable.dtype).numpy()


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
