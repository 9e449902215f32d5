"""Forms read without a Keras that writes them: legacy Keras 2 `.h5` files (TensorFlow 2.x
wrote them; built here with h5py), and every loss and activation name Keras and tf.nn accept,
checked against what Keras itself resolves each name to."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import tf

from layergrad.commands.check.check_files import CheckOptions, check_file

STATIC = CheckOptions(static_only=True)


def loss_item(path: Path):
    verdict = check_file(path, STATIC)
    return next(c for c in verdict.checks if c.name == "loss"), verdict


def _keras2_h5(path: Path, head: dict, loss: object) -> Path:
    """A legacy `.h5` as TensorFlow 2.x's Keras 2 wrote it (no module keys, `batch_input_shape`,
    `training_config` with the loss), built with h5py: no Keras 2 here to save one."""
    import json

    import h5py

    dense = {"class_name": "Dense", "config": {"name": "hidden", "trainable": True,
             "dtype": "float32", "units": 16, "activation": "relu", "use_bias": True,
             "batch_input_shape": [None, 6]}}  # fmt: skip
    config = {"class_name": "Sequential", "config": {"name": "sequential", "layers": [
        {"class_name": "InputLayer", "config": {"batch_input_shape": [None, 6],
                                                "dtype": "float32", "name": "x"}},
        dense, head]}}  # fmt: skip
    with h5py.File(path, "w") as h5:
        h5.attrs["keras_version"] = "2.15.0"
        h5.attrs["backend"] = "tensorflow"
        h5.attrs["model_config"] = json.dumps(config)
        h5.attrs["training_config"] = json.dumps({"loss": loss, "metrics": None})
        h5.create_group("model_weights").attrs["layer_names"] = []
    return path


@pytest.mark.parametrize(
    ("head", "loss", "bad"),
    [
        ({"class_name": "Dense", "config": {"name": "head", "units": 10,
                                           "activation": "softmax"}},
         {"class_name": "BinaryCrossentropy", "config": {"reduction": "auto", "from_logits": False,
                                                         "name": "binary_crossentropy"}}, True),
        ({"class_name": "Dense", "config": {"name": "head", "units": 10, "activation": "linear"}},
         {"class_name": "CategoricalCrossentropy", "config": {"from_logits": True}}, False),
        ({"class_name": "TFOpLambda", "config": {"name": "head", "function": "nn.softmax"}},
         "binary_crossentropy", True),
        ({"class_name": "Dense", "config": {"name": "head", "units": 10,
                                           "activation": "softmax"}},
         "kullback_leibler_divergence", False),
        ({"class_name": "Lambda", "config": {"name": "head", "function": "x"}},
         "binary_crossentropy", False),
    ],
)  # fmt: skip
def test_legacy_keras2_files_are_read(tmp_path, head, loss, bad):
    item, _ = loss_item(_keras2_h5(tmp_path / "old.h5", head, loss))
    assert (item.findings == ("loss_mismatch",)) == bad, item.message
    assert bad or item.findings == (), item.message


def test_every_loss_name_keras_accepts_is_read_as_keras_resolves_it():
    from keras.src.losses import ALL_OBJECTS_DICT

    from layergrad.model.loss_forms import read_loss

    skip = {"Loss", "LossFunctionWrapper"}
    for key, obj in ALL_OBJECTS_DICT.items():
        if key in skip:
            continue
        # what Keras itself resolves the name to: a function, or a class wrapping one
        expected = (obj().fn if isinstance(obj, type) else obj).__name__
        read = read_loss(key)
        assert read is not None and read.known and read.name == expected, (key, read, expected)


def test_every_activation_keras_or_tf_nn_names_is_read():
    from keras.src.activations import ALL_OBJECTS_DICT

    from layergrad.model.head_forms import activation_from

    for key, fn in ALL_OBJECTS_DICT.items():
        assert activation_from(key) != "unknown", key
        assert activation_from({"class_name": "function", "config": fn.__name__}) != "unknown"
    # how a tf.nn function is saved: its __name__ (softmax_v2) as a function object
    for fn, expected in ((tf.nn.softmax, "softmax"), (tf.nn.log_softmax, "log_softmax"),
                         (tf.nn.sigmoid, "sigmoid"), (tf.nn.relu, "relu"), (tf.nn.tanh, "tanh"),
                         (tf.nn.relu6, "relu6"), (tf.nn.softplus, "softplus")):  # fmt: skip
        saved = {"module": "builtins", "class_name": "function", "config": fn.__name__}
        assert activation_from(saved) == expected, fn.__name__
