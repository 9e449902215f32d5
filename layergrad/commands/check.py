"""The CI gate: named checks of one model file, from static reading to gradient flow.

1. readable   the file is a well-formed .keras / .h5 (no TensorFlow)
2. safe       the static audit finds nothing that would run code on load
3. weights    every stored weight is finite
4. loss       the compiled loss (or --loss) fits each output's activation
5. loads      Keras loads it in safe mode
6. forward    a forward pass on a random probe batch is finite, and its outputs vary
7. gradient   the gradient of the loss (compiled in the file, or --loss), else of a random
              projection of the outputs, reaches every differentiable layer, finite
8. trainable  every trainable variable gets a gradient from the loss (skipped without one)
9. baseline   with `--baseline`: no regression against a committed scan (see `baseline.py`)

`static_only` stops after 4 and never imports TensorFlow.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from layergrad.commands import check_steps as steps
from layergrad.commands.baseline import (
    Baseline,
    fits,
    judge,
    load_baselines,
    match_baselines,
    probe_options,
    same_data,
)
from layergrad.commands.check_steps import Add
from layergrad.core.errors import LayergradError, UsageError, describe
from layergrad.core.probe_options import PathLike, ProbeOptions, Progress
from layergrad.core.results import CheckItem, FileVerdict
from layergrad.core.tf_types import KerasModel
from layergrad.core.vocab import DEFAULT_FAIL_ON, Finding
from layergrad.diagnose.regressions import DEFAULT_TOLERANCE
from layergrad.files.file_info import FileInfo, read_file_info

if TYPE_CHECKING:
    import numpy as np

    from layergrad.commands.session import Session
    from layergrad.core.results import ScanRow, WeightScanReport
    from layergrad.core.tf_types import Strategy
    from layergrad.data.sources import DataStream
    from layergrad.engine.data_step import StreamRun
    from layergrad.engine.loader import LoadedModel

    Opened = tuple[LoadedModel, tuple[str, ...], Strategy | None]  # what `session.load` returns


@dataclass(frozen=True)
class CheckOptions:
    """What a check run looks for and how it probes.

    `probe` makes the batch of the forward and gradient checks (a random one, `input_file`,
    or every sample of `data`); its `reduce` and `training` are the check's own choice.
    """

    fail_on: frozenset[Finding] = frozenset(DEFAULT_FAIL_ON)
    static_only: bool = False
    imports: tuple[str, ...] = ()
    unsafe: bool = False
    probe: ProbeOptions = field(default_factory=ProbeOptions)
    loss: str | None = None  # a keras.losses name overriding the file's compiled loss
    baselines: tuple[str, ...] = ()  # `layergrad scan --json` files (see baseline.match_baselines)
    tolerance: float = DEFAULT_TOLERANCE  # decades of mean |g| a baseline allows
    on_progress: Progress | None = None
    allow_other_data: bool = False  # --baseline --data: compare with a baseline of other data

    def __post_init__(self) -> None:
        if self.allow_other_data and not (self.probe.data is not None and self.baselines):
            raise UsageError("--allow-other-data goes with --baseline and --data; drop it")

    def probing(self, training: bool = False) -> ProbeOptions:
        """The probe options of the forward and gradient checks, in training mode or not."""
        return replace(self.probe, reduce="sum", training=training)


def _text(path: PathLike | None) -> str | None:
    return None if path is None else os.fspath(path)


def check_files(
    paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    options: CheckOptions = CheckOptions(),
    on_file: Callable[[str], None] | None = None,
) -> tuple[FileVerdict, ...]:
    """Check each file; `on_file(path)` is called as each one starts (for a progress bar).

    `paths` is one file or a list of them. With `options.baselines`, each baseline is
    matched to a file first (a baseline that matches none, or whose probe cannot be reused,
    is an InputError before anything loads).
    """
    if isinstance(paths, (str, os.PathLike)):  # one file, not a sequence of characters
        paths = [paths]
    unknown = sorted(set(options.fail_on) - set(Finding.words()))
    if unknown:
        raise LayergradError(
            f"unknown --fail-on finding {', '.join(unknown)}; use {','.join(Finding.words())}"
        )
    baselines: dict[str, Baseline] = {}
    if options.baselines:
        if options.static_only:
            raise LayergradError("--baseline compares a gradient scan; drop --static-only")
        files = [os.fspath(p) for p in paths]
        found = load_baselines(options.baselines)
        probe = options.probe
        baselines = match_baselines(files, found, _text(probe.input_file), probe.data is not None)
    verdicts = []
    for path in paths:
        if on_file is not None:
            on_file(os.fspath(path))
        verdicts.append(check_file(path, options, baselines.get(os.fspath(path))))
    return tuple(verdicts)


def check_file(
    path: str | os.PathLike[str],
    options: CheckOptions = CheckOptions(),
    baseline: Baseline | None = None,
) -> FileVerdict:
    """Run the checks on one file, stopping at the first that leaves nothing to check next.

    Whatever the file holds, it gets a verdict: a failure nobody foresaw is recorded as an
    ``error`` finding of the check that was running, and the other files still get theirs.
    `baseline` adds the `baseline` check, scanning with the baseline's probe.

    Raises:
        UsageError: the options cannot work with this file (a baseline made with another
            probe, an `--input` that does not fit): the command, not the file, is wrong.
    """
    items: list[CheckItem] = []
    running = [CHECKS[0]]

    def add(name: str, message: str, findings: Sequence[Finding] = ()) -> bool:
        passed = not set(findings) & options.fail_on
        warned = tuple(f for f in findings if f not in options.fail_on)
        items.append(CheckItem(name, passed, message, tuple(findings), warned))
        running[0] = CHECKS[min(CHECKS.index(name) + 1, len(CHECKS) - 1)]
        return passed

    try:
        _run(path, options, add, baseline)
    except UsageError:
        raise
    except (Exception, SystemExit) as exc:  # one bad file must not sink (or pass) the run
        message = f"failed unexpectedly: {type(exc).__name__}: {describe(exc)}"
        add(running[0], message, [Finding.ERROR])
    return _verdict(path, items)


CHECKS = (
    "readable", "safe", "weights", "loss", "loads", "targets", "forward", "gradient", "trainable",
    "baseline",
)  # fmt: skip


def _run(
    path: str | os.PathLike[str], options: CheckOptions, add: Add, baseline: Baseline | None
) -> None:
    if Path(path).is_dir() and not (Path(path) / "saved_model.pb").exists():
        add(
            "readable",
            f"{os.fspath(path)} is a directory without .keras or .h5 files; expected model "
            "files; check the path",
            [Finding.UNREADABLE],
        )
        return
    try:
        info = read_file_info(path, read_weights=True)
    except LayergradError as exc:
        add("readable", str(exc), [Finding.UNREADABLE])
        return
    add("readable", f"{info.format} file, {len(info.graph.layers)} layers")
    if not steps.safe(info, options.imports, options.unsafe, add):
        return
    steps.weights(info, add)
    steps.loss_fits(info, options.loss, add)
    if not options.static_only:
        _dynamic(path, info, options, add, baseline)


def _verdict(path: str | os.PathLike[str], items: list[CheckItem]) -> FileVerdict:
    return FileVerdict(os.fspath(path), all(i.passed for i in items), tuple(items))


def _load(
    path: str | os.PathLike[str],
    info: FileInfo,
    options: CheckOptions,
    probe: ProbeOptions,
    add: Add,
) -> Opened | None:
    """Load the model (`session.load`) and record the `loads` check; None when it fails."""
    from layergrad.commands import session

    try:
        opened = session.load(
            path, probe, imports=options.imports, unsafe=options.unsafe, info=info
        )
    except LayergradError as exc:
        add("loads", str(exc), [Finding.UNREADABLE])
        return None
    model = opened[0].model
    mode = "" if options.unsafe else " in safe mode"
    add("loads", f"{type(model).__name__} {model.name!r} loads{mode}")
    return opened


def _dynamic_data(
    path: str | os.PathLike[str],
    info: FileInfo,
    options: CheckOptions,
    add: Add,
    baseline: Baseline | None = None,
    has_loss: bool = False,
) -> None:
    """The forward and gradient checks over every sample of `options.probe.data` (one pass), and
    with `baseline` the baseline check over the same data (the loss's gradient over the data
    for a file with a loss)."""
    from layergrad.commands import over_data
    from layergrad.engine.data_step import BatchFailed

    probe = options.probing()
    other, sha = False, ""
    if baseline is not None:
        from layergrad.data.fingerprint import data_sha256

        fits(baseline, has_loss, os.fspath(path))  # a usage error, before anything loads
        assert options.probe.data is not None
        sha = data_sha256(options.probe.data)
        other = not same_data(
            baseline, os.fspath(options.probe.data), sha, None, options.allow_other_data
        )
        recorded = probe_options(baseline, None, data=True)
        probe = replace(
            options.probing(),
            batch_size=recorded.batch_size,
            seed=recorded.seed,
            reduce=recorded.reduce,
            training=recorded.training,
        )
    opened = _load(path, info, options, probe, add)
    if opened is None:
        return
    loaded, _, strategy = opened
    from layergrad.data.functions import is_function
    from layergrad.data.labels import summarise_function, summarise_npz

    names, ranks = _outputs(loaded.model)
    data = os.fspath(options.probe.data or "")
    if is_function(data):
        inputs = len(getattr(loaded.model, "inputs", None) or [None])
        labels = summarise_function(data, names, ranks, inputs, options.probe.limit)
    else:
        labels = summarise_npz(data, names, ranks, options.probe.limit)
    mismatched = steps.targets(info, options.loss, labels, f"--data {options.probe.data}", add)
    try:
        batches = over_data.open_stream(loaded.model, probe, strategy)
    except LayergradError as exc:  # the data does not fit this model: the command is wrong
        raise UsageError(f"{os.fspath(path)}: {exc}") from exc
    try:
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
    first = _first_batch(loaded, batches, info, options, None if mismatched else names)
    weights, has_loss = _weights_of(first, options)
    weights = _dead_over_data(loaded.model, batches, weights, first.options.training)
    report = weights.activations
    where = f" (on the first batch of {first.batch.batch_size} samples of --data)"
    found, parts = steps.forward_parts(report) if report is not None else ([], [])
    if found:
        add("forward", f"{message}; {'; '.join(parts)}{where}", found)
    else:
        add("forward", f"{message}; outputs vary and inputs are in range{where}")
    steps.gradient(rows, add)
    steps.trainable(weights, add, has_loss, where, dead_scope="the data")
    if baseline is not None:  # over the same data: the loss's gradient over every sample
        data = os.fspath(options.probe.data or "")
        other = other or not same_data(baseline, data, sha, run.samples, options.allow_other_data)
        _baseline_over_data(
            path, opened, batches, run, rows, probe, options, add, baseline, has_loss, other
        )


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
) -> None:
    """The `baseline` check over the data: for a file with a loss, the loss's gradient over
    every sample (`scan --wrt weights --data`), else the rows of the streamed scan."""
    from layergrad.commands import over_data
    from layergrad.core.results import ScanReport
    from layergrad.engine.data_step import BatchFailed

    loaded, warnings, strategy = opened
    full = None
    if has_loss:
        from layergrad.commands.weights_data import weights_over

        try:
            full = weights_over(
                loaded, warnings, strategy, probe, options.loss, options.on_progress, path
            )
        except BatchFailed as exc:
            add("baseline", str(exc), [Finding.ERROR])
            return
    scanned = ScanReport(
        model=over_data._model_meta(path, loaded, warnings),
        probe=over_data._probe_meta(batches.source, run, probe, seeded=True),
        target=None,
        rows=rows,
    )
    add("baseline", *judge(scanned, full, baseline, options.tolerance, other))


def _first_batch(
    loaded: LoadedModel,
    batches: DataStream,
    info: FileInfo,
    options: CheckOptions,
    names: list[str] | None,
) -> Session:
    """A session on the first batch of --data, with its labels when they fit (`names`)."""
    from layergrad.commands.scan import untrained_batchnorm
    from layergrad.commands.session import Session
    from layergrad.data.labels import first_labels
    from layergrad.diagnose.diagnoser import Diagnoser

    batch = batches.batch(0)
    if names:
        given = first_labels(os.fspath(options.probe.data or ""), names, batch.batch_size)
        batch = replace(batch, labels=given or None)
    model = loaded.model
    probe = replace(options.probing(bool(untrained_batchnorm(model))), data=None, limit=None,
                    distribute=None, cpu_replicas=None)  # fmt: skip
    diagnoser = Diagnoser(model, batch, info.graph, probe.training, probe.reduce)
    return Session(info.path, model, info, batch, probe, diagnoser)


def _dead_everywhere(
    masks: list[np.ndarray | None], batches: DataStream
) -> list[np.ndarray | None]:
    """Under `--distribute multi-worker`, the units dead on every worker's shard (a worker
    without batches has no say); in one process the masks as they are."""
    import numpy as np

    from layergrad.data.accumulators import gather_workers
    from layergrad.data.devices import strategy_for

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


def _weights_of(session: Session, options: CheckOptions) -> tuple[WeightScanReport, bool]:
    """The weight scan of the session (the loss, or the outputs' projection) and whether a
    loss was found."""
    from layergrad.commands.weight_scan import scan_weights
    from layergrad.engine.compiled_loss import find_loss

    has_loss = find_loss(session.info.compile_config, options.loss) is not None
    return scan_weights(session, options.loss, projection=True), has_loss


def _dynamic(
    path: str | os.PathLike[str],
    info: FileInfo,
    options: CheckOptions,
    add: Add,
    baseline: Baseline | None = None,
) -> None:
    from layergrad.commands.scan import scan_session, untrained_batchnorm
    from layergrad.commands.session import session_for
    from layergrad.commands.weight_scan import scan_weights
    from layergrad.data.preflight import check_before_loading
    from layergrad.engine.compiled_loss import find_loss

    try:  # data that cannot feed this model: the command is wrong, not the file
        check_before_loading(info.graph, options.probe.data, options.probe.input_file)
    except LayergradError as exc:
        raise UsageError(f"{os.fspath(path)}: {exc}") from exc
    has_loss = find_loss(info.compile_config, options.loss) is not None
    if options.probe.data is not None:
        _dynamic_data(path, info, options, add, baseline, has_loss)
        return
    if baseline is not None:
        fits(baseline, has_loss, os.fspath(path))  # a usage error, before anything loads
    opened = _load(path, info, options, options.probing(), add)
    if opened is None:
        return
    loaded, warnings, _ = opened
    model = loaded.model
    # A model that was never trained does not normalize in inference (BatchNormalization with
    # its initial statistics): check it the way training will run it, with batch statistics.
    training = bool(untrained_batchnorm(model))
    try:
        probe = (
            replace(
                probe_options(baseline, _text(options.probe.input_file)),
                max_memory=options.probe.max_memory,
            )
            if baseline
            else options.probing(training)
        )
        session = session_for(loaded, probe, warnings)
    except LayergradError as exc:  # e.g. a model that does not declare its inputs
        if baseline is not None or options.probe.input_file is not None:
            # a batch the user asked for does not fit: the command is wrong, not the file
            raise UsageError(str(exc)) from exc
        add("forward", f"not run: {exc}")
        return
    if session.batch.labels:
        from layergrad.data.labels import summarise_arrays

        names, ranks = _outputs(model)
        labels = summarise_arrays(session.batch.labels, names, ranks)
        if steps.targets(info, options.loss, labels, session.batch.source, add):
            # the loss cannot take these labels: the gradient checks draw labels that fit
            session = replace(session, batch=replace(session.batch, labels=None))
    try:
        # without a loss the update ratios come from a random projection of the outputs
        weights = scan_weights(session, options.loss, projection=True)
        report = weights.activations if weights.activations else scan_session(session)
    except LayergradError as exc:  # e.g. --loss names no Keras loss
        add("forward", f"not run: {exc}", [Finding.ERROR])
        return
    except (
        Exception,
        SystemExit,
    ) as exc:  # the model's code failed: the file fails, the run goes on
        add("forward", f"the forward pass failed: {describe(exc)}", [Finding.ERROR])
        return
    if report.first_nonfinite is not None:
        add(
            "forward",
            f"activations turn non-finite (NaN/Inf) at layer {report.first_nonfinite!r}",
            [Finding.NONFINITE],
        )
    elif report.constant or report.input_range:
        steps.forward_findings(report, add)
    else:
        batch = session.batch
        source = "a random batch" if batch.source == "random" else f"the batch in {batch.source}"
        drawn = f" ({batch.drawn})" if batch.drawn else ""
        mode = ""
        if training and session.options.training:
            mode = " (in training mode: its BatchNormalization was never trained)"
        add("forward", f"finite and varying on {source} of {batch.batch_size}{drawn}{mode}")
    steps.gradient(report.rows, add)
    steps.trainable(weights, add, has_loss)
    if baseline is not None:
        add("baseline", *judge(report, weights if has_loss else None, baseline, options.tolerance))
    elif options.baselines:
        add("baseline", "no baseline given for this file")


def _outputs(model: KerasModel) -> tuple[list[str], dict[str, int]]:
    """The model's output names and the rank of each output without the batch axis."""
    names = list(getattr(model, "output_names", None) or [])
    try:
        shapes = [tuple(t.shape) for t in model.outputs]
    except (AttributeError, ValueError):
        shapes = []
    names = names or [f"output_{i}" for i in range(max(1, len(shapes)))]
    ranks = {n: len(shape) - 1 for n, shape in zip(names, shapes, strict=False)}
    return names, ranks


def expand_paths(paths: Sequence[str]) -> list[str]:
    """Model files to check: files as given; a directory's .keras / .h5 files, recursively.

    A directory holding `saved_model.pb` is kept as it is, so its check explains SavedModels;
    so is a directory without model files (or one that cannot be listed), so its check says
    so while the other files are checked. Symbolic links to directories are not followed.
    """
    out: list[str] = []
    for text in paths:
        p = Path(text)
        try:
            walk = p.is_dir() and not (p / "saved_model.pb").exists()
        except OSError:
            walk = False
        found: list[str] = []
        if walk:
            for root, _dirs, files in os.walk(p, followlinks=False):
                found += [os.path.join(root, f) for f in files if f.endswith((".keras", ".h5"))]
        out.extend(sorted(found) or [text])
    if not out:
        raise LayergradError("give at least one model file to check")
    return out
