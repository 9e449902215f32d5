"""The verdict of one repair: is the copy's loss clearly below the original's, like for like?

`judge` reads the two runs of `evidence.py` (the original and a repaired copy trained side by
side on the same batches): the copy's loss on the held-back samples against the trained
original's predictions scored by the copy's loss (its `baseline`), else each against its own
trivial loss; a classifier that answers no better than its labels' prior sits at chance; a
model with several outputs is judged on the outputs the repair reaches. No TensorFlow.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence

from layergrad.core.fix_results import OutputLoss, Run, Verdict
from layergrad.model.graph import ModelGraph
from layergrad.render.common import number

CLEARLY = 0.9  # a loss "clearly below" another: at most this share of it
WELL = 0.5  # a loss "well below" the trivial loss: at most this share of it
ABOVE_PRIOR = 0.05  # an accuracy "above the prior": at least this much above the prior's
FALLING = 0.97  # a run still falls: its last tenth's mean below this share of the tenth before


def judge(
    finding: str, original: Run, repaired: Run, reached: Collection[str] | None = None
) -> tuple[Verdict, str]:
    """`verified` when the finding is gone and the loss falls clearly below the original's;
    else `not verified` and why.

    The original's loss is, where it can be, its trained predictions scored by the copy's
    loss on the same batches (the copy's `baseline`): a repair that changes the loss is then
    still judged by one loss. Otherwise (the original could not be trained, or its outputs
    have another shape) each run is read against its own trivial loss.

    A model with several outputs is judged on the outputs the repair reaches (`reached`, by
    name; None: every one), each by its own loss against its own trivial loss: the total
    loss adds losses of any scale, and a regression output's can hide a classification
    head's whole loss. It is verified when one of them ends clearly lower and none clearly
    higher."""
    if repaired.error is not None:
        return Verdict.NOT_VERIFIED, f"the repaired copy could not be trained: {repaired.error}"
    if finding in repaired.findings:
        return Verdict.NOT_VERIFIED, f"the repaired copy still has {finding}"
    falling = _FALLING_WHY if still_falling(repaired.losses) else ""
    chance = at_chance(repaired)
    if chance:
        return Verdict.NOT_VERIFIED, chance + falling
    pairs = _output_pairs(original, repaired, reached)
    if not pairs:
        return _compare(original, repaired, falling)
    said = [(name, _compare(theirs, mine, falling)) for name, theirs, mine in pairs]
    worse = [
        f"output {name}'s loss ends at {ratio:.3g} times the original's: clearly higher"
        for name, theirs, mine in pairs
        if (ratio := _ratio(theirs, mine)) is not None and CLEARLY * ratio > 1
    ]
    if not worse and any(v is Verdict.VERIFIED for _, (v, _) in said):
        return Verdict.VERIFIED, ""
    whys = worse or [f"output {name}: {why}" for name, (_, why) in said]
    return Verdict.NOT_VERIFIED, "; ".join(whys)


def at_chance(run: Run) -> str:
    """Why a classifier's run is no better than the trivial predictor: its accuracy on the
    scored batches is not above always answering their most frequent class, and its loss is
    not well below the trivial loss (a loss a little below it is calibration, not learning);
    "" when it is better, or is no classifier."""
    accuracy, prior = run.accuracy, run.prior_accuracy
    if accuracy is None or prior is None or accuracy >= prior + ABOVE_PRIOR:
        return ""
    mine = run.relative
    if mine is not None and mine <= WELL:
        return ""
    loss = (
        f"its loss ({number(run.final)}) is not well below the trivial loss ({number(run.trivial)})"
        if run.final is not None and run.trivial
        else "its loss has no trivial loss to beat"
    )
    return (
        f"the copy answers {accuracy:.1%} of the scored samples right, no better than always "
        f"answering their most frequent class ({prior:.1%}), and {loss}: it sits at chance"
    )


def reached_outputs(graph: ModelGraph, layer: str | None, run: Run) -> tuple[str, ...] | None:
    """The outputs of `run` a repair at `layer` can change: the output layer itself, one
    nested in it, or one downstream of it (None: every output, as for the learning rate or a
    model whose graph is unknown)."""
    if layer is None or not graph.known:
        return None
    return tuple(
        o.name
        for o in run.outputs
        if o.name == layer
        or layer.startswith(f"{o.name}/")
        or graph.depends(o.name, layer) is not False
    )


def _output_pairs(
    original: Run, repaired: Run, reached: Collection[str] | None
) -> list[tuple[str, Run, Run]]:
    """(output name, the original's, the copy's) for each output the repair reaches that
    both runs scored; empty for a model with one output (or outputs not scored)."""
    if original.error is not None or not original.outputs or not repaired.outputs:
        return []
    copies = {o.name: o for o in repaired.outputs}
    return [
        (o.name, _as_run(o), _as_run(copies[o.name]))
        for o in original.outputs
        if o.name in copies and (reached is None or o.name in reached)
    ]


def _as_run(output: OutputLoss) -> Run:
    return Run(output.loss_name, trivial=output.trivial, final=output.final,
               baseline=output.baseline)  # fmt: skip


def _ratio(original: Run, repaired: Run) -> float | None:
    """The copy's loss over the original's, like for like where it can be (None when the
    two have no common scale)."""
    if repaired.final is None:
        return None
    if repaired.baseline is not None and repaired.baseline > 0:
        return repaired.final / repaired.baseline
    mine, theirs = repaired.relative, original.relative
    return mine / theirs if mine is not None and theirs else None


def _compare(original: Run, repaired: Run, falling: str) -> tuple[Verdict, str]:
    """The verdict of the copy's loss against the original's (each against its trivial loss
    where it has one)."""
    if repaired.final is None:
        return Verdict.NOT_VERIFIED, "the repaired copy's loss turned NaN/Inf"
    mine = repaired.relative
    unlearned = (
        (Verdict.NOT_VERIFIED, f"the copy's loss ends at {mine:.3g} of the trivial loss: it "
                               f"learned no more than the labels' prior{falling}")
        if mine is not None and mine > CLEARLY else None
    )  # fmt: skip  # beating a broken original is no evidence that the copy trains
    if repaired.baseline is not None:
        return unlearned or _like_for_like(repaired, falling)
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
        if mine is not None and falling:
            stays = (
                f"and the copy's loss ends at {mine:.3g} of the trivial loss, "
                f"not clearly below it{falling}"
            )
        else:
            stays = "and the copy's loss stays at the trivial loss"
        return Verdict.NOT_VERIFIED, f"the original{said}, {stays}"
    if unlearned:
        return unlearned
    theirs = original.relative
    if mine is not None and theirs is not None:
        ours, base = mine, theirs
        said = f"the loss ends at {mine:.3g} of the trivial loss, the original's at {theirs:.3g}"
    elif repaired.loss_name == original.loss_name:
        ours, base = repaired.final, original.final
        said = f"the loss ends at {ours:.4g}, the original's at {base:.4g}"
    elif mine is not None:
        # the original's loss has no trivial loss (a categorical loss on one unit is 0 for
        # any output): no common scale, so the copy is judged by its own, as when the
        # original cannot be trained
        ours, base = mine, 1.0
        said = (f"the original's loss ({original.loss_name}) has no trivial loss to compare by, "
                f"and the copy's ends at {mine:.3g} of its trivial loss")  # fmt: skip
    else:
        return Verdict.NOT_VERIFIED, (
            f"the losses differ ({original.loss_name}, {repaired.loss_name}) and have no "
            "trivial loss to compare them by"
        )
    if ours <= CLEARLY * base:
        return Verdict.VERIFIED, ""
    return Verdict.NOT_VERIFIED, f"{said}: not clearly below{falling}"


def _like_for_like(repaired: Run, falling: str) -> tuple[Verdict, str]:
    """The copy against the trained original's predictions scored by the copy's loss, on the
    same batches and labels (its `baseline`): one loss, one scale."""
    mine, theirs = repaired.final, repaired.baseline
    assert mine is not None and theirs is not None
    if mine <= theirs - (1 - CLEARLY) * abs(theirs):  # 0.9x, for a loss below 0 too
        return Verdict.VERIFIED, ""
    said = f"{number(mine)}, the original's predictions at {number(theirs)}"
    if repaired.trivial:
        said = (f"{number(mine)} ({mine / repaired.trivial:.3g} of the trivial loss, "
                f"{number(repaired.trivial)}), the original's predictions at {number(theirs)} "
                f"({theirs / repaired.trivial:.3g})")  # fmt: skip
    return Verdict.NOT_VERIFIED, (
        f"the loss ends at {said}, scored by the same loss: not clearly below{falling}"
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
