"""The training rules as tests against the loss curve's own noise, on records made by hand:
each curve is built from a known trend plus known noise, so the truth is the construction."""

from __future__ import annotations

import math

import numpy as np
import pytest

from layergrad.core.fit_results import Checkpoint, LayerStats
from layergrad.core.vocab import Finding
from layergrad.training import rules, trends

CHANCE = math.log(4)


def noisy(trend, sigma: float, seed: int = 0) -> list[float]:
    rng = np.random.default_rng(seed)
    trend = np.asarray(trend, np.float64)
    return list(trend + rng.normal(0.0, sigma, trend.shape))


def point(step: int, ratios: dict[str, float], *, constant: dict[str, float] | None = None,
          grads: dict[str, float] | None = None) -> Checkpoint:  # fmt: skip
    constant, grads = constant or {}, grads or {}
    rows = tuple(
        LayerStats(name, grads.get(name, 1.0), 1.0, ratio, 0.0, 0, 0, constant.get(name, 0.0))
        for name, ratio in ratios.items()
    )
    return Checkpoint(step, 0, step - 1, 1.0, 0.1, rows, ())


TINY = [point(s, {"a": 1e-9, "head": 2e-9}) for s in (1, 150, 300)]
HEALTHY = [point(s, {"a": 1e-3, "head": 2e-3}) for s in (1, 150, 300)]


@pytest.mark.parametrize("sigma", [0.02, 0.1, 0.3])
def test_the_noise_is_the_batch_to_batch_spread_whatever_the_trend(sigma):
    trend = np.linspace(2.0, 0.5, 2000)  # a strong trend must not inflate it
    assert trends.noise(np.array(noisy(trend, sigma))) == pytest.approx(sigma, rel=0.1)


def test_a_flat_noisy_loss_with_tiny_updates_is_not_learning_at_any_noise():
    # batch-to-batch noise of 7% of the loss: far above the 1% a fixed share allowed
    for seed in range(5):
        found = rules.not_learning(noisy([1.475] * 300, 0.1, seed), TINY)
        assert found is not None and found.code == Finding.NOT_LEARNING
    # a real fall of 0.2 through the same noise moves; and healthy update ratios learn
    assert rules.not_learning(noisy(np.linspace(1.475, 1.275, 300), 0.1), TINY) is None
    assert rules.not_learning(noisy([1.475] * 300, 0.1), HEALTHY) is None


def test_a_noisy_loss_at_the_trivial_loss_plateaus_and_one_below_it_does_not():
    for seed in range(5):  # per-step values range over about 1.1 to 1.7
        found = rules.plateau_at_chance(noisy([CHANCE] * 300, 0.1, seed), HEALTHY, CHANCE)
        assert found is not None and found.layer == "head" and found.step <= 20
    assert rules.plateau_at_chance(noisy([0.8 * CHANCE] * 300, 0.1), HEALTHY, CHANCE) is None
    # after a fall to it: the plateau starts where the fall ends
    curve = noisy(np.r_[np.linspace(3.0, CHANCE, 100), [CHANCE] * 200], 0.05)
    found = rules.plateau_at_chance(curve, HEALTHY, CHANCE)
    assert found is not None and 80 <= found.step <= 130
    # for a regression head the trivial loss is the targets' variance
    assert rules.plateau_at_chance(noisy([2.5] * 300, 0.2), HEALTHY, 2.5) is not None


def test_a_growing_loss_diverges_and_noise_alone_does_not():
    high = [point(s, {"a": 0.5, "head": 0.2}) for s in (1, 150, 300)]
    curve = noisy(np.r_[np.linspace(1.4, 1.0, 100), np.linspace(1.0, 3.0, 200)], 0.1)
    found = rules.diverging(curve, high, blew_up=False)
    assert found is not None and found.layer == "a" and 100 < found.step < 200
    assert rules.diverging(noisy([1.4] * 300, 0.3), high, blew_up=False) is None
    # a jump at the very first steps counts: the start is the first steps' loss
    jump = noisy(np.r_[[1.4] * 2, [40.0] * 298], 0.1)
    assert rules.diverging(jump, HEALTHY, blew_up=False) is not None


def test_a_loss_swinging_without_trend_oscillates_and_a_falling_one_does_not():
    t = np.arange(400)
    swing = 1.0 + 0.4 * np.sign(np.sin(2 * np.pi * t / 80))
    found = rules.oscillating(noisy(swing, 0.05), HEALTHY, CHANCE)
    assert found is not None and found.code == Finding.OSCILLATING and found.layer == "head"
    assert rules.oscillating(noisy(np.linspace(1.4, 0.3, 400), 0.1), HEALTHY, CHANCE) is None
    # a converged loss with a few spiky batches swings by little: no oscillation
    spiky = np.array(noisy([0.05] * 400, 0.01))
    spiky[[37, 120, 211, 290, 350]] += 1.0
    assert rules.oscillating(list(spiky), HEALTHY, CHANCE) is None
    # a batch of one sample: each step's loss jumps by about the trivial loss
    jumpy = np.abs(noisy([0.8] * 400, 1.0))
    assert rules.oscillating(list(jumpy), HEALTHY, CHANCE) is not None
    # a loss that starts seven times the trivial loss (unscaled inputs) jumps by several times
    # the trivial loss while it falls, then settles below it: no oscillation
    falling = np.linspace(9.0, 1.0, 100)
    settling = np.abs(noisy(falling, 0.0) + np.r_[noisy([0.0] * 50, 3.0), noisy([0.0] * 50, 0.2)])
    assert float(np.std(np.diff(settling))) / math.sqrt(2) > CHANCE  # the whole run is jumpy
    assert rules.oscillating(list(settling), HEALTHY, CHANCE) is None


def test_slow_convergence_says_how_many_steps_the_rate_needs():
    rate = 2e-4
    curve = noisy(CHANCE - rate * np.arange(300), 0.02)
    found = rules.slow_convergence(curve, HEALTHY, CHANCE)
    assert found is not None
    end = float(np.mean(curve[-30:]))
    needed = (end - 0.5 * CHANCE) / rate  # worked out from the construction
    said = int(found.message.split("about ")[1].split(" more")[0].replace(",", ""))
    assert said == pytest.approx(needed, rel=0.25)
    fast = noisy(CHANCE * np.exp(-np.arange(300) / 60), 0.02)
    assert rules.slow_convergence(fast, HEALTHY, CHANCE) is None
    assert rules.slow_convergence(noisy([CHANCE] * 300, 0.02), HEALTHY, CHANCE) is None


def test_slow_convergence_not_of_a_loss_levelling_off_above_half_the_trivial_loss():
    # a noisy task's loss converges to 0.7 of the trivial loss (its labels allow no better):
    # the last half still falls, but the last quarter barely; more steps would not get it
    # below half the trivial loss
    level = 0.7 * CHANCE
    curve = noisy(level + 0.3 * CHANCE * np.exp(-np.arange(100) / 15), 0.001)
    half, quarter = trends.slope(np.array(curve[50:])), trends.slope(np.array(curve[75:]))
    assert half.z() < -3 and quarter.per_step > 0.5 * half.per_step  # the construction
    assert rules.slow_convergence(curve, HEALTHY, CHANCE) is None
    # a fall with no levelling, 10% of the trivial loss in the run, is slow
    straight = noisy(np.linspace(CHANCE, 0.9 * CHANCE, 100), 0.001)
    assert rules.slow_convergence(straight, HEALTHY, CHANCE) is not None


def test_constant_predictions_need_the_head_constant_at_the_final_checkpoints():
    ratios = {"a": 1e-3, "head": 1e-3}
    const = [point(s, ratios, constant={"head": 1.0}) for s in (1, 11, 21)]
    (found,) = rules.constant_predictions(const)
    assert (found.code, found.layer, found.step) == (Finding.CONSTANT_PREDICTIONS, "head", 1)
    late = [point(1, ratios), point(11, ratios), point(21, ratios, constant={"head": 1.0})]
    assert rules.constant_predictions(late) == []  # one checkpoint is not a stretch
    partly = [point(s, ratios, constant={"head": 0.5}) for s in (1, 11, 21)]
    assert rules.constant_predictions(partly) == []
    inner = [point(s, ratios, constant={"a": 1.0}) for s in (1, 11, 21)]
    assert rules.constant_predictions(inner) == []
    assert rules.constant_predictions(inner, heads=["a"]) != []
    # the head explains a flat loss: one finding, not two
    curve = [0.7] * 300
    tiny = [point(s, {"a": 1e-9, "head": 1e-9}, constant={"head": 1.0}) for s in (1, 150, 300)]
    found = rules.findings(curve, tiny, None, chance_loss=CHANCE)
    assert [f.code for f in found] == [Finding.CONSTANT_PREDICTIONS]


def test_vanishing_and_exploding_gradients_toward_the_input():
    names = {"in": 1e-3, "mid": 1e-3, "top": 1e-3, "head": 1e-3}
    shrink = {"in": 1e-7, "mid": 1e-5, "top": 1e-1, "head": 1.0}
    gone = [point(s, names, grads=shrink) for s in (1, 11, 21)]
    found = rules.vanishing(gone)
    assert found is not None and (found.layer, found.step) == ("mid", 1)
    assert rules.vanishing(gone[:1]) is None  # one checkpoint is not a run
    # the first layer recovering while the next ones stay down: still a vanished stack
    names5 = {"in": 1e-3, "a": 1e-3, "b": 1e-3, "top": 1e-3, "head": 1e-3}
    recovered = {"in": 3e-3, "a": 4e-4, "b": 4e-4, "top": 1e-1, "head": 1.0}
    found = rules.vanishing([point(s, names5, grads=recovered) for s in (1, 11)])
    assert found is not None and found.layer == "b"
    one = {"in": 1e-7, "mid": 1e-1, "top": 1e-1, "head": 1.0}  # one layer: stalled, not depth
    assert rules.vanishing([point(s, names, grads=one) for s in (1, 11)]) is None
    grow = {"in": 1e5, "mid": 1e4, "top": 1.0, "head": 1.0}
    found = rules.exploding([point(s, names, grads=grow) for s in (1, 11)])
    assert found is not None and found.layer == "mid"
    huge = [point(1, names), point(11, {**names, "top": 3.0}), point(21, names)]
    assert rules.exploding(huge) is None  # one large step of a loss that trains well
    found = rules.exploding(huge, unstable=True)  # one, as the loss blew up
    assert found is not None and (found.layer, found.step) == ("top", 11)
    first = [point(1, {**names, "top": 3.0}), point(11, names), point(21, names)]
    blown = [50.0 * CHANCE, *([CHANCE] * 99)]  # a first loss 50 times the trivial one
    found = rules.findings(blown, first, None, chance_loss=CHANCE)
    assert (Finding.EXPLODING, "top", 1) in [(f.code, f.layer, f.step) for f in found]
    assert Finding.EXPLODING not in [f.code for f in rules.findings([CHANCE] * 100, first, None)]
    twice = [point(1, names), *(point(s, {**names, "top": 3.0}) for s in (11, 21))]
    found = rules.exploding(twice)
    assert found is not None and (found.layer, found.step) == ("top", 11)
    assert rules.exploding([point(s, names) for s in (1, 11)]) is None


def test_findings_of_a_vanished_stack_do_not_also_call_its_layers_stalled():
    names = {"in": 1e-9, "mid": 1e-8, "top": 1e-3, "head": 1e-3}
    shrink = {"in": 1e-6, "mid": 1e-5, "top": 1.0, "head": 1.0}
    points = [point(s, names, grads=shrink) for s in (1, 11, 21, 31)]
    found = rules.findings(noisy(np.linspace(1.4, 0.3, 40), 0.01), points, None)
    assert [(f.code, f.layer) for f in found] == [(Finding.VANISHING, "mid")]


def test_a_growing_loss_that_jumps_from_batch_to_batch_diverges_and_oscillates():
    high = [point(s, {"a": 0.5, "head": 0.2}) for s in (1, 150, 300)]
    grows = np.abs(noisy(np.linspace(1.0, 8.0, 300), 1.0))  # a batch of one sample
    found = [f.code for f in rules.findings(list(grows), high, None, chance_loss=CHANCE)]
    assert Finding.DIVERGING in found and Finding.OSCILLATING in found
    smooth = noisy(np.linspace(1.0, 3.0, 300), 0.05)
    found = [f.code for f in rules.findings(smooth, high, None, chance_loss=CHANCE)]
    assert Finding.DIVERGING in found and Finding.OSCILLATING not in found


@pytest.mark.parametrize(
    ("name", "units", "expected"),
    [
        ("bce", [1], math.log(2)),
        ("BinaryCrossentropy", [1], math.log(2)),
        ("binary_crossentropy", [1], math.log(2)),
        ("categorical_crossentropy", [4], math.log(4)),
        ("sparse_categorical_crossentropy", [7], math.log(7)),
        ("mse", [1], None),
        ("my_package>focal", [3], None),
    ],
)
def test_chance_loss_reads_every_name_keras_accepts(name, units, expected):
    from layergrad.training.rules import chance_loss

    got = chance_loss(name, units)
    assert got == pytest.approx(expected) if expected is not None else got is None


def test_a_growing_loss_is_said_with_the_runs_own_losses():
    # a window's mean is the test's, not a loss the run had: the words give the lowest loss
    # before the step it grew at, and that step's
    high = [point(s, {"a": 0.5, "head": 0.2}) for s in (1, 150, 300)]
    curve = noisy(np.r_[np.linspace(1.4, 1.0, 100), np.linspace(1.0, 3.0, 200)], 0.1)
    found = rules.diverging(curve, high, blew_up=False)
    assert found is not None
    low, end = f"{min(curve[: found.step - 1]):.4g}", f"{curve[found.step - 1]:.4g}"
    assert found.message.startswith(f"the loss grows from {low} to {end} by step {found.step}")
