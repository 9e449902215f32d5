"""Less common model shapes: dict inputs, layers that return their input, several outputs,
layers that fail at run time, NaN in a sibling branch. Values from hand-set weights or the
seeds' manual tape."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest
from helpers import CUSTOM_LAYERS, keras, load_sample, manual_gradient, normal, sample, tf

from layergrad.commands.api import inspect_model, scan_model
from layergrad.commands.check.check_files import CheckOptions, check_file

layers = keras.layers


def test_dict_inputs_are_fed_by_name_not_by_order(tmp_path, write_input):
    # Keys given in non-sorted order and of different shapes: swapping them would fail or lie.
    b_in, a_in = keras.Input((3,), name="b"), keras.Input((2,), name="a")
    da, db = layers.Dense(4, name="da"), layers.Dense(4, name="db")
    concat, head = layers.Concatenate(name="concat"), layers.Dense(1, name="head")
    model = keras.Model({"b": b_in, "a": a_in}, head(concat([da(a_in), db(b_in)])))
    path = tmp_path / "dict.keras"
    model.save(path)
    a, b = normal(8, 2), normal(8, 3, seed=2)
    (res,) = inspect_model(path, "da", ["head"], input_file=write_input(a=a, b=b)).results
    expected = manual_gradient(da, lambda h: head(concat([h, db(tf.constant(b))])), a)
    np.testing.assert_allclose(res.array, expected, rtol=1e-5, atol=1e-6)


@pytest.fixture(scope="module")
def identity_skip(tmp_path_factory):
    """d -> Dropout -> h (kernel [[1,2],[3,4]]); add = d + h; head kernel [[5],[6]], no biases."""
    x = keras.Input((2,), name="x")
    d = layers.Dense(2, name="d")(x)
    h_layer = layers.Dense(2, name="h", use_bias=False)
    head_layer = layers.Dense(1, name="head", use_bias=False)
    out = head_layer(layers.Add(name="add")([d, h_layer(layers.Dropout(0.5, name="drop")(d))]))
    model = keras.Model(x, out)
    h_layer.set_weights([np.array([[1.0, 2.0], [3.0, 4.0]], "float32")])
    head_layer.set_weights([np.array([[5.0], [6.0]], "float32")])
    path = tmp_path_factory.mktemp("identity") / "identity.keras"
    model.save(path)
    return path


def test_a_layer_that_returns_its_input_excludes_the_skip_path(identity_skip):
    # Dropout in inference returns its input tensor itself. Only the path through h depends on
    # drop's output: W_h @ w = [1*5 + 2*6, 3*5 + 4*6] = [17, 39]. Through d both paths count:
    # (I + W_h) @ w = [22, 45].
    (drop,) = inspect_model(identity_skip, "drop", ["head"]).results
    np.testing.assert_allclose(drop.array, np.tile([17.0, 39.0], (8, 1)))
    (d,) = inspect_model(identity_skip, "d", ["head"]).results
    np.testing.assert_allclose(d.array, np.tile([22.0, 45.0], (8, 1)))
    rows = {r.layer: r for r in scan_model(identity_skip, target="head").rows}
    assert rows["drop"].gradient.mean_abs == pytest.approx(28.0)  # (17 + 39) / 2
    assert rows["d"].gradient.mean_abs == pytest.approx(33.5)  # (22 + 45) / 2


@pytest.fixture(scope="module")
def lstm_state(tmp_path_factory):
    """LSTM(return_state=True): the head reads the cell state, output 2."""
    x = keras.Input((5, 3), name="x")
    _, _, c = layers.LSTM(4, return_state=True, name="lstm")(x)
    model = keras.Model(x, layers.Dense(2, name="head")(c))
    path = tmp_path_factory.mktemp("lstm") / "lstm_state.keras"
    model.save(path)
    return path


def test_several_outputs_the_target_uses_another_one(lstm_state):
    (res,) = inspect_model(lstm_state, "lstm", ["head"]).results
    assert res.status == "none"  # output 0 (the sequence) does not reach the head
    cause = res.causes[0]
    assert cause.code == "not_downstream" and "output 2" in cause.message


def test_scan_and_check_follow_the_connected_output(lstm_state):
    rows = {r.layer: r for r in scan_model(lstm_state).rows}
    assert rows["lstm"].status == "ok" and rows["lstm"].class_name == "LSTM (output 2)"
    assert check_file(lstm_state).passed


def test_a_layer_that_raises_fails_its_file_without_stopping_check(tmp_path):
    module = tmp_path / "boom_layers.py"
    module.write_text(
        textwrap.dedent("""
        import keras

        @keras.saving.register_keras_serializable(package="boom")
        class Boom(keras.layers.Layer):
            def call(self, x):
                raise RuntimeError("value too large for Boom")

            def compute_output_shape(self, input_shape):
                return input_shape
    """)
    )
    import importlib.util

    spec = importlib.util.spec_from_file_location("boom_layers", module)
    boom = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(boom)
    x = keras.Input((3,), name="x")
    path = tmp_path / "boom.keras"
    keras.Model(x, layers.Dense(1, name="head")(boom.Boom(name="boom")(x))).save(path)
    verdict = check_file(path, CheckOptions(imports=(str(module),)))
    assert not verdict.passed
    forward = next(c for c in verdict.checks if c.name == "forward")
    assert forward.findings == ("error",) and "value too large for Boom" in forward.message


def test_nan_in_a_sibling_branch_is_not_blamed(tmp_path):
    # dense -> relu -> sqrt -> head: sqrt'(0) is Inf where relu outputs 0 (unit 0: bias -100).
    # A sibling branch 'broken' with a NaN kernel feeds a second output, not the head.
    load_sample("seed.keras")  # puts sample_models/ (and its custom_layers) on the path
    import custom_layers

    x = keras.Input((6,), name="x")
    dense = layers.Dense(4, name="dense")
    h = custom_layers.SqrtLayer(name="sqrt")(layers.ReLU(name="relu")(dense(x)))
    broken = layers.Dense(2, name="broken")
    model = keras.Model(x, [layers.Dense(2, name="head")(h), broken(x)])
    kernel, bias = dense.get_weights()
    bias[0] = -100.0
    dense.set_weights([kernel, bias])
    kernel, bias = broken.get_weights()
    kernel[0, 0] = np.nan
    broken.set_weights([kernel, bias])
    path = tmp_path / "sibling_nan.keras"
    model.save(path)
    (res,) = inspect_model(path, "dense", ["head"], imports=[CUSTOM_LAYERS]).results
    assert res.status == "nonfinite"
    assert (res.causes[0].code, res.causes[0].layer) == ("nonfinite_backward", "sqrt")


def test_nan_input_is_a_forward_problem(write_input):
    nan = np.full((2, 5), np.nan, dtype="float32")
    (res,) = inspect_model(
        sample("seed.keras"), "dense", ["dense_1"], input_file=write_input(nan)
    ).results
    assert res.status != "ok"
    assert res.causes[0].code == "nonfinite_forward"
    assert not any(c.code == "dead_relu" for c in res.causes)
    # said of the batch: an input has no weights to check
    cause = res.causes[0]
    assert cause.rule == "nonfinite_input" and "10 of 10 values" in cause.message, cause
    assert "weights" not in cause.hint and "np.isfinite" in cause.hint, cause.hint
