"""The runs the training rules' examples name (`layergrad/training/rules.RULES`): loss curves
and checkpoints made by hand, each from a known trend plus known noise, so the truth is the
construction (no training). The tests run every rule on its examples and near misses."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from layergrad.core.fit_results import Checkpoint, LayerStats
from layergrad.training.rules import Run

CHANCE = math.log(4)  # the trivial loss of 4 balanced classes


def noisy(trend: object, sigma: float, seed: int = 0) -> list[float]:
    values = np.asarray(trend, np.float64)
    return list(values + np.random.default_rng(seed).normal(0.0, sigma, values.shape))


def point(step: int, ratios: dict[str, float], *, constant: dict[str, float] | None = None,
          grads: dict[str, float] | None = None, dead: dict[str, float] | None = None,
          nan_out: dict[str, int] | None = None) -> Checkpoint:  # fmt: skip
    """A checkpoint: per layer its update ratio, and (when given) its gradient L2 against a
    weight L2 of 1, its constant and dead fractions, its NaN/Inf outputs."""
    constant, grads, dead, nan_out = constant or {}, grads or {}, dead or {}, nan_out or {}
    rows = tuple(
        LayerStats(name, grads.get(name, 1.0), 1.0, ratio, dead.get(name, 0.0), 0,
                   nan_out.get(name, 0), constant.get(name, 0.0))
        for name, ratio in ratios.items()
    )  # fmt: skip
    return Checkpoint(step, 0, step - 1, 1.0, 0.1, rows, ())


HEALTHY = {"a": 1e-3, "head": 2e-3}
THREE = [point(s, HEALTHY) for s in (1, 150, 300)]
TINY = [point(s, {"a": 1e-9, "head": 2e-9}) for s in (1, 150, 300)]
HIGH = [point(s, {"a": 0.5, "head": 0.2}) for s in (1, 150, 300)]
DEPTH = {"in": 1e-3, "mid": 1e-3, "top": 1e-3, "head": 1e-3}


def _curve(losses: list[float], checkpoints: list[Checkpoint] = THREE) -> Run:
    return Run(losses, checkpoints, CHANCE)


def _layers(checkpoints: list[Checkpoint]) -> Run:
    return Run(noisy(np.linspace(1.4, 0.3, 40), 0.01), checkpoints, CHANCE)


def _square_wave() -> Run:
    t = np.arange(400)
    return _curve(noisy(1.0 + 0.4 * np.sign(np.sin(2 * np.pi * t / 80)), 0.05))


def _spikes() -> Run:
    spiky = np.array(noisy([0.05] * 400, 0.01))
    spiky[[37, 120, 211, 290, 350]] += 1.0
    return _curve(list(spiky))


def _spikes_recur() -> Run:
    """A flat run of heavy-tailed batch losses (a batch of one sample): its third step is
    2.4 times its first, and as high a loss comes again later: its spread, not a blow-up."""
    flat = np.array(noisy([1.0] * 300, 0.05, seed=2))
    flat[0], flat[2], flat[[90, 170, 240]] = 0.9, 2.2, 2.3
    return _curve(list(flat))


def _dead(fractions: list[float]) -> Run:
    return _layers([point(1 + 10 * i, {"a": 1e-3}, dead={"a": d})
                    for i, d in enumerate(fractions)])  # fmt: skip


def _stalled(count: int) -> Run:
    low = {"a": 1e-3, "b": 2e-3, "c": 1e-7}
    return _layers([point(1, {"a": 1e-3, "b": 2e-3, "c": 1e-3}),
                    *(point(11 + 10 * i, low) for i in range(count))])  # fmt: skip


EXAMPLES: dict[str, Callable[[], Run]] = {
    # nonfinite
    "nan_in_head": lambda: _layers([point(1, HEALTHY), point(11, HEALTHY, nan_out={"head": 4})]),
    "finite_run": lambda: _layers([point(1, HEALTHY), point(11, HEALTHY)]),
    # diverging
    "loss_grows": lambda: _curve(
        noisy(np.r_[np.linspace(1.4, 1.0, 100), np.linspace(1.0, 3.0, 200)], 0.1), HIGH),
    "first_steps_blow_up": lambda: _curve(noisy(np.r_[[1.4] * 2, [40.0] * 298], 0.1)),
    "flat_noisy_high_ratios": lambda: _curve(noisy([1.4] * 300, 0.3), HIGH),
    "spikes_recur": _spikes_recur,
    # constant_predictions
    "constant_head": lambda: _layers(
        [point(s, HEALTHY, constant={"head": 1.0}) for s in (1, 11, 21)]),
    "constant_once": lambda: _layers(
        [point(1, HEALTHY), point(11, HEALTHY), point(21, HEALTHY, constant={"head": 1.0})]),
    # not_learning
    "flat_tiny_ratios": lambda: _curve(noisy([1.475] * 300, 0.1), TINY),
    "stuck_far_above": lambda: _curve(noisy([5 * CHANCE] * 300, 0.01)),
    "falling_tiny_ratios": lambda: _curve(noisy(np.linspace(1.475, 1.275, 300), 0.1), TINY),
    "flat_healthy_ratios": lambda: _curve(noisy([1.475] * 300, 0.1)),
    # plateau_at_chance
    "at_chance": lambda: _curve(noisy([CHANCE] * 300, 0.1)),
    "below_chance": lambda: _curve(noisy([0.8 * CHANCE] * 300, 0.1)),
    # oscillating
    "square_wave": _square_wave,
    "batch_of_one": lambda: _curve(list(np.abs(noisy([0.8] * 400, 1.0)))),
    "falling": lambda: _curve(noisy(np.linspace(1.4, 0.3, 400), 0.1)),
    "converged_spikes": _spikes,
    # slow_convergence
    "slow_fall": lambda: _curve(noisy(CHANCE - 2e-4 * np.arange(300), 0.02)),
    "fast_fall": lambda: _curve(noisy(CHANCE * np.exp(-np.arange(300) / 60), 0.02)),
    "levelling_off": lambda: _curve(
        noisy(0.7 * CHANCE + 0.3 * CHANCE * np.exp(-np.arange(100) / 15), 0.001)),
    # vanishing
    "shrinking_to_input": lambda: _layers([
        point(s, DEPTH, grads={"in": 1e-7, "mid": 1e-5, "top": 1e-1, "head": 1.0})
        for s in (1, 11, 21)]),
    "one_layer_low": lambda: _layers([
        point(s, DEPTH, grads={"in": 1e-7, "mid": 1e-1, "top": 1e-1, "head": 1.0})
        for s in (1, 11)]),
    # exploding
    "growing_to_input": lambda: _layers([
        point(s, DEPTH, grads={"in": 1e5, "mid": 1e4, "top": 1.0, "head": 1.0})
        for s in (1, 11)]),
    "huge_steps_twice": lambda: _layers(
        [point(1, DEPTH), *(point(s, {**DEPTH, "top": 3.0}) for s in (11, 21))]),
    "one_huge_step": lambda: _layers(
        [point(1, DEPTH), point(11, {**DEPTH, "top": 3.0}), point(21, DEPTH)]),
    # dying_units
    "units_die": lambda: _dead([0.1, 0.1, 0.6, 0.7, 0.6]),
    "dead_from_the_start": lambda: _dead([0.6, 0.7]),
    "dead_last_batch": lambda: _dead([0.1, 0.1, 0.1, 0.1, 0.6]),
    # dead (from the start)
    "born_dead": lambda: _dead([0.6, 0.7, 0.6]),
    "dead_then_alive": lambda: _dead([0.6, 0.6, 0.1, 0.1]),
    "dies_in_training": lambda: _dead([0.1, 0.6, 0.7]),
    # stalled_layer
    "one_layer_stalls": lambda: _stalled(3),
    "stalls_twice": lambda: _stalled(2),
}  # fmt: skip
