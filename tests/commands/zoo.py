"""Healthy models, untrained, each compiled with the loss its head calls for.

A healthy model must get no finding from `check`, warnings included: these are the models the
verdict rules are calibrated on (see docs/verdicts.md). Every builder is seeded and small.
"""

from __future__ import annotations

from collections.abc import Callable

from helpers import keras

layers = keras.layers
SCCE = "sparse_categorical_crossentropy"


def _application(name: str, size: int, **kwargs: object) -> Callable[[], keras.Model]:
    def build() -> keras.Model:
        keras.utils.set_random_seed(0)
        model = getattr(keras.applications, name)(
            weights=None, input_shape=(size, size, 3), classes=10, **kwargs
        )
        model.compile(optimizer="adam", loss="categorical_crossentropy")
        return model

    return build


def rescaling_cnn() -> keras.Model:
    keras.utils.set_random_seed(0)
    x = keras.Input((32, 32, 3), name="image")
    h = layers.Rescaling(1 / 255)(x)
    for filters in (16, 32):
        h = layers.Conv2D(filters, 3, padding="same", activation="relu")(h)
        h = layers.MaxPooling2D()(h)
    h = layers.Flatten()(h)
    h = layers.Dense(32, activation="relu")(h)
    h = layers.Dropout(0.5)(h)
    model = keras.Model(x, layers.Dense(10, activation="softmax")(h))
    model.compile(optimizer="adam", loss=SCCE)
    return model


def lstm_text_classifier() -> keras.Model:
    keras.utils.set_random_seed(0)
    x = keras.Input((20,), dtype="int32", name="tokens")
    h = layers.Embedding(1000, 16, mask_zero=True)(x)
    h = layers.LSTM(16)(h)
    model = keras.Model(x, layers.Dense(1, activation="sigmoid")(h))
    model.compile(optimizer="adam", loss="binary_crossentropy")
    return model


def gru_regressor() -> keras.Model:
    keras.utils.set_random_seed(0)
    x = keras.Input((12, 4), name="series")
    h = layers.GRU(16, return_sequences=True)(x)
    h = layers.GRU(8)(h)
    model = keras.Model(x, layers.Dense(1)(h))
    model.compile(optimizer="adam", loss="mse")
    return model


def transformer_encoder() -> keras.Model:
    keras.utils.set_random_seed(0)
    x = keras.Input((16,), dtype="int32", name="tokens")
    h = layers.Embedding(500, 32)(x)
    attended = layers.MultiHeadAttention(num_heads=4, key_dim=8)(h, h)
    h = layers.LayerNormalization()(layers.Add()([h, attended]))
    ff = layers.Dense(64, activation="relu")(h)
    ff = layers.Dense(32)(ff)
    h = layers.LayerNormalization()(layers.Add()([h, ff]))
    h = layers.GlobalAveragePooling1D()(h)
    model = keras.Model(x, layers.Dense(4, activation="softmax")(h))
    model.compile(optimizer="adam", loss=SCCE)
    return model


def conv_autoencoder() -> keras.Model:
    keras.utils.set_random_seed(0)
    x = keras.Input((28, 28, 1), name="image")
    h = layers.Conv2D(16, 3, padding="same", activation="relu")(x)
    h = layers.MaxPooling2D()(h)
    h = layers.Conv2D(8, 3, padding="same", activation="relu")(h)
    h = layers.MaxPooling2D()(h)
    h = layers.Conv2DTranspose(8, 3, strides=2, padding="same", activation="relu")(h)
    h = layers.Conv2DTranspose(16, 3, strides=2, padding="same", activation="relu")(h)
    model = keras.Model(x, layers.Conv2D(1, 3, padding="same", activation="sigmoid")(h))
    model.compile(optimizer="adam", loss="binary_crossentropy")
    return model


def relu_mlp_12() -> keras.Model:
    keras.utils.set_random_seed(0)
    x = keras.Input((32,), name="x")
    h = x
    for _ in range(12):
        h = layers.Dense(64, activation="relu", kernel_initializer="he_normal")(h)
    model = keras.Model(x, layers.Dense(10, activation="softmax")(h))
    model.compile(optimizer="adam", loss=SCCE)
    return model


def sigmoid_mlp_3() -> keras.Model:
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((8,), name="x"),
            layers.Dense(12, activation="sigmoid"),
            layers.Dense(8, activation="sigmoid"),
            layers.Dense(1, activation="sigmoid"),
        ]
    )
    model.compile(optimizer="adam", loss="binary_crossentropy")
    return model


SMALL = {
    "rescaling_cnn": rescaling_cnn,
    "lstm_text_classifier": lstm_text_classifier,
    "gru_regressor": gru_regressor,
    "transformer_encoder": transformer_encoder,
    "conv_autoencoder": conv_autoencoder,
    "relu_mlp_12": relu_mlp_12,
    "sigmoid_mlp_3": sigmoid_mlp_3,
}

APPLICATIONS = {
    "MobileNetV2": _application("MobileNetV2", 96),
    "MobileNetV3Small": _application("MobileNetV3Small", 64),
    "ResNet50": _application("ResNet50", 32),
    "EfficientNetB0": _application("EfficientNetB0", 32),
    "DenseNet121": _application("DenseNet121", 32),
    "ConvNeXtTiny": _application("ConvNeXtTiny", 32),
    "VGG16": _application("VGG16", 32),
    "Xception": _application("Xception", 71),
}
