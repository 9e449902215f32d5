"""A corpus of buggy programs and their human fixes, in the shape of the Stack Overflow
questions and public fault benchmarks they come from.

Each `Program` holds a model-building function (`build(fixed)`: the buggy model, or with
`fixed=True` the one the accepted answer gives), compiled with the buggy settings or the human
fix's, and its own small seeded data set (`data(fixed)`: the bug may be in the data, as in
`targets_255`). The classes (`kind`) are the ones `fix` must repair as the human fix does:
the learning rate of a linear network, a missing `Flatten`, targets divided by 255, labels of
another rank than the head; and the common head bugs `fix` repairs already.

`bench_real_fix.py` trains the three versions of each program on the same batches.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

SAMPLES = 640  # rows of each data set (a fifth is held back for scoring)
FEATURES = 20
CLASSES = 4
SIDE = 8  # images are SIDE x SIDE x 1


@dataclass(frozen=True)
class Program:
    name: str
    kind: str  # the class of bug
    bug: str  # what the question's code does
    human_fix: str  # what the accepted answer changes
    build: Callable[[bool], object]  # fixed -> a compiled keras.Model
    data: Callable[[bool], tuple[np.ndarray, np.ndarray]]  # fixed -> (x, y)


def _keras():  # type: ignore[no-untyped-def]
    import keras

    return keras


def blobs(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """CLASSES Gaussian clusters in FEATURES dimensions that overlap a little: class ids."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(0, 1.0, (CLASSES, FEATURES))
    y = rng.integers(0, CLASSES, SAMPLES)
    x = centres[y] + rng.normal(0, 1.2, (SAMPLES, FEATURES))
    return x.astype("float32"), y.astype("int64")


def pictures(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """SIDE x SIDE pixels in 0-1: each class a bright bar (a row or a column), with noise."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, CLASSES, SAMPLES)
    x = rng.uniform(0, 0.5, (SAMPLES, SIDE, SIDE, 1))
    for k in range(CLASSES):
        rows = y == k
        if k % 2:
            x[rows, :, 2 * k, 0] += 0.5
        else:
            x[rows, 2 * k, :, 0] += 0.5
    return x.astype("float32"), y.astype("int64")


def one_hot(y: np.ndarray) -> np.ndarray:
    return np.eye(CLASSES, dtype="float32")[y]


# (a) a network of linear Dense layers with a learning rate far too high
def linear_high_lr(fixed: bool):  # type: ignore[no-untyped-def]
    keras = _keras()
    act = "relu" if fixed else None
    model = keras.Sequential([
        keras.Input((FEATURES,)),
        keras.layers.Dense(64, activation=act),
        keras.layers.Dense(64, activation=act),
        keras.layers.Dense(CLASSES, activation="softmax"),
    ])  # fmt: skip
    rate = 0.01 if fixed else 1.0
    model.compile(keras.optimizers.SGD(rate), "sparse_categorical_crossentropy",
                  metrics=["accuracy"])  # fmt: skip
    return model


# (b) Dense on a convolution's 4-D output: the Flatten is missing
def missing_flatten(fixed: bool):  # type: ignore[no-untyped-def]
    keras = _keras()
    layers = [
        keras.Input((SIDE, SIDE, 1)),
        keras.layers.Conv2D(8, 3, activation="relu"),
        keras.layers.MaxPooling2D(2),
    ]
    if fixed:
        layers.append(keras.layers.Flatten())
    layers.append(keras.layers.Dense(CLASSES, activation="softmax"))
    model = keras.Sequential(layers)
    model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
    return model


def conv_net(fixed: bool):  # type: ignore[no-untyped-def]
    """A healthy small CNN (its bugs are in the data)."""
    keras = _keras()
    model = keras.Sequential([
        keras.Input((SIDE, SIDE, 1)),
        keras.layers.Conv2D(8, 3, activation="relu"),
        keras.layers.Flatten(),
        keras.layers.Dense(CLASSES, activation="softmax"),
    ])  # fmt: skip
    model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
    return model


# (c) the class ids divided by 255 with the pixels (`y_train = y_train / 255`)
def targets_255_data(fixed: bool) -> tuple[np.ndarray, np.ndarray]:
    x, y = pictures(3)
    return x, (y if fixed else (y / 255.0).astype("float32"))


# (d) one-hot labels with an extra axis (`to_categorical` of a column of shape (n, 1, 1))
def label_rank_data(fixed: bool) -> tuple[np.ndarray, np.ndarray]:
    x, y = blobs(4)
    rows = one_hot(y)
    return x, (rows if fixed else rows[:, None, :])


def mlp(head: str | None = "softmax", loss: str = "categorical_crossentropy"):  # type: ignore[no-untyped-def]
    """One ReLU hidden layer and a head of CLASSES units: the shape of the head bugs."""
    keras = _keras()
    model = keras.Sequential([
        keras.Input((FEATURES,)),
        keras.layers.Dense(32, activation="relu"),
        keras.layers.Dense(CLASSES, activation=head),
    ])  # fmt: skip
    model.compile("adam", loss, metrics=["accuracy"])
    return model


# the head bugs `fix` repaired before: the wrong activation or loss for the head
def relu_head(fixed: bool):  # type: ignore[no-untyped-def]
    return mlp("softmax" if fixed else "relu")


def missing_softmax(fixed: bool):  # type: ignore[no-untyped-def]
    return mlp("softmax" if fixed else None, "sparse_categorical_crossentropy")


def binary_on_softmax(fixed: bool):  # type: ignore[no-untyped-def]
    return mlp(loss="categorical_crossentropy" if fixed else "binary_crossentropy")


def ids_with_categorical(fixed: bool):  # type: ignore[no-untyped-def]
    return mlp(loss="sparse_categorical_crossentropy" if fixed else "categorical_crossentropy")


def _blobs_ids(fixed: bool) -> tuple[np.ndarray, np.ndarray]:
    return blobs(5)


def _blobs_rows(fixed: bool) -> tuple[np.ndarray, np.ndarray]:
    x, y = blobs(6)
    return x, one_hot(y)


def _pictures_ids(fixed: bool) -> tuple[np.ndarray, np.ndarray]:
    return pictures(2)


PROGRAMS = (
    Program("linear_high_lr", "a: linear layers, learning rate too high",
            "Dense(64) x2 with no activation, SGD(learning_rate=1.0)",
            "activation='relu' on the hidden layers, SGD(learning_rate=0.01)",
            linear_high_lr, lambda fixed: blobs(1)),
    Program("missing_flatten", "b: Dense on a 4-D convolution output",
            "Conv2D -> MaxPooling2D -> Dense(4, softmax)",
            "Flatten() before the Dense", missing_flatten, _pictures_ids),
    Program("targets_255", "c: targets divided by 255",
            "y_train = y_train / 255 with the pixels", "divide only x by 255",
            conv_net, targets_255_data),
    Program("label_rank", "d: labels of another rank than the head",
            "one-hot labels of shape (n, 1, 4) for a (n, 4) head",
            "labels reshaped to (n, 4)",
            lambda fixed: mlp(), label_rank_data),
    Program("relu_head", "head: ReLU under categorical cross-entropy",
            "Dense(4, activation='relu') head", "activation='softmax'",
            relu_head, _blobs_rows),
    Program("missing_softmax", "head: no activation, loss expects probabilities",
            "Dense(4) head with sparse_categorical_crossentropy",
            "activation='softmax' on the head", missing_softmax, _blobs_ids),
    Program("binary_on_softmax", "loss: binary cross-entropy on a 4-class softmax",
            "loss='binary_crossentropy'", "loss='categorical_crossentropy'",
            binary_on_softmax, _blobs_rows),
    Program("ids_with_categorical", "loss: class ids under categorical cross-entropy",
            "loss='categorical_crossentropy' on integer labels",
            "loss='sparse_categorical_crossentropy'",
            ids_with_categorical, _blobs_ids),
)  # fmt: skip
BY_NAME = {p.name: p for p in PROGRAMS}
