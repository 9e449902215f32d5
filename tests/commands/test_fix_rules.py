"""Rules of `fix` on hand-made inputs (no training): the learning rate's factor and the words
that explain it, and which repairs the written copy holds."""

from __future__ import annotations

from dataclasses import replace

from layergrad.commands.fix.plan import Plan, _unrepaired, learning_rate
from layergrad.commands.fix.repair import _chosen
from layergrad.core.fit_results import Checkpoint, FitReport, LayerStats
from layergrad.core.fix_results import Repair, Verdict
from layergrad.core.results import CheckItem, FileVerdict, Reason
from layergrad.core.vocab import Finding
from layergrad.diagnose.causes import BY_NAME, KINDS
from layergrad.training.rules import BY_CODE as TRAINING


def _fit(ratio: float, lr: float = 1e-3) -> FitReport:
    """A run whose every layer moves by `ratio` of its weights per step."""
    rows = tuple(LayerStats(f"d{i}", 1.0, 1.0, ratio, 0.0, 0, 0) for i in range(3))
    checkpoints = tuple(Checkpoint(s, 1, s, 0.5, lr, rows, ()) for s in range(4))
    return FitReport("m", "Functional", 1, 4, 1, "mse", "Adam", lr, (0.5,) * 4, checkpoints, ())


def test_a_rate_too_high_by_the_finding_but_slow_by_its_ratios_says_so():
    # oscillating with a median update ratio of 5e-4: the factor toward 1e-3 is x2 (up), the
    # finding says down: 3x down, and the words must not claim it nears 1e-3
    plan = learning_rate(_fit(5e-4), "oscillating", {})
    assert plan is not None and "learning_rate=0.00033" in plan.code[0]
    assert "at least 3x down, as oscillating says" in plan.change
    assert "brings it toward" not in plan.change
    # a ratio of 1e-2: x0.1 brings it toward 1e-3 (worked out by hand)
    plan = learning_rate(_fit(1e-2), "oscillating", {})
    assert plan is not None and "learning_rate=0.0001" in plan.code[0]
    assert "x0.1 brings it toward 0.001" in plan.change


def _plan(name: str) -> Plan:
    return Plan(name, "head", f"change {name}", (f"{name}: a -> b",))


def test_the_copy_holds_the_verified_repairs_when_some_are():
    plans = [_plan("loss_mismatch"), _plan("oscillating")]
    repairs = [
        Repair("loss_mismatch", "head", "change loss_mismatch", (), Verdict.VERIFIED),
        Repair("oscillating", None, "change oscillating", (), Verdict.NOT_VERIFIED),
    ]
    notes: list[str] = []
    assert _chosen(plans, repairs, notes) == [plans[0]]
    assert notes and "oscillating (oscillating: a -> b)" in notes[0]
    # none verified, or no evidence: every repair, no note
    for verdict in (Verdict.NOT_VERIFIED, Verdict.NOT_RUN):
        same = [Repair(r.finding, r.layer, r.change, (), verdict) for r in repairs]
        notes = []
        assert _chosen(plans, same, notes) == plans and not notes


def test_a_status_without_a_hint_is_left_with_the_hint_of_the_cause_that_explains_it():
    """`dead`, `blocked` and `no_gradient` carry no hint of their own in check's record: fix
    says the hint of the cause table's entry that explains each, at the layer when known."""
    dead = Reason(Finding.DEAD, "60% of the units of 'd1' are dead", layer="d1")
    items = (
        CheckItem("gradient_flow", False, "dead units", (Finding.DEAD,), reasons=(dead,)),
        CheckItem("weights", False, "no gradient", (Finding.NO_GRADIENT,)),
        CheckItem("path", False, "blocked", (Finding.BLOCKED,)),
    )
    verdict = FileVerdict("m.keras", False, items)
    left = _unrepaired("dead", verdict, None)
    assert left.message == dead.message
    assert left.hint == BY_NAME["dead_relu"][1].hint
    assert "LeakyReLU" in left.hint
    fit = replace(_fit(1e-3), findings=(Reason(Finding.NO_GRADIENT, "none", layer="d2"),))
    from_fit = _unrepaired("no_gradient", FileVerdict("m.keras", False, ()), fit).hint
    assert (
        from_fit
        == "read the call() of 'd2'; "
        + "a variable that should not train can be made non-trainable (trainable=False)"
    )
    assert _unrepaired("no_gradient", verdict, fit).hint == next(
        k.fix for k in KINDS if k.code == Finding.UNKNOWN
    )  # no layer named: the fix of its code
    assert _unrepaired("blocked", verdict, None).hint == next(
        k.fix for k in KINDS if k.code == Finding.NON_DIFFERENTIABLE_OP
    )
    assert _unrepaired("vanishing", verdict, None).hint == TRAINING[Finding.VANISHING].hint
