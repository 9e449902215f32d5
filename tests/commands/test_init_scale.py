"""Initialisation scaled far up: a tanh stack whose kernels are drawn from N(0, 4^2) saturates
(|tanh| > 0.99 for most units), and every saturated layer shrinks the gradient about as much,
so the update-ratio trend does not show it. `check` warns `exploding` at the first such layer,
naming the initialisation; the default initialisation, a ReLU net, and a file whose optimizer
records training steps (its kernels were learnt) get no such warning. Truth: how each model is
built, and the steps worked out by hand (64 samples in batches of 32, 3 epochs: 6 steps)."""

from __future__ import annotations

import re

import numpy as np
import pytest
from helpers import keras, tf

from layergrad.commands.check.check_files import CheckOptions, check_file
from layergrad.diagnose.saturation import saturated_init
from layergrad.files.file_info import training_steps

layers = keras.layers


def _tanh_stack(init, separate=False, depth=6):
    keras.utils.set_random_seed(0)
    x = keras.Input((8,), name="features")
    h = x
    for i in range(depth):
        if separate:  # Dense then an Activation layer, as some users write it
            h = layers.Dense(16, kernel_initializer=init, name=f"h{i + 1}")(h)
            h = layers.Activation("tanh", name=f"h{i + 1}_act")(h)
        else:
            h = layers.Dense(16, "tanh", kernel_initializer=init, name=f"h{i + 1}")(h)
    model = keras.Model(x, layers.Dense(1, name="head")(h))
    model.compile("adam", "mae")
    return model


def _trainable(path):
    verdict = check_file(path, CheckOptions())
    return next(c for c in verdict.checks if c.name == "trainable"), verdict


LARGE = keras.initializers.RandomNormal(stddev=4.0, seed=0)


@pytest.mark.parametrize(("separate", "suffix"), [(False, ".keras"), (True, ".h5")])
def test_kernels_scaled_far_up_warn_exploding_at_the_first_layer(tmp_path, separate, suffix):
    path = tmp_path / f"large{suffix}"
    _tanh_stack(LARGE, separate).save(path)
    item, verdict = _trainable(path)
    assert "exploding" in item.findings, item.message
    assert "exploding: h1 (initialisation)" in item.message, item.message
    assert ("'h1_act' after 'h1'" if separate else "outputs of 'h1'") in item.message
    assert verdict.passed  # a warning
    # the factor by hand: std 4 against the wider of Glorot sqrt(2 / (8 + 16)) = 0.289 and
    # He sqrt(2 / 8) = 0.5 for the 8 x 16 kernel: 8.0; the 128 drawn values' own spread is
    # within a few percent of 4
    factor = float(re.search(r"spread is ([0-9.]+) times", item.message).group(1))
    assert abs(factor - 4.0 / 0.5) < 1.0, factor


def test_the_default_initialisation_and_learnt_kernels_get_no_warning(tmp_path):
    healthy = tmp_path / "healthy.keras"
    _tanh_stack("glorot_uniform").save(healthy)
    assert "exploding" not in _trainable(healthy)[0].findings
    model = _tanh_stack(LARGE)
    rng = np.random.default_rng(0)
    model.fit(rng.standard_normal((64, 8)), rng.standard_normal((64, 1)), epochs=3, verbose=0)
    trained = tmp_path / "trained.keras"
    model.save(trained)
    model.save(tmp_path / "trained.h5")
    assert training_steps(trained) == 6 and training_steps(tmp_path / "trained.h5") == 6
    assert training_steps(healthy) == 0
    assert "exploding" not in _trainable(trained)[0].findings


def test_an_unscaled_input_is_not_blamed_on_the_initialisation():
    """He's initialisation on a fan-in of 2 is 5.7 times Glorot's, yet Keras's own: on inputs
    at unit scale its tanh units are not saturated (pre-activations of std ~1.4), and on
    inputs 30 times larger they are, because of the input (`input_range`'s matter)."""
    keras.utils.set_random_seed(0)
    x = keras.Input((2,))
    model = keras.Model(
        x, layers.Dense(1)(layers.Dense(64, "tanh", kernel_initializer="he_normal")(x))
    )
    rng = np.random.default_rng(0)
    unit = rng.standard_normal((64, 2)).astype("float32")
    assert saturated_init(model, [unit]) is None
    assert saturated_init(model, [unit * 30]) is None


def test_recurrent_layers_are_left_alone():
    """A SimpleRNN (tanh, its kernel inside its cell) after a Dense drawn with std 2: the
    recurrent layer's saturation is not the linear Dense's initialisation to judge."""
    keras.utils.set_random_seed(0)
    x = keras.Input((5, 4))
    big = keras.initializers.RandomNormal(stddev=2.0, seed=0)
    h = layers.SimpleRNN(8)(layers.Dense(16, kernel_initializer=big)(x))
    model = keras.Model(x, layers.Dense(1)(h))
    arrays = [np.random.default_rng(0).standard_normal((8, 5, 4)).astype("float32")]
    assert saturated_init(model, arrays) is None


def test_mixed_precision_training_counts_the_wrapped_optimizers_steps(tmp_path):
    """Under a LossScaleOptimizer the first counter of the file is the loss scale's, reset
    when the scale grows; the wrapped optimizer's counts the steps: 36 samples in batches of
    4 is 9 steps, of which a step whose scaled gradient overflows is skipped (at most the
    first few, while the scale falls from 32768)."""
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), layers.Dense(3)])
    inner = keras.optimizers.Adam()
    model.compile(keras.optimizers.LossScaleOptimizer(inner, dynamic_growth_steps=3), "mse")
    rng = np.random.default_rng(0)
    model.fit(rng.random((36, 4)), rng.random((36, 3)), batch_size=4, verbose=0)
    model.save(tmp_path / "mixed.keras")
    steps = training_steps(tmp_path / "mixed.keras")
    assert steps is not None and 5 <= steps <= 9, steps
    assert steps == int(inner.iterations.numpy())


def test_the_heads_and_the_initialisation_are_read_from_one_forward_pass(tmp_path):
    """A head the file does not describe (a Lambda) is judged on its outputs on the probe, and
    the tanh layer drawn with std 4 saturates on it: both are read from one recorded forward
    pass. Counted at the hidden layer, eagerly: the weight scan's pass (whose activations give
    the forward check too) and that one, 2 in all (3 when each rule ran its own)."""
    keras.utils.set_random_seed(0)
    x = keras.Input((8,), name="features")
    h = layers.Dense(16, "tanh", kernel_initializer=LARGE, name="hidden")(x)
    z = layers.Dense(3, name="logits")(h)
    model = keras.Model(x, layers.Lambda(lambda t: t / (1.0 + abs(t)), output_shape=(3,))(z))
    model.compile("adam", "mae")
    model.save(tmp_path / "lambda.keras")
    passes = []

    def opener(path, probe, info):
        from layergrad.commands.session import load

        opened = load(path, probe, unsafe=True, info=info)
        layer = opened[0].model.get_layer("hidden")
        inner = layer.call

        def counted(*args, **kwargs):
            passes.append(tf.executing_eagerly())
            return inner(*args, **kwargs)

        layer.call = counted  # kept under layergrad's own wrapping, which restores it after
        return opened

    verdict = check_file(tmp_path / "lambda.keras", CheckOptions(opener=opener, unsafe=True))
    checks = {c.name: c for c in verdict.checks}
    assert "on the probe its outputs take either sign" in checks["loss"].message
    assert "exploding: hidden (initialisation)" in checks["trainable"].message
    assert sum(passes) == 2, passes
