"""Which repair each finding gets: the rules of `fix`, one per finding (docs/fix.md).

`plan_repairs` walks the original's findings (check's, and training's with data) and asks the
rule for each one for a `Plan`; a finding no rule can repair is `Unrepaired`, with check's
own message and hint. One plan that fixes two findings (a softmax over one unit makes both
`loss_mismatch` and `constant_output`) is planned once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np

from layergrad.commands import repair_weights as rw
from layergrad.commands.repair_heads import HeadRules
from layergrad.commands.repair_plan import Plan
from layergrad.core.fit_results import FitReport
from layergrad.core.fix_results import Unrepaired
from layergrad.core.results import FileVerdict
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
) -> tuple[list[Plan], list[Unrepaired]]:
    """A plan for each finding with a mechanical repair; the others, unrepaired."""
    heads = HeadRules(info, info.compile_config, labels)
    plans: list[Plan] = []
    unrepaired: list[Unrepaired] = []
    done: set[str] = set()
    for finding in dict.fromkeys(findings):
        if finding in done:
            continue
        found = _plans(finding, heads, info, stats, weights, fit)
        if found:
            for plan in found:
                if plan.change not in {p.change for p in plans}:
                    plans.append(plan)
                    done.update(plan.covers)
            continue
        unrepaired.append(_unrepaired(finding, verdict, fit))
    covered = {c for p in plans for c in p.covers}
    return plans, [u for u in unrepaired if u.finding not in covered]


def _plans(
    finding: str,
    heads: HeadRules,
    info: FileInfo,
    stats: Sequence[rw.InputStats],
    weights: Mapping[str, Mapping[str, np.ndarray]],
    fit: FitReport | None,
) -> list[Plan]:
    if finding in (F.LOSS_MISMATCH, F.TARGET_MISMATCH):
        found, _ = heads.plans(finding, set())
        return [_covering(p, heads) for p in found]
    if finding == F.CONSTANT_OUTPUT:
        found = [p for p in heads.plans(F.LOSS_MISMATCH, set())[0] if _one_unit_softmax(p)]
        if found:
            return []  # the loss_mismatch repair covers it (planned there)
        plan = rw.biases(info, weights, finding)
        return [plan] if plan else []
    if finding == F.DEAD:
        plan = rw.biases(info, weights, finding)
        return [plan] if plan else []
    if finding in (F.EXPLODING, F.VANISHING):
        plan = rw.kernels(info, weights, finding)
        return [plan] if plan else []
    if finding == F.INPUT_RANGE:
        plan = rw.scale_inputs(info, stats, finding)
        return [plan] if plan else []
    if finding in (F.DIVERGING, F.NOT_LEARNING) and fit is not None:
        plan = rw.learning_rate(fit, finding)
        if plan is not None and finding == F.DIVERGING and fit.stopped == F.NONFINITE:
            plan = replace(plan, covers=(F.NONFINITE,))  # the NaN the divergence ended in
        return [plan] if plan else []
    return []


def _one_unit_softmax(plan: Plan) -> bool:
    return any("softmax" in line and "(1," in line for line in plan.code)


def _covering(plan: Plan, heads: HeadRules) -> Plan:
    """A head repair that also makes a constant output vary covers `constant_output`."""
    if _one_unit_softmax(plan):
        return replace(plan, covers=(F.CONSTANT_OUTPUT,))
    return plan


def _unrepaired(finding: str, verdict: FileVerdict, fit: FitReport | None) -> Unrepaired:
    """A finding without a mechanical repair: check's (or training's) message and hint."""
    for item in verdict.checks:
        if finding in item.findings:
            message, hint = _split(item.message)
            return Unrepaired(finding, None, message, hint)
    if fit is not None:
        for f in fit.findings:
            if str(f.finding) == finding:
                message, hint = _split(f.message)
                return Unrepaired(finding, f.layer, message, hint)
    return Unrepaired(finding, None, "", "")


def _split(message: str) -> tuple[str, str]:
    for mark in (". Fix: ", ". Use ", "; fix: ", " Fix: "):
        if mark in message:
            text, _, hint = message.partition(mark)
            return text, hint
    return message, ""
