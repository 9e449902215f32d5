"""Raw 0-255 pixels into a ReLU convolution with no Rescaling: a ReLU does not saturate, so no
activation is pinned, yet the kernels see inputs ~255 times the scale their initialisation is
for. `check --data` warns `input_range` at the first convolution; a model that rescales, one
whose convolution feeds a BatchNormalization, and tabular data of legitimate whole numbers
(ages, counts) get no warning. The truth is how the data and the models are built."""

from __future__ import annotations

import numpy as np
from helpers import keras

from layergrad.commands.check.check_files import CheckOptions, check_file
from layergrad.core.probe_options import ProbeOptions
from layergrad.diagnose.forward_findings import _pixels

layers = keras.layers


def _images(rng, n=32, channels=1):
    img = rng.integers(0, 60, (n, 10, 10, channels)).astype("float32")
    img[:, 2:8, 2:8] += rng.integers(100, 195, (n, 1, 1, channels))  # a bright blob
    return img


def _conv(first=None, bn=False, channels=1):
    keras.utils.set_random_seed(0)
    x = keras.Input((10, 10, channels), name="image")
    h = first(x) if first is not None else x
    h = layers.Conv2D(6, 3, activation=None if bn else "relu", name="conv1")(h)
    if bn:
        h = layers.ReLU(name="relu1")(layers.BatchNormalization(name="bn1")(h))
    h = layers.Flatten(name="flat")(layers.MaxPooling2D(name="pool")(h))
    model = keras.Model(x, layers.Dense(3, activation="softmax", name="head")(h))
    model.compile("adam", "sparse_categorical_crossentropy")
    return model


def _check(tmp_path, model, x, y, name):
    path = tmp_path / f"{name}.keras"
    model.save(path)
    np.savez(tmp_path / f"{name}.npz", x=x, y=y)
    options = CheckOptions(probe=ProbeOptions(data=str(tmp_path / f"{name}.npz")))
    verdict = check_file(path, options)
    return {f for c in verdict.checks for f in c.findings}, verdict


def test_raw_pixels_into_a_convolution_warn_at_it(tmp_path, channels=3):
    rng = np.random.default_rng(0)
    x, y = _images(rng, channels=channels), rng.integers(0, 3, 32)
    found, verdict = _check(tmp_path, _conv(channels=channels), x, y, "raw")
    assert "input_range" in found, found  # (pixels this large may saturate the softmax too)
    forward = next(c for c in verdict.checks if c.name == "forward")
    assert "'conv1'" in forward.message and "Rescaling(1 / 255)" in forward.message


def test_the_same_model_with_rescaling_or_batchnorm_is_clean(tmp_path):
    rng = np.random.default_rng(0)
    x, y = _images(rng), rng.integers(0, 3, 32)
    rescaled = _conv(first=layers.Rescaling(1 / 255, name="rescale"))
    assert _check(tmp_path, rescaled, x, y, "rescaled")[0] == set()
    # (an untrained BatchNormalization has not learnt the pixels' scale: other findings may
    # say so, but the convolution's input is not the fault)
    assert "input_range" not in _check(tmp_path, _conv(bn=True), x, y, "bn")[0]


def test_tabular_whole_numbers_are_not_pixels():
    rng = np.random.default_rng(0)
    ages = rng.integers(18, 90, (32, 6)).astype("float32")  # rank 2: features, not images
    assert not _pixels(ages)
    assert not _pixels(ages.reshape(32, 2, 3, 1) / 100)  # fractions
    assert not _pixels(rng.integers(0, 2, (4, 8, 8, 1)).astype("float32"))  # a 0/1 mask
    assert not _pixels(rng.integers(0, 255, (4, 8, 8, 7)).astype("float32"))  # 7 channels
    assert _pixels(rng.integers(0, 256, (4, 3, 8, 8)).astype("float32"))  # channels first


def test_a_model_trained_on_raw_pixels_gets_no_warning(tmp_path):
    """Kernels learnt on 0-255 pixels are scaled for them: a file whose optimizer records
    training steps (32 samples in batches of 16, 2 epochs: 4 steps) is not warned."""
    rng = np.random.default_rng(0)
    x, y = _images(rng), rng.integers(0, 3, 32)
    model = _conv()
    model.fit(x, y, batch_size=16, epochs=2, verbose=0)
    found, _ = _check(tmp_path, model, x, y, "trained")
    assert "input_range" not in found, found


def _normalised_first(first, activation="tanh", bypass=False):
    """0-255 images through `first` (a normalising layer, or None) into a convolution with
    `activation`; with `bypass` a second convolution also reads the raw image."""
    keras.utils.set_random_seed(0)
    x = keras.Input((10, 10, 3), name="image")
    h = layers.Conv2D(6, 3, activation=activation, name="conv1")(first(x) if first else x)
    h = layers.GlobalAveragePooling2D(name="pool")(h)
    if bypass:
        raw = layers.Conv2D(6, 3, activation=activation, name="conv_raw")(x)
        h = layers.Concatenate(name="both")([h, layers.GlobalAveragePooling2D(name="p2")(raw)])
    model = keras.Model(x, layers.Dense(3, activation="softmax", name="head")(h))
    model.compile("adam", "sparse_categorical_crossentropy")
    return model


def _adapted(x):
    norm = layers.Normalization(name="norm")
    norm.adapt(x)
    return norm


def test_a_normalising_first_layer_scales_the_pixels_it_is_given(tmp_path):
    """A `BatchNormalization` first scales the pixels once its moving statistics are learnt
    (untrained, they are 0 and 1 and the pixels pass unscaled: 96% of the tanh units of the
    convolution are pinned); `LayerNormalization` scales each pixel, an adapted `Normalization`
    and `Rescaling` by their factors. None is an unscaled input."""
    rng = np.random.default_rng(0)
    x, y = _images(rng, channels=3), rng.integers(0, 3, 32)
    firsts = {
        "bn": lambda: layers.BatchNormalization(name="norm"),
        "ln": lambda: layers.LayerNormalization(name="norm"),
        "adapted": lambda: _adapted(x),
        "rescale": lambda: layers.Rescaling(1 / 255, name="norm"),
    }
    for name, make in firsts.items():
        for activation in ("tanh", "relu"):
            found, _ = _check(tmp_path, _normalised_first(make(), activation), x, y, name)
            assert "input_range" not in found, (name, activation, found)


def test_raw_pixels_that_also_bypass_the_normalising_layer_still_warn(tmp_path):
    """The near misses: with no normalising layer, or with a second convolution that reads
    the raw image beside the one behind a `BatchNormalization`, the pixels reach a convolution
    unscaled: `input_range`, at that convolution."""
    rng = np.random.default_rng(0)
    x, y = _images(rng, channels=3), rng.integers(0, 3, 32)
    for activation in ("tanh", "relu"):
        found, verdict = _check(tmp_path, _normalised_first(None, activation), x, y, "plain")
        assert "input_range" in found, (activation, found)
        bn = layers.BatchNormalization(name="norm")
        found, verdict = _check(
            tmp_path, _normalised_first(bn, activation, bypass=True), x, y, "bypass"
        )
        assert "input_range" in found, (activation, found)
        forward = next(c for c in verdict.checks if c.name == "forward")
        assert "'conv_raw'" in forward.message, forward.message
