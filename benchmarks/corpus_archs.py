"""The healthy architectures of the verdict corpus: every kind people build, each tiny.

Each `Arch` builds its model from a `Spec` (corpus_forms.py), so a fault operator changes the
spec, not the graph; `data` draws realistic inputs (unscaled but legitimate tabular features,
0-255 pixels, token ids, strings) and `tags` say which operators make sense on it:

  mlp     the hidden non-linearity is only the activations the spec sets (Dense stacks):
          removing them leaves one linear map; the initialisation operators apply
  deep    a deep tanh stack: kernels drawn far too large explode the first layers' updates
  image   0-255 pixels through Rescaling(1/255): removing the Rescaling is the raw-pixel fault
  custom  uses corpus_layers.py (checked with it as an import)
  no_h5   the legacy .h5 format cannot hold it (subclassed models)
  no_data --data cannot be matched to its inputs (a subclassed model declares none)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import corpus_layers as custom
import keras
import numpy as np
from corpus_forms import Build, Head, Spec

layers = keras.layers
Inputs = dict[str, np.ndarray]

BINARY = Head("binary", 1, "sigmoid", "binary_crossentropy")
MULTILABEL = Head("multilabel", 4, "sigmoid", "binary_crossentropy")
CATEGORICAL = Head("categorical", 4, "softmax", "categorical_crossentropy")
SPARSE = Head("sparse", 5, "softmax", "sparse_categorical_crossentropy")
LOGITS_SPARSE = Head("sparse", 3, None, "sparse_categorical_crossentropy", from_logits=True)
LOGITS_BINARY = Head("binary", 1, None, "binary_crossentropy", from_logits=True)
MSE = Head("regression", 1, None, "mean_squared_error")
MAE = Head("regression", 1, None, "mean_absolute_error")
HUBER = Head("regression", 3, None, "huber")
VALUE = Head("regression", 1, None, "mean_squared_error")  # the second head of multi_output
VOCAB = ["good", "bad", "great", "awful", "fine", "movie", "plot", "actor", "boring", "fun"]
CITIES = ["paris", "lima", "oslo", "cairo", "quito"]


@dataclass(frozen=True)
class Arch:
    name: str
    build: Callable[[Build], keras.Model]
    head: Head
    data: Callable[[np.random.Generator, int], Inputs]
    tags: frozenset[str] = frozenset()
    others: dict[str, Head] = field(default_factory=dict)  # more outputs, never mutated
    forms: tuple[str, ...] = ("str", "fn", "obj")
    hidden: str = "relu"

    def spec(self, form: str) -> Spec:
        return Spec(self.head, form=form, hidden=self.hidden)


def tabular(width: int) -> Callable[[np.random.Generator, int], Inputs]:
    """Unscaled but legitimate features: ages, hours, ratings, counts (0 to ~100)."""

    def draw(rng: np.random.Generator, n: int) -> Inputs:
        low = np.array([18, 0, 1, 0, 0, 10, 0, 1] * 4)[:width]
        high = np.array([90, 60, 5, 12, 100, 40, 3, 10] * 4)[:width]
        return {"features": rng.uniform(low, high, (n, width)).astype("float32")}

    return draw


def _mlp(b: Build, width: int = 8, depth: int = 2, sequential: bool = False) -> keras.Model:
    if sequential and b.spec.form != "obj" and not b.spec.relu_before_softmax:
        model = keras.Sequential([keras.Input((width,), name="features")], name="sequential")
        for i in range(depth):
            model.add(
                layers.Dense(
                    16,
                    activation=b.act(b.spec.hidden),
                    kernel_initializer=b.spec.kernel_init,
                    name=f"h{i + 1}",
                )
            )
        head = b.spec.head
        model.add(layers.Dense(head.units, activation=b.act(head.activation), name="head"))
        if b.spec.dropout_after_head:
            model.add(layers.Dropout(0.3, name="head_dropout"))
        return model
    x = keras.Input((width,), name="features")
    h = x
    for i in range(depth):
        h = b.dense(h, 16, f"h{i + 1}")
    return keras.Model(x, b.head(h))


def _branches(b: Build) -> keras.Model:
    x = keras.Input((8,), name="features")
    left = b.dense(x, 16, "h1")
    right = b.dense(x, 8, "h2")
    h = layers.Concatenate(name="concat")([left, right])
    return keras.Model(x, b.head(b.dense(h, 8, "h3")))


def _residual(b: Build) -> keras.Model:
    x = keras.Input((8,), name="features")
    h = b.dense(x, 16, "h1")
    r = b.dense(h, 16, "h2")
    h = layers.LayerNormalization(name="norm")(layers.Add(name="add")([h, r]))
    return keras.Model(x, b.head(h))


def _subclassed(b: Build) -> keras.Model:
    head = b.spec.head
    model = custom.SubclassedClassifier(
        head.units, b.spec.hidden, head.activation, name="subclassed"
    )
    model(np.zeros((1, 8), "float32"))
    return model


def _nested(b: Build) -> keras.Model:
    inner = keras.Sequential(
        [
            keras.Input((8,)),
            layers.Dense(
                16,
                activation=b.act(b.spec.hidden),
                kernel_initializer=b.spec.kernel_init,
                name="h1",
            ),
            layers.Dense(
                16,
                activation=b.act(b.spec.hidden),
                kernel_initializer=b.spec.kernel_init,
                name="h2",
            ),
        ],
        name="encoder",
    )
    x = keras.Input((8,), name="features")
    return keras.Model(x, b.head(inner(x)))


def _custom_head(b: Build) -> keras.Model:
    x = keras.Input((8,), name="features")
    h = b.dense(x, 16, "h1")
    head = b.spec.head
    out = custom.ClassifierHead(8, head.units, b.act(head.activation), name="head")(h)
    if b.spec.dropout_after_head:
        out = layers.Dropout(0.3, name="head_dropout")(out)
    return keras.Model(x, out)


def ids(length: int, vocabulary: int, name: str = "tokens", dtype: str = "int32") -> Any:
    def draw(rng: np.random.Generator, n: int) -> Inputs:
        tokens = rng.integers(1, vocabulary, (n, length))
        tokens[:, length // 2 :] *= rng.random((n, 1)) < 0.5  # padded sequences
        return {name: tokens.astype(dtype)}

    return draw


def _custom_embedding(b: Build) -> keras.Model:
    x = keras.Input((12,), name="tokens")  # float32: the Keras text-classifier default
    h = custom.TokenEmbedding(200, 8, name="embed")(x)
    return keras.Model(x, b.head(b.dense(h, 16, "h1")))


def _text_float_ids(b: Build) -> keras.Model:
    x = keras.Input((12,), name="tokens")
    h = layers.Embedding(200, 8, name="embedding")(x)
    h = layers.GlobalAveragePooling1D(name="pool")(h)
    return keras.Model(x, b.head(b.dense(h, 16, "h1")))


def _multi_input(b: Build) -> keras.Model:
    numeric = keras.Input((6,), name="features")
    city = keras.Input((1,), dtype="int32", name="city")
    e = layers.Flatten(name="flat")(layers.Embedding(10, 4, name="city_embedding")(city))
    h = layers.Concatenate(name="concat")([b.dense(numeric, 16, "h1"), e])
    return keras.Model([numeric, city], b.head(b.dense(h, 8, "h2")))


def _multi_input_data(rng: np.random.Generator, n: int) -> Inputs:
    out = tabular(6)(rng, n)
    out["city"] = rng.integers(0, 10, (n, 1)).astype("int32")
    return out


def _multi_output(b: Build) -> keras.Model:
    x = keras.Input((8,), name="features")
    h = b.dense(b.dense(x, 16, "h1"), 16, "h2")
    value = layers.Dense(1, name="value")(h)
    return keras.Model(x, {"head": b.head(h), "value": value})


def _text_vectorization(b: Build) -> keras.Model:
    vectorize = layers.TextVectorization(
        max_tokens=20, output_sequence_length=6, vocabulary=VOCAB, name="vectorize"
    )
    x = keras.Input((1,), dtype="string", name="text")
    h = layers.Embedding(20, 8, name="embedding")(vectorize(x))
    h = layers.GlobalAveragePooling1D(name="pool")(h)
    return keras.Model(x, b.head(b.dense(h, 16, "h1")))


def _sentences(rng: np.random.Generator, n: int) -> Inputs:
    words = [" ".join(rng.choice(VOCAB, size=rng.integers(2, 8))) for _ in range(n)]
    return {"text": np.array(words, dtype=str).reshape(n, 1)}


def _string_lookup(b: Build) -> keras.Model:
    x = keras.Input((1,), dtype="string", name="city")
    numeric = keras.Input((4,), name="features")
    h = layers.StringLookup(vocabulary=CITIES, output_mode="one_hot", name="lookup")(x)
    h = layers.Concatenate(name="concat")([h, numeric])
    return keras.Model([x, numeric], b.head(b.dense(h, 16, "h1")))


def _cities(rng: np.random.Generator, n: int) -> Inputs:
    out = tabular(4)(rng, n)
    out["city"] = np.array(rng.choice([*CITIES, "rome"], size=n), dtype=str).reshape(n, 1)
    return out


def _lstm(b: Build) -> keras.Model:
    x = keras.Input((10,), dtype="int32", name="tokens")
    h = layers.Embedding(100, 8, mask_zero=True, name="embedding")(x)
    h = layers.LSTM(8, name="lstm")(h)
    return keras.Model(x, b.head(h))


def _gru(b: Build) -> keras.Model:
    x = keras.Input((10, 3), name="series")
    h = layers.GRU(8, name="gru")(x)
    return keras.Model(x, b.head(b.dense(h, 8, "h1")))


def _series(rng: np.random.Generator, n: int) -> Inputs:  # temperatures, humidity, wind
    base = rng.uniform([5, 40, 0], [30, 90, 20], (n, 1, 3))
    return {"series": (base + rng.normal(0, 1, (n, 10, 3))).astype("float32")}


def _transformer(b: Build) -> keras.Model:
    x = keras.Input((10,), dtype="int32", name="tokens")
    h = layers.Embedding(100, 8, name="embedding")(x)
    a = layers.MultiHeadAttention(num_heads=2, key_dim=4, name="attention")(h, h)
    h = layers.LayerNormalization(name="norm1")(layers.Add(name="add1")([h, a]))
    f = layers.Dense(8, name="ff2")(layers.Dense(16, activation="relu", name="ff1")(h))
    h = layers.LayerNormalization(name="norm2")(layers.Add(name="add2")([h, f]))
    return keras.Model(x, b.head(layers.GlobalAveragePooling1D(name="pool")(h)))


def _conv(b: Build, bn: bool) -> keras.Model:
    x = keras.Input((12, 12, 1), name="image")
    h = layers.Rescaling(1 / 255, name="rescale")(x) if b.spec.rescale else x
    h = layers.Conv2D(
        8, 3, padding="same", name="conv1", activation=None if bn else b.act(b.spec.hidden)
    )(h)
    if bn:
        h = layers.ReLU(name="relu1")(layers.BatchNormalization(name="bn1")(h))
    h = layers.MaxPooling2D(name="pool1")(h)
    h = layers.Conv2D(8, 3, padding="same", activation="relu", name="conv2")(h)
    if bn:
        h = layers.GlobalAveragePooling2D(name="gap")(h)
    else:
        h = layers.Flatten(name="flat")(layers.MaxPooling2D(name="pool2")(h))
    return keras.Model(x, b.head(h))


def _pixels(rng: np.random.Generator, n: int) -> Inputs:  # 0-255 grey images with a blob
    img = rng.integers(0, 60, (n, 12, 12, 1)).astype("float32")
    img[:, 3:9, 3:9] += rng.integers(100, 195, (n, 1, 1, 1))
    return {"image": img}


def _autoencoder(b: Build) -> keras.Model:
    x = keras.Input((16,), name="signal")
    h = b.dense(b.dense(x, 8, "h1"), 4, "h2")
    h = b.dense(h, 8, "h3")
    return keras.Model(x, b.head(h))


def _unit_signal(rng: np.random.Generator, n: int) -> Inputs:
    return {"signal": rng.random((n, 16)).astype("float32")}


def _conv1d(b: Build) -> keras.Model:
    x = keras.Input((16,), dtype="int32", name="tokens")
    h = layers.Embedding(100, 8, name="embedding")(x)
    h = layers.Conv1D(8, 3, activation="relu", name="conv")(h)
    h = layers.GlobalMaxPooling1D(name="pool")(h)
    return keras.Model(x, b.head(h))


def standardized(width: int) -> Callable[[np.random.Generator, int], Inputs]:
    """Features already scaled to z-scores (as a tanh stack's inputs should be)."""

    def draw(rng: np.random.Generator, n: int) -> Inputs:
        return {"features": rng.standard_normal((n, width)).astype("float32")}

    return draw


def _deep(b: Build) -> keras.Model:
    x = keras.Input((8,), name="features")
    h = x
    for i in range(8):
        h = b.dense(h, 16, f"h{i + 1}")
    return keras.Model(x, b.head(h))


AE = Head("reconstruction", 16, "sigmoid", "binary_crossentropy")
MLP, DEEP = frozenset({"mlp"}), frozenset({"mlp", "deep"})
OBJ = ("obj",)
ARCHS = [
    Arch("seq_mlp_binary", lambda b: _mlp(b, sequential=True), BINARY, tabular(8), MLP),
    Arch("seq_mlp_categorical", lambda b: _mlp(b, sequential=True), CATEGORICAL, tabular(8), MLP),
    Arch("mlp_sparse", _mlp, SPARSE, tabular(8), MLP),
    Arch("mlp_multilabel", _mlp, MULTILABEL, tabular(8), MLP),
    Arch("mlp_logits_sparse", _mlp, LOGITS_SPARSE, tabular(8), MLP, forms=OBJ),
    Arch("mlp_logits_binary", _mlp, LOGITS_BINARY, tabular(8), MLP, forms=OBJ),
    Arch("mlp_mse", lambda b: _mlp(b, sequential=True), MSE, tabular(8), MLP),
    Arch("mlp_mae", _mlp, MAE, tabular(8), MLP),
    Arch("mlp_huber", _mlp, HUBER, tabular(8), MLP),
    Arch("branches", _branches, SPARSE, tabular(8), MLP),
    Arch("residual", _residual, BINARY, tabular(8)),
    Arch(
        "subclassed",
        _subclassed,
        CATEGORICAL,
        tabular(8),
        frozenset({"custom", "no_h5", "no_data"}),
        forms=("str", "fn"),
    ),
    Arch("nested", _nested, CATEGORICAL, tabular(8)),
    Arch(
        "custom_head", _custom_head, BINARY, tabular(8), frozenset({"custom"}), forms=("str", "fn")
    ),
    Arch(
        "custom_embedding",
        _custom_embedding,
        BINARY,
        ids(12, 200, dtype="float32"),
        frozenset({"custom"}),
    ),
    Arch("text_float_ids", _text_float_ids, SPARSE, ids(12, 200, dtype="float32")),
    Arch("multi_input", _multi_input, BINARY, _multi_input_data),
    Arch("multi_output", _multi_output, SPARSE, tabular(8), others={"value": VALUE}),
    Arch("text_vectorization", _text_vectorization, CATEGORICAL, _sentences),
    Arch("string_lookup", _string_lookup, BINARY, _cities),
    Arch("lstm", _lstm, BINARY, ids(10, 100)),
    Arch("gru_regressor", _gru, MSE, _series),
    Arch("transformer", _transformer, SPARSE, ids(10, 100)),
    Arch("conv_bn", lambda b: _conv(b, True), SPARSE, _pixels, frozenset({"image", "bn"})),
    Arch("conv", lambda b: _conv(b, False), CATEGORICAL, _pixels, frozenset({"image"})),
    Arch("autoencoder", _autoencoder, AE, _unit_signal, MLP),
    Arch("conv1d_text", _conv1d, BINARY, ids(16, 100)),
    Arch("deep_tanh_regressor", _deep, MAE, standardized(8), DEEP, hidden="tanh"),
]
BY_NAME = {a.name: a for a in ARCHS}
