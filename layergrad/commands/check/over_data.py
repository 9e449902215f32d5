"""`check --data`: the forward, gradient and baseline checks over every sample of the data.

One streamed pass gives the forward and gradient checks; the rules that need one batch
(outputs that never vary, unscaled inputs, the weights' gradients) run on the data's first
batch with its labels, and a layer dead on that batch is judged over every sample.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import TYPE_CHECKING

from layergrad.commands.check import steps
from layergrad.commands.check.baseline import Baseline, fits, judge, probe_options, same_data
from layergrad.commands.check.heads import judge_on_random_probe
from layergrad.commands.check.options import Add, CheckOptions
from layergrad.core.errors import LayergradError, UsageError
from layergrad.core.probe_options import OneBatch, ProbeOptions
from layergrad.core.tf_types import KerasModel
from layergrad.core.vocab import Finding
from layergrad.files.file_info import FileInfo

if TYPE_CHECKING:
    import numpy as np

    from layergrad.commands.check.steps import Opened
    from layergrad.commands.session import Session
    from layergrad.core.results import ScanRow, WeightScanReport
    from layergrad.data.label_stream import Labelled
    from layergrad.data.sources import DataStream
    from layergrad.engine.data_step import StreamRun
    from layergrad.engine.loader import LoadedModel


def dynamic_data(
    path: str | os.PathLike[str],
    info: FileInfo,
    options: CheckOptions,
    add: Add,
    baseline: Baseline | None = None,
    has_loss: bool = False,
) -> None:
    """The forward and gradient checks over every sample of the data set (one pass), and
    with `baseline` the baseline check over the same data (the loss's gradient over the data
    for a file with a loss)."""
    from layergrad.commands import over_data
    from layergrad.commands.untrained_batchnorm import probe_in_training, scan_wrong
    from layergrad.engine.step_calls import BatchFailed

    probe, data = options.probing(), options.probe.data_set
    other, sha = False, ""
    assert data is not None
    if baseline is not None:
        from layergrad.data.fingerprint import data_sha256

        fits(baseline, has_loss, os.fspath(path))  # a usage error, before anything loads
        sha = data_sha256(data.path)
        other = not same_data(baseline, os.fspath(data.path), sha, None, options.allow_other_data)
        recorded = probe_options(baseline, None, data=True)
        probe = replace(
            options.probing(),
            batch_size=recorded.batch_size,
            seed=recorded.seed,
            reduce=recorded.reduce,
            training=recorded.training,
        )
    opened = steps.loads(path, info, options, probe, add)
    if opened is None:
        return
    loaded, _, strategy = opened
    judge_on_random_probe(loaded.model, info, options, add)
    labelled = _labels(loaded, info, options, probe)
    names, ranks = steps.output_ranks(loaded.model)
    from layergrad.data.labels import summarise_batches

    labels = summarise_batches(labelled.label_batches(), names, ranks) if labelled else {}
    source = f"--data {data.path}"
    if labelled is not None and labelled.classes:
        source += f" (the class sub-folders {labelled.describe_classes()})"
    mismatched = steps.targets(info, options.loss, labels, source, add)
    try:
        batches = over_data.open_stream(loaded.model, probe, strategy)
    except LayergradError as exc:  # the data does not fit this model: the command is wrong
        raise UsageError(f"{os.fspath(path)}: {exc}") from exc
    try:
        run, rows = over_data.scan_over(
            loaded, strategy, batches, probe, on_progress=options.on_progress
        )
        wrong = baseline is None and scan_wrong(rows)  # a baseline's own mode is kept
        said = probe_in_training(loaded.model, probe.training, wrong)
        if said:  # never-trained BatchNormalization: stream again as training runs it
            probe = replace(probe, training=True)
            run, rows = over_data.scan_over(
                loaded, strategy, batches, probe, on_progress=options.on_progress
            )
    except BatchFailed as exc:  # the model's own code failed: the file fails, the run goes on
        add("forward", str(exc), [Finding.ERROR])
        return
    message, findings = over_data.forward_check(run)
    if findings:
        add("forward", message, findings)
        steps.gradient(rows, add)
        return
    # the rules that need one batch (outputs that never vary, unscaled inputs, the weights'
    # gradients) run on the data's first batch, with its labels
    given = labelled if labelled is not None and not mismatched else None
    first = _first_batch(loaded, batches, info, options.probing(probe.training), given)
    weights, has_loss = steps.weight_scan(first, options)
    weights = _dead_over_data(loaded.model, batches, weights, first.options.training)
    report = weights.activations
    where = f" (on the first batch of {first.batch.batch_size} samples of --data)"
    mode = f"; {said}" if said else ""
    found, parts = steps.forward_parts(report) if report is not None else ([], [])
    if found:
        add("forward", f"{message}; {'; '.join(parts)}{where}{mode}", found)
    else:
        add("forward", f"{message}; outputs vary and inputs are in range{where}{mode}")
    steps.gradient(rows, add)
    init = steps.init_scale(path, loaded.model, first.batch.arrays)
    steps.trainable(weights, add, has_loss, where, dead_scope="the data", init=init)
    if baseline is not None:  # over the same data: the loss's gradient over every sample
        text = os.fspath(data.path)
        other = other or not same_data(baseline, text, sha, run.samples, options.allow_other_data)
        _baseline_over_data(
            path, opened, batches, run, rows, probe, options, add, baseline, has_loss, other,
            given,
        )  # fmt: skip


def _baseline_over_data(
    path: str | os.PathLike[str],
    opened: Opened,
    batches: DataStream,
    run: StreamRun,
    rows: tuple[ScanRow, ...],
    probe: ProbeOptions,
    options: CheckOptions,
    add: Add,
    baseline: Baseline,
    has_loss: bool,
    other: bool,
    given: Labelled | None,
) -> None:
    """The `baseline` check over the data: for a file with a loss, the loss's gradient over
    every sample (`scan --wrt weights --data`), else the rows of the streamed scan."""
    from layergrad.commands import data_meta
    from layergrad.core.results import ScanReport
    from layergrad.engine.step_calls import BatchFailed

    loaded, warnings, strategy = opened
    full = None
    if has_loss:
        from layergrad.commands.weight_scan import weights_over

        try:
            from layergrad.data.label_stream import Labelled

            full = weights_over(  # the labels as check read them, or random ones
                loaded, warnings, strategy, probe, options.loss, options.on_progress, path,
                given or Labelled(None),
            )  # fmt: skip
        except BatchFailed as exc:
            add("baseline", str(exc), [Finding.ERROR])
            return
    scanned = ScanReport(
        model=data_meta.model_meta(path, loaded, warnings),
        probe=data_meta.probe_meta(batches.source, run, probe, seeded=True),
        target=None,
        rows=rows,
    )
    add("baseline", *judge(scanned, full, baseline, options.tolerance, other))


def _labels(
    loaded: LoadedModel, info: FileInfo, options: CheckOptions, probe: ProbeOptions
) -> Labelled | None:
    """The data's labels with its inputs (`data/label_stream.py`), in the form the loss in
    the file (or `--loss`) takes; None when the data has none or they do not match the
    outputs (the `targets` check is then not run)."""
    from layergrad.commands.over_data import data_specs, shard_of
    from layergrad.data.label_stream import open_labelled
    from layergrad.engine.compiled_loss import find_loss, label_request

    model = loaded.model
    request = label_request(model, find_loss(info.compile_config, options.loss))
    data = probe.data_set
    assert data is not None
    try:
        found = open_labelled(  # this worker's part, as the inputs' (for the weight pass)
            os.fspath(data.path), data_specs(model), request, probe.rows, data.limit,
            shard_of(probe), first_sample=data.first_sample, strict=False,
        )  # fmt: skip
    except LayergradError as exc:  # the data does not fit this model: the command is wrong
        raise UsageError(f"{os.fspath(info.path)}: {exc}") from exc
    return found if found.stream is not None else None


def _first_batch(
    loaded: LoadedModel,
    batches: DataStream,
    info: FileInfo,
    probe: ProbeOptions,
    labelled: Labelled | None,
) -> Session:
    """A session on the first batch of --data with `probe` (the check's, in the mode of the
    pass over the data), with its labels when they fit (`labelled`: the data read with its
    labels, from the same rows)."""
    from layergrad.commands.session import Session
    from layergrad.diagnose.diagnoser import Diagnoser

    stream = batches if labelled is None or labelled.stream is None else labelled.stream
    batch = stream.batch(0)
    model = loaded.model
    probe = replace(probe, source=OneBatch())
    diagnoser = Diagnoser(model, batch, info.graph, probe.training, probe.reduce)
    return Session(info.path, model, info, batch, probe, diagnoser)


def _dead_everywhere(
    masks: list[np.ndarray | None], batches: DataStream
) -> list[np.ndarray | None]:
    """Under `--distribute multi-worker`, the units dead on every worker's shard (a worker
    without batches has no say); in one process the masks as they are."""
    import numpy as np

    from layergrad.data.devices import strategy_for
    from layergrad.data.stats.accumulators import gather_workers

    if batches.part is None:  # one process read every batch
        return masks
    mine = [None if m is None else [bool(v) for v in m] for m in masks]
    out: list[np.ndarray | None] = [None] * len(masks)
    for worker in gather_workers(strategy_for("multi-worker"), mine):
        for i, mask in enumerate(worker):
            if mask is not None:
                seen = np.asarray(mask, bool)
                before = out[i]
                out[i] = seen if before is None else before & seen
    return out


def _dead_over_data(
    model: KerasModel, batches: DataStream, weights: WeightScanReport, training: bool
) -> WeightScanReport:
    """The weight scan with only the dead layers of its batch that are dead for every sample
    of the data (one more forward pass over the data, only when a layer is dead)."""
    import numpy as np

    from layergrad.core.gradient_stats import DEAD_FRACTION
    from layergrad.data.probe_input import ProbeBatch
    from layergrad.engine.probe import run_probe
    from layergrad.model.layer_refs import resolve

    if not weights.dead_layers:
        return weights
    sites = [resolve(model, ref) for ref, _ in weights.dead_layers]
    masks: list[np.ndarray | None] = [None] * len(sites)
    names = tuple(s.name for s in batches.specs)
    for tensors in batches.dataset:
        arrays = tuple(np.asarray(t.numpy()) for t in tensors)
        run = run_probe(model, ProbeBatch(arrays, names, batches.source, None), sites, sites[:1],
                        training=training)  # fmt: skip
        for i, act in enumerate(run.sources):
            value = act.value.reshape(-1, act.value.shape[-1])
            zero = np.all(value == 0, axis=0)
            masks[i] = zero if masks[i] is None else masks[i] & zero
    masks = _dead_everywhere(masks, batches)
    dead = tuple(
        (ref, float(np.mean(mask)))
        for (ref, _), mask in zip(weights.dead_layers, masks, strict=True)
        if mask is not None and float(np.mean(mask)) > DEAD_FRACTION
    )
    return replace(weights, dead_layers=dead)
