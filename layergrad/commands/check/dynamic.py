"""The checks that run the model (forward, gradient, trainable, baseline) over a stream of
batches: the probe batch (random, or `--input`) is a stream of one batch, `--data` the data.

The rules that need one batch (outputs that never vary, unscaled inputs, the weights'
gradients) run on the stream's first batch with its labels; over --data, one pass more gives
the forward and gradient checks, and a layer dead on the first batch is judged over all.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from layergrad.commands.check import loss_check as heads
from layergrad.commands.check import verdicts as steps
from layergrad.commands.check.verdicts import Add, CheckOptions
from layergrad.commands.diff import Baseline, baseline_probe, fits, judge, same_data
from layergrad.core.errors import LayergradError, UsageError, describe
from layergrad.core.probe_options import ProbeOptions
from layergrad.core.results import ScanReport, ScanRow, WeightScanReport
from layergrad.core.vocab import Finding
from layergrad.files.file_info import FileInfo, training_steps

if TYPE_CHECKING:
    from layergrad.commands.check.verdicts import Opened
    from layergrad.commands.session import Session
    from layergrad.data.label_stream import Labelled, LabelSummary
    from layergrad.engine.data_step import StreamRun
    from layergrad.engine.layer_calls import Recorded
    from layergrad.model.loss_fit import LossVerdict


@dataclass(frozen=True)
class _Stream:
    """Where check's batches come from: `session`, the probe batch, or the batches of --data
    as one session."""

    session: Session
    labels: dict[str, LabelSummary]
    source: str  # where the labels come from, as the `targets` check says
    given: Labelled | None = None  # --data's labels with its inputs
    recorded: Callable[[], Recorded | None] | None = None  # the first batch's forward pass


@dataclass(frozen=True)
class _Scanned:
    session: Session  # the first batch, in the mode kept
    weights: WeightScanReport | None  # None: the loss failed on the labels
    report: ScanReport  # the first batch's activations scan
    run: StreamRun | None  # the pass over --data
    rows: tuple[ScanRow, ...]  # the gradient rows over the stream
    failed: BaseException | None = None


def dynamic(
    path: str | os.PathLike[str],
    info: FileInfo,
    options: CheckOptions,
    add: Add,
    loss: LossVerdict,
    baseline: Baseline | None = None,
) -> None:
    """The checks that run the model, over the stream of its batches: the probe batch, or
    every sample of --data; with `baseline` the baseline check over the same batches. `loss`:
    the `loss` check's verdict (`loss_check.loss_fits`)."""
    from layergrad.data.preflight import check_before_loading

    try:  # data that cannot feed this model: the command is wrong, not the file
        check_before_loading(info.graph, options.probe.source)
    except LayergradError as exc:
        raise UsageError(f"{os.fspath(path)}: {exc}") from exc
    info, has_loss = heads.without_unbuildable_loss(info, options, add, loss)
    data, given_input = options.probe.data_set, options.probe.input_file
    probe, sha, other = options.probing(), "", False
    if baseline is not None:  # the baseline's own probe and mode: usage errors, before loading
        fits(baseline, has_loss, os.fspath(path))
        if data is not None:
            from layergrad.data.fingerprint import data_sha256

            sha = data_sha256(data.path)
        probe, other = baseline_probe(baseline, probe, sha, options.allow_other_data)
    opened = steps.loads(path, info, options, probe if data else options.probing(), add)
    if opened is None:
        return
    loaded, warnings, _ = opened
    # the file records optimizer steps: its kernels were learnt, not drawn (a small read)
    trained = (training_steps(path) or 0) > 0
    from layergrad.commands.scan import scan_over, scan_session  # TensorFlow: now
    from layergrad.commands.session import session_for
    from layergrad.commands.untrained_batchnorm import in_right_mode, scan_wrong
    from layergrad.commands.weight_scan import scan_weights
    from layergrad.diagnose.saturation import saturated_init
    from layergrad.engine.layer_calls import BatchFailed
    from layergrad.engine.trace import recorder

    model = loaded.model
    stream = (
        _probe_batch(opened, info, options, probe, add, bool(baseline or given_input))
        if data is None
        else _data_stream(opened, info, options, probe, add)
    )
    if stream is None:
        return
    mismatched = steps.targets(info, options.loss, stream.labels, stream.source, add)
    start, given = stream.session, stream.given if not mismatched else None
    over, progress = start if data is not None else None, options.on_progress
    if over is None and mismatched:  # the loss cannot take these labels: draw ones that fit
        start = replace(start, probe=replace(start.batch, labels=None))

    def scans(session: Session) -> _Scanned:  # the first batch, or --data, in a mode
        run, rows = (None, ()) if over is None else scan_over(session, on_progress=progress)[:2]
        if over is not None:  # --data: its first batch, with its labels when they fit the loss
            rows_of = over.stream if given is None or given.stream is None else given.stream
            session = session_for(session, session.options, warnings, rows_of.batch(0))
        try:
            weights = scan_weights(session, options.loss, projection=True)
        except Exception as exc:  # the outputs' projection, without a loss
            if not steps.loss_error(exc):
                raise
            report = scan_session(session)  # the forward pass alone: it raises when it fails
            return _Scanned(session, None, report, run, rows if run else report.rows, exc)
        assert weights.activations is not None  # one batch: its layers' scan is traced with it
        report = weights.activations
        return _Scanned(session, weights, report, run, rows if run else report.rows)

    def wrong(found: _Scanned) -> bool:  # a baseline's own mode is kept
        constant = found.report.constant if found.run is None else ()
        return baseline is None and scan_wrong(found.rows, constant)

    try:
        _, scanned, said = in_right_mode(start, scans, wrong)
    except UsageError:  # the data does not fit this model: the command is wrong, not the file
        raise
    except BatchFailed as exc:  # the model's own code failed on a batch: the file fails
        add("forward", str(exc), [Finding.ERROR])
        return
    except LayergradError as exc:  # e.g. --loss names no Keras loss
        add("forward", f"not run: {exc}", [Finding.ERROR])
        return
    except (Exception, SystemExit) as exc:  # the model's code failed: the file fails
        add("forward", f"the forward pass failed: {describe(exc)}", [Finding.ERROR])
        return
    session, report, run, rows = scanned.session, scanned.report, scanned.run, scanned.rows
    batch, failed = session.batch, scanned.failed is not None
    where = f" (on the first batch of {batch.batch_size} samples of --data)" if run else ""
    if steps.forward(report, rows, run, batch, trained, where, said, failed, add):
        return  # non-finite over the data: nothing more to judge
    if scanned.failed is not None:
        labelled = given is not None and stream.labels if run else batch.labels
        own = stream.source if labelled else None
        steps.loss_failed(scanned.failed, info, options.loss, own, add)
        return
    weights = scanned.weights
    assert weights is not None
    # a layer that a kernel scaled far up saturates on the probe (unless the kernels were learnt)
    first_pass = stream.recorded or recorder(model, batch.arrays)
    init = None if trained else saturated_init(model, first_pass())
    if over is not None:
        weights = _dead_over_data(over, weights, session.options.training)
    steps.trainable(weights, add, has_loss, where, "the data" if over else "the batch", init)
    if baseline is None:
        if options.baselines:
            add("baseline", "no baseline given for this file")
        return
    full: WeightScanReport | None = weights if has_loss else None
    if run is not None:
        # over the same data: for a file with a loss, the loss's gradient over every sample
        # (`scan --wrt weights --data`, with the labels as check read them, or random ones)
        assert data is not None and over is not None
        text = os.fspath(data.path)
        other = other or not same_data(baseline, text, sha, run.samples, options.allow_other_data)
        if has_loss:
            from layergrad.data.label_stream import Labelled

            try:
                full = scan_weights(
                    over, options.loss, on_progress=options.on_progress,
                    given=given or Labelled(None),
                )  # fmt: skip
            except BatchFailed as exc:
                add("baseline", str(exc), [Finding.ERROR])
                return
        report = ScanReport(over.model_meta, over.probe_meta_of(run, seeded=True), None, rows)
    add("baseline", *judge(report, full, baseline, options.tolerance, other))


def _probe_batch(
    opened: Opened,
    info: FileInfo,
    options: CheckOptions,
    probe: ProbeOptions,
    add: Add,
    asked: bool,
) -> _Stream | None:
    """The stream of one probe batch (random, or `--input`; `asked`: a batch the user asked
    for, whose failure is a usage error); None when it cannot be made (recorded)."""
    from layergrad.commands.session import session_for
    from layergrad.engine.trace import recorder

    loaded, warnings, _ = opened
    model = loaded.model
    try:
        session = session_for(loaded, probe, warnings)
    except LayergradError as exc:  # e.g. a model that does not declare its inputs
        if asked:  # a batch the user asked for does not fit: the command is wrong, not the file
            raise UsageError(str(exc)) from exc
        heads.judge_on_probe(None, info, options.loss, add)
        add("forward", f"not run: {exc}")
        return None
    except Exception as exc:  # no labels are read yet: a failure here is the forward check's
        add("forward", f"the probe batch could not be made: {describe(exc)}", [Finding.ERROR])
        return None
    recorded = recorder(model, session.batch.arrays)  # one forward pass for the heads and init
    heads.judge_on_probe(recorded, info, options.loss, add)
    labels: dict[str, LabelSummary] = {}
    if session.batch.labels:
        from layergrad.data.label_stream import by_output_name, summarise_arrays
        from layergrad.engine.compiled_loss import output_keys

        names, ranks = steps.output_ranks(model)
        keys = output_keys(model, len(names))
        given = by_output_name(session.batch.labels, names, keys)
        session = replace(session, probe=replace(session.batch, labels=given))
        labels = summarise_arrays(given, names, ranks)
    return _Stream(session, labels, session.batch.source, recorded=recorded)


def _data_stream(
    opened: Opened, info: FileInfo, options: CheckOptions, probe: ProbeOptions, add: Add
) -> _Stream:
    """The stream of --data's batches, with its labels (`data/label_stream.py`) in the form
    the loss in the file (or `--loss`) takes, summarised for the `targets` check."""
    from layergrad.commands.session import Session, open_labels, open_stream, probe_batch
    from layergrad.data.label_stream import summarise_batches
    from layergrad.engine.compiled_loss import label_request
    from layergrad.engine.trace import record_calls
    from layergrad.model.loss_forms import find_loss

    loaded, warnings, strategy = opened
    model, data = loaded.model, probe.data_set
    assert data is not None
    names, ranks = steps.output_ranks(model)

    def recorded() -> Recorded | None:  # a random probe batch, drawn if a head needs it
        try:
            return record_calls(model, probe_batch(model, options.probing()).arrays)
        except LayergradError:
            return None

    heads.judge_on_probe(recorded, info, options.loss, add)  # --data is streamed later
    # a compiled loss that does not fit the model's outputs fails the file, before the data
    request = label_request(model, find_loss(info.compile_config, options.loss))
    try:  # the data does not fit this model: the command is wrong, not the file
        labelled: Labelled | None = open_labels(model, request, probe, strict=False)
        batches = open_stream(model, probe, strategy)
    except LayergradError as exc:
        raise UsageError(f"{os.fspath(info.path)}: {exc}") from exc
    if labelled is not None and labelled.stream is None:  # no labels, or none that fit
        labelled = None
    labels = summarise_batches(labelled.label_batches(), names, ranks) if labelled else {}
    source = f"--data {data.path}"
    if labelled is not None and labelled.classes:
        source += f" (the class sub-folders {labelled.describe_classes()})"
    over = Session(os.fspath(info.path), model, loaded.info, probe, batches, strategy, warnings)
    return _Stream(over, labels, source, labelled)


def _dead_over_data(over: Session, weights: WeightScanReport, training: bool) -> WeightScanReport:
    """The weight scan with only the dead layers of its batch that are dead for every sample
    of the data (every worker's): one more pass of the measured step over the data, nothing
    differentiated, each unit's activity kept (`Plan.alive`), only when a layer is dead."""
    import numpy as np

    from layergrad.core.gradient_stats import DEAD_FRACTION
    from layergrad.engine.data_step import Plan, run_stream
    from layergrad.model.layer_refs import resolve

    if not weights.dead_layers:
        return weights
    sites = tuple(resolve(over.model, ref) for ref, _ in weights.dead_layers)
    plan = Plan(sources=sites, targets=(), training=training, data=True, alive=sites)
    run = run_stream(over.model, plan, over.stream, over.strategy)
    shares = [float(np.mean(units <= 0)) for units in run.alive]
    dead = tuple(
        (ref, share)
        for (ref, _), share in zip(weights.dead_layers, shares, strict=True)
        if share > DEAD_FRACTION
    )
    return replace(weights, dead_layers=dead)
