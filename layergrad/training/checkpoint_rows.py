"""A checkpoint of a monitored fit, from the rows of the step's results (`StepResults`), and
its TensorBoard summaries (`GradientMonitor(log_dir=...)`)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from layergrad.core.fit_results import Checkpoint, LayerStats, VariableStats
from layergrad.core.tf_runtime import tf
from layergrad.core.tf_types import SummaryWriter
from layergrad.training.step_hook import LayerVariables, StepHook
from layergrad.training.step_reductions import DEAD, GRAD_NONFINITE, GRAD_SQ, UNITS, WEIGHT_SQ

_NOT_REDUCED = np.array([0.0, 0.0, 0.0, 0.0, -1.0])  # a variable row read as "no gradient"


def checkpoint_from_rows(
    read: dict[str, np.ndarray],
    row: int,
    step: int,
    counted: int,
    hook: StepHook,
    *,
    epoch: int,
    batch: int,
    loss: float | None,
) -> Checkpoint:
    """The checkpoint of step `step` (from 0), from row `row` of the results `read` of `hook`;
    its layers in the order the step called them. `counted`: the step's number as the
    monitored step counts it (less than `step` when Keras's own first step built the model)."""
    grads, acts, dead = read["grads"][row], read["activations"][row], read["dead"][row]
    weights = read["weights"][row]
    forward_at, reduced_at = int(read["forward_at"][row]), int(read["reduced_at"][row])
    if forward_at != counted:  # the forward pass was finite: not measured
        acts, dead = np.zeros_like(acts), np.zeros_like(dead)
    if reduced_at != counted:  # the optimizer skipped the step's update
        grads = np.tile(_NOT_REDUCED, (len(grads), 1))
    # the weights: counted with the gradients on a measuring step, in the branch of an
    # ordinary step's first NaN/Inf (the spare row) with the forward pass
    if forward_at != counted or (reduced_at != counted and row != hook.results.spare):
        weights = np.zeros_like(weights)
    lr = float(read["learning_rate"][row])
    inputs: tuple[tuple[str, int, int], ...] = ()
    if counted in (forward_at, reduced_at):
        found = read["inputs"][row]
        inputs = tuple(
            (name, int(found[i][0]), int(found[i][1]))
            for i, name in enumerate(hook.input_names[: len(found)])
            if found[i][0] > 0
        )
    values = grads.tolist()
    return Checkpoint(
        step=step + 1,
        epoch=epoch,
        batch=batch,
        loss=loss,
        learning_rate=lr,
        layers=tuple(
            _layer_row(hook.layers[i], values, dead[i], int(acts[i]), lr, weights)
            for i in hook.called()
        ),
        variables=tuple(
            _variable_row(name, layer, shape, row)
            for (name, layer, shape), row in zip(hook.named, values, strict=True)
        ),
        nonfinite_inputs=inputs,
    )


def _variable_row(name: str, layer: str, shape: tuple[int, ...], row: list[float]) -> VariableStats:
    missing = row[WEIGHT_SQ] < 0
    units = row[UNITS]
    return VariableStats(
        variable=name,
        layer=layer,
        shape=shape,
        grad_l2=None if missing else math.sqrt(row[GRAD_SQ]),
        weight_l2=0.0 if missing else math.sqrt(row[WEIGHT_SQ]),
        nonfinite=int(row[GRAD_NONFINITE]),
        dead_fraction=None if missing or not units else row[DEAD] / units,
    )


def _layer_row(
    entry: LayerVariables,
    grads: list[list[float]],
    dead: np.ndarray,
    acts: int,
    lr: float,
    weights: np.ndarray,
) -> LayerStats:
    fraction = float(dead[0] / dead[1]) if dead[1] > 0 else None
    constant = float(dead[2] / dead[1]) if dead[1] > 0 else None
    bad_weights = int(sum(weights[i] for i in entry.variables))
    mine = [i for i in entry.variables if not grads[i][WEIGHT_SQ] < 0]  # (NaN weights too)
    if not mine:
        return LayerStats(entry.path, None, None, None, fraction, 0, acts, constant, bad_weights)
    grad = math.sqrt(sum(grads[i][GRAD_SQ] for i in mine))
    weight = math.sqrt(sum(grads[i][WEIGHT_SQ] for i in mine))
    return LayerStats(
        layer=entry.path,
        grad_l2=grad,
        weight_l2=weight,
        update_ratio=lr * grad / weight if weight > 0 else None,
        dead_fraction=fraction,
        nonfinite_gradient=int(sum(grads[i][GRAD_NONFINITE] for i in mine)),
        nonfinite_activation=acts,
        constant_fraction=constant,
        nonfinite_weight=bad_weights,
    )


def write_summaries(
    writer: SummaryWriter,
    checkpoint: Checkpoint,
    read: dict[str, np.ndarray],
    at: int,
    layers: Sequence[LayerVariables],
) -> None:
    """Write one checkpoint's scalars and gradient histograms (row `at` of `read`)."""
    from tensorboard.plugins.histogram import metadata as histogram_metadata

    counts, ranges = read["histogram"][at], read["ranges"][at]
    position = {e.path: i for i, e in enumerate(layers)}
    with writer.as_default():
        for row in checkpoint.layers:
            for name in ("update_ratio", "grad_l2", "dead_fraction"):
                if (value := getattr(row, name)) is not None:
                    tf.summary.scalar(f"layergrad/{name}/{row.layer}", value, checkpoint.step)
            index = position[row.layer]
            if not layers[index].variables:
                continue
            low, high = (float(v) for v in ranges[index])
            edges = np.linspace(low, high, counts.shape[1] + 1)
            buckets = np.stack([edges[:-1], edges[1:], counts[index]], axis=1)
            tag = f"layergrad/gradient/{row.layer}"
            tf.summary.write(
                tag,
                tf.constant(buckets, tf.float64),
                step=checkpoint.step,
                metadata=histogram_metadata.create_summary_metadata(tag, ""),
            )
