"""`LAYER:logits`: the output of a layer with a fused activation before that activation, as
`--from` and `--to` (a `Dense(3, activation="softmax")` head has no layer of its own for its
logits). Against hand-written tapes on the loaded model's weights: d sum(x @ W + b) / d h, and
d after / d z through the softmax; real saved models, CLI runs."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from helpers import keras, normal, tf

from layergrad.cli.app import main
from layergrad.commands.api import inspect_model, scan_model
from layergrad.core.errors import LayerNotFound

RTOL, ATOL = 1e-5, 1e-6


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("logits")
    keras.utils.set_random_seed(0)
    x = keras.Input((5,), name="x")
    h = keras.layers.Dense(8, activation="tanh", name="hidden")(x)
    category = keras.layers.Dense(3, activation="softmax", name="category")(h)
    after = keras.layers.Dense(2, name="after")(category)
    model = keras.Model(x, [category, after])
    model.save(folder / "head.keras")
    encoder = keras.Sequential(
        [keras.Input((6, 6, 2)), keras.layers.Conv2D(4, 3, activation="relu", name="conv")],
        name="encoder",
    )
    i = keras.Input((6, 6, 2), name="image")
    pooled = keras.layers.GlobalAveragePooling2D(name="pool")(encoder(i))
    nested = keras.Model(i, keras.layers.Dense(2, activation="sigmoid", name="out")(pooled))
    nested.save(folder / "nested.keras")
    rnn = keras.Sequential(
        [keras.Input((4, 3)), keras.layers.LSTM(5, name="lstm"), keras.layers.Dense(1)]
    )
    rnn.save(folder / "rnn.keras")
    np.save(folder / "x.npy", normal(6, 5))
    np.save(folder / "image.npy", normal(3, 6, 6, 2))
    np.save(folder / "seq.npy", normal(2, 4, 3))
    return folder


def loaded(path):
    return keras.saving.load_model(path, compile=False)


def inspect_json(*args: str) -> dict:
    result = CliRunner().invoke(main, ["inspect", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def saved_gradient(tmp_path, *args: str) -> np.ndarray:
    out = tmp_path / "g.npy"
    result = CliRunner().invoke(main, ["inspect", *args, "--save-gradient", str(out)])
    assert result.exit_code == 0, result.output
    return np.load(out)


def test_to_logits_is_the_gradient_of_x_at_w_plus_b_not_of_the_softmax(files, tmp_path):
    path, x = str(files / "head.keras"), np.load(files / "x.npy")
    m = loaded(path)
    hidden, category = m.get_layer("hidden"), m.get_layer("category")
    w, b = (v.numpy() for v in category.weights)
    with tf.GradientTape(persistent=True) as tape:
        h = hidden(tf.constant(x))
        tape.watch(h)
        z = tf.matmul(h, w) + b  # the logits by hand
        p = tf.nn.softmax(z)
    expected = tape.gradient(z, h).numpy()
    np.testing.assert_allclose(expected, np.tile(w.sum(axis=1), (6, 1)), rtol=RTOL)  # on paper
    args = (path, "--from", "hidden", "--to", "category:logits", "--input", str(files / "x.npy"))
    got = saved_gradient(tmp_path, *args)
    np.testing.assert_allclose(got, expected, rtol=RTOL, atol=ATOL)
    # the softmax output's gradient is the sum's: zero up to rounding, 5 decades below
    softmax = tape.gradient(p, h).numpy()
    assert np.abs(softmax).max() < 1e-5 * np.abs(expected).max()
    doc = inspect_json(*args)
    (result,) = doc["results"]
    assert result["to"] == {"layer": "category:logits", "shape": [6, 3], "dtype": "float32"}
    assert result["status"] == "ok"
    (api,) = inspect_model(path, "hidden", ["category:logits"]).results
    assert api.target.layer == "category:logits" and not any("softmax" in w for w in api.warnings)


def test_from_logits_goes_through_the_activation(files, tmp_path):
    """d sum(after) / d z, with the softmax applied to the watched z inside the call."""
    path, x = str(files / "head.keras"), np.load(files / "x.npy")
    m = loaded(path)
    hidden, category, after = (m.get_layer(n) for n in ("hidden", "category", "after"))
    w, b = (v.numpy() for v in category.weights)
    with tf.GradientTape() as tape:
        z = tf.matmul(hidden(tf.constant(x)), w) + b
        tape.watch(z)
        out = after(tf.nn.softmax(z))
    expected = tape.gradient(out, z).numpy()
    assert np.abs(expected).max() > 1e-3
    args = (path, "--from", "category:logits", "--to", "after", "--input", str(files / "x.npy"))
    np.testing.assert_allclose(saved_gradient(tmp_path, *args), expected, rtol=RTOL, atol=ATOL)
    # the model's outputs are unchanged by the capture: d after / d category as ever
    report = inspect_model(path, "category", ["after"], input_file=str(files / "x.npy"))
    with tf.GradientTape() as tape:
        p = category(hidden(tf.constant(x)))
        tape.watch(p)
        out = after(p)
    np.testing.assert_allclose(report.results[0].array, tape.gradient(out, p), rtol=RTOL)


def test_a_softmax_target_points_at_its_logits_and_at_the_jacobian(files):
    path = str(files / "head.keras")
    result = CliRunner().invoke(main, ["inspect", path, "--from", "hidden", "--to", "category"])
    assert result.exit_code == 0, result.output
    (res,) = inspect_model(path, "hidden", ["category"]).results
    # a warning of an ok gradient; the cause of a zero one (its sum is exactly 1 per sample)
    said = [w for w in res.warnings if "ends in softmax" in w]
    said += [c.hint for c in res.causes if c.rule == "constant_output/softmax_sum"]
    (note,) = said
    assert "take --to category:logits (its output before the softmax)" in note
    assert "--measure jacobian" in note and "layer before it" not in note
    assert "--to category:logits" in result.output  # (a cause is shown in a framed panel)
    result = CliRunner().invoke(main, ["scan", path, "--to", "category"])
    assert "scan with --to category:logits" in " ".join(result.output.split())


def test_the_logits_over_data_equal_the_probe_batch(files):
    path, batch = str(files / "head.keras"), str(files / "x.npy")
    one = inspect_json(path, "--from", "hidden", "--to", "category:logits", "--input", batch)
    over = inspect_json(path, "--from", "hidden", "--to", "category:logits", "--data", batch)
    a, b = one["results"][0]["gradient"], over["results"][0]["gradient"]
    for key in ("l2", "mean_abs", "max_abs"):
        assert b[key] == pytest.approx(a[key], rel=1e-5)


def test_scan_to_logits_ends_at_the_logits(files):
    path = str(files / "head.keras")
    rows = {r.layer: r for r in scan_model(path, target="category:logits").rows}
    assert list(rows) == ["x", "hidden", "category:logits"]  # not the softmax after it
    assert rows["category:logits"].gradient.mean_abs == pytest.approx(1.0)
    assert rows["category:logits"].class_name == "Dense"


def test_nested_paths_calls_and_indexes_take_logits(files, tmp_path):
    path, image = str(files / "nested.keras"), np.load(files / "image.npy")
    m = loaded(path)
    conv = m.get_layer("encoder").get_layer("conv")
    kernel, bias = (v.numpy() for v in conv.weights)
    with tf.GradientTape() as tape:
        z = tf.nn.conv2d(tf.constant(image), kernel, 1, "VALID") + bias
        tape.watch(z)
        out = m.get_layer("out")(m.get_layer("pool")(tf.nn.relu(z)))
    expected = tape.gradient(out, z).numpy()
    assert (expected == 0).any() and (expected != 0).any()  # the ReLU's kink is in it
    for ref in ("encoder/conv:logits", "conv@0:logits"):
        args = (path, "--from", ref, "--to", "out", "--input", str(files / "image.npy"))
        np.testing.assert_allclose(saved_gradient(tmp_path, *args), expected, atol=ATOL)
    # an index names a top-level layer: -1 is `out`, whose sigmoid's logits come before it
    (result,) = inspect_json(path, "--from", "pool", "--to", "-1:logits")["results"]
    assert result["to"]["layer"] == "out:logits" and result["status"] == "ok"


@pytest.mark.parametrize(
    "model,ref,message",
    [
        ("head.keras", "x:logits", "'x' is a model input"),
        ("rnn.keras", "lstm:logits", "'lstm' is an LSTM, which has no fused activation"),
        ("head.keras", "nope:logits", "no layer named 'nope'"),
    ],
)
def test_logits_of_what_has_no_fused_activation_is_exit_2(files, model, ref, message):
    result = CliRunner().invoke(main, ["inspect", str(files / model), "--from", ref, "--to", "-1"])
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output
    with pytest.raises(LayerNotFound):
        inspect_model(str(files / model), ref, ["-1"])


def test_a_layer_named_like_logits_is_that_layer_with_its_activation(tmp_path):
    # Keras allows `:` in a name: `h:logits` is the layer so named, its ReLU included. With
    # an identity kernel and no bias it outputs relu(x), so d sum(h:logits) / d x is 1 where
    # x > 0 and 0 elsewhere (the value before the activation would give 1 everywhere)
    dense = keras.layers.Dense
    model = keras.Sequential(
        [keras.Input((2,), name="x"), dense(2, "relu", use_bias=False, name="h:logits"),
         dense(1, use_bias=False, name="head")]
    )  # fmt: skip
    model.get_layer("h:logits").set_weights([np.eye(2, dtype="float32")])
    model.get_layer("head").set_weights([np.array([[5.0], [6.0]], "float32")])
    path = tmp_path / "named.keras"
    model.save(path)
    x = np.array([[1.0, -2.0], [-0.5, 3.0], [2.0, 4.0]], "float32")
    np.save(tmp_path / "x.npy", x)
    report = inspect_model(str(path), "x", ["h:logits"], input_file=str(tmp_path / "x.npy"))
    (res,) = report.results
    assert res.target.layer == "h:logits"
    np.testing.assert_array_equal(res.array, (x > 0).astype("float32"))
    # `check` records every layer call of its probe by name: it runs to the end
    result = CliRunner().invoke(main, ["check", str(path), "--json"])
    assert result.exit_code == 0, result.output
    checks = json.loads(result.output)["files"][0]["checks"]
    assert all(c["passed"] for c in checks), [c["message"] for c in checks if not c["passed"]]
