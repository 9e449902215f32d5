"""The verdict of each named check of one model file: its message and its findings.

`check.py` runs the checks in order; each function here turns what a check found into one
`add(name, message, findings)` call.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from layergrad.core.errors import LayergradError
from layergrad.core.results import ScanReport, ScanRow, WeightScanReport
from layergrad.core.vocab import Finding, Status
from layergrad.files.file_info import FileInfo

Add = Callable[..., bool]


def safe(info: FileInfo, imports: Sequence[str], unsafe: bool, add: Add) -> bool:
    """`safe`: the static audit; False when the file must not be loaded."""
    from layergrad.files.audit import check_safety, module_name

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
        add("weights", f"non-finite weights in {listed}{note}", [Finding.NONFINITE])
    else:
        params = sum(w.params for w in info.weights)
        add("weights", f"{params:,} stored weights, all finite{note}")


def loss_fits(info: FileInfo, loss: str | None, add: Add) -> None:
    """`loss`: the compiled loss (or `--loss`) fits each output's activation."""
    from layergrad.model.loss_fit import mismatches

    compiled = {"loss": loss} if loss else info.compile_config
    if not compiled.get("loss"):
        add("loss", "no compiled loss to check")
        return
    found = mismatches(info.config, info.graph, compiled)
    if not found:
        add("loss", "the compiled loss fits every output")
        return
    text = "; ".join(f"{m.message}. Use {m.hint}" for m in found)
    add("loss", text, [Finding.LOSS_MISMATCH])


def gradient(rows: Sequence[ScanRow], add: Add) -> None:
    """`gradient`: the scan's flags, each with its first cause."""
    problems = [r for r in rows if r.flags]
    if not problems:
        differentiable = sum(1 for r in rows if r.status != Status.INTEGER)
        add("gradient", f"reaches all {differentiable} differentiable layers, finite")
        return
    findings = [f for f in Finding if any(f.value in r.flags for r in problems)]
    parts = []
    for finding in findings:
        layers = [r for r in problems if finding.value in r.flags]
        cause = next((c for r in layers for c in r.causes), None)
        why = f" ({cause.code} at {cause.layer})" if cause else ""
        names = ", ".join(r.layer for r in layers[:4]) + ("..." if len(layers) > 4 else "")
        parts.append(f"{finding}: {names}{why}")
    add("gradient", "; ".join(parts), findings)


def forward_findings(report: ScanReport, add: Add) -> None:
    """`forward`: outputs that never vary, unscaled inputs."""
    from layergrad.diagnose import causes as why

    findings, parts = [], []
    if report.constant:
        findings.append(Finding.CONSTANT_OUTPUT)
        parts += [why.constant_output(c.output, c.layer, c.reason) for c in report.constant]
    scale = report.input_range
    if scale is not None:
        findings.append(Finding.INPUT_RANGE)
        parts.append(
            why.input_range(scale.input, scale.mean_abs, scale.layer, scale.kind, scale.pinned)
        )
    add("forward", "; ".join(f"{c.message}. Fix: {c.hint}" for c in parts), findings)


def trainable(report: WeightScanReport | None, add: Add) -> None:
    """`trainable`: every trainable variable gets a gradient from the loss."""
    if report is None:
        add("trainable", "skipped: no loss (the file was saved without model.compile; --loss)")
        return
    findings, parts = [], []
    for status, finding in (
        (Status.NONE, Finding.NO_GRADIENT),
        (Status.NONFINITE, Finding.NONFINITE),
    ):
        bad = [v for v in report.variables if v.status == status]
        if bad:
            findings.append(finding)
            cause = next((c for v in bad for c in v.causes), None)
            why = f" ({cause.code} at {cause.layer})" if cause else ""
            names = ", ".join(v.variable for v in bad[:4]) + ("..." if len(bad) > 4 else "")
            parts.append(f"{finding}: {names}{why}")
    if not findings:
        count = len(report.variables)
        add("trainable", f"all {count} trainable variables get a gradient from the loss")
        return
    add("trainable", "; ".join(parts), findings)
