"""Weight layers with no non-linearity between them, read from the file: a deep linear
regression warns (`linear_stack`), a deep linear classifier fails (`loss_mismatch`), a
redundant linear layer inside a network warns; healthy architectures with linear layers by
design (projections before a norm, attention's Q/K/V, residual adds, Embedding -> Dense,
bottlenecks, depthwise -> pointwise, a linear regression head) get no finding. Each model is
saved as `.keras` and legacy `.h5`; what each should get is stated here by hand."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import keras

from layergrad.commands.check.check_files import CheckOptions, check_file

layers = keras.layers
STATIC = CheckOptions(static_only=True)


def _checked(model, tmp_path: Path, loss) -> list:
    if loss is not None:
        model.compile(optimizer="adam", loss=loss)
    items = []
    for name in ("m.keras", "m.h5"):
        model.save(tmp_path / name)
        verdict = check_file(tmp_path / name, STATIC)
        items.append((name, verdict, next(c for c in verdict.checks if c.name == "loss")))
    return items


def _seq(*stack, width=6):
    return keras.Sequential([keras.Input((width,), name="x"), *stack])


@pytest.mark.parametrize(
    "loss", ["mse", keras.losses.mean_squared_error, keras.losses.Huber(), "mae"]
)
def test_a_deep_linear_regression_warns_at_its_first_layer(tmp_path, loss):
    model = _seq(layers.Dense(32, name="d0"), layers.Dense(16, name="d1"),
                 layers.Dense(1, name="out"))  # fmt: skip
    for saved, verdict, item in _checked(model, tmp_path, loss):
        assert item.findings == ("linear_stack",) and item.warnings == ("linear_stack",), (
            saved,
            item.message,
        )
        assert verdict.passed, saved  # a warning: the file passes
        assert item.message.startswith("layer 'd0': the 3 layers with weights"), item.message


def test_a_linear_network_saved_without_a_loss_is_not_judged(tmp_path):
    # no compile: an inference-only or hand-built model; nothing says it is meant to train
    model = _seq(layers.Dense(32, name="d0"), layers.Dense(1, name="out"))
    for saved, _, item in _checked(model, tmp_path, None):
        assert item.findings == () and item.message == "no compiled loss to check", saved


def test_a_deep_linear_classifier_fails(tmp_path):
    model = _seq(layers.Dense(32, name="d0"), layers.Dense(16, name="d1"),
                 layers.Dense(4, activation="softmax", name="out"))  # fmt: skip
    for saved, verdict, item in _checked(model, tmp_path, keras.losses.categorical_crossentropy):
        assert item.findings == ("loss_mismatch",) and not verdict.passed, (saved, item.message)
        assert "one linear map" in item.message


@pytest.mark.parametrize(
    ("stack", "first"),
    [
        # Dense(32) without activation feeds Dense(4): 32 >= 4, one Dense(64 -> 4) does it
        ([layers.Dense(64, activation="relu", name="d0"), layers.Dense(32, name="d1"),
          layers.Dense(4, activation="softmax", name="out")], "d1"),
        ([layers.Dense(64, name="d0"), layers.Dense(32, activation="relu", name="d1"),
          layers.Dense(1, name="out")], "d0"),
        ([layers.Reshape((6, 1)), layers.Conv1D(8, 3, name="c0"),
          layers.Conv1D(8, 3, activation="relu", name="c1"), layers.GlobalMaxPooling1D(),
          layers.Dense(1, name="out")], "c0"),
        ([layers.Dense(64, activation="relu", name="d0"), layers.Dense(32, name="d1"),
          layers.Dropout(0.2), layers.BatchNormalization(), layers.Dense(2, name="out")], "d1"),
    ],
)  # fmt: skip
def test_a_redundant_linear_layer_warns(tmp_path, stack, first):
    loss = "categorical_crossentropy" if first == "d1" and len(stack) == 3 else "mse"
    for saved, verdict, item in _checked(_seq(*stack), tmp_path, loss):
        assert item.findings == ("linear_stack",) and verdict.passed, (saved, item.message)
        assert item.message.startswith(f"layer '{first}' has no activation"), item.message


def _transformer():
    x = keras.Input((10, 16), name="x")
    h = layers.Dense(32, name="project")(x)  # a linear projection before the block
    a = layers.MultiHeadAttention(4, 8, name="mha")(h, h)
    h = layers.LayerNormalization()(layers.Add()([h, a]))
    f = layers.Dense(64, activation="relu")(h)
    f = layers.Dense(32)(f)  # the FFN's linear output, into the residual add
    h = layers.LayerNormalization()(layers.Add()([h, f]))
    return keras.Model(x, layers.Dense(3, activation="softmax")(layers.GlobalAveragePooling1D()(h)))


def _qkv():
    x = keras.Input((10, 16), name="x")
    h = layers.Dense(32, name="embed")(x)  # read by three projections
    q, k, v = (layers.Dense(32, name=n)(h) for n in ("q", "k", "v"))
    a = layers.Attention()([q, v, k])
    return keras.Model(x, layers.Dense(3, activation="softmax")(layers.GlobalAveragePooling1D()(a)))


def _residual():
    x = keras.Input((6,), name="x")
    h = layers.Dense(32, activation="relu")(x)
    r = layers.Dense(32)(layers.Dense(32, activation="relu")(h))
    h = layers.Activation("relu")(layers.Add()([h, r]))
    return keras.Model(x, layers.Dense(1)(h))


def _autoencoder():
    return _seq(layers.Dense(64, activation="relu"), layers.Dense(8, name="code"),
                layers.Dense(64, activation="relu"), layers.Dense(32, activation="sigmoid"),
                width=32)  # fmt: skip


def _inverted_residuals():
    x = keras.Input((16, 16, 16), name="x")
    h = layers.ReLU(6.0)(layers.BatchNormalization()(layers.Conv2D(64, 1)(x)))
    h = layers.ReLU(6.0)(layers.BatchNormalization()(layers.DepthwiseConv2D(3, padding="same")(h)))
    h = layers.BatchNormalization()(layers.Conv2D(16, 1, name="project")(h))  # linear bottleneck
    h = layers.ReLU(6.0)(layers.BatchNormalization()(layers.Conv2D(96, 1, name="expand")(h)))
    h = layers.GlobalAveragePooling2D()(h)
    return keras.Model(x, layers.Dense(5, activation="softmax")(h))


def _separable():
    x = keras.Input((16, 16, 8), name="x")
    h = layers.DepthwiseConv2D(3, padding="same")(x)  # depthwise -> pointwise, no activation
    h = layers.Conv2D(32, 1, activation="relu")(h)
    return keras.Model(x, layers.Dense(5, activation="softmax")(layers.GlobalAveragePooling2D()(h)))


def _decoder():
    x = keras.Input((8,), name="code")
    h = layers.Reshape((2, 2, 2))(layers.Dense(8, activation="relu")(x))
    h = layers.Conv2DTranspose(16, 2, strides=2, name="upsample")(h)  # learned upsampling
    h = layers.Conv2D(16, 3, padding="same", activation="relu")(h)
    return keras.Model(x, layers.Conv2D(1, 1, activation="sigmoid")(h))


def _text_lstm():
    return keras.Sequential(
        [keras.Input((20,), dtype="int32"), layers.Embedding(500, 16),
         layers.Bidirectional(layers.LSTM(8, return_sequences=True)),
         layers.TimeDistributed(layers.Dense(8)), layers.GlobalMaxPooling1D(),
         layers.Dense(1, activation="sigmoid")]
    )  # fmt: skip


HEALTHY = {
    "learned upsampling": (_decoder, "binary_crossentropy"),
    "text LSTM": (_text_lstm, "binary_crossentropy"),
    "GRU regressor": (lambda: keras.Sequential([keras.Input((10, 3)), layers.GRU(16),
                                                layers.Dense(1)]), "mse"),
    "relu MLP, linear regression head": (
        lambda: _seq(layers.Dense(32, activation="relu"), layers.Dense(16, activation="relu"),
                     layers.Dense(1)), "mse"),
    "linear projection before LayerNorm": (
        lambda: _seq(layers.Dense(32), layers.LayerNormalization(),
                     layers.Dense(32, activation="gelu"), layers.Dense(1)), "mse"),
    "Dense, BatchNorm, Activation": (
        lambda: _seq(layers.Dense(32), layers.BatchNormalization(), layers.Activation("relu"),
                     layers.Dense(3, activation="softmax")), "categorical_crossentropy"),
    "Embedding then Dense": (
        lambda: keras.Sequential([keras.Input((12,), dtype="int32"), layers.Embedding(100, 16),
                                  layers.Dense(16, activation="relu"),
                                  layers.GlobalAveragePooling1D(),
                                  layers.Dense(1, activation="sigmoid")]),
        "binary_crossentropy"),
    "Embedding, pooling, logistic regression": (
        lambda: keras.Sequential([keras.Input((12,), dtype="int32"), layers.Embedding(100, 16),
                                  layers.GlobalAveragePooling1D(),
                                  layers.Dense(1, activation="sigmoid")]),
        "binary_crossentropy"),
    "transformer block": (_transformer, "sparse_categorical_crossentropy"),
    "Q/K/V projections": (_qkv, "sparse_categorical_crossentropy"),
    "residual block": (_residual, "mse"),
    "bottleneck autoencoder": (_autoencoder, "binary_crossentropy"),
    "inverted residuals": (_inverted_residuals, "sparse_categorical_crossentropy"),
    "depthwise then pointwise": (_separable, "sparse_categorical_crossentropy"),
    "one linear layer": (lambda: _seq(layers.Dense(1)), "mse"),
    "logistic regression": (lambda: _seq(layers.Dense(1, activation="sigmoid")),
                            "binary_crossentropy"),
}  # fmt: skip


@pytest.mark.parametrize("name", list(HEALTHY))
def test_healthy_architectures_get_no_finding(tmp_path, name):
    build, loss = HEALTHY[name]
    for saved, verdict, item in _checked(build(), tmp_path, loss):
        assert item.findings == () and verdict.passed, (name, saved, item.message)
