"""`fix` repairs a head whose labels do not fit, whatever form its loss was saved in (a name,
a function, a class instance with options, a dict per output) and whether its activation is
an option of the Dense layer or an `Activation` layer of its own.

Truth from outside `fix`: the code lines are written here by hand; the copy is loaded back
with plain Keras and its layers and compiled loss read from it.
"""

from __future__ import annotations

import numpy as np
import pytest

from layergrad.commands.fix.repair import FixOptions, fix_model
from layergrad.core.keras_backend import quiet_import

tf, keras = quiet_import()


def _ids(tmp_path, key: str = "y") -> str:
    """Class ids 0-4 (a rule of the inputs) for a head built for one yes/no answer."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 6)).astype("float32")
    y = np.argmax(x @ rng.normal(size=(6, 5)), axis=1).astype("int64")
    extra = {"y:price": rng.normal(size=(256, 1)).astype("float32")} if key != "y" else {}
    path = tmp_path / "ids.npz"
    np.savez(path, x=x, **{key: y}, **extra)
    return str(path)


def _binary_head(tmp_path, loss, separate: bool) -> str:
    keras.utils.set_random_seed(0)
    inp = keras.Input((6,), name="x")
    h = keras.layers.Dense(8, activation="relu", name="hidden")(inp)
    if separate:  # Dense(1) then Activation("sigmoid"): the units live on the Dense
        out = keras.layers.Activation("sigmoid", name="head_act")(
            keras.layers.Dense(1, name="head")(h)
        )
    else:
        out = keras.layers.Dense(1, activation="sigmoid", name="head")(h)
    model = keras.Model(inp, out)
    model.compile("adam", loss)
    path = str(tmp_path / "m.keras")
    model.save(path)
    return path


CASES = [
    (keras.losses.BinaryCrossentropy(label_smoothing=0.1), True,
     ['Activation("sigmoid") -> Activation("softmax") at "head_act"', 'Dense(1) -> Dense(5) at "head"',
      'loss=keras.losses.BinaryCrossentropy(label_smoothing=0.1) -> '
      'loss="sparse_categorical_crossentropy"']),
    (keras.losses.binary_crossentropy, True,
     ['Activation("sigmoid") -> Activation("softmax") at "head_act"', 'Dense(1) -> Dense(5) at "head"',
      'loss=keras.losses.binary_crossentropy -> loss="sparse_categorical_crossentropy"']),
    ("binary_crossentropy", False,
     ['Dense(1, activation="sigmoid") -> Dense(5, activation="softmax") at "head"',
      'loss="binary_crossentropy" -> loss="sparse_categorical_crossentropy"']),
]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize(("loss", "separate", "code"), CASES, ids=["object", "function", "name"])
def test_a_head_for_class_ids_is_rebuilt_in_every_loss_form(tmp_path, loss, separate, code):
    out = tmp_path / "o.keras"
    report = fix_model(_binary_head(tmp_path, loss, separate), _ids(tmp_path),
                       FixOptions(output=str(out), steps=300))  # fmt: skip
    (repair,) = report.repairs
    assert (repair.finding, repair.applied) == ("target_mismatch", True), repair.why
    assert list(repair.code) == code
    copy = keras.saving.load_model(out)
    assert copy.get_layer("head").units == 5
    last = copy.get_layer("head_act" if separate else "head")
    assert keras.activations.serialize(last.activation) == "softmax"
    assert copy.loss == "sparse_categorical_crossentropy"


def test_a_dict_of_losses_keyed_by_the_outputs_keys_is_edited_at_that_key(tmp_path):
    keras.utils.set_random_seed(0)
    inp = keras.Input((6,), name="x")
    h = keras.layers.Dense(8, activation="relu", name="hidden")(inp)
    kind = keras.layers.Dense(5, activation="softmax", name="kind_layer")(h)
    price = keras.layers.Dense(1, name="price_layer")(h)
    model = keras.Model(inp, {"kind": kind, "price": price})
    model.compile("adam", {"kind": keras.losses.BinaryCrossentropy(), "price": "mse"})
    path = str(tmp_path / "m.keras")
    model.save(path)
    out = tmp_path / "o.keras"
    report = fix_model(path, None, FixOptions(output=str(out)))
    (repair,) = report.repairs
    assert repair.code == (
        'loss={"kind": keras.losses.BinaryCrossentropy()} -> '
        'loss={"kind": "categorical_crossentropy"}',
    )
    copy = keras.saving.load_model(out)
    assert copy.loss == {"kind": "categorical_crossentropy", "price": "mse"}


@pytest.mark.slow
def test_one_unit_for_one_hot_rows_gets_a_unit_per_column(tmp_path):
    # a softmax over one unit under categorical cross-entropy, trained on one-hot rows of
    # width 3 (learnable from the first feature): the labels say 3 softmax units; the loss
    # already reads one-hot rows and stays. Before, the head's static repair (a sigmoid with
    # binary cross-entropy) was planned and its copy could not take the 3 columns
    keras.utils.set_random_seed(0)
    inp = keras.Input((4,), name="x")
    h = keras.layers.Dense(8, activation="relu", name="hidden")(inp)
    out = keras.layers.Softmax(name="head_act")(keras.layers.Dense(1, name="head")(h))
    model = keras.Model(inp, out)
    model.compile("adam", "categorical_crossentropy")
    path = tmp_path / "m.keras"
    model.save(path)
    x = np.random.default_rng(0).normal(size=(512, 4)).astype("float32")
    ids = np.digitize(x[:, 0], [-0.5, 0.5])
    data = tmp_path / "onehot.npz"
    np.savez(data, x=x, y=np.eye(3, dtype="float32")[ids])
    out_path = tmp_path / "o.keras"
    report = fix_model(str(path), str(data), FixOptions(output=str(out_path)))
    (repair,) = report.repairs
    assert (repair.finding, repair.applied) == ("target_mismatch", True), repair.why
    assert list(repair.code) == [
        'Softmax() -> Activation("softmax") at "head_act"',
        'Dense(1) -> Dense(3) at "head"',
    ]
    copy = keras.saving.load_model(out_path)
    assert copy.get_layer("head").units == 3
    assert copy.loss == "categorical_crossentropy"
    assert not {"constant_output", "loss_mismatch", "target_mismatch"} & set(report.after)
    assert repair.verdict == "verified", repair.why
