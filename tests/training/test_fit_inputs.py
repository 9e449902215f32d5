"""`fit` feeds every model the way `scan --data` does: several inputs by name (`.npz` keys)
or by position (a data function's tuples), a list built from one input, and several outputs
with `y:NAME` labels, whatever the structure of the outputs (a list, or a dict whose keys are
not the layers' names).

Truth from outside layergrad: each run is one batch of every sample with plain SGD, so the
first step's loss is the compiled loss at the file's weights and the second the loss after
one step `w - lr * g`, both worked out here with Keras ops and a GradientTape.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from helpers import keras, sample, tf

from layergrad.cli.app import main
from layergrad.commands.fit.train import FitOptions, fit_model

ROWS, LR = 48, 0.1
rng = np.random.default_rng(7)
XA = rng.standard_normal((ROWS, 4)).astype("float32")
XB = rng.standard_normal((ROWS, 4)).astype("float32")
XC = rng.standard_normal((ROWS, 3)).astype("float32")
Y_CLS = rng.standard_normal((ROWS, 2)).astype("float32")
Y_REG = rng.standard_normal((ROWS, 1)).astype("float32")


def mse(y, p):
    return tf.reduce_mean(tf.square(tf.cast(y, p.dtype) - p))


def hand_losses(path: str, x, y_of) -> tuple[float, float]:
    """The summed MSE of every output at the file's weights, and after one SGD step of LR.

    `x` is what the model is called with; `y_of(outputs)` pairs each output tensor with its
    labels."""
    model = keras.saving.load_model(path, compile=False, safe_mode=True)

    def loss() -> tf.Tensor:
        return tf.add_n([mse(y, p) for p, y in y_of(model(x, training=True))])

    with tf.GradientTape() as tape:
        first = loss()
    weights = model.trainable_variables
    for w, g in zip(weights, tape.gradient(first, weights), strict=True):
        w.assign(w - LR * g)
    return float(first), float(loss())


def options() -> FitOptions:
    return FitOptions(steps=2, batch_size=ROWS, loss="mse", optimizer="sgd", learning_rate=LR)


def two_heads(h):
    return keras.layers.Dense(2, name="cls")(h), keras.layers.Dense(1, name="reg")(h)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tmp_path_factory.mktemp("fit_inputs")


def test_cli_two_inputs_by_name_in_an_npz(folder):
    path = sample("two_input.keras")  # inputs [a (4,), b (3,)] as a list, one output
    model = keras.saving.load_model(path, compile=False, safe_mode=True)
    y = rng.standard_normal((ROWS, *model.outputs[0].shape[1:])).astype("float32")
    np.savez(folder / "ab.npz", a=XA, b=XC, y=y)
    result = CliRunner().invoke(main, [
        "fit", path, "--data", str(folder / "ab.npz"), "--loss", "mse", "--optimizer", "sgd",
        "--learning-rate", str(LR), "--steps", "2", "--batch-size", str(ROWS), "--json",
    ])  # fmt: skip
    assert result.exit_code == 0, result.output
    losses = json.loads(result.output)["losses"]
    want = hand_losses(path, [tf.constant(XA), tf.constant(XC)], lambda out: [(out, y)])
    np.testing.assert_allclose(losses, want, rtol=1e-5)


def test_api_same_shaped_inputs_by_name_and_a_dict_of_outputs_keyed_unlike_its_layers(folder):
    # tf.data would stack two same-shaped inputs into one tensor; a nested model takes both;
    # the outputs dict's keys (z, b) are not the heads' names (cls, reg), nor in their order
    keras.utils.set_random_seed(1)
    a, b = keras.Input((4,), name="a"), keras.Input((4,), name="b")
    e, f = keras.layers.Dense(3, name="e")(a), keras.layers.Dense(3, name="f")(b)
    siamese = keras.Model([a, b], keras.layers.Subtract()([e, f]), name="siamese")
    left, right = keras.Input((4,), name="left"), keras.Input((4,), name="right")
    cls, reg = two_heads(siamese([left, right]))
    keras.Model({"left": left, "right": right}, {"z": cls, "b": reg}).save(folder / "s.keras")
    np.savez(folder / "s.npz", left=XA, right=XB, **{"y:cls": Y_CLS, "y:reg": Y_REG})
    report = fit_model(folder / "s.keras", folder / "s.npz", options())
    x = {"left": tf.constant(XA), "right": tf.constant(XB)}
    want = hand_losses(str(folder / "s.keras"), x, lambda o: [(o["z"], Y_CLS), (o["b"], Y_REG)])
    np.testing.assert_allclose(report.losses, want, rtol=1e-5)


DATA_FUNCTIONS = f"""
import numpy as np
rng = np.random.default_rng(7)
XA, XB, XC = (rng.standard_normal((48, n)).astype("float32") for n in (4, 4, 3))
Y_CLS = rng.standard_normal((48, 2)).astype("float32")
Y_REG = rng.standard_normal((48, 1)).astype("float32")
def by_position():
    for i in range(0, {ROWS}, 16):
        yield (XA[i:i + 16], XB[i:i + 16]), (Y_CLS[i:i + 16], Y_REG[i:i + 16])
def by_output_name():
    for i in range(0, {ROWS}, 16):
        yield [XA[i:i + 16], XB[i:i + 16]], {{"cls": Y_CLS[i:i + 16], "reg": Y_REG[i:i + 16]}}
"""


@pytest.mark.parametrize("function", ["by_position", "by_output_name"])
def test_api_inputs_by_position_from_a_data_function_and_a_list_of_outputs(folder, function):
    keras.utils.set_random_seed(2)
    a, b = keras.Input((4,), name="a"), keras.Input((4,), name="b")
    h = keras.layers.Dense(5, activation="tanh", name="trunk")(keras.layers.Concatenate()([a, b]))
    keras.Model([a, b], list(two_heads(h))).save(folder / "p.keras")
    (folder / "pairs.py").write_text(DATA_FUNCTIONS)
    report = fit_model(folder / "p.keras", f"{folder / 'pairs.py'}:{function}", options())
    x = [tf.constant(XA), tf.constant(XB)]
    want = hand_losses(str(folder / "p.keras"), x, lambda o: [(o[0], Y_CLS), (o[1], Y_REG)])
    np.testing.assert_allclose(report.losses, want, rtol=1e-5)


def test_cli_a_model_built_on_a_list_of_one_input(folder):
    # keras.Model([a], ...): a one-element list, which tf.data would make a (1, rows, 4) tensor
    keras.utils.set_random_seed(3)
    a = keras.Input((4,), name="a")
    keras.Model([a], keras.layers.Dense(1, name="out")(a)).save(folder / "one.keras")
    np.savez(folder / "one.npz", a=XA, y=Y_REG)
    result = CliRunner().invoke(main, [
        "fit", str(folder / "one.keras"), "--data", str(folder / "one.npz"), "--loss", "mse",
        "--optimizer", "sgd", "--learning-rate", str(LR), "--steps", "2", "--batch-size",
        str(ROWS), "--json",
    ])  # fmt: skip
    assert result.exit_code == 0, result.output
    want = hand_losses(str(folder / "one.keras"), [tf.constant(XA)], lambda o: [(o, Y_REG)])
    np.testing.assert_allclose(json.loads(result.output)["losses"], want, rtol=1e-5)


def test_a_legacy_h5_file_trains_with_the_optimizer_it_records(folder):
    """A `.h5` file keeps its optimizer as `optimizer_config`: `fit` takes it from there (it
    asked for --optimizer before). SGD at LR in the file, no option: the losses are the hand's
    one-step SGD losses."""
    keras.utils.set_random_seed(3)
    x = keras.Input((4,), name="a")
    model = keras.Model(x, keras.layers.Dense(1, name="reg")(keras.layers.Dense(3, "tanh")(x)))
    model.compile(keras.optimizers.SGD(learning_rate=LR), "mse")
    model.save(folder / "legacy.h5")
    np.savez(folder / "legacy.npz", a=XA, y=Y_REG)
    report = fit_model(
        folder / "legacy.h5", folder / "legacy.npz", FitOptions(steps=2, batch_size=ROWS)
    )
    assert report.optimizer.lower().startswith("sgd") and report.learning_rate == pytest.approx(LR)
    want = hand_losses(str(folder / "legacy.h5"), tf.constant(XA), lambda out: [(out, Y_REG)])
    np.testing.assert_allclose(report.losses, want, rtol=1e-5)
