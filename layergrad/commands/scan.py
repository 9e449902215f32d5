"""Whole-model gradient flow: one target, every layer's output, one forward and backward pass
(of the probe batch, or of every batch of `--data`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from layergrad.commands.over_data import scan_over
from layergrad.commands.scan_rows import scan_rows, summary_rows
from layergrad.commands.session import DataSession, Session
from layergrad.commands.untrained_batchnorm import in_training, probe_in_training, scan_wrong
from layergrad.core.probe_options import Progress
from layergrad.core.results import FrobeniusNorms, ProbeMeta, ScanJacobian, ScanReport, ScanRow
from layergrad.core.vocab import NOT_DIFFERENTIABLE, Status
from layergrad.diagnose import causes as why
from layergrad.diagnose.diagnoser import softmax_target_note
from layergrad.diagnose.forward_findings import (
    constant_outputs,
    first_nonfinite,
    unscaled_input,
)
from layergrad.engine.jacobian import JacobianOptions
from layergrad.engine.jacobian_scan import with_jacobians
from layergrad.engine.trace import Trace, TraceMode, live_trace, run_trace, trace_gradients
from layergrad.model.layer_refs import Site, iter_layers, resolve


def scan_session(
    session: Session | DataSession,
    target: str | None = None,
    patterns: Sequence[str] = (),
    jacobian: JacobianOptions | None = None,
    top: int = 10,
    on_progress: Progress | None = None,
) -> ScanReport:
    """Gradient of one target with respect to every layer's output, in one backward pass: of
    the probe batch (a `Session`), or of every sample of the data (a `DataSession`).

    `target` is a layer reference, or None for a seeded random projection of the model's
    outputs (see `trace.run_trace`); `patterns` (shell globs) keep only matching rows.
    With `jacobian`, rows also get per-sample Jacobian norms (`jacobian_scan`), from the same
    forward pass (over the data: a second pass, whose `top` samples are named). A model whose
    BatchNormalization was never trained is scanned again in training mode when the scan in
    inference finds what it makes (`untrained_batchnorm`). `on_progress` follows the data.
    """
    site = None if target is None else resolve(session.model, target)
    report = _scan(session, site, patterns, jacobian, on_progress)
    wrong = scan_wrong(report.rows, report.constant)
    said = probe_in_training(session.model, session.options.training, wrong)
    if said:  # never-trained BatchNormalization: probe again as training runs it
        session = in_training(session)
        report = _scan(session, site, patterns, jacobian, on_progress)
        report = replace(report, notes=(*report.notes, said))
    if jacobian is not None and isinstance(session, DataSession):
        rows, found = _jacobians_over(session, site, report.rows, jacobian, top, on_progress)
        report = replace(report, rows=rows, notes=(*report.notes, *found))
    return report


def _scan(
    session: Session | DataSession,
    site: Site | None,
    patterns: Sequence[str],
    jacobian: JacobianOptions | None,
    on_progress: Progress | None,
) -> ScanReport:
    """`scan_session` in the session's mode (over the data: without the Jacobians)."""
    if isinstance(session, DataSession):
        run, rows = scan_over(
            session.loaded, session.strategy, session.stream, session.options, site, patterns,
            on_progress,
        )  # fmt: skip
        return _report(session, session.probe_meta_of(run, seeded=site is None), site, rows)
    model, options = session.model, session.options
    how = TraceMode(training=options.training, reduce=options.reduce, seed=options.seed)
    if jacobian is not None:  # one forward pass serves the gradient and the Jacobians
        live = live_trace(model, session.batch, site, **how)
        trace = trace_gradients(live)
        report = scan_report(session, trace, site, patterns)
        rows, notes = with_jacobians(report.rows, trace, live, jacobian)
        return replace(report, rows=rows, notes=(*report.notes, *notes))
    light = _light_scan(session, site, patterns)
    if light is not None:
        return light
    return scan_report(session, run_trace(model, session.batch, site, **how), site, patterns)


def _jacobians_over(
    session: DataSession,
    site: Site | None,
    rows: tuple[ScanRow, ...],
    how: JacobianOptions,
    top: int,
    on_progress: Progress | None,
) -> tuple[tuple[ScanRow, ...], tuple[str, ...]]:
    """Each row whose gradient is ok or zero with its per-sample Jacobian norms over every
    sample (a second pass, `jacobian_data`, over every worker's shard), and how they were
    measured."""
    from layergrad.engine.jacobian_data import scan_jacobians

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


def _light_scan(session: Session, site: Site | None, patterns: Sequence[str]) -> ScanReport | None:
    """The scan of a model with nothing to diagnose, without keeping any array.

    Each gradient is reduced to its statistics where the backward pass produces it (the
    probe batch run as a data source of one batch: `data_step.run_stream`), so a scan takes
    about the memory of a plain forward and backward pass. None when a row is not ok, an
    output is the same for every sample, an activation is non-finite or the inputs are not
    scaled: then the causes need the full trace.
    """
    from layergrad.data.sources import ProbeStream
    from layergrad.diagnose.forward_findings import CONSTANT_RTOL, MIN_BATCH, UNSCALED
    from layergrad.engine.data_step import Plan, run_stream

    model, options, batch = session.model, session.options, session.batch
    plan = Plan(
        targets=(site,),
        every_leaf=True,
        training=options.training,
        reduce=options.reduce,
        seed=options.seed,
    )
    run = run_stream(model, plan, ProbeStream(batch.arrays))
    if any(f is not None and f.nonfinite_batches for f in run.forward):
        return None
    if batch.batch_size >= MIN_BATCH and any(
        spread <= CONSTANT_RTOL * max(1.0, top) for spread, top in run.output_spread
    ):
        return None
    floats = [a for a in batch.arrays if a.dtype.kind == "f" and a.size]
    if any(float(np.mean(np.abs(a.astype(np.float64)))) > UNSCALED for a in floats):
        return None
    classes = {p: type(layer).__name__ for p, layer in iter_layers(model)}
    rows = summary_rows(run, session.info.graph, classes, patterns)
    if any(r.status not in (Status.OK, *NOT_DIFFERENTIABLE) for r in rows):
        return None
    return _report(session, session.probe_meta_of(seeded=site is None), site, rows)


def scan_report(
    session: Session, trace: Trace, site: Site | None, patterns: Sequence[str] = ()
) -> ScanReport:
    """The scan rows, flags, causes and notes of a trace of the session's model."""
    model = session.model
    classes = {p: type(layer).__name__ for p, layer in iter_layers(model)}
    rows = scan_rows(trace, session.info.graph, session.diagnoser, classes, patterns)
    layers = dict(iter_layers(model))
    found = tuple(constant_outputs(trace, session.info.graph, layers))
    notes = list(target_notes(site))
    constant = tuple(found)
    bad = first_nonfinite(trace)
    if bad is not None:
        notes.append(
            f"the forward pass turns non-finite (NaN/Inf) at layer {bad.site.ref!r}, and so "
            "is every activation computed from it"
        )
    notes += [why.constant_output(c.output, c.layer, c.reason).message for c in constant]
    scale = unscaled_input(trace, session.info.graph, layers)
    if scale is not None:
        cause = why.input_range(scale.input, scale.mean_abs, scale.layer, scale.kind, scale.pinned)
        notes.append(f"{cause.message}; {cause.hint}")
    return replace(
        _report(session, session.probe_meta_of(seeded=site is None), site, rows),
        notes=tuple(notes),
        first_nonfinite=None if bad is None else bad.site.ref,
        constant=constant,
        input_range=scale,
    )


def _report(
    session: Session | DataSession, probe: ProbeMeta, site: Site | None, rows: tuple[ScanRow, ...]
) -> ScanReport:
    """The report of `rows`, with the notes the target gives (`scan_report` adds the trace's)."""
    return ScanReport(
        model=session.model_meta,
        probe=probe,
        target=site.ref if site else None,
        rows=rows,
        notes=target_notes(site),
    )


def target_notes(site: Site | None) -> tuple[str, ...]:
    """What a softmax target does not say (its outputs sum to one)."""
    note = site and softmax_target_note(
        site, "scan with {before}, or without --to (a projection of the outputs)"
    )
    return (note,) if note else ()
