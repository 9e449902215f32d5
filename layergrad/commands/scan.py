"""Whole-model gradient flow: one target, every layer's output, one forward and backward pass
per batch, over a stream of batches (the probe batch: a stream of one batch; or `--data`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from layergrad.commands.over_data import scan_over
from layergrad.commands.scan_rows import scan_rows
from layergrad.commands.session import Session
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
from layergrad.engine.trace import Trace
from layergrad.model.layer_refs import Site, iter_layers, resolve


def scan_session(
    session: Session,
    target: str | None = None,
    patterns: Sequence[str] = (),
    jacobian: JacobianOptions | None = None,
    top: int = 10,
    on_progress: Progress | None = None,
) -> ScanReport:
    """Gradient of one target with respect to every layer's output, in one backward pass per
    batch, over the session's batches: the probe batch (a stream of one batch) or every
    sample of the data.

    `target` is a layer reference, or None for a seeded random projection of the model's
    outputs (see `trace.run_trace`); `patterns` (shell globs) keep only matching rows.
    With `jacobian`, rows also get per-sample Jacobian norms (`jacobian_data.scan_jacobians`,
    a second pass over the same batches; over the data it names the `top` samples). A model
    whose BatchNormalization was never trained is scanned again in training mode when the
    scan in inference finds what it makes (`untrained_batchnorm`). `on_progress` follows the
    data.
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
    from layergrad.diagnose.forward_findings import CONSTANT_RTOL, MIN_BATCH, UNSCALED

    run, rows, diagnosis = scan_over(
        session.model, session.info.graph, session.strategy, session.stream, session.options,
        site, patterns, on_progress,
    )  # fmt: skip
    probe = session.probe_meta_of(run, seeded=site is None)
    if not session.stream.probe:
        return _report(session, probe, site, rows)
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
        return _report(session, probe, site, rows)
    return scan_report(session, diagnosis.trace(0, site), site, patterns)


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
    session: Session, probe: ProbeMeta, site: Site | None, rows: tuple[ScanRow, ...]
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
