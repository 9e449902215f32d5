"""The training gradient over a stream of batches (`scan --wrt weights`; the probe batch is a
stream of one batch, run eagerly, `--data` one of many, one compiled step per batch).

The step, run by the one loop over batches (`step_calls.over_batches`), does the forward
pass, the loss and `tape.gradient(loss, trainable variables)`, and adds up in float64 on
each replica. For a batch b of n_b samples with gradient g_b (of its samples' mean loss):

- n_b g_b for every variable: divided by N = sum n_b at the end, one full-batch
  `tape.gradient` of the loss averaged over every sample (a partial last batch counts for
  its samples);
- n_b ||g_b,l||^2 per layer l, and n_b, n_b^2: the sample-weighted spread of the batch
  gradients around their mean (`GradientNoise`). Under a strategy a batch's gradient is that
  of all its samples (the replicas' shares added up by one all-reduce per batch), so the
  spread is the same on any number of replicas; under `--distribute multi-worker` each
  replica takes whole batches of its worker's shard (no all-reduce), and a replica left
  without a batch at a step (the workers step together) adds nothing.

Every total is a sum, so replicas, workers and shards combine by adding them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from layergrad.core.results import GradientNoise
from layergrad.core.tf_runtime import tf
from layergrad.core.tf_types import KerasModel, KerasVariable, Strategy, Tensor, TensorTree
from layergrad.data.devices import is_multi_worker
from layergrad.engine import step_calls
from layergrad.engine.layer_calls import forward
from layergrad.engine.step_calls import Progress, masked, pad_if_empty, statistics_kept

if TYPE_CHECKING:
    from layergrad.data.sources import DataStream

# (outputs, labels or None, sample indices) -> loss
Objective = Callable[[TensorTree, TensorTree | None, Tensor], Tensor]


@dataclass(frozen=True)
class WeightTotals:
    """What the step added up: the mean gradient per variable (None: no path from the loss),
    per layer its noise, and the samples and replicas seen."""

    gradients: tuple[np.ndarray | None, ...]
    noise: tuple[GradientNoise, ...]
    samples: int
    replicas: int


@statistics_kept
def stream_weight_gradients(
    model: KerasModel,
    variables: Sequence[KerasVariable],
    layers: Sequence[str],
    objective: Objective,
    stream: DataStream,
    strategy: Strategy,
    *,
    training: bool = False,
    on_progress: Progress | None = None,
) -> WeightTotals:
    """The mean training gradient of every variable over `stream`, and each layer's noise.

    Args:
        model: the loaded model (variables created under `strategy.scope()`).
        variables: the trainable variables (tf.Variables); `layers[i]` owns `variables[i]`.
        objective: the loss of a batch from (outputs, labels or None, sample indices).
        stream: the batches, with their labels when it has them; the loop over them, its
            errors and `on_progress` are `step_calls.over_batches`.
        strategy: a tf.distribute strategy (the default one for one device).

    Raises:
        InputError: a batch the model fails on, or a data set without samples.
    """
    workers = is_multi_worker(strategy)
    names = list(dict.fromkeys(layers))
    owner = [names.index(layer) for layer in layers]
    connected: list[bool] = []
    n_inputs = len(stream.specs)

    def compute(batch: tuple[Tensor, ...]) -> dict[str, Tensor]:
        inputs, labels, samples = batch[:n_inputs], batch[n_inputs:-1], batch[-1]
        if not workers:
            return summaries(inputs, labels, samples)
        # each worker's replicas take whole batches of its shard in turn; a replica left
        # without one at a step (the workers step together) adds nothing
        empty = tf.equal(tf.size(samples), 0)
        inputs, fed = pad_if_empty(inputs, samples, empty)
        labels, _ = pad_if_empty(labels, samples, empty)
        return masked(summaries(inputs, labels, fed), empty)

    def summaries(
        inputs: Sequence[Tensor], labels: Sequence[Tensor], samples: Tensor
    ) -> dict[str, Tensor]:
        rows = tf.shape(inputs[0])[0]
        n = tf.cast(rows, tf.float64)
        with tf.GradientTape() as tape:
            outputs = forward(model, list(inputs), training)
            loss = objective(outputs, labels or None, samples)
        grads = tape.gradient(loss, list(variables))
        connected[:] = [g is not None for g in grads]
        kept = [i for i, g in enumerate(grads) if g is not None]
        weighted = [n * tf.cast(tf.convert_to_tensor(grads[i]), tf.float64) for i in kept]
        out: dict[str, Tensor] = {f"{i}/sum": w for i, w in zip(kept, weighted, strict=True)}
        # the batch's gradient is that of all its samples: with replicas, their shares added
        # up (n_b g_b = sum_r n_r g_r); each replica then adds 1/R of the batch's numbers
        total, share = (weighted, n), 1.0
        context = tf.distribute.get_replica_context()
        replicas = context.num_replicas_in_sync if context is not None else 1
        if replicas > 1 and weighted and not workers:  # one batch split between replicas
            total = context.all_reduce("SUM", (weighted, n))
            share = 1.0 / replicas
        summed, rows_b = total
        squares = [tf.zeros([], tf.float64) for _ in names]
        for i, w in zip(kept, summed, strict=True):
            squares[owner[i]] = squares[owner[i]] + tf.reduce_sum(tf.square(w))
        safe = tf.maximum(rows_b, 1.0)
        out["n/sum"] = tf.stack([n, share * rows_b * rows_b, tf.constant(share, tf.float64)])
        out["samples"] = tf.reshape(n, [1])
        layer_sq = tf.stack(squares) / safe if names else tf.zeros([0], tf.float64)
        out["layers/sum"] = share * layer_sq  # n_b ||g_b||^2 per layer
        return out

    totals = step_calls.over_batches(stream, strategy, compute, on_progress, model).totals
    count, count_sq, steps = (float(v) for v in totals["n/sum"])
    batches = round(steps)  # every worker's batches
    gradients = tuple(totals[f"{i}/sum"] / count if ok else None for i, ok in enumerate(connected))
    noise = layer_noise(names, owner, gradients, totals["layers/sum"], count, count_sq, batches)
    replicas = int(strategy.num_replicas_in_sync)
    return WeightTotals(gradients, noise, int(count), replicas)


def layer_noise(
    names: Sequence[str],
    owner: Sequence[int],
    gradients: Sequence[np.ndarray | None],
    weighted_sq: np.ndarray,
    count: float,
    count_sq: float,
    batches: int,
) -> tuple[GradientNoise, ...]:
    """Per layer: signal ||mean g||^2, the variance of the batch gradients, and their ratio.

    With w_b = n_b / N the variance is sum_b w_b ||g_b - mean g||^2 / (1 - sum_b w_b^2)
    (the unbiased estimate for batches of equal size: the spread of B batch gradients with
    B - 1 degrees of freedom), from the totals: (sum n_b ||g_b||^2 / N - ||mean g||^2) /
    (1 - sum n_b^2 / N^2).
    """
    signal = np.zeros(len(names))
    has = np.zeros(len(names), bool)
    for i, g in enumerate(gradients):
        if g is not None:
            signal[owner[i]] += float(np.sum(g * g))
            has[owner[i]] = True
    out = []
    dof = 1.0 - count_sq / (count * count) if count else 0.0
    for layer, (name, s) in enumerate(zip(names, signal, strict=True)):
        if not has[layer]:
            continue
        variance = None
        if dof > 1e-12 and np.isfinite(weighted_sq[layer]) and np.isfinite(s):
            variance = max(float(weighted_sq[layer]) / count - s, 0.0) / dof
        snr = s / variance if variance else None
        out.append(GradientNoise(name, float(s), variance, snr, batches))
    return tuple(out)
