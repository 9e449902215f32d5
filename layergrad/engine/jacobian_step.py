"""The estimated Jacobian norms over `--data` in one compiled step per batch, traced once.

On one batch's eager tape (`jacobian.measure_jacobian`) the estimate's tf.functions are traced
anew for every batch, since the products are built from the ops that tape recorded; over a
data set that tracing would cost more than the products. Here the forward pass, the check
that samples do not mix, the K probes and the Lanczos steps (`jacobian_estimate`) of every
target are one tf.function of the batch's inputs and seed: traced for the first batch and
reused for all the others. A smaller batch (the last) is padded with copies of its last
sample, and their rows dropped: in a model that does not mix samples, padding changes no other
sample's numbers. A batch that does mix samples gets None from `EstimateStep.run`, and is
measured again on its eager tape (the diagonal blocks, sample by sample), as one batch is.

The step is used only when the first batch measures every target by the estimate and does
not mix samples; otherwise every batch is measured on its eager tape.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from layergrad.core.results import JacobianStats
from layergrad.core.tf_runtime import tf
from layergrad.core.tf_types import KerasModel, Tensor, TFFunction
from layergrad.core.vocab import JacobianMethod
from layergrad.data.probe_input import ProbeBatch
from layergrad.engine.jacobian import (
    DEFAULT_PROBES,
    JacobianOptions,
    choose_method,
    estimate_ops,
    estimate_stats,
    linear_maps,
    no_spectral,
)
from layergrad.engine.linear_map import LinearMap
from layergrad.engine.trace import replay
from layergrad.model.layer_refs import Site

Measured = list[tuple[int, JacobianStats, tuple[str, ...]]]  # (target index, stats, warnings)


@dataclass
class EstimateStep:
    """The compiled step for a model, a source and its targets; `run` measures one batch."""

    function: TFFunction
    size: int  # the batch size it is traced for (larger batches trace again)
    probes: int
    targets: tuple[int, ...]  # the indices of the targets it measures (the others: no batch axis)
    columns: tuple[int, ...]  # n of each measured target's Jacobians
    notes: tuple[tuple[str, ...], ...]  # each target's warnings from the first batch
    missing: dict[int, str]  # the targets without a batch axis, and why

    def run(self, batch: ProbeBatch, seed: int) -> Measured | None:
        """Each measured target's JacobianStats and warnings for `batch`, drawn from `seed`;
        None when the batch mixes samples (then measure it eagerly)."""
        count = int(np.shape(batch.arrays[0])[0]) if batch.arrays else 0
        inputs = [tf.convert_to_tensor(a) for a in batch.arrays]
        short = self.size - count
        if short > 0:  # pad with copies of the last sample (dropped below)
            inputs = [tf.concat([a, tf.repeat(a[-1:], short, axis=0)], axis=0) for a in inputs]
        outs = self.function(inputs, tf.constant(seed, tf.int64))
        out: Measured = []
        for t, n, note, (mixes, squared, *rest) in zip(
            self.targets, self.columns, self.notes, outs, strict=True
        ):
            if bool(mixes):
                return None
            found = [squared.numpy()[:, :count], *(a.numpy()[:count] for a in rest)]
            stats, why = estimate_stats(found, n, self.probes, True)
            out.append((t, stats, (*note, *why)))
        return out


def estimate_step(
    model: KerasModel,
    batch: ProbeBatch,
    source: Site,
    targets: Sequence[Site],
    how: JacobianOptions,
    *,
    training: bool = False,
    reduce: str = "sum",
    size: int | None = None,
) -> tuple[EstimateStep, Measured] | None:
    """The compiled step for `batch` (drawn from `how.seed`) and the batches after it, with
    its measurement of `batch`; None when the batches are to be measured on their eager
    tapes: some target is measured exactly, the batch mixes samples, or the step cannot be
    traced (the eager measurement of the batch then says why).

    `size` is the batch size to trace for (default: `batch`'s): a shard whose first batch
    is shorter (the last of the whole run) is padded to it, so that its draws are those of
    one run over the whole data."""
    live = replay(model, batch, targets, sources=[source], training=training, reduce=reduce)
    measured, columns, notes = [], [], []
    missing: dict[int, str] = {}
    for t, lin in linear_maps(live, missing):
        method, note = choose_method(lin, how)
        if method != JacobianMethod.ESTIMATE or bool(lin.mixing(how.seed)[0]):
            return None
        measured.append(t)
        columns.append(lin.n)
        notes.append(() if note is None else (note,))
    del live
    if not measured:
        return None
    probes = how.probes or DEFAULT_PROBES

    def build(spectral: bool) -> TFFunction:
        @tf.function(autograph=False)
        def step(inputs: list[Tensor], seed: Tensor) -> list[list[Tensor]]:
            probe = ProbeBatch(tuple(inputs), batch.names, batch.source, None)
            live = replay(model, probe, targets, sources=[source], training=training, reduce=reduce)
            out = []
            for t in measured:
                lin = LinearMap(live.tape, live.sources[0], live.targets[t])
                out.append([lin.mixing(seed)[0], *estimate_ops(lin, probes, seed, spectral)])
            return out

        return step

    size = max(size or 0, int(np.shape(batch.arrays[0])[0]))
    step = EstimateStep(
        build(True), size, probes, tuple(measured), tuple(columns), tuple(notes), missing
    )
    try:
        first = step.run(batch, how.seed)  # traces it
    except (LookupError, ValueError, TypeError) as exc:  # J v needs a second derivative
        step.function = build(False)
        step.notes = tuple((*n, no_spectral(exc)) for n in step.notes)
        try:
            first = step.run(batch, how.seed)
        except Exception:  # the model does not trace: the eager measurement says why
            return None
    except Exception:  # the model does not trace: the eager measurement says why
        return None
    return None if first is None else (step, first)
