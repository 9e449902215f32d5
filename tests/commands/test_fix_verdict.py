"""The verdict of one repair, on runs whose numbers are written here by hand."""

from __future__ import annotations

from layergrad.commands.fix.evidence import judge
from layergrad.core.fix_results import Run, Verdict


def test_a_cross_entropy_below_zero_is_no_loss_to_beat():
    # binary cross-entropy on targets 0-4 runs below 0 (-y log p grows without bound): the
    # copy (a regression with MSE) is judged against its own trivial loss, 0.2 < 0.9 x 1.0
    original = Run("binary_crossentropy", (0.1, -0.4), trivial=0.69, final=-0.4)
    repaired = Run("mean_squared_error", (1.0, 0.2), trivial=1.0, final=0.2)
    assert judge("target_mismatch", original, repaired) == (Verdict.VERIFIED, "")
    stays = Run("mean_squared_error", (1.0, 0.95), trivial=1.0, final=0.95)
    verdict, why = judge("target_mismatch", original, stays)
    assert verdict == Verdict.NOT_VERIFIED and "below 0" in why


def test_a_loss_negative_by_design_is_still_compared():
    # cosine similarity runs from -1 to 1: -0.2 is not clearly below -0.3
    original = Run("cosine_similarity", (0.0, -0.3), final=-0.3)
    repaired = Run("cosine_similarity", (0.0, -0.2), final=-0.2)
    verdict, why = judge("exploding", original, repaired)
    assert verdict == Verdict.NOT_VERIFIED and "not clearly below" in why


def _curve(start: float, end: float, steps: int = 100) -> tuple[float, ...]:
    """A loss falling linearly from `start` to `end` (worked out by hand, not by the code)."""
    return tuple(start + (end - start) * i / (steps - 1) for i in range(steps))


def test_a_copy_still_falling_says_more_steps_may_show_it():
    # unscaled inputs: the copy starts at 20x the trivial loss 0.5 and is still falling at a
    # rate of 0.5 every 10 steps when it stops at 0.6 (1.2 x trivial): not verified, and the
    # reason is the run's length, not a copy that stays at the trivial loss
    original = Run("-", error="labels do not fit the loss")
    falling = _curve(10.0, 0.6)
    final = sum(falling[-10:]) / 10
    repaired = Run("binary_crossentropy", falling, trivial=0.5, final=final)
    verdict, why = judge("target_mismatch", original, repaired)
    assert verdict == Verdict.NOT_VERIFIED
    assert "still falling" in why and "--steps" in why and "stays" not in why
    flat = (10.0, *([0.52] * 99))  # came down at once, then flat at 1.04 x trivial
    verdict, why = judge("target_mismatch", original, Run("binary_crossentropy", flat, 0.5, 0.52))
    assert verdict == Verdict.NOT_VERIFIED and "stays at the trivial loss" in why
    assert "still falling" not in why


def test_compared_runs_say_when_the_copy_was_still_falling():
    original = Run("mse", _curve(2.0, 1.0), trivial=None, final=1.0)
    repaired = Run("mse", _curve(2.0, 0.95), trivial=None, final=0.95)  # -0.05 per 10 steps
    verdict, why = judge("linear_stack", original, repaired)
    assert verdict == Verdict.NOT_VERIFIED and "not clearly below" in why
    assert "still falling" in why
    plateau = Run("mse", (2.0, *([0.95] * 99)), trivial=None, final=0.95)
    verdict, why = judge("linear_stack", original, plateau)
    assert verdict == Verdict.NOT_VERIFIED and "still falling" not in why
