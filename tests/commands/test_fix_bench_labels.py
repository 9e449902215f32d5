"""The labels `benchmarks/bench_fix_corpus.py` trains the non-linearity faults on (a hidden
activation removed, a ReLU before the softmax): no linear map of the inputs may fit them, or
the linear original would fit them as well as the repaired copy and the benchmark could never
verify the repair. The truth is numpy's least squares, not the benchmark's code."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from bench_fix_corpus import _rule_labels
from corpus_archs import BINARY, CATEGORICAL, SPARSE, _pixels, tabular


def _inputs() -> tuple[dict[str, np.ndarray], np.ndarray]:
    x = tabular(8)(np.random.default_rng(3), 2000)
    flat = x["features"].astype("float64")
    return x, np.c_[flat, np.ones(len(flat))]


def _linear_accuracy(design: np.ndarray, onehot: np.ndarray) -> float:
    """The accuracy of the best least-squares linear scores (argmax, or > 0.5 for one column)."""
    weights = np.linalg.lstsq(design, onehot, rcond=None)[0]
    scores = design @ weights
    if onehot.shape[1] == 1:
        return float(np.mean((scores[:, 0] > 0.5) == (onehot[:, 0] > 0.5)))
    return float(np.mean(scores.argmax(1) == onehot.argmax(1)))


def test_the_linear_rule_is_fit_by_a_linear_map_and_the_magnitude_rule_is_not():
    x, design = _inputs()
    y = _rule_labels(x, BINARY, np.zeros((2000, 1)))
    assert _linear_accuracy(design, y) > 0.9  # the old labels (0.96): a linear stack fits them
    y = _rule_labels(x, BINARY, np.zeros((2000, 1)), nonlinear=True)
    assert y.shape == (2000, 1) and abs(y.mean() - 0.5) < 0.01  # balanced: prior = chance
    assert _linear_accuracy(design, y) < 0.6  # 0.53
    # one non-linear feature separates them: |x0 / mean0 - x1 / mean1|, with no offset to
    # learn (a ReLU unit bends at 0): relu(u) + relu(-u) with u a difference of the inputs
    f = x["features"].astype("float64")
    size = np.abs(f[:, :1] / f[:, 0].mean() - f[:, 1:2] / f[:, 1].mean())
    order = np.argsort(size[:, 0])
    assert np.all(np.diff(y[order, 0]) >= 0)  # one threshold on it gives every label


def test_the_magnitude_classes_are_balanced_and_not_linear():
    x, design = _inputs()
    for head in (SPARSE, CATEGORICAL):
        y = _rule_labels(x, head, np.zeros(2000), nonlinear=True)
        onehot = np.eye(head.units)[y] if head.kind == "sparse" else y
        assert onehot.shape == (2000, head.units)
        assert np.all(np.abs(onehot.mean(0) - 1 / head.units) < 0.01)
        best_prior = 1 / head.units
        assert _linear_accuracy(design, onehot) < best_prior + 0.1  # sparse 0.26, one-hot 0.29


def test_image_labels_follow_the_brightness_a_conv_can_read():
    # the pixel images: labels from a projection of single pixels (mostly noise) were no
    # task for a small conv; they now follow each image's mean brightness (whole, centre),
    # so two images of the same brightness get the same class, and the classes are spread
    x = _pixels(np.random.default_rng(5), 2000)
    y = _rule_labels(x, CATEGORICAL, np.zeros((2000, CATEGORICAL.units)))
    ids = y.argmax(1)
    image = x["image"][..., 0].astype("float64")
    bright = np.c_[image.mean((1, 2)), image[:, 3:9, 3:9].mean((1, 2)), np.ones(2000)]
    weights = np.linalg.lstsq(bright, np.eye(CATEGORICAL.units)[ids], rcond=None)[0]
    assert np.mean((bright @ weights).argmax(1) == ids) > 0.75  # linear in the two means
    assert len(np.unique(ids)) >= 2
