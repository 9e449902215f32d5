"""The labels of `layergrad fit`, read once before the first step.

Whether each output can take its labels is the `target_mismatch` rule of `check --data`
(`model/target_fit.py`), so a label problem is a finding before training, never a failure
inside TensorFlow's graph; the same pass gives the trivial loss (`data/labels.py`
`TrivialLoss`: the loss of predicting the labels' prior) and the samples the data holds.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from layergrad.core.fit_results import FitReport
from layergrad.core.results import Reason
from layergrad.core.tf_types import KerasModel
from layergrad.core.vocab import Finding
from layergrad.files.file_info import FileInfo
from layergrad.model.target_fit import LabelSummary

if TYPE_CHECKING:
    from layergrad.data.label_stream import Labelled
    from layergrad.model.loss_forms import LossSpec


UNKNOWN_READ = 1_000_000  # labels read at most from a source of unknown length (--epochs)


@dataclass(frozen=True)
class LabelCheck:
    """What the labels hold: the outputs they do not fit, the trivial loss, the samples."""

    mismatches: tuple[Reason, ...]
    trivial: float | None
    samples: int


def read_labels(
    model: KerasModel,
    info: FileInfo,
    labelled: Labelled,
    spec: LossSpec,
    loss: str | None,
    bound: int | None,
    on_batch: Callable[[int], None] | None = None,
) -> LabelCheck:
    """Read the labels of `labelled` once (at most `bound` samples when the source does not
    say how many it has) and judge them against each output and `spec` (`loss`: --loss).
    `on_batch(seen)` is called after each batch with the samples read so far."""
    from layergrad.commands.check.steps import output_ranks
    from layergrad.data.labels import TrivialLoss, label_keys
    from layergrad.engine.compiled_loss import label_request

    stream = labelled.stream
    assert stream is not None
    names, ranks = output_ranks(model)
    request = label_request(model, spec)
    units = [u or 0 for u in request.units]
    trivial = TrivialLoss(spec.name, units[0] if units else 0) if len(stream.labels) == 1 else None
    summaries: dict[str, LabelSummary] = {}
    seen = 0
    known = stream.samples
    for batch in labelled.label_batches():
        for name, key in label_keys(names, list(batch)).items():
            summaries.setdefault(name, LabelSummary()).add(batch[key], ranks.get(name))
        y = next(iter(batch.values()))
        if trivial is not None:
            trivial.add(y)
        seen += len(y) if getattr(y, "ndim", 0) else 1
        if on_batch is not None:
            on_batch(seen)
        if known is None and seen >= (bound or UNKNOWN_READ):
            break  # a source that does not say how many samples it has may have no end
    found = _mismatches(info, names, units, summaries, spec, loss)
    return LabelCheck(tuple(found), trivial.value() if trivial else None, known or seen)


def _mismatches(
    info: FileInfo,
    names: list[str],
    units: list[int],
    labels: Mapping[str, LabelSummary],
    spec: LossSpec,
    loss: str | None,
) -> list[Reason]:
    """`target_mismatches` with the file's output heads (the rule of `check --data`), or,
    when the file does not say which layers make the outputs, heads of unknown activation
    with the model's output widths."""
    from layergrad.model.head_forms import keyed_by_head
    from layergrad.model.loss_fit import Head, output_heads, per_output
    from layergrad.model.loss_forms import unknown_outputs
    from layergrad.model.target_fit import target_mismatches

    if not labels:
        return []
    heads = output_heads(info.config, info.graph) if info.graph.known else []
    if not heads or len(heads) != len(names):
        heads = [Head(n, n, "unknown", u or None) for n, u in zip(names, units, strict=False)]
    if len(heads) == 1 and len(labels) == 1:  # `y`: however Keras names the one output
        labels = {heads[0].name: next(iter(labels.values()))}
    elif {h.name for h in heads} == set(names):  # by name: the heads' order may differ
        labels = {h.name: labels[h.name] for h in heads if h.name in labels}
    else:
        labels = {h.name: labels[n] for h, n in zip(heads, names, strict=False) if n in labels}
    compiled = {"loss": loss} if loss else info.compile_config
    given = keyed_by_head(compiled.get("loss"), info.config)
    names = [h.name for h in heads]
    specs = per_output(given, names) if given else []
    custom = unknown_outputs(given, names) if given else frozenset()
    if not specs or (all(s is None for s in specs) and not custom):
        specs = per_output(spec.name, names)
    return target_mismatches(heads, specs, labels, custom)


def refused(model: KerasModel, loss: str, mismatches: tuple[Reason, ...]) -> FitReport:
    """The report of a run that never started: each mismatch a `target_mismatch` finding at
    step 0 (before the first step)."""
    optimizer = getattr(model, "optimizer", None)
    findings = tuple(
        Reason(Finding.TARGET_MISMATCH, f"{m.message}. Fix: {m.hint}", layer=m.layer, step=0)
        for m in mismatches
    )
    return FitReport(
        model=str(model.name),
        model_class=type(model).__name__,
        every=0,
        steps=0,
        epochs=0,
        loss_name=loss,
        optimizer=type(optimizer).__name__ if optimizer is not None else "",
        learning_rate=None,
        losses=(),
        checkpoints=(),
        findings=findings,
        stopped=Finding.TARGET_MISMATCH.value,
    )
