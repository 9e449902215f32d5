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
from layergrad.commands.check.baseline import Baseline, judge, probe_options, same_data
from layergrad.commands.check.heads import judge_on_random_probe
from layergrad.commands.check.options import Add, CheckOptions
from layergrad.core.errors import LayergradError, UsageError
from layergrad.core.probe_options import OneBatch, ProbeOptions
from layergrad.core.tf_types import KerasModel, Strategy, Tensor
from layergrad.core.vocab import Finding
from layergrad.files.file_info import FileInfo

if TYPE_CHECKING:
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
    baseline: Baseline | None,
    has_loss: bool,
    trained: bool,
) -> None:
    """The forward and gradient checks over every sample of the data set (one pass), and
    with `baseline` the baseline check over the same data (the loss's gradient over the data
    for a file with a loss). `trained`: the file records training steps."""
    from layergrad.commands import data_meta, over_data
    from layergrad.commands.session import Session
    from layergrad.commands.untrained_batchnorm import in_right_mode, scan_wrong
    from layergrad.commands.weight_scan import scan_weights, weights_over
    from layergrad.core.results import ScanReport
    from layergrad.data.label_stream import Labelled
    from layergrad.diagnose.diagnoser import Diagnoser
    from layergrad.engine.layer_calls import recorder
    from layergrad.engine.step_calls import BatchFailed

    probe, data = options.probing(), options.probe.data_set
    other, sha = False, ""
    assert data is not None
    if baseline is not None:
        from layergrad.data.fingerprint import data_sha256

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
    loaded, warnings, strategy = opened
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

    def scan(training: bool) -> tuple[ProbeOptions, StreamRun, tuple[ScanRow, ...]]:
        mode = replace(probe, training=training)
        return mode, *over_data.scan_over(
            loaded, strategy, batches, mode, on_progress=options.on_progress
        )

    try:  # a baseline's own mode is kept
        (probe, run, rows), said = in_right_mode(
            loaded.model, probe.training, scan, lambda f: baseline is None and scan_wrong(f[2])
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
    stream = batches if given is None or given.stream is None else given.stream  # same rows
    one = replace(options.probing(probe.training), source=OneBatch())
    diagnoser = Diagnoser(loaded.model, stream.batch(0), info.graph, one.training, one.reduce)
    first = Session(info.path, loaded.model, info, diagnoser.batch, one, diagnoser)
    try:
        weights = scan_weights(first, options.loss, projection=True)  # or the outputs' projection
    except Exception as exc:  # the forward pass ran above: the loss failed on the labels
        if not steps.loss_error(exc):
            raise
        add("forward", message)
        steps.gradient(rows, add)
        own = source if given is not None and labels else None
        steps.loss_failed(exc, info, options.loss, own, add)
        return
    weights = _dead_over_data(loaded.model, batches, weights, first.options.training, strategy)
    report = weights.activations
    where = f" (on the first batch of {first.batch.batch_size} samples of --data)"
    mode = f"; {said}" if said else ""
    found, reasons = steps.forward_parts(report, trained) if report is not None else ([], [])
    if found:
        said_all = "; ".join(map(str, reasons))
        add("forward", f"{message}; {said_all}{where}{mode}", found, reasons=reasons)
    else:
        add("forward", f"{message}; outputs vary and inputs are in range{where}{mode}")
    steps.gradient(rows, add)
    init = steps.init_scale(trained, loaded.model, recorder(loaded.model, first.batch.arrays))
    steps.trainable(weights, add, has_loss, where, dead_scope="the data", init=init)
    if baseline is None:
        return
    # over the same data: for a file with a loss, the loss's gradient over every sample (`scan
    # --wrt weights --data`, with the labels as check read them, or random ones), else the rows
    text = os.fspath(data.path)
    other = other or not same_data(baseline, text, sha, run.samples, options.allow_other_data)
    full = None
    if has_loss:
        try:
            full = weights_over(
                loaded, warnings, strategy, probe, options.loss, options.on_progress, path,
                given or Labelled(None),
            )  # fmt: skip
        except BatchFailed as exc:
            add("baseline", str(exc), [Finding.ERROR])
            return
    meta = data_meta.probe_meta(batches.source, run, probe, seeded=True)
    scanned = ScanReport(data_meta.model_meta(path, loaded, warnings), meta, None, rows)
    add("baseline", *judge(scanned, full, baseline, options.tolerance, other))


def _labels(
    loaded: LoadedModel, info: FileInfo, options: CheckOptions, probe: ProbeOptions
) -> Labelled | None:
    """The data's labels with its inputs (`data/label_stream.py`), in the form the loss in
    the file (or `--loss`) takes; None when the data has none or they do not match the
    outputs (the `targets` check is then not run)."""
    from layergrad.commands.over_data import data_specs, shard_of
    from layergrad.data.label_stream import open_labelled
    from layergrad.engine.compiled_loss import label_request
    from layergrad.model.loss_forms import find_loss

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


def _dead_over_data(
    model: KerasModel,
    batches: DataStream,
    weights: WeightScanReport,
    training: bool,
    strategy: Strategy | None,
) -> WeightScanReport:
    """The weight scan with only the dead layers of its batch that are dead for every sample
    of the data (every worker's): one more forward pass over the data (`over_batches`, each
    unit's largest |output| != 0), only when a layer is dead."""
    import threading

    import numpy as np

    from layergrad.core.gradient_stats import DEAD_FRACTION
    from layergrad.core.keras_backend import quiet_import
    from layergrad.engine import step_calls as calls
    from layergrad.engine.layer_calls import site_groups, wrapped
    from layergrad.model.layer_refs import resolve

    if not weights.dead_layers:
        return weights
    tf, _ = quiet_import()
    strategy = strategy or tf.distribute.get_strategy()
    sites = [resolve(model, ref) for ref, _ in weights.dead_layers]
    spread = not calls.is_default(strategy)  # a replica's share of a batch may be empty
    local = threading.local()  # each replica (a thread) records its own calls

    def replica_step(batch: tuple[Tensor, ...]) -> dict[str, Tensor]:
        inputs, samples = batch[: len(batches.specs)], batch[-1]
        empty = tf.equal(tf.size(samples), 0)
        inputs = calls.pad_if_empty(inputs, samples, empty)[0] if spread else inputs
        seen: dict[tuple[str, int], list[Tensor]] = {}
        local.route = (lambda key, flat, _: seen.setdefault(key, flat), {})
        calls.call_model(model, list(inputs), training)
        del local.route
        out = {"samples": tf.reshape(tf.cast(tf.size(samples), tf.float64), [1])}
        for i, site in enumerate(sites):  # 1 where a unit's output is not 0 on some sample
            units = tf.reshape(seen[site.key][0], [-1, tf.shape(seen[site.key][0])[-1]])
            out[f"{i}/gmax"] = tf.reduce_max(tf.cast(units != 0, tf.float64), axis=0)
        return calls.masked(out, empty) if spread else out

    route = lambda: getattr(local, "route", None)  # noqa: E731
    with calls.moving_statistics_kept(model, training), wrapped(site_groups(sites), route):
        totals = calls.over_batches(batches, strategy, replica_step, model=model).totals
    shares = [float(np.mean(totals[f"{i}/gmax"] <= 0)) for i in range(len(sites))]
    dead = tuple(
        (ref, share)
        for (ref, _), share in zip(weights.dead_layers, shares, strict=True)
        if share > DEAD_FRACTION
    )
    return replace(weights, dead_layers=dead)
