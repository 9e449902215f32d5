"""The trivial loss of each kind of head, from its labels batch by batch, against numpy on
all the labels at once; and labels that are not this output's cost nothing to count."""

from __future__ import annotations

import math
import tracemalloc

import numpy as np
import pytest

from layergrad.data.label_stream import TrivialLoss


def fed(loss: str, y: np.ndarray, units: int = 0, batch: int = 37) -> float | None:
    trivial = TrivialLoss(loss, units)
    for start in range(0, len(y), batch):
        trivial.add(y[start : start + batch])
    return trivial.value()


def entropy(counts: np.ndarray) -> float:
    p = counts / counts.sum()
    p = p[p > 0]
    return float(-(p * np.log(p)).sum())


def test_squared_error_is_the_variance_of_each_target_column():
    y = np.random.default_rng(0).normal([3.0, -1.0], [2.0, 0.5], (1000, 2))
    expected = float(np.mean(np.var(y, axis=0)))  # predicting each column's mean
    assert fed("mean_squared_error", y) == pytest.approx(expected, rel=1e-9)
    assert fed("mse", y[:, :1]) == pytest.approx(float(np.var(y[:, 0])), rel=1e-9)


def test_absolute_error_is_the_mean_distance_from_the_median():
    y = np.random.default_rng(1).exponential(2.0, (999, 1))
    expected = float(np.mean(np.abs(y - np.median(y))))
    assert fed("mae", y) == pytest.approx(expected, rel=1e-12)
    assert fed("MeanAbsoluteError", y) == pytest.approx(expected, rel=1e-12)


def test_cross_entropies_are_the_entropy_of_the_class_frequencies():
    rng = np.random.default_rng(2)
    ids = rng.choice(4, 1000, p=[0.1, 0.2, 0.3, 0.4])
    counts = np.bincount(ids, minlength=4).astype(float)
    assert fed("sparse_categorical_crossentropy", ids, 4) == pytest.approx(entropy(counts))
    rows = np.eye(4)[ids]
    assert fed("categorical_crossentropy", rows, 4) == pytest.approx(entropy(counts))
    bits = (ids > 1).astype("float32")
    both = np.array([bits.sum(), len(bits) - bits.sum()])
    assert fed("binary_crossentropy", bits, 1) == pytest.approx(entropy(both))
    assert fed("sparse_categorical_crossentropy", np.zeros(10, int), 4) is None  # one class


@pytest.mark.parametrize(
    ("loss", "y"),
    [
        ("sparse_categorical_crossentropy", np.array([0, 1, 2_000_000_000, 3])),
        ("sparse_categorical_crossentropy", np.array([0.0, 1.0, np.nan])),
        ("sparse_categorical_crossentropy", np.array([0.0, 0.5, 1.0])),
        ("sparse_categorical_crossentropy", np.array([-1, 0, 1])),
        ("categorical_crossentropy", np.array([0, 3, 6, 2])),  # ids, not rows
        ("binary_crossentropy", np.array([0.0, np.inf])),
        ("mse", np.array([[1.0], [np.nan]])),
    ],
)
def test_labels_that_are_not_this_outputs_give_no_trivial_loss_and_allocate_nothing(loss, y):
    tracemalloc.start()
    try:
        assert fed(loss, y, units=4) is None
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20  # an id of 2e9 is not counted into a 16 GB table


def test_other_losses_have_none():
    assert fed("huber", np.ones((10, 1))) is None
    assert math.isclose(fed("mse", np.arange(10.0)[:, None]) or 0.0, float(np.var(np.arange(10.0))))
