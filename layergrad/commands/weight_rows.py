"""A variable's row in `scan --wrt weights`: its gradient's status, statistics, update ratio
and causes; the vanishing / exploding flags of the update ratios' trend; dead ReLU layers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np

from layergrad.core.gradient_stats import (
    DEAD_FRACTION,
    dead_fraction,
    gradient_stats,
    status_flags,
    status_of,
)
from layergrad.core.results import ScanRow, VariableRow
from layergrad.core.tf_types import KerasLayer, KerasVariable
from layergrad.core.vocab import Finding, Status
from layergrad.diagnose import causes as why
from layergrad.engine.trace import Trace

# Vanishing / exploding: the update ratios of the layers near the input this many decades
# below / above those near the output (see `scale_flags`). Calibrated on untrained healthy
# architectures (keras.applications, RNNs, a Transformer, deep He ReLU MLPs), whose trend lies
# within -1.8 and +0.2 decades; an 8-layer sigmoid stack has +4.6, a 20-layer tanh stack with
# kernels 11 times the Glorot scale -4.9 (docs/verdicts.md).
TREND_DECADES, MIN_LAYERS = 3.0, 3
# The variables whose update ratio says how fast a layer learns (biases and normalization
# scales are left out: they start at 0 or 1 whatever the layer).
KERNELS = ("kernel", "embeddings", "depthwise_kernel", "pointwise_kernel")
# Tables whose gradient reaches only the rows a batch's ids select (an Embedding's): their
# update ratio is over those rows, the weights a step moves. Over the whole table it would
# shrink with the vocabulary, far below a dense layer's by construction.
SPARSE_ROWS = ("embeddings",)


def dead_layers(trace: Trace, layers: Mapping[str, KerasLayer]) -> tuple[tuple[str, float], ...]:
    """ReLU layers with more than DEAD_FRACTION of their units (last axis) exactly zero for
    every sample of the batch: (layer reference, that share)."""
    from layergrad.diagnose.activations import activation_name

    relu = [
        a
        for a in trace.activations
        if a.is_float and a.value.size and activation_name(layers.get(a.site.path)) == "relu"
    ]
    shares = [(a.site.ref, dead_fraction(a.value)) for a in relu]
    return tuple((ref, share) for ref, share in shares if share > DEAD_FRACTION)


def variable_row(
    variable: KerasVariable, path: str, grad: np.ndarray | None, name: str | None = None
) -> VariableRow:
    """The row of `variable` (held by the layer at `path`, named `name` in it: see
    `layer_refs.variable_names`) with gradient `grad`, no causes yet (`with_causes`)."""
    status = status_of(grad)
    weight = np.asarray(variable.numpy(), dtype=np.float64)
    stats = None if grad is None else gradient_stats(grad, top=0)
    norm = float(np.sqrt(np.sum(np.square(touched_rows(variable.name, weight, grad)))))
    ratio = None if stats is None or not norm else stats.l2 / norm
    flags = status_flags(status, dead_fraction(grad) if grad is not None and grad.ndim else None)
    name = name or variable.name
    return VariableRow(
        variable=f"{path}/{name}",
        layer=path,
        name=name,
        shape=tuple(int(d) for d in variable.shape),
        dtype=str(variable.dtype),
        status=status,
        gradient=stats,
        update_ratio=ratio,
        flags=flags,
    )


def touched_rows(name: str, weight: np.ndarray, grad: np.ndarray | None) -> np.ndarray:
    """The weights whose size an update ratio is judged against: for an embedding table
    (`SPARSE_ROWS`) the rows its gradient touches (the ids of the batch), else all of them."""
    if name not in SPARSE_ROWS or grad is None or weight.ndim != 2 or grad.shape != weight.shape:
        return weight
    rows = np.any(grad != 0, axis=1)
    return weight[rows] if rows.any() else weight


def with_causes(row: VariableRow, layer_rows: Sequence[ScanRow]) -> VariableRow:
    """A row that is not ok with its causes: those of the layer's output rows when they share
    the variable's problem, else that the layer's own call loses it."""
    if row.status == Status.OK:
        return row
    calls = [r for r in layer_rows if r.layer.split("@")[0] == row.layer]
    broken = [r for r in calls if r.status == row.status and r.causes]
    if broken:
        causes = broken[0].causes
    elif calls and all(r.status == Status.NONE for r in calls):
        causes = tuple(c for r in calls for c in r.causes)[:3] or (why.cause("unknown"),)
    else:
        said = why.cause("variable_not_used", row.layer, variable=row.name, status=str(row.status))
        causes = (said,)
    return replace(row, causes=causes)


def layer_ratios(rows: Sequence[VariableRow]) -> dict[str, float]:
    """Each layer's update ratio: ||d loss / d W|| / ||W|| over all its trainable variables.

    Only layers whose every variable has a finite gradient and that hold a non-zero weight.
    """
    grads: dict[str, float] = {}
    norms: dict[str, float] = {}
    broken: set[str] = set()
    for r in rows:
        if r.status not in (Status.OK, Status.ZERO) or r.gradient is None:
            broken.add(r.layer)
            continue
        ratio = r.update_ratio
        grads[r.layer] = grads.get(r.layer, 0.0) + r.gradient.l2**2
        weight = r.gradient.l2 / ratio if ratio else 0.0
        norms[r.layer] = norms.get(r.layer, 0.0) + weight**2
    return {
        layer: math.sqrt(grads[layer] / norms[layer])
        for layer in grads
        if layer not in broken and norms[layer] > 0 and grads[layer] > 0
    }


def scale_flags(rows: Sequence[VariableRow]) -> dict[str, tuple[Finding, float]]:
    """Vanishing / exploding layers: {layer: (flag, decades below / above the output end)}.

    Only layers with a kernel (Dense, Conv, Embedding, recurrent layers...) take part, in
    execution order; a layer without weights is never flagged. The trend is the median
    log10 update ratio of the last quarter of them minus that of the first quarter. When it
    is at least TREND_DECADES (the layers near the input would learn that many decades slower
    than those near the output), every layer of the first half at least TREND_DECADES below
    the last quarter's median is vanishing; at most -TREND_DECADES, every layer of the first
    half that far above it is exploding. Needs MIN_LAYERS such layers.
    """
    ratios = layer_ratios([r for r in rows if r.name in KERNELS])
    if len(ratios) < MIN_LAYERS:
        return {}
    logs = [(layer, math.log10(ratio)) for layer, ratio in ratios.items()]
    quarter = max(1, round(len(logs) / 4))
    end = float(np.median([v for _, v in logs[-quarter:]]))
    start = float(np.median([v for _, v in logs[:quarter]]))
    trend = end - start
    found: dict[str, tuple[Finding, float]] = {}
    for layer, value in logs[: max(1, len(logs) // 2)]:
        if trend >= TREND_DECADES and value <= end - TREND_DECADES:
            found[layer] = (Finding.VANISHING, value - end)
        elif trend <= -TREND_DECADES and value >= end + TREND_DECADES:
            found[layer] = (Finding.EXPLODING, value - end)
    return found


def flag_update_ratio_trend(rows: list[VariableRow]) -> list[VariableRow]:
    """Vanishing / exploding by the trend of the update ratios from the input end to the output
    end: the ok, not yet flagged variables of each layer `scale_flags` finds."""
    flagged = scale_flags(rows)
    return [
        replace(r, flags=(flagged[r.layer][0],))
        if r.layer in flagged and r.status == Status.OK and not r.flags
        else r
        for r in rows
    ]
