"""The evidence of `fix`: a model file checked and trained, and the verdict of one repair.

The original and each repaired copy are trained by `fit_model` with the same options (seed,
batch size, steps, data), so the shuffled batches are the same and the copy starts from the
original's weights wherever the repair kept them. Each run is then judged against its own
trivial loss (the loss of predicting a uniform class prior), since a repair may change the
loss itself.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from layergrad.core.errors import LayergradError, describe
from layergrad.core.fit_results import FitReport
from layergrad.core.fix_results import Run, Verdict
from layergrad.core.probe_options import PathLike
from layergrad.core.results import FileVerdict

if TYPE_CHECKING:
    from layergrad.commands.check.steps import Opened
    from layergrad.commands.fit.train import FitOptions

CLEARLY = 0.9  # a loss "clearly below" another: at most this share of it
FALLING = 0.97  # a run still falls: its last tenth's mean below this share of the tenth before


def check_findings(verdict: FileVerdict) -> tuple[str, ...]:
    """Every finding of a check (failures and warnings), once each, in check order."""
    seen: dict[str, None] = {}
    for item in verdict.checks:
        for finding in item.findings:
            seen.setdefault(str(finding), None)
    return tuple(seen)


def train(
    model: Callable[[], Opened],
    data: PathLike,
    fit_options: FitOptions,
    *,
    limit: int | None,
    found: Sequence[str] = (),
) -> tuple[Run, FitReport | None]:
    """Train the model `model()` gives (as `session.load` returns it; trained in place) and
    summarise the run (a model that cannot be opened or trained: a run with its error);
    `found` are its check findings, joined by the training findings. `final` is the loss of
    the trained model's predictions (`training`), else the last tenth of the training
    losses."""
    from layergrad.commands.fix.training import train_and_score

    try:
        report, served, chance = train_and_score(model(), data, fit_options, limit=limit)
    except LayergradError as exc:
        return Run("-", findings=tuple(found), error=str(exc)), None
    except Exception as exc:
        return Run("-", findings=tuple(found), error=describe(exc)), None
    findings = dict.fromkeys(found)
    for f in report.findings:
        findings.setdefault(str(f.finding), None)
    final = served if served is not None else _final(report.losses)
    return Run(report.loss_name, report.losses, chance, final, tuple(findings)), report


def _final(losses: Sequence[float | None]) -> float | None:
    """The mean of the last tenth of the losses (None when one of them is NaN/Inf)."""
    if not losses:
        return None
    tail = losses[-max(1, len(losses) // 10) :]
    values = [v for v in tail if v is not None]
    if len(values) < len(tail) or not all(math.isfinite(v) for v in values):
        return None
    return sum(values) / len(values)


def judge(finding: str, original: Run, repaired: Run) -> tuple[Verdict, str]:
    """`verified` when the finding is gone and the loss falls clearly below the original's;
    else `not verified` and why."""
    if repaired.error is not None:
        return Verdict.NOT_VERIFIED, f"the repaired copy could not be trained: {repaired.error}"
    if finding in repaired.findings:
        return Verdict.NOT_VERIFIED, f"the repaired copy still has {finding}"
    if repaired.final is None:
        return Verdict.NOT_VERIFIED, "the repaired copy's loss turned NaN/Inf"
    # a cross-entropy below 0 read labels it cannot take (e.g. targets beyond [0, 1]): it
    # measures nothing, like a run that could not train
    invalid = original.final is not None and original.final < 0 and _is_entropy(original)
    if original.error is not None or original.final is None or invalid:
        if repaired.trivial is None or repaired.final < CLEARLY * repaired.trivial:
            return Verdict.VERIFIED, ""
        said = (
            "'s loss ended below 0, on labels it cannot take"
            if invalid
            else (" could not be trained")
        )
        mine = repaired.relative
        if mine is not None and still_falling(repaired.losses):
            stays = (
                f"and the copy's loss ends at {mine:.3g} of the trivial loss, "
                f"not clearly below it{_FALLING_WHY}"
            )
        else:
            stays = "and the copy's loss stays at the trivial loss"
        return Verdict.NOT_VERIFIED, f"the original{said}, {stays}"
    falling = _FALLING_WHY if still_falling(repaired.losses) else ""
    mine, theirs = repaired.relative, original.relative
    if mine is not None and theirs is not None:
        if mine <= CLEARLY * theirs:
            return Verdict.VERIFIED, ""
        return Verdict.NOT_VERIFIED, (
            f"the loss ends at {mine:.3g} of the trivial loss, the original's at {theirs:.3g}: "
            f"not clearly below{falling}"
        )
    if repaired.loss_name == original.loss_name:
        if repaired.final <= CLEARLY * original.final:
            return Verdict.VERIFIED, ""
        return Verdict.NOT_VERIFIED, (
            f"the loss ends at {repaired.final:.4g}, the original's at {original.final:.4g}: "
            f"not clearly below{falling}"
        )
    if mine is not None:
        # the original's loss has no trivial loss (a categorical loss on one unit is 0 for
        # any output): no common scale, so the copy is judged by its own, as when the
        # original cannot be trained
        if mine <= CLEARLY:
            return Verdict.VERIFIED, ""
        return Verdict.NOT_VERIFIED, (
            f"the original's loss ({original.loss_name}) has no trivial loss to compare by, "
            f"and the copy's ends at {mine:.3g} of its trivial loss: not clearly below{falling}"
        )
    return Verdict.NOT_VERIFIED, (
        f"the losses differ ({original.loss_name}, {repaired.loss_name}) and have no trivial "
        "loss to compare them by"
    )


_FALLING_WHY = "; it was still falling when training stopped: more --steps may show it"


def still_falling(losses: Sequence[float | None]) -> bool:
    """The run's last tenth of losses averages clearly below the tenth before it (a run too
    short for its verdict: e.g. unscaled inputs spend the first steps coming down to the
    trivial loss)."""
    tenth = len(losses) // 10
    if tenth < 1:
        return False
    last, before = losses[-tenth:], losses[-2 * tenth : -tenth]
    values = [v for v in (*last, *before) if v is not None and math.isfinite(v)]
    if len(values) < 2 * tenth:
        return False
    late, early = sum(last) / tenth, sum(before) / tenth  # type: ignore[arg-type]
    return early - late > (1 - FALLING) * abs(early)


def _is_entropy(run: Run) -> bool:
    """A cross-entropy loss (never below 0 on the labels it takes)."""
    return "crossentropy" in run.loss_name.replace("_", "").lower()
