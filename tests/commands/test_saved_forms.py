"""The `loss` check reads every form Keras saves: losses as strings, aliases, function objects,
class instances with arguments, one per output, custom ones (said unknown, never failing);
activations as strings, tf.nn functions, layer instances, activation layers, operations; heads
the config cannot show judged on their outputs; linear stacks. Each model is built the way
users build it and checked as `.keras`, legacy `.h5`, and loaded and saved again both ways.

What each model should get is stated here by hand from how it was built (which head, which
loss), never read from layergrad."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from helpers import keras, tf

from layergrad.commands.check.check_files import CheckOptions, check_file

HEADS = str(Path(__file__).with_name("head_layers.py"))
if "head_layers" not in sys.modules:  # the module layergrad imports with --import HEADS
    _spec = importlib.util.spec_from_file_location("head_layers", HEADS)
    assert _spec is not None and _spec.loader is not None
    sys.modules["head_layers"] = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(sys.modules["head_layers"])
head_layers = sys.modules["head_layers"]

layers = keras.layers
STATIC = CheckOptions(static_only=True, imports=(HEADS,))
FULL = CheckOptions(imports=(HEADS,))


def saved_forms(model, tmp_path: Path) -> dict[str, Path]:
    """`model` saved as users save it: `.keras`, legacy `.h5`, and each loaded and saved again
    in the other format (when Keras itself can load it: it cannot compile an `.h5` whose loss
    is the alias "bce")."""
    out = {"keras": tmp_path / "m.keras", "h5": tmp_path / "m.h5"}
    model.save(out["keras"])
    model.save(out["h5"])
    for source, target in (("keras", "again.h5"), ("h5", "again.keras")):
        try:
            again = keras.saving.load_model(out[source], safe_mode=True)
        except (ValueError, TypeError):  # Keras cannot load tf.nn.softmax either
            continue
        out[f"{source} -> {Path(target).suffix[1:]}"] = tmp_path / target
        again.save(tmp_path / target)
    return out


def loss_item(path: Path, options: CheckOptions = STATIC):
    verdict = check_file(path, options)
    return next(c for c in verdict.checks if c.name == "loss"), verdict


def loss_items(model, loss, tmp_path: Path):
    """`model` compiled with `loss`, in every saved form: (form, its loss check, its verdict)."""
    model.compile(optimizer="adam", loss=loss)
    for saved, path in saved_forms(model, tmp_path).items():
        yield saved, *loss_item(path)


def mlp(head, width: int = 6):
    return keras.Sequential(
        [keras.Input((width,), name="x"), layers.Dense(16, activation="relu", name="hidden"),
         *head]
    )  # fmt: skip


SOFTMAX10 = [layers.Dense(10, activation="softmax", name="head")]
SIGMOID1 = [layers.Dense(1, activation="sigmoid", name="head")]
LINEAR10 = [layers.Dense(10, name="head")]
RELU10 = [layers.Dense(10, activation="relu", name="head")]


def _losses():
    return {
        "string": "binary_crossentropy",
        "alias": "bce",
        "function": keras.losses.binary_crossentropy,
        "tf.keras function": tf.keras.losses.binary_crossentropy,
        "instance": keras.losses.BinaryCrossentropy(label_smoothing=0.1),
    }


@pytest.mark.parametrize("form", list(_losses()))
def test_binary_crossentropy_on_a_softmax_fails_in_every_form(tmp_path, form):
    model = mlp([layers.Dense(10, activation="softmax", name="head")])
    for saved, item, _ in loss_items(model, _losses()[form], tmp_path):
        assert item.findings == ("loss_mismatch",), (form, saved, item.message)
        assert "binary_crossentropy on output 'head' (10 units, softmax)" in item.message


@pytest.mark.parametrize(
    ("head", "loss", "bad"),
    [
        # a ReLU head and a linear head under cross-entropy that reads probabilities
        (RELU10, keras.losses.categorical_crossentropy, True),
        (LINEAR10, keras.losses.CategoricalCrossentropy(label_smoothing=0.1), True),
        (LINEAR10, keras.losses.CategoricalCrossentropy(from_logits=True), False),
        (SOFTMAX10, keras.losses.CategoricalCrossentropy(from_logits=True), True),
        (SOFTMAX10, keras.losses.SparseCategoricalCrossentropy(), False),
        (SOFTMAX10, "sparse_categorical_crossentropy", False),
        (SIGMOID1, keras.losses.BinaryCrossentropy(from_logits=True), True),
        (SIGMOID1, keras.losses.BinaryFocalCrossentropy(gamma=2.0), False),
        (SIGMOID1, keras.losses.sparse_categorical_crossentropy, True),
        (SOFTMAX10, keras.losses.mean_squared_error, True),
        (SOFTMAX10, "mse", True),
        ([layers.Dense(1, name="head")], keras.losses.Huber(delta=2.0), False),
        ([layers.Dense(1, name="head")], "mae", False),
        ([layers.Dense(1, name="head")], keras.losses.Poisson(), True),
        ([layers.Dense(1, activation="exponential", name="head")], "poisson", False),
        (LINEAR10, keras.losses.KLDivergence(), True),
        (SOFTMAX10, "kld", False),
    ],
)  # fmt: skip
def test_loss_and_head_pairings_in_every_saved_form(tmp_path, head, loss, bad):
    model = mlp([keras.layers.deserialize(keras.layers.serialize(head[0]))])
    for saved, item, _ in loss_items(model, loss, tmp_path):
        assert (item.findings == ("loss_mismatch",)) == bad, (saved, item.message)
        assert bad or item.findings == (), (saved, item.message)


def _two_outputs():
    x = keras.Input((6,), name="x")
    h = layers.Dense(16, activation="relu", name="hidden")(x)
    cls = layers.Dense(4, activation="softmax", name="cls")(h)
    reg = layers.Dense(1, name="reg")(h)
    return keras.Model(x, {"cls": cls, "reg": reg})


@pytest.mark.parametrize(
    "loss",
    [
        {"cls": keras.losses.binary_crossentropy, "reg": "mse"},
        {"reg": keras.losses.MeanSquaredError(), "cls": "binary_crossentropy"},
    ],
)
def test_a_loss_per_output_names_the_output_it_does_not_fit(tmp_path, loss):
    model = _two_outputs()
    for saved, item, _ in loss_items(model, loss, tmp_path):
        assert item.findings == ("loss_mismatch",), (saved, item.message)
        assert "output 'cls'" in item.message and "output 'reg'" not in item.message


def test_a_list_of_losses_is_read_in_output_order(tmp_path):
    x = keras.Input((6,), name="x")
    h = layers.Dense(16, activation="relu", name="hidden")(x)
    model = keras.Model(
        x, [layers.Dense(4, activation="softmax", name="cls")(h), layers.Dense(1, name="reg")(h)]
    )
    losses = [keras.losses.SparseCategoricalCrossentropy(), keras.losses.mean_absolute_error]
    for saved, item, _ in loss_items(model, losses, tmp_path):
        assert item.findings == (), (saved, item.message)
        assert "fits every output" in item.message


@pytest.mark.parametrize(
    ("loss", "name"),
    [
        (head_layers.weighted_mse, "head_layers>weighted_mse"),
        (head_layers.FocalLoss(gamma=3.0), "head_layers>FocalLoss"),
    ],
)
def test_a_custom_loss_is_said_unknown_and_never_fails(tmp_path, loss, name):
    # a softmax head: had the rules guessed from the name, nothing here says it is wrong
    model = mlp(SOFTMAX10)
    for saved, item, verdict in loss_items(model, loss, tmp_path):
        assert item.findings == () and verdict.passed, (saved, item.message)
        assert f"unknown loss `{name}`, loss rules skipped" in item.message, (saved, item.message)


def test_an_unregistered_function_loss_is_said_unknown(tmp_path):
    def my_loss(y_true, y_pred):
        return keras.ops.mean(keras.ops.abs(y_true - y_pred), axis=-1)

    model = mlp(SOFTMAX10)
    model.compile(optimizer="adam", loss=my_loss)
    model.save(tmp_path / "m.keras")
    model.save(tmp_path / "m.h5")
    for path in (tmp_path / "m.keras", tmp_path / "m.h5"):
        item, _ = loss_item(path)
        assert item.findings == () and "unknown loss `my_loss`" in item.message, item.message


@pytest.mark.parametrize(
    ("head", "loss", "bad", "says"),
    [
        # tf.nn.softmax is saved as the function object `softmax_v2`
        ([layers.Dense(10, activation=tf.nn.softmax, name="head")], "binary_crossentropy",
         True, "softmax"),
        ([layers.Dense(10, activation=tf.nn.softmax, name="head")],
         "sparse_categorical_crossentropy", False, ""),
        ([layers.Dense(10, activation=keras.activations.sigmoid, name="head")],
         "binary_crossentropy", False, ""),
        # an activation given as a layer instance
        ([layers.Dense(10, activation=layers.ReLU(), name="head")],
         "categorical_crossentropy", True, "relu"),
        ([layers.Dense(10, name="logits"), layers.LeakyReLU(name="head")],
         "binary_crossentropy", True, "leaky_relu"),
        ([layers.Dense(10, name="logits"), layers.Activation(tf.nn.softmax, name="head")],
         "categorical_crossentropy", False, ""),
        ([layers.Dense(10, name="logits"), layers.Softmax(name="head")],
         keras.losses.CategoricalCrossentropy(from_logits=True), True, "softmax"),
        ([layers.Dense(10, activation="relu", name="logits"), layers.Softmax(name="head")],
         "categorical_crossentropy", True, "applies ReLU to the logits"),
        ([layers.Dense(10, name="logits"), layers.Dropout(0.2, name="drop")],
         keras.losses.CategoricalCrossentropy(from_logits=True), True, "Dropout 'drop'"),
    ],
)  # fmt: skip
def test_activations_in_every_form(tmp_path, head, loss, bad, says):
    model = mlp(head)
    for saved, item, _ in loss_items(model, loss, tmp_path):
        assert (item.findings == ("loss_mismatch",)) == bad, (saved, item.message)
        assert says in item.message, (saved, item.message)


def test_an_operation_head_is_read(tmp_path):
    x = keras.Input((6,), name="x")
    h = layers.Dense(16, activation="relu", name="hidden")(x)
    out = keras.ops.softmax(layers.Dense(5, name="logits")(h))
    model = keras.Model(x, out)
    for saved, item, _ in loss_items(model, keras.losses.binary_crossentropy, tmp_path):
        assert item.findings == ("loss_mismatch",) and "5 units, softmax" in item.message, (
            saved,
            item.message,
        )


def _custom_head(final, units):
    x = keras.Input((6,), name="x")
    h = layers.Dense(16, activation="relu", name="hidden")(x)
    return keras.Model(x, head_layers.ClassifierHead(units, final, name="classifier")(h))


@pytest.mark.parametrize(
    ("final", "units", "loss", "bad", "seen"),
    [
        # the Dense inside that returns the values says its activation: read from it
        ("sigmoid", 1, "binary_crossentropy", False, "applies sigmoid"),
        ("softmax", 4, "categorical_crossentropy", False, "applies softmax"),
        ("softmax", 4, keras.losses.binary_crossentropy, True, "applies softmax"),
        (None, 4, "categorical_crossentropy", True, "applies linear"),
        (None, 4, keras.losses.CategoricalCrossentropy(from_logits=True), False, "applies linear"),
    ],
)
def test_a_custom_head_is_judged_on_its_outputs_never_assumed_linear(
    tmp_path, final, units, loss, bad, seen
):
    model = _custom_head(final, units)
    model.compile(optimizer="adam", loss=loss)
    paths = saved_forms(model, tmp_path)
    for saved in ("keras", "h5 -> keras", "keras -> h5"):
        item, verdict = loss_item(paths[saved], FULL)
        assert (item.findings == ("loss_mismatch",)) == bad, (saved, item.message)
        assert seen in item.message and "custom layer ClassifierHead" in item.message, (
            saved,
            item.message,
        )
        assert [c.name for c in verdict.checks].count("loss") == 1
    # the file alone cannot decide: said, never failed
    item, verdict = loss_item(paths["keras"], STATIC)
    assert item.findings == () and verdict.passed
    assert "does not show its activation in the file; not judged" in item.message


def test_a_lambda_head_is_judged_on_its_outputs(tmp_path):
    # a softsign squashed into (0, 1): probabilities no activation name says
    x = keras.Input((6,), name="x")
    h = layers.Dense(16, activation="relu", name="hidden")(x)
    out = layers.Lambda(lambda t: 0.5 + 0.5 * t / (1 + abs(t)), output_shape=(1,), name="squash")(
        layers.Dense(1, name="logit")(h)
    )
    model = keras.Model(x, out)
    model.compile(optimizer="adam", loss="binary_crossentropy")
    model.save(tmp_path / "m.keras")
    item, verdict = loss_item(tmp_path / "m.keras", CheckOptions(unsafe=True))
    assert item.findings == () and verdict.passed, item.message
    assert "like a sigmoid" in item.message


def test_a_nested_model_head_is_read_through(tmp_path):
    inner = keras.Sequential(
        [keras.Input((16,)), layers.Dense(8, activation="relu"),
         layers.Dense(3, activation="softmax", name="probs")], name="head_model"
    )  # fmt: skip
    x = keras.Input((6,), name="x")
    model = keras.Model(x, inner(layers.Dense(16, activation="relu", name="hidden")(x)))
    for saved, item, _ in loss_items(model, keras.losses.binary_crossentropy, tmp_path):
        assert item.findings == ("loss_mismatch",) and "softmax" in item.message, (
            saved,
            item.message,
        )


def test_outputs_in_the_unit_range_fail_no_rule(tmp_path):
    # logits that happen to lie in [0, 1] on the probe: with from_logits=True this is healthy;
    # values in [0, 1] do not prove a sigmoid, so no rule may fail on them
    x = keras.Input((6,), name="x")
    h = layers.Dense(16, activation="relu", name="hidden")(x)
    model = keras.Model(x, head_layers.SmallLogits(3, name="logits")(h))
    model.compile(optimizer="adam", loss=keras.losses.CategoricalCrossentropy(from_logits=True))
    model.save(tmp_path / "m.keras")
    item, verdict = loss_item(tmp_path / "m.keras", FULL)
    assert item.findings == () and verdict.passed, item.message
    assert "lie in [0, 1]" in item.message


def test_a_custom_head_is_judged_with_data_too(tmp_path):
    import numpy as np

    from layergrad.core.probe_options import ProbeOptions

    model = _custom_head("softmax", 4)
    model.compile(optimizer="adam", loss=keras.losses.binary_crossentropy)
    model.save(tmp_path / "m.keras")
    rng = np.random.default_rng(0)
    data = tmp_path / "d.npz"
    np.savez(data, x=rng.standard_normal((16, 6)).astype("float32"),
             y=np.eye(4, dtype="float32")[rng.integers(0, 4, 16)])  # fmt: skip
    options = CheckOptions(imports=(HEADS,), probe=ProbeOptions(data=str(data)))
    item, verdict = loss_item(tmp_path / "m.keras", options)
    assert item.findings == ("loss_mismatch",) and "applies softmax" in item.message, item.message
    assert [c.name for c in verdict.checks].count("loss") == 1


def test_a_custom_loss_keras_cannot_build_never_fails_the_file(tmp_path):
    # a registered loss class whose module is not at hand: the gradient checks fall back to
    # the outputs' projection and the loss check says so
    import json

    import h5py

    model = mlp(SOFTMAX10)
    model.compile(optimizer="adam", loss="categorical_crossentropy")
    model.save(tmp_path / "m.h5")
    with h5py.File(tmp_path / "m.h5", "r+") as h5:
        config = json.loads(h5.attrs["training_config"])
        config["loss"] = {"class_name": "elsewhere>MissingLoss", "config": {"name": "missing"}}
        h5.attrs["training_config"] = json.dumps(config)
    item, verdict = loss_item(tmp_path / "m.h5", FULL)
    assert verdict.passed, [(c.name, c.message) for c in verdict.checks]
    assert "unknown loss `elsewhere>MissingLoss`, loss rules skipped" in item.message
    assert "Keras cannot build the compiled loss" in item.message
