"""Heads the file does not show, read from what the outputs do on the probe: a subclassed
model (its file describes no layer, so the loss rules had nothing to judge) and a ReLU inside a
custom head layer (non-negative values with many exact zeros, told apart from a sigmoid). The
truth is how each model is built: which loss fits which activation is worked out by hand."""

from __future__ import annotations

import numpy as np
import pytest
from test_saved_forms import FULL, HEADS, STATIC, _custom_head, head_layers, keras, loss_item

from layergrad.commands.check.check_files import CheckOptions
from layergrad.core.probe_options import ProbeOptions
from layergrad.model.observed_heads import observe

CCE = "categorical_crossentropy"


def _subclassed(tmp_path, final, units, loss, fit: bool = False, again: bool = True):
    keras.utils.set_random_seed(0)
    model = head_layers.Classifier(units, final, name="classifier")
    x = np.random.default_rng(0).standard_normal((32, 6)).astype("float32")
    model(x[:2])
    model.compile(optimizer="adam", loss=loss)
    if fit:  # saved after training, as most files are
        y = np.eye(units, dtype="float32")[np.arange(32) % units]
        model.fit(x, y if units > 1 else y[:, :1], epochs=1, verbose=0)
    path = tmp_path / f"sub{'_fit' if fit else ''}.keras"
    model.save(path)
    if not again:
        return [path]
    resaved = tmp_path / f"again{'_fit' if fit else ''}.keras"
    keras.saving.load_model(path, safe_mode=True).save(resaved)
    return [path, resaved]


@pytest.mark.parametrize(
    ("final", "units", "loss", "bad", "seen"),
    [
        ("softmax", 4, CCE, False, "applies softmax"),
        ("ops_softmax", 4, CCE, False, "sum to 1 per sample"),  # an operation: observed
        ("sigmoid", 1, "binary_crossentropy", False, "applies sigmoid"),
        (None, 4, keras.losses.CategoricalCrossentropy(from_logits=True), False, "linear"),
        (None, 1, "mse", False, "applies linear"),
        ("softmax", 4, keras.losses.binary_crossentropy, True, "applies softmax"),
        ("softmax", 4, "mse", True, "applies softmax"),
        ("sigmoid", 4, CCE, True, "applies sigmoid"),
        ("relu", 4, CCE, True, "applies relu"),
        (None, 4, CCE, True, "applies linear"),
    ],
)
def test_a_subclassed_models_output_is_judged_on_the_probe(tmp_path, final, units, loss, bad, seen):
    for path in _subclassed(tmp_path, final, units, loss, again=not bad):  # healthy: resaved
        item, verdict = loss_item(path, FULL)
        assert (item.findings == ("loss_mismatch",)) == bad, (path.name, item.message)
        assert seen in item.message and "subclassed" in item.message, item.message
        if bad and final != "ops_softmax":  # named by the layer whose call made the output
            assert "output 'head'" in item.message, item.message
        if not bad:
            assert verdict.passed, [(c.name, c.message) for c in verdict.checks if not c.passed]
    # the file alone cannot decide: said, never failed
    item, verdict = loss_item(path, STATIC)
    assert item.findings == () and "loss rules skipped" in item.message


def test_a_healthy_subclassed_model_stays_clean_after_fit_and_with_data(tmp_path):
    for path in _subclassed(tmp_path, "softmax", 3, CCE, fit=True):
        rng = np.random.default_rng(1)
        data = tmp_path / "d.npz"
        np.savez(data, x=rng.standard_normal((16, 6)).astype("float32"),
                 y=np.eye(3, dtype="float32")[rng.integers(0, 3, 16)])  # fmt: skip
        for options in (FULL, CheckOptions(imports=(HEADS,), probe=ProbeOptions(data=str(data)))):
            item, verdict = loss_item(path, options)
            assert item.findings == () and verdict.passed, [
                (c.name, c.message) for c in verdict.checks if not c.passed
            ]


def test_a_relu_in_a_custom_head_is_told_apart_from_a_sigmoid(tmp_path):
    keras.utils.set_random_seed(0)  # all 8 probe outputs above 0: the layer inside says ReLU
    model = _custom_head("relu", 1)
    model.compile(optimizer="adam", loss="binary_crossentropy")
    model.save(tmp_path / "m.keras")
    item, _ = loss_item(tmp_path / "m.keras", FULL)
    assert item.findings == ("loss_mismatch",), item.message
    assert "which applies relu" in item.message and "'classifier'" in item.message


def test_what_the_values_say_worked_out_by_hand():
    relu = np.array([[0.0], [0.3], [0.0], [0.7], [0.1], [0.0]], "float32")  # half exactly 0
    assert observe(relu).kind == "relu"
    # exact 0 and exact 1 both: a clipped (hard) sigmoid, not decided
    assert observe(np.array([[0.0], [1.0], [0.0], [0.4]], "float32")).kind == "unit_range"
    assert observe(np.array([[0.2], [0.6], [0.9], [0.4]], "float32")).kind == "unit_range"
    rows = np.array([[0.2, 0.8], [0.5, 0.5], [0.1, 0.9]], "float32")
    assert observe(rows).kind == "softmax"
    # a channels-first segmentation map, softmax over the channels (axis 1), not the last axis:
    # 2 samples, 3 classes, 2 x 2 pixels; each pixel's 3 values sum to 1 by construction
    logits = np.arange(24, dtype="float64").reshape(2, 3, 2, 2) % 5
    maps = (np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)).astype("float32")
    assert not np.allclose(maps.sum(axis=-1), 1)  # the last axis does not sum to 1
    assert observe(maps).kind == "softmax"
