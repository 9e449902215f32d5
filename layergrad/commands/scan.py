"""Whole-model gradient flow: one target, every layer's output, one forward and backward pass
per batch, over a stream of batches (the probe batch: a stream of one batch; or `--data`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from layergrad.commands.over_data import Diagnosis
from layergrad.commands.scan_rows import rows_report, scan_report, summary_rows, trace_causes
from layergrad.commands.session import Session
from layergrad.commands.untrained_batchnorm import in_training, probe_in_training, scan_wrong
from layergrad.core.probe_options import ProbeOptions, Progress
from layergrad.core.results import FrobeniusNorms, ScanJacobian, ScanReport, ScanRow
from layergrad.core.tf_types import KerasModel, Strategy
from layergrad.core.vocab import NOT_DIFFERENTIABLE, Status
from layergrad.data.sources import DataStream
from layergrad.diagnose.diagnoser import Diagnoser
from layergrad.diagnose.forward_findings import CONSTANT_RTOL, MIN_BATCH, UNSCALED
from layergrad.engine.data_step import Plan, StreamRun, run_stream
from layergrad.engine.jacobian import JacobianOptions
from layergrad.engine.jacobian_data import scan_jacobians
from layergrad.engine.trace import Trace
from layergrad.model.graph import ModelGraph
from layergrad.model.layer_refs import Site, iter_layers, resolve


def scan_session(
    session: Session,
    target: str | None = None,
    patterns: Sequence[str] = (),
    jacobian: JacobianOptions | None = None,
    top: int = 10,
    on_progress: Progress | None = None,
) -> ScanReport:
    """Gradient of one target (a layer reference, or None: a seeded random projection of the
    outputs) with respect to every layer's output, one backward pass per batch of the session
    (see `api.scan_model`). A model whose BatchNormalization was never trained is scanned again
    in training mode when the scan in inference finds what it makes (`untrained_batchnorm`).
    """
    site = None if target is None else resolve(session.model, target)
    report = _scan(session, site, patterns, on_progress)
    wrong = scan_wrong(report.rows, report.constant)
    said = probe_in_training(session.model, session.options.training, wrong)
    if said:  # never-trained BatchNormalization: probe again as training runs it
        session = in_training(session)
        report = _scan(session, site, patterns, on_progress)
        report = replace(report, notes=(*report.notes, said))
    if jacobian is not None:
        rows, found = _jacobians(session, site, report.rows, jacobian, top, on_progress)
        report = replace(report, rows=rows, notes=(*report.notes, *found))
    return report


def _scan(
    session: Session,
    site: Site | None,
    patterns: Sequence[str],
    on_progress: Progress | None,
) -> ScanReport:
    """One pass over the session's batches (`over_data.scan_over`), in its mode.

    Over the data, its rows are the report. The probe batch's too, unless the pass shows
    something that needs the whole arrays: a row that is not ok, an output that is the same
    for every sample, a non-finite activation or inputs that are not scaled; then the batch's
    whole trace (read again) gives the rows, causes and notes (`scan_report`).
    """
    run, rows, diagnosis = scan_over(
        session.model, session.info.graph, session.strategy, session.stream, session.options,
        site, patterns, on_progress,
    )  # fmt: skip
    probe = session.probe_meta_of(run, seeded=site is None)
    if not session.stream.probe:
        return rows_report(session, probe, site, rows)
    batch = session.batch
    floats = [a for a in batch.arrays if a.dtype.kind == "f" and a.size]
    plain = (
        not any(f is not None and f.nonfinite_batches for f in run.forward)
        and not (
            batch.batch_size >= MIN_BATCH
            and any(spread <= CONSTANT_RTOL * max(1.0, top) for spread, top in run.output_spread)
        )
        and not any(float(np.mean(np.abs(a.astype(np.float64)))) > UNSCALED for a in floats)
        and all(r.status in (Status.OK, *NOT_DIFFERENTIABLE) for r in rows)
    )
    if plain:
        return rows_report(session, probe, site, rows)
    return scan_report(session, diagnosis.trace(0, site), site, patterns)


def scan_over(
    model: KerasModel,
    graph: ModelGraph | None,
    strategy: Strategy,
    batches: DataStream,
    options: ProbeOptions,
    site: Site | None = None,
    layers: Sequence[str] = (),
    on_progress: Progress | None = None,
) -> tuple[StreamRun, tuple[ScanRow, ...], Diagnosis]:
    """The scan pass over a stream of batches (the probe batch: a stream of one batch): the
    StreamRun, one row per layer call (a row that is not ok with its causes, from a trace of
    the batch it shows on, read again), and that `Diagnosis`."""
    plan = Plan(
        targets=(site,),
        every_leaf=True,
        training=options.training,
        reduce=options.reduce,
        data=not batches.probe,
        seed=options.seed,
    )
    run = run_stream(model, plan, batches, strategy, on_progress)
    diagnosis = Diagnosis(model, batches, graph, options)
    firsts = [
        g.first_nonfinite
        for g in run.gradients[0]
        if g is not None and g.status == "nonfinite" and g.first_nonfinite is not None
    ]
    index = min(firsts, default=0)

    def make() -> tuple[Trace, Diagnoser]:
        return diagnosis.trace(index, site), diagnosis.diagnoser(index)

    classes = {p: type(layer).__name__ for p, layer in iter_layers(model)}
    rows = summary_rows(run, graph, classes, layers, trace_causes(make, graph))
    return run, rows, diagnosis


def _jacobians(
    session: Session,
    site: Site | None,
    rows: tuple[ScanRow, ...],
    how: JacobianOptions,
    top: int,
    on_progress: Progress | None,
) -> tuple[tuple[ScanRow, ...], tuple[str, ...]]:
    """Each row whose gradient is ok or zero with its per-sample Jacobian norms over the
    session's batches (`jacobian_data.scan_jacobians`: of the probe batch, each sample's;
    over the data, every worker's shard), and how they were measured."""
    options = session.options
    norms, notes = scan_jacobians(
        session.model, session.stream, site, how, training=options.training,
        reduce=options.reduce, top=top, on_progress=on_progress, strategy=session.strategy,
    )  # fmt: skip
    by_ref: dict[str, FrobeniusNorms] = {}
    for (path, call, _), found in norms.items():
        by_ref.setdefault(f"{path}@{call}" if call else path, found)
    out = []
    for row in rows:
        norm = by_ref.get(row.layer)
        if norm is not None and row.status in (Status.OK, Status.ZERO):
            row = replace(row, jacobian=ScanJacobian(frobenius=norm))
        out.append(row)
    return tuple(out), notes
