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
