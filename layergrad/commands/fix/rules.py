"""Which repair each finding gets: the rules of `fix`, one per finding (docs/fix.md).

`plan_repairs` walks the original's findings (check's, and training's with data) and asks the
rule for each one for a `Plan`; a finding no rule can repair is left as its `Reason`, with
check's own message and hint, and so is one whose code line would have to name a class that is
no Python name (`plan.Unwritable`). One plan that fixes two findings (a softmax over one unit
makes both `loss_mismatch` and `constant_output`) is planned once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np

from layergrad.commands.fix import weights as rw
from layergrad.commands.fix.heads import HeadRules
from layergrad.commands.fix.plan import Plan, Unwritable
from layergrad.core.fit_results import FitReport
from layergrad.core.results import FileVerdict, Reason
from layergrad.core.vocab import Finding
from layergrad.files.file_info import FileInfo
from layergrad.model.target_fit import LabelSummary

F = Finding


def plan_repairs(
    info: FileInfo,
    findings: Sequence[str],
    verdict: FileVerdict,
    labels: Mapping[str, LabelSummary],
    stats: Sequence[rw.InputStats],
    weights: Mapping[str, Mapping[str, np.ndarray]],
    fit: FitReport | None,
) -> tuple[list[Plan], list[Reason], list[str]]:
    """A plan for each finding with a mechanical repair; the others, unrepaired; and a note
    for each planned repair another one stands for (said, never dropped silently)."""
    heads = HeadRules(info, info.compile_config, labels)
    plans: list[Plan] = []
    unrepaired: list[Reason] = []
    done: set[str] = set()
    # raw inputs first: the training findings they cause are theirs, not the learning rate's
    order = sorted(dict.fromkeys(findings), key=lambda f: f != F.INPUT_RANGE)
    for finding in order:
        if finding in done:
            continue
        try:
            found = _plans(finding, heads, info, stats, weights, fit)
        except Unwritable:  # a class its code would name is no Python name: not offered
            found = []
        stray = heads.stray_ids() if finding == F.TARGET_MISMATCH else []
        unrepaired += stray
        if found or stray:
            for plan in found:
                if plan.change not in {p.change for p in plans}:
                    plans.append(plan)
                    done.update(plan.covers)
            continue
        unrepaired.append(_unrepaired(finding, verdict, fit))
    plans, notes = _labels_win(plans)
    covered = {c for p in plans for c in p.covers}
    return plans, [u for u in unrepaired if u.code not in covered], notes


def _plans(
    finding: str,
    heads: HeadRules,
    info: FileInfo,
    stats: Sequence[rw.InputStats],
    weights: Mapping[str, Mapping[str, np.ndarray]],
    fit: FitReport | None,
) -> list[Plan]:
    if finding in (F.LOSS_MISMATCH, F.TARGET_MISMATCH):
        return heads.plans(finding, set())[0]
    if finding == F.CONSTANT_OUTPUT:
        if any(F.CONSTANT_OUTPUT in p.covers for p in heads.plans(F.LOSS_MISMATCH, set())[0]):
            return []  # the head's repair (planned for loss_mismatch) makes it vary
        plan = rw.biases(info, weights, finding) or rw.kernels(info, weights, finding)
        return [plan] if plan else []
    if finding == F.LINEAR_STACK:
        plan = heads.linear_stacks()
        return [plan] if plan else []
    if finding == F.DEAD:
        plan = rw.biases(info, weights, finding)
        return [plan] if plan else []
    if finding in (F.EXPLODING, F.VANISHING):
        plan = rw.kernels(info, weights, finding)
        if plan is None and finding == F.EXPLODING:  # well-scaled kernels: the steps, maybe
            return _learning_rate(fit, finding, weights, info)
        return [plan] if plan else []
    if finding == F.DYING_UNITS:
        return _learning_rate(fit, finding, weights, info)
    if finding == F.INPUT_RANGE:
        plan = rw.scale_inputs(info, stats, finding)
        if plan is None:
            return []
        seen = {str(f.code) for f in fit.findings} if fit is not None else set()
        return [replace(plan, covers=tuple(str(c) for c in SCALE_CAUSES if str(c) in seen))]
    if finding in (*rw.LOWER, *rw.RAISE):
        return _learning_rate(fit, finding, weights, info)
    return []


# what inputs in raw units do to training (logits hundreds of times too large, steps as
# large): the scaling layer stands for all of them, and the learning rate is left alone
SCALE_CAUSES = (F.NONFINITE, F.DIVERGING, F.OSCILLATING, F.EXPLODING, F.DYING_UNITS,
                F.STALLED_LAYER, F.CONSTANT_PREDICTIONS, F.PLATEAU_AT_CHANCE)  # fmt: skip


def _learning_rate(
    fit: FitReport | None,
    finding: str,
    weights: Mapping[str, Mapping[str, np.ndarray]],
    info: FileInfo,
) -> list[Plan]:
    """The learning-rate repair, covering what the rate also causes in training: the NaN a
    divergence ends in, the layers whose steps are too large (and the units they push dead,
    the layers and outputs that then stop moving) or too small (not learning)."""
    compiled = info.compile_config
    plan = rw.learning_rate(fit, finding, weights, compiled) if fit is not None else None
    if fit is None or plan is None:
        return []
    if finding in rw.RAISE:
        caused: tuple[str, ...] = (F.VANISHING, *rw.RAISE)
    else:
        caused = (F.NONFINITE, F.EXPLODING, F.DYING_UNITS, *rw.LOWER)
        if finding == F.DYING_UNITS:
            caused += (F.VANISHING, F.CONSTANT_PREDICTIONS)
    seen = {str(f.code) for f in fit.findings}
    return [replace(plan, covers=tuple(str(c) for c in caused if str(c) in seen))]


def _labels_win(plans: list[Plan]) -> tuple[list[Plan], list[str]]:
    """A head with both a loss repair (from the file) and a label repair (from the data): the
    labels say what the head must produce, so their repair stands for both (it holds what the
    head rules still ask of the head it leaves: `HeadRules._targets`); a note says which
    repair it stands for."""
    by_labels = {p.layer: p for p in plans if p.finding == F.TARGET_MISMATCH}
    dropped = [p for p in plans if p.finding == F.LOSS_MISMATCH and p.layer in by_labels]
    if not dropped:
        return plans, []
    notes = [
        f"{F.LOSS_MISMATCH} at {p.layer}: its own repair ({'; '.join(p.code) or p.change}) "
        f"is not made alone: the labels decide the head, and the {F.TARGET_MISMATCH} repair "
        f"({'; '.join(by_labels[p.layer].code)}) stands for it"
        for p in dropped
    ]
    return [
        replace(p, covers=(*p.covers, str(F.LOSS_MISMATCH)))
        if p.finding == F.TARGET_MISMATCH and p.layer in by_labels
        else p
        for p in plans
        if p not in dropped
    ], notes


def _unrepaired(finding: str, verdict: FileVerdict, fit: FitReport | None) -> Reason:
    """A finding without a mechanical repair: check's (or training's) message and hint, as the
    check keeps them apart (`CheckItem.reasons`), or its whole message and the hint below."""
    for item in verdict.checks:
        if finding in item.findings:
            reason = next((r for r in item.reasons if r.code == finding), None)
            if reason is not None:
                return replace(reason, hint=_hint(finding, reason.hint))
            return Reason(Finding(finding), item.message, _hint(finding, ""))
    if fit is not None:
        for f in fit.findings:
            if str(f.code) == finding:
                return Reason(f.code, f.message, _hint(finding, ""), f.layer)
    return Reason(Finding(finding), "", _hint(finding, ""))


# What to do by hand when the finding's own message carries no hint.
HINTS = {
    F.VANISHING: "ReLU-family activations with he_normal kernels in the deep stack, or "
    "BatchNormalization / residual connections between its layers",
    F.EXPLODING: "smaller initial kernels (glorot_uniform; he_normal for ReLU), gradient "
    "clipping (clipnorm=1.0), or BatchNormalization",
    F.DEAD: "a smaller learning rate, LeakyReLU, or he_normal kernels with zero biases",
    F.BLOCKED: "remove the non-differentiable operation or stop_gradient on the path (see the "
    "cause in check's message)",
    F.NO_GRADIENT: "connect the variable's layer to the output, or freeze it (trainable=False)",
}


def _hint(finding: str, hint: str) -> str:
    return hint or HINTS.get(finding, "")  # type: ignore[call-overload]
