"""The training gradient (`scan --wrt weights`) as a measure of the one step over a stream of
batches (`data_step.Step`; the probe batch is a stream of one batch).

With a `WeightPlan` the step also takes the loss and `tape.gradient(loss, trainable
variables)`, and adds up in float64 on each replica. For a batch b of n_b samples with
gradient g_b (of its samples' mean loss):

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

import numpy as np

from layergrad.core.results import GradientNoise
from layergrad.core.tf_runtime import tf
from layergrad.core.tf_types import KerasVariable, Tensor, TensorTree
from layergrad.data.devices import is_multi_worker

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


@dataclass(eq=False)
class WeightPlan:
    """The training gradient as a measure of the one step (`data_step.Step`): the trainable
    `variables` (tf.Variables; `layers[i]` owns `variables[i]`) and the loss of a batch from
    (outputs, labels or None, sample indices)."""

    variables: Sequence[KerasVariable]
    layers: Sequence[str]
    objective: Objective

    def __post_init__(self) -> None:
        self.names = list(dict.fromkeys(self.layers))
        self.owner = [self.names.index(layer) for layer in self.layers]
        self.connected: list[bool] = []  # per variable: a path from the loss (set when traced)

    def summaries(self, grads: Sequence[Tensor | None], rows: Tensor) -> dict[str, Tensor]:
        """A batch's totals from `grads`, the gradients of its loss (one per variable)."""
        n = tf.cast(rows, tf.float64)
        self.connected[:] = [g is not None for g in grads]
        kept = [i for i, g in enumerate(grads) if g is not None]
        weighted = [n * tf.cast(tf.convert_to_tensor(grads[i]), tf.float64) for i in kept]
        out: dict[str, Tensor] = {f"{i}/sum": w for i, w in zip(kept, weighted, strict=True)}
        # the batch's gradient is that of all its samples: with replicas, their shares added
        # up (n_b g_b = sum_r n_r g_r); each replica then adds 1/R of the batch's numbers
        total, share = (weighted, n), 1.0
        context = tf.distribute.get_replica_context()
        replicas = context.num_replicas_in_sync if context is not None else 1
        workers = is_multi_worker(tf.distribute.get_strategy())
        if replicas > 1 and weighted and not workers:  # one batch split between replicas
            total = context.all_reduce("SUM", (weighted, n))
            share = 1.0 / replicas
        summed, rows_b = total
        squares = [tf.zeros([], tf.float64) for _ in self.names]
        for i, w in zip(kept, summed, strict=True):
            squares[self.owner[i]] = squares[self.owner[i]] + tf.reduce_sum(tf.square(w))
        safe = tf.maximum(rows_b, 1.0)
        out["n/sum"] = tf.stack([n, share * rows_b * rows_b, tf.constant(share, tf.float64)])
        layer_sq = tf.stack(squares) / safe if self.names else tf.zeros([0], tf.float64)
        out["layers/sum"] = share * layer_sq  # n_b ||g_b||^2 per layer
        return out

    def result(self, totals: dict[str, np.ndarray], replicas: int) -> WeightTotals:
        """The mean gradients and per layer their noise: signal ||mean g||^2, the variance of
        the batch gradients, and their ratio.

        With w_b = n_b / N the variance is sum_b w_b ||g_b - mean g||^2 / (1 - sum_b w_b^2)
        (the unbiased estimate for batches of equal size: the spread of B batch gradients
        with B - 1 degrees of freedom), from the totals: (sum n_b ||g_b||^2 / N -
        ||mean g||^2) / (1 - sum n_b^2 / N^2).
        """
        count, count_sq, steps = (float(v) for v in totals["n/sum"])
        batches = round(steps)  # every worker's batches
        gradients = tuple(
            totals[f"{i}/sum"] / count if ok else None for i, ok in enumerate(self.connected)
        )
        weighted_sq = totals["layers/sum"]
        signal = np.zeros(len(self.names))
        has = np.zeros(len(self.names), bool)
        for i, g in enumerate(gradients):
            if g is not None:
                signal[self.owner[i]] += float(np.sum(g * g))
                has[self.owner[i]] = True
        noise = []
        dof = 1.0 - count_sq / (count * count) if count else 0.0
        for layer, (name, s) in enumerate(zip(self.names, signal, strict=True)):
            if not has[layer]:
                continue
            variance = None
            if dof > 1e-12 and np.isfinite(weighted_sq[layer]) and np.isfinite(s):
                variance = max(float(weighted_sq[layer]) / count - s, 0.0) / dof
            snr = s / variance if variance else None
            noise.append(GradientNoise(name, float(s), variance, snr, batches))
        return WeightTotals(gradients, tuple(noise), int(count), replicas)
