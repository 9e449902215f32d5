"""The bugs people post: constant outputs, loss/activation mismatches, unscaled inputs, a
vanishing sigmoid stack. Each `bug_*` sample must get its finding at the right layer, and its
`fixed_*` twin no finding at all. What each model does is stated in make_samples.py and checked
here from its weights and outputs, independently of layergrad."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import keras, load_sample, sample

from layergrad.commands.api import inspect_model, scan_model
from layergrad.commands.check.check_files import CheckOptions, check_file

TWINS = ["fixed_sigmoid_head.keras", "fixed_softmax_head.keras", "fixed_logits_head.keras",
         "fixed_rescaled_input.keras", "fixed_relu_stack.keras"]  # fmt: skip


def findings(verdict):
    return {c.name: c.findings for c in verdict.checks if c.findings}


def message(verdict, name):
    return next(c.message for c in verdict.checks if c.name == name)


@pytest.mark.parametrize("name", TWINS)
def test_healthy_twins_get_no_finding(name):
    verdict = check_file(sample(name))
    assert verdict.passed and findings(verdict) == {}, [c.message for c in verdict.checks]


def test_a_softmax_over_one_unit_is_a_constant_output():
    model = load_sample("bug_softmax_one_unit.keras")
    out = model(np.random.default_rng(0).standard_normal((5, 6)).astype("float32")).numpy()
    assert np.all(out == 1.0)  # the truth, from Keras: softmax over one unit is 1.0
    verdict = check_file(sample("bug_softmax_one_unit.keras"))
    assert findings(verdict) == {
        "loss": ("loss_mismatch",), "forward": ("constant_output",),
    }  # fmt: skip
    assert "stops varying at 'head' (a softmax over one unit is always 1.0)" in message(
        verdict, "forward"
    )
    assert "Dense(1, activation='sigmoid')" in message(verdict, "forward")
    (res,) = inspect_model(sample("bug_softmax_one_unit.keras"), "dense", ["head"]).results
    if res.status == "zero":
        assert [(c.code, c.layer) for c in res.causes] == [("constant_output", "head")]
    else:  # some CPUs' kernels leave rounding noise (1e-7) in the softmax's zero gradient
        assert res.status == "ok" and res.gradient.max_abs < 1e-6
        assert any("head ends in softmax" in w for w in res.warnings)
        assert any(w.startswith("vanishing: ") for w in res.warnings)


def test_a_saturated_sigmoid_head_is_a_constant_output():
    model = load_sample("bug_saturated_head.keras")
    assert model.get_layer("head").bias.numpy()[0] == 1000.0
    verdict = check_file(sample("bug_saturated_head.keras"))
    assert findings(verdict)["forward"] == ("constant_output",)
    assert "stops varying at 'head' (its activation is saturated for every sample)" in message(
        verdict, "forward"
    )


def test_a_dead_relu_layer_and_zero_weights_name_where_the_output_stops(tmp_path):
    verdict = check_file(sample("cause_dead_relu.keras"))
    assert "stops varying at 'dead' (its ReLU units output 0" in message(verdict, "forward")
    x = keras.Input((4,), name="x")
    h = keras.layers.Dense(4, activation="tanh", name="h")(x)
    z = keras.layers.Dense(3, kernel_initializer="zeros", bias_initializer="ones", name="zeroed")(h)
    out = keras.layers.Dense(2, name="head")(z)
    path = tmp_path / "zeros.keras"
    keras.Model(x, out).save(path)
    verdict = check_file(path)
    assert findings(verdict)["forward"] == ("constant_output",)
    assert "stops varying at 'zeroed' (its weights are all zero" in message(verdict, "forward")


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("bug_bce_on_softmax.keras", "binary cross-entropy scores each softmax output"),
        ("bug_logits_twice.keras", "from_logits=True applies softmax to an output that already"),
        ("bug_linear_no_logits.keras", "clips them to [1e-7, 1 - 1e-7]"),
    ],
)
def test_loss_mismatches_in_the_samples(name, says):
    verdict = check_file(sample(name), CheckOptions(static_only=True))  # no TensorFlow needed
    assert findings(verdict) == {"loss": ("loss_mismatch",)}
    assert says in message(verdict, "loss") and "output 'head'" in message(verdict, "loss")


def _saved(tmp_path, activation, units, loss):
    x = keras.Input((6,), name="x")
    out = keras.layers.Dense(units, activation=activation, name="out")(x)
    model = keras.Model(x, out)
    model.compile(loss=loss)
    path = tmp_path / "m.keras"
    model.save(path)
    return path


@pytest.mark.parametrize(
    ("activation", "units", "loss", "bad"),
    [
        ("sigmoid", 1, "categorical_crossentropy", True),  # one unit holds no distribution
        ("sigmoid", 4, "sparse_categorical_crossentropy", True),  # sigmoid is not a distribution
        ("softmax", 4, "mse", True),  # squared error on class probabilities
        ("softmax", 4, keras.losses.CategoricalCrossentropy(from_logits=True), True),
        (None, 4, keras.losses.BinaryCrossentropy(from_logits=False), True),
        ("sigmoid", 1, "binary_crossentropy", False),
        ("softmax", 4, "categorical_crossentropy", False),
        (None, 4, keras.losses.CategoricalCrossentropy(from_logits=True), False),
        (None, 1, "mse", False),  # regression
        ("relu", 1, "mae", False),
    ],
)
def test_loss_and_activation_pairings(tmp_path, activation, units, loss, bad):
    verdict = check_file(_saved(tmp_path, activation, units, loss), CheckOptions(static_only=True))
    assert (findings(verdict).get("loss") == ("loss_mismatch",)) == bad, message(verdict, "loss")


def test_unscaled_pixels_saturate_the_first_tanh_and_a_rescaling_layer_fixes_it(tmp_path):
    pixels = np.random.default_rng(0).integers(0, 256, (8, 12)).astype("float32")
    np.save(tmp_path / "pixels.npy", pixels)
    # the truth from the weights: |W^T x + b| for 0-255 inputs is far beyond tanh's range
    squash = load_sample("bug_unscaled_input.keras").get_layer("squash")
    pre = pixels @ squash.kernel.numpy() + squash.bias.numpy()
    assert np.mean(np.abs(np.tanh(pre)) >= 1 - 1e-6) > 0.5
    report = scan_model(sample("bug_unscaled_input.keras"), input_file=tmp_path / "pixels.npy")
    assert report.input_range is not None
    assert (report.input_range.input, report.input_range.layer) == ("pixels", "squash")
    assert any("Rescaling(1 / 255)" in note for note in report.notes)
    fixed = scan_model(sample("fixed_rescaled_input.keras"), input_file=tmp_path / "pixels.npy")
    assert fixed.input_range is None and not fixed.notes


def test_a_sigmoid_stack_vanishes_and_a_relu_stack_does_not():
    sig = scan_model(sample("bug_sigmoid_stack.keras"))
    flagged = [r.layer for r in sig.rows if "vanishing" in r.flags]
    assert flagged and flagged[0] == "x"
    end = sig.rows[-1].gradient.l2
    for row in sig.rows:
        if row.layer in flagged:
            assert np.log10(row.gradient.l2 / end) <= -3
    relu = scan_model(sample("fixed_relu_stack.keras"))
    assert not any(r.flags for r in relu.rows)


def test_an_output_without_a_loss_leaves_its_branch_without_gradient(tmp_path):
    # The check differentiates the compiled loss: an output with no loss trains nothing.
    x = keras.Input((6,), name="x")
    a = keras.layers.Dense(2, name="a")(x)
    b = keras.layers.Dense(2, name="b")(keras.layers.Dense(4, name="b_hidden")(x))
    model = keras.Model(x, {"a": a, "b": b})
    model.compile(loss={"a": "mse"})
    path = tmp_path / "half.keras"
    model.save(path)
    verdict = check_file(path)
    assert findings(verdict)["trainable"] == ("no_gradient",)
    assert "b_hidden/kernel" in message(verdict, "trainable")
    assert "blocked" in findings(verdict)["gradient"]
