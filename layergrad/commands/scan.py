"""Whole-model gradient flow: one target, every layer's output, one forward and backward pass."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from layergrad.commands.scan_rows import scan_rows, summary_rows
from layergrad.commands.session import Session
from layergrad.commands.untrained_batchnorm import in_right_mode, in_training, scan_wrong
from layergrad.core.results import ScanReport
from layergrad.core.vocab import Status
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
    session: Session,
    target: str | None = None,
    patterns: Sequence[str] = (),
    jacobian: JacobianOptions | None = None,
) -> ScanReport:
    """Gradient of one target with respect to every layer's output, in one backward pass.

    `target` is a layer reference, or None for a seeded random projection of the model's
    outputs (see `trace.run_trace`); `patterns` (shell globs) keep only matching rows.
    With `jacobian`, rows also get per-sample Jacobian norms (`jacobian_scan`), from the same
    forward pass. A model whose BatchNormalization was never trained is scanned again in
    training mode when the scan in inference finds what it makes (`untrained_batchnorm`).
    """

    def scan(training: bool) -> ScanReport:
        return _scan(in_training(session) if training else session, target, patterns, jacobian)

    wrong = lambda found: scan_wrong(found.rows, found.constant)  # noqa: E731
    report, said = in_right_mode(session.model, session.options.training, scan, wrong)
    return replace(report, notes=(*report.notes, said)) if said else report


def _scan(
    session: Session, target: str | None, patterns: Sequence[str], jacobian: JacobianOptions | None
) -> ScanReport:
    """`scan_session` in the session's mode."""
    model, options = session.model, session.options
    site = None if target is None else resolve(model, target)
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
    if any(r.status not in (Status.OK, Status.INTEGER) for r in rows):
        return None
    return ScanReport(
        model=session.model_meta,
        probe=session.probe_meta,
        target=site.ref if site else None,
        rows=rows,
        notes=target_notes(site),
    )


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
    return ScanReport(
        model=session.model_meta,
        probe=session.probe_meta,
        target=site.ref if site else None,
        rows=rows,
        notes=tuple(notes),
        first_nonfinite=None if bad is None else bad.site.ref,
        constant=constant,
        input_range=scale,
    )


def target_notes(site: Site | None) -> tuple[str, ...]:
    """What a softmax target does not say (its outputs sum to one)."""
    note = site and softmax_target_note(
        site, "scan with --to the layer before it, or without --to (a projection of the outputs)"
    )
    return (note,) if note else ()
