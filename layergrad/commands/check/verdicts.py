"""What a `check` run looks for and how it probes (`CheckOptions`), and the verdict of each
named check of one model file: its message and its findings.

`check_files.py` runs the checks in order; each function here turns what a check found into
one `add(name, message, findings)` call (the `loss` check's are in `loss_check.py`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from layergrad.commands import session
from layergrad.core.errors import LayergradError, UsageError, op_message
from layergrad.core.probe_options import PathLike, ProbeOptions, Progress
from layergrad.core.results import Reason, ScanReport, ScanRow, WeightScanReport
from layergrad.core.tf_types import KerasModel
from layergrad.core.vocab import (
    DEFAULT_FAIL_ON,
    NOT_DIFFERENTIABLE,
    SCAN_FLAGS,
    Finding,
    Reduce,
    Severity,
    Status,
)
from layergrad.diagnose.regressions import DEFAULT_TOLERANCE
from layergrad.files.audit import check_safety, module_name
from layergrad.files.file_info import FileInfo
from layergrad.model.head_forms import keyed_by_head, output_heads
from layergrad.model.label_summary import LabelSummary
from layergrad.model.loss_forms import display_name, per_output, unknown_outputs
from layergrad.model.target_fit import target_mismatches

if TYPE_CHECKING:
    from layergrad.core.tf_types import Strategy
    from layergrad.data.probe_input import ProbeBatch
    from layergrad.diagnose.saturation import SaturatedInit
    from layergrad.engine.data_step import StreamRun
    from layergrad.engine.loader import LoadedModel

    Opened = tuple[LoadedModel, tuple[str, ...], Strategy | None]  # what `session.load` returns

# How a check step records one check: add(check, message, findings=(), ...) -> passed
Add = Callable[..., bool]
# How the `loads` check opens the file: opener(path, probe, info) -> what `session.load` returns
Opener = Callable[[PathLike, ProbeOptions, FileInfo], "Opened"]


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
    # a caller that keeps the loaded model (`fix`); None: `session.load`
    opener: Opener | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.allow_other_data and not (self.probe.data_set is not None and self.baselines):
            raise UsageError("--allow-other-data goes with --baseline and --data; drop it")

    def probing(self) -> ProbeOptions:
        """The probe options of the forward and gradient checks (in inference)."""
        return replace(self.probe, reduce=Reduce.SUM, training=False)


def safe(info: FileInfo, imports: Sequence[str], unsafe: bool, add: Add) -> bool:
    """`safe`: the static audit; False when the file must not be loaded."""
    try:
        accepted = check_safety(info, [module_name(m) for m in imports], unsafe)
    except LayergradError as exc:
        add("safe", str(exc), [Finding.UNSAFE])
        return False
    message = (
        f"accepted with --unsafe: {'; '.join(accepted)}"
        if accepted
        else "nothing runs code on load"
    )
    return add("safe", message)


def loads(
    path: str | os.PathLike[str],
    info: FileInfo,
    options: CheckOptions,
    probe: ProbeOptions,
    add: Add,
) -> Opened | None:
    """Load the model (`session.load`, or the caller's `options.opener`) and record the
    `loads` check; None when it fails."""
    try:
        if options.opener is not None:
            opened: Opened = options.opener(path, probe, info)
        else:
            opened = session.load_checked(  # `dynamic` checked --data and --input
                path, probe, info, imports=options.imports, unsafe=options.unsafe
            )
    except UsageError:  # a custom class no --import defines: the file itself reads fine
        raise
    except LayergradError as exc:
        add("loads", str(exc), [Finding.UNREADABLE])
        return None
    model = opened[0].model
    mode = "" if options.unsafe else " in safe mode"
    add("loads", f"{type(model).__name__} {model.name!r} loads{mode}")
    return opened


def weights(info: FileInfo, add: Add) -> None:
    """`weights`: every stored weight finite (and no shape bomb)."""
    if info.stored.hollow:
        add(
            "weights",
            f"weight {info.stored.hollow[0]} (an HDF5 shape bomb: Keras would allocate the "
            "declared size)",
            [Finding.UNREADABLE],
        )
        return
    bad = [w for w in info.weights if w.nan or w.inf]
    unchecked = sum(w.unchecked for w in info.weights)
    note = f"; {unchecked} tensors not scanned ({info.notes[0]})" if unchecked else ""
    if bad:
        listed = ", ".join(f"{w.layer} ({w.nan} NaN, {w.inf} Inf)" for w in bad[:5])
        each = [(w.layer, f"non-finite weights in {w.layer} ({w.nan} NaN, {w.inf} Inf)")
                for w in bad]  # fmt: skip
        add("weights", f"non-finite weights in {listed}{note}", [Finding.NONFINITE],
            reasons=at_layers(Finding.NONFINITE, each))  # fmt: skip
    else:
        params = sum(w.params for w in info.weights)
        add("weights", f"{params:,} stored weights, all finite{note}")


# Flags of a layer's output that say training cannot work; the magnitude flags (dead,
# vanishing, exploding) of check are judged on the layers' weights instead (`trainable`).
CERTAIN_FLAGS = (Finding.BLOCKED, Finding.NONFINITE)


def targets(
    info: FileInfo, loss: str | None, labels: Mapping[str, LabelSummary], source: str, add: Add
) -> bool:
    """`targets`: the labels given with the data can be produced by each output and fit the
    loss (skipped, not recorded, without labels). True when a failing rule refuses them (a rule
    that only warns keeps them: the loss trains on them)."""
    if not labels:
        return False
    heads = output_heads(info.config, info.graph)
    if not info.graph.known or not heads:
        add("targets", "not run: the file does not say which layers make the outputs")
        return False
    names = [h.name for h in heads]
    if len(heads) == 1 and len(labels) == 1:  # `y`: however Keras names the one output
        labels = {names[0]: next(iter(labels.values()))}
    specs, custom = head_losses(info, loss, names)
    found = target_mismatches(heads, specs or [None] * len(heads), labels, custom)
    if not found:
        held = "; ".join(f"{name}: {s.describe()}" for name, s in labels.items())
        if custom:
            listed = ", ".join(sorted(custom))
            fits = "not judged" if set(names) <= custom else "fit the other outputs"
            add("targets", f"the labels in {source} ({held}): {fits}; {listed}: a custom loss "
                "reads its labels in its own layout, so no label rule applies")  # fmt: skip
            return False
        add("targets", f"the labels in {source} fit every output ({held})")
        return False
    # only warned when every rule that found them warns (its evidence: flagged models train)
    warned = [Finding.TARGET_MISMATCH] if all(r.severity == Severity.WARN for r in found) else []
    add("targets", "; ".join(map(str, found)), [Finding.TARGET_MISMATCH], warn=warned,
        reasons=found)  # fmt: skip
    return not warned  # labels that only warn are kept: the loss trains on them


def head_losses(
    info: FileInfo, loss: str | None, names: Sequence[str]
) -> tuple[list[tuple[str, bool] | None], frozenset[str]]:
    """Each output's loss (`--loss`, else the file's compiled loss, keyed by head) and the
    outputs under a custom loss; ([], none) when there is no loss."""
    given = keyed_by_head(loss or info.compile_config.get("loss"), info.config)
    if not given:
        return [], frozenset()
    return per_output(given, names), unknown_outputs(given, names)


# What a loss raises on labels it cannot read (ids beyond the head, another layout), besides
# TensorFlow's op errors: Keras's checks of shapes and types, a custom loss's own indexing
LOSS_ERRORS = (ValueError, TypeError, LookupError, ArithmeticError)


def loss_error(exc: BaseException) -> bool:
    """Whether `exc`, raised while the loss ran on a batch the model's forward pass took, is
    the loss failing on its labels (not a check of layergrad's own)."""
    from layergrad.core.tf_runtime import tf

    return not isinstance(exc, LayergradError) and isinstance(
        exc, (*LOSS_ERRORS, tf.errors.OpError)
    )


def loss_failed(
    exc: BaseException, info: FileInfo, loss: str | None, source: str | None, add: Add
) -> None:
    """The loss raised on the first batch's labels (`source`: where they came from; None for
    random ones drawn to fit each output): with the user's labels they do not fit the loss,
    a `target_mismatch` completing the `targets` check; with random labels the loss reads a
    layout of its own, which only real labels can give (the `trainable` check says so)."""
    name = loss or display_name(info.compile_config.get("loss"))
    detail = op_message(exc)
    if source is not None:
        message = f"the loss {name} fails on the labels in {source}: {type(exc).__name__}: {detail}"
        hint = "give the labels in the layout the loss reads (ids inside the head's units)"
        reason = Reason(Finding.TARGET_MISMATCH, message, hint)
        add("targets", f"{message}. Fix: {hint}", [Finding.TARGET_MISMATCH], replace=True,
            reasons=[reason])  # fmt: skip
        said = "the loss fails on the labels (targets)"
    else:
        said = (
            f"the loss {name} fails on random labels ({type(exc).__name__}: {detail}): it "
            "reads a layout of its own; pass its labels (`y` in --data or --input)"
        )
    add("trainable", f"not judged: {said}")


def forward(
    report: ScanReport,
    rows: Sequence[ScanRow],
    run: StreamRun | None,
    batch: ProbeBatch,
    trained: bool,
    where: str,
    said: str | None,
    loss_failed: bool,
    add: Add,
) -> bool:
    """`forward` (finite over --data `run` or on `batch`, outputs vary, inputs in range unless
    `trained`; `said`: the note of a probe made again in training mode), then `gradient` of the
    scan's `rows`. True when the activations turn non-finite over the data."""
    from layergrad.diagnose import causes as why

    message, mode = "", f"; {said}" if said else ""
    if run is not None:
        message = f"finite over {run.samples:,} samples"
        for act, fwd in zip(run.activations, run.forward, strict=True):
            if fwd is not None and fwd.nonfinite_batches:
                said = (f"activations turn non-finite (NaN/Inf) at layer {act.site.ref!r} "
                        f"(first in batch {fwd.first_nonfinite})")  # fmt: skip
                if act.site.input_index is not None:  # a model input: the data, no layer
                    said = (f"the data holds NaN/Inf: input {act.site.ref!r} (first in batch "
                            f"{fwd.first_nonfinite}), before any layer; clean the data (the "
                            "model is not at fault)")  # fmt: skip
                each = at_layers(Finding.NONFINITE, [(act.site.ref, said)])
                add("forward", said, [Finding.NONFINITE], reasons=each)
                gradient(rows, add)
                return True
    found: list[Finding] = []
    reasons = [why.constant_output(c) for c in report.constant]
    if reasons:
        found.append(Finding.CONSTANT_OUTPUT)
    scale = report.input_range
    if scale is not None and scale.kind in ("pixels", "units") and trained:
        scale = None  # trained on these values, its kernels are scaled for them
    if scale is not None:
        found.append(Finding.INPUT_RANGE)
        reasons.append(why.input_range(scale))
    bad = report.first_nonfinite if run is None else None
    if bad is not None:
        message = f"activations turn non-finite (NaN/Inf) at layer {bad!r}"
        add("forward", message, [Finding.NONFINITE],
            reasons=at_layers(Finding.NONFINITE, [(bad, message)]))  # fmt: skip
    elif run is not None and loss_failed:  # the forward pass ran above
        add("forward", message)
    elif found:
        text = "; ".join(map(str, reasons))
        add("forward", f"{message}; {text}{where}{mode}" if run else text, found, reasons=reasons)
    elif run is not None:
        add("forward", f"{message}; outputs vary and inputs are in range{where}{mode}")
    else:
        source = "a random batch" if batch.source == "random" else f"the batch in {batch.source}"
        drawn = f" ({batch.drawn})" if batch.drawn else ""
        add("forward", f"finite and varying on {source} of {batch.batch_size}{drawn}{mode}")
    gradient(rows, add)
    return False


def gradient(rows: Sequence[ScanRow], add: Add) -> None:
    """`gradient`: the scan's blocked and non-finite rows, each with its first cause."""
    rows = [replace(r, flags=tuple(f for f in r.flags if f in CERTAIN_FLAGS)) for r in rows]
    problems = [r for r in rows if r.flags]
    if not problems:
        differentiable = sum(1 for r in rows if r.status not in NOT_DIFFERENTIABLE)
        add("gradient", f"reaches all {differentiable} differentiable layers, finite")
        return
    findings = [f for f in SCAN_FLAGS if any(f.value in r.flags for r in problems)]
    parts = [_listed(f, [(r.layer, r.causes) for r in problems if f in r.flags]) for f in findings]
    # each layer's record carries its first cause's hint and op (what to do about it); the
    # message, the hint of the first finding's first known cause
    each = [
        replace(reason, hint=c.hint, op=c.op) if (c := _known(r.causes)) else reason
        for f in findings
        for r in problems
        if f in r.flags
        for reason in at_layers(f, [(r.layer, _listed(f, [(r.layer, r.causes)]))])
    ]
    first = next((c for r in problems if findings[0] in r.flags and (c := _known(r.causes))), None)
    message = "; ".join(parts) + (f". Fix: {first.hint}" if first is not None else "")
    add("gradient", message, findings, reasons=each)


def _known(causes: Sequence[Reason]) -> Reason | None:
    """The first cause, when it is a known one with a hint (`unknown` only says where to look)."""
    first = causes[0] if causes else None
    return first if first is not None and first.hint and first.code != Finding.UNKNOWN else None


def at_layers(finding: Finding, said: Sequence[tuple[str, str]]) -> list[Reason]:
    """A check's `finding` at each layer of `said` ((layer, message) pairs): the records of a
    check that words its findings together (its message lists the layers)."""
    return [Reason(finding, message, layer=layer) for layer, message in said]


def _listed(finding: Finding, named: Sequence[tuple[str, Sequence[Reason]]]) -> str:
    """`finding: a, b, c, d... (code at layer)`: the first four names and the first cause."""
    cause = next((c for _, causes in named for c in causes), None)
    why = f" ({cause.code} at {cause.layer})" if cause else ""
    names = ", ".join(name for name, _ in named[:4])
    return f"{finding}: {names}{'...' if len(named) > 4 else ''}{why}"


# vanishing / exploding: the update ratio below / above the head's, said of layers / a layer
_SCALE_WORDS = (
    (Finding.VANISHING, "below", "they barely learn", "it barely learns"),
    (Finding.EXPLODING, "above", "they take steps far too large", "it takes steps far too large"),
)


def trainable(
    report: WeightScanReport,
    add: Add,
    has_loss: bool = True,
    where: str = "",
    dead_scope: str = "the batch",
    init: SaturatedInit | None = None,
) -> None:
    """`trainable`: every trainable variable gets a gradient from the loss, and each layer's
    update ratio fits the others' (dead, vanishing, exploding: warnings by default).

    Without a loss (`has_loss` False) the report differentiates a random projection of the
    outputs: only the update ratios are judged. `where` is appended to the message (the
    batch it was judged on, with --data); `dead_scope` what the dead units were dead for.
    `init`: a layer that a kernel scaled far up saturates (`diagnose.saturation`), an
    `exploding` warning there.
    """
    from layergrad.commands.weight_rows import scale_flags

    findings: list[Finding] = []
    parts: list[str] = []
    each: list[Reason] = []  # each finding at its layer
    for status, finding in (
        (Status.NONE, Finding.NO_GRADIENT),
        (Status.NONFINITE, Finding.NONFINITE),
    ):
        # without a loss no variable was checked for a gradient: only the update ratios are
        bad = [v for v in report.variables if has_loss and v.status == status]
        if bad:
            findings.append(finding)
            parts.append(_listed(finding, [(v.variable, v.causes) for v in bad]))
            owners = dict.fromkeys(v.layer for v in bad)  # one record a layer, its variables
            each += at_layers(finding, [
                (layer, _listed(finding, [(v.variable, v.causes) for v in bad if v.layer == layer]))
                for layer in owners
            ])  # fmt: skip
    dead = report.dead_layers
    if dead:
        findings.append(Finding.DEAD)
        names = ", ".join(f"{layer} ({share:.0%} of its units)" for layer, share in dead[:4])
        so = (f"these ReLU units output 0 for every sample of {dead_scope}, so their weights "
              "get no gradient")  # fmt: skip
        parts.append(f"dead: {names}{'...' if len(dead) > 4 else ''}: {so}")
        each += at_layers(Finding.DEAD, [(layer, f"dead: {layer} ({share:.0%} of its units): {so}")
                                         for layer, share in dead])  # fmt: skip
    flagged = scale_flags(report.variables)
    ratio = "the update ratio |dL/dW| / |W| of {} is that many decades {} that of the layers "
    for finding, word, they, it in _SCALE_WORDS:
        layers = [(layer, d) for layer, (f, d) in flagged.items() if f == finding]
        if layers:
            findings.append(finding)
            listed = ", ".join(f"{layer} ({abs(d):.1f} decades)" for layer, d in layers[:4])
            more = "..." if len(layers) > 4 else ""
            why = ratio.format("these layers", word) + f"near the output, so {they}"
            parts.append(f"{finding}: {listed}{more}: {why}")
            one = ratio.format("this layer", word) + f"near the output, so {it}"
            each += at_layers(finding, [(layer, f"{finding}: {layer} ({abs(d):.1f} decades): {one}")
                                        for layer, d in layers])  # fmt: skip
    if init is not None:
        findings += [] if Finding.EXPLODING in findings else [Finding.EXPLODING]
        parts.append(init.message())
        if all(r.layer != init.layer or r.code != Finding.EXPLODING for r in each):
            each += at_layers(Finding.EXPLODING, [(init.layer, init.message())])
    if findings:
        projected = "" if has_loss else " (no loss: judged on a random projection of the outputs)"
        message = "; ".join(parts) + projected
    elif has_loss:
        message = (
            f"all {len(report.variables)} trainable variables get a gradient from the loss; "
            "update ratios of the layers fit each other"
        )
    else:
        message = (
            "no loss (the file was saved without model.compile; --loss), so no variable was "
            "checked for a gradient; update ratios of a random projection of the outputs fit "
            "each other"
        )
    add("trainable", message + where, findings, reasons=each)


def output_ranks(model: KerasModel) -> tuple[list[str], dict[str, int]]:
    """The model's output names and the rank of each output without the batch axis."""
    names = list(getattr(model, "output_names", None) or [])
    try:
        shapes = [tuple(t.shape) for t in model.outputs]
    except (AttributeError, ValueError):
        shapes = []
    names = names or [f"output_{i}" for i in range(max(1, len(shapes)))]
    return names, {n: len(shape) - 1 for n, shape in zip(names, shapes, strict=False)}
