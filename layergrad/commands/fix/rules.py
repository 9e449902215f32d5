"""Which repair each finding gets: the rules of `fix`, one per finding (docs/fix.md).

`plan_repairs` walks the original's findings (check's, and training's with data) and asks the
rule for each one for a `Plan`; a finding no rule can repair is left as its `Reason`, with
check's own message and hint, and so is one whose code line would have to name a class that is
no Python name (`plan.Unwritable`). One plan that fixes two findings (a softmax over one unit
makes both `loss_mismatch` and `constant_output`) is planned once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from layergrad.commands.fix import weights as rw
from layergrad.commands.fix.heads import HeadRules
from layergrad.commands.fix.plan import Plan, Unwritable
from layergrad.core.fit_results import FitReport
from layergrad.core.results import FileVerdict, Reason
from layergrad.core.vocab import Finding
from layergrad.diagnose.causes import fallback_hint
from layergrad.files.file_info import FileInfo
from layergrad.model.label_summary import LabelSummary
from layergrad.training.rules import BY_CODE
from layergrad.training.rules import RULES as TRAINING_RULES

F = Finding


@dataclass(frozen=True)
class Planning:
    """What a repair reads: the model, the repairs of its heads, the data's input statistics,
    the stored weights, and the training run (None without data)."""

    info: FileInfo
    heads: HeadRules
    stats: Sequence[rw.InputStats]
    weights: Mapping[str, Mapping[str, np.ndarray]]
    fit: FitReport | None


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
    planning = Planning(info, heads, stats, weights, fit)
    plans: list[Plan] = []
    unrepaired: list[Reason] = []
    done: set[str] = set()
    # raw inputs first: the training findings they cause are theirs, not the learning rate's
    order = sorted(dict.fromkeys(findings), key=lambda f: f != F.INPUT_RANGE)
    for finding in order:
        if finding in done:
            continue
        try:
            found = _plans(finding, planning)
        except Unwritable:  # a class its code would name is no Python name: not offered
            found = []
        stray = heads.stray_ids() if finding == F.TARGET_MISMATCH else []
        unrepaired += stray
        if not found and not stray:
            unrepaired.append(_unrepaired(finding, verdict, fit))
        for plan in found:
            if plan.change not in {p.change for p in plans}:
                plans.append(plan)
                done.update(plan.covers)
    plans, notes = _labels_win(plans)
    covered = {c for p in plans for c in p.covers}
    return plans, [u for u in unrepaired if u.code not in covered], notes


def _plans(finding: str, planning: Planning) -> list[Plan]:
    """The plans of the first of the finding's repairs (`REPAIRS`) that makes one."""
    for name in REPAIRS.get(finding, ()):
        found = PLANNERS[name](finding, planning)
        if found is not None:
            return found
    return []


def _one(plan: Plan | None) -> list[Plan] | None:
    return [plan] if plan is not None else None


def _unless_the_head(finding: str, p: Planning) -> list[Plan] | None:
    """Nothing when the head's repair (planned for `loss_mismatch`) makes the output vary."""
    heads = p.heads.plans(F.LOSS_MISMATCH)
    return [] if any(F.CONSTANT_OUTPUT in plan.covers for plan in heads) else None


def _covering(plan: Plan | None, caused: Sequence[str], fit: FitReport | None) -> list[Plan] | None:
    """`plan`, covering what of `caused` training found."""
    if plan is None:
        return None
    seen = {str(f.code) for f in fit.findings} if fit is not None else set()
    return [replace(plan, covers=tuple(str(c) for c in caused if str(c) in seen))]


# what inputs in raw units do to training (logits hundreds of times too large, steps as
# large): the scaling layer stands for all of them, and the learning rate is left alone
SCALE_CAUSES = (F.NONFINITE, F.DIVERGING, F.OSCILLATING, F.EXPLODING, F.DYING_UNITS,
                F.STALLED_LAYER, F.CONSTANT_PREDICTIONS, F.PLATEAU_AT_CHANCE)  # fmt: skip

# Each repair by name: its plans (None: it has none here, the next repair is tried).
PLANNERS: dict[str, Callable[[str, Planning], list[Plan] | None]] = {
    "head": lambda f, p: p.heads.plans(f),
    "unless_the_head": _unless_the_head,
    "biases": lambda f, p: _one(rw.biases(p.info, p.weights, f)),
    "kernels": lambda f, p: _one(rw.kernels(p.info, p.weights, f)),
    "linear_stacks": lambda f, p: _one(p.heads.linear_stacks()),
    "learning_rate": lambda f, p: _learning_rate(f, p),
    "scale_inputs": lambda f, p: _covering(
        rw.scale_inputs(p.info, p.stats, f), SCALE_CAUSES, p.fit
    ),
}
# The repairs of each finding, in order: a training finding's from its entry in
# `training/rules.RULES`, a head rule's from the head rules' table (`head`: the entry's
# `ConfigChange`), and those of the findings `check` alone makes.
REPAIRS: dict[str, tuple[str, ...]] = {
    **{str(rule.code): rule.fixes for rule in TRAINING_RULES},
    F.LOSS_MISMATCH: ("head",),
    F.CONSTANT_OUTPUT: ("unless_the_head", "biases", "kernels"),
    F.LINEAR_STACK: ("linear_stacks",),
    F.DEAD: ("biases",),
}


def _learning_rate(finding: str, p: Planning) -> list[Plan] | None:
    """The learning-rate repair, covering what the rate also causes in training: the NaN a
    divergence ends in, the layers whose steps are too large (and the units they push dead,
    the layers and outputs that then stop moving) or too small (not learning)."""
    if p.fit is None:
        return None
    if finding in rw.RAISE:
        caused: tuple[str, ...] = (F.VANISHING, *rw.RAISE)
    else:
        caused = (F.NONFINITE, F.EXPLODING, F.DYING_UNITS, *rw.LOWER)
        if finding == F.DYING_UNITS:
            caused += (F.VANISHING, F.CONSTANT_PREDICTIONS)
    plan = rw.learning_rate(p.fit, finding, p.weights, p.info.compile_config)
    return _covering(plan, caused, p.fit)


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
                return replace(reason, hint=reason.hint or _hint(finding, reason.layer))
            return Reason(Finding(finding), item.message, _hint(finding))
    if fit is not None:
        for f in fit.findings:
            if str(f.code) == finding:
                return Reason(f.code, f.message, _hint(finding, f.layer), f.layer)
    return Reason(Finding(finding), "", _hint(finding))


# What to do by hand about a finding of `check` whose record carries no hint (a training
# finding's message holds its own): vanishing and exploding as their training rules say, a
# status as the cause that explains it (`diagnose/causes.EXPLAINS`).
HINTS = {str(c): BY_CODE[c].hint for c in (F.VANISHING, F.EXPLODING)}


def _hint(finding: str, layer: str | None = None) -> str:
    return HINTS.get(finding) or fallback_hint(finding, layer)
