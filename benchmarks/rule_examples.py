"""The models and data of the head rules' examples (`layergrad/model/head_rules.Example`), for
the severity benchmark (bench_rule_evidence.py) and the tests that build every example.

An example is the head of a small MLP (16 features, Dense(32, relu)) on learnable data:
Gaussian clusters, one per class, or XOR-like labels for the linear-network examples (which
no straight boundary splits), or a linear target for a regression.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from layergrad.core.tf_runtime import keras
from layergrad.model.head_forms import Head
from layergrad.model.head_rules import Change, Example, HeadFacts

FEATURES = 16
LOSS_CLASSES = {
    "binary_crossentropy": "BinaryCrossentropy",
    "categorical_crossentropy": "CategoricalCrossentropy",
    "sparse_categorical_crossentropy": "SparseCategoricalCrossentropy",
}


def repaired(example: Example, change: Change) -> Example:
    """The example as the rule's repair leaves it."""
    if change.kind == "loss":
        return replace(example, loss=change.loss or example.loss, from_logits=change.from_logits)
    if change.kind == "activation":
        act = change.activation or example.activation
        return replace(example, activation=act, loss=change.loss or example.loss,
                       from_logits=False if change.loss else example.from_logits)  # fmt: skip
    return replace(example, structure="")  # remove_before, move_dropout, relu_hidden


def facts(example: Example) -> HeadFacts:
    """The facts the table reads for the example's model, as check reads them from the file."""
    structure = example.structure
    act = "softmax" if structure == "relu_before" else example.activation
    head = Head("head", "head", act, example.units,
                dropout="drop" if structure == "dropout_after" else None,
                before="relu" if structure == "relu_before" else None,
                before_layer="logits" if structure == "relu_before" else None)  # fmt: skip
    linear = ("hidden", "head") if structure == "linear_hidden" else ()
    return HeadFacts(head, example.loss, example.from_logits, None, linear)


def data(
    example: Example, rows: int, seed: int, held_back: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(x, the labels as the loss takes them, the class of each row or the regression target):
    the task of `seed`, its training rows or its held-back ones."""
    rng = np.random.default_rng([seed, int(held_back)])
    classes = example.classes or max(example.units, 2)
    if example.labels == "real":
        x = rng.normal(size=(rows, FEATURES)).astype("float32")
        target = (x[:, :4].sum(axis=1, keepdims=True) / 2).astype("float32")
        return x, target, target[:, 0]
    if example.structure == "linear_hidden":  # XOR-like: no straight boundary splits them
        x = rng.normal(size=(rows, FEATURES)).astype("float32")
        y = ((x[:, 0] > 0) ^ (x[:, 1] > 0)).astype(int) + 2 * (x[:, 2] > 0) * (classes > 2)
        y = np.minimum(y, classes - 1)
    else:
        centres = np.random.default_rng([seed, 2]).normal(size=(classes, FEATURES)) * 1.5
        y = rng.integers(0, classes, rows)
        x = (centres[y] + rng.normal(size=(rows, FEATURES))).astype("float32")
    if example.labels == "ids":
        return x, y, y
    if example.labels == "binary":
        return x, y[:, None].astype("float32"), y
    return x, np.eye(classes, dtype="float32")[y], y


def build(example: Example) -> tuple[object, object]:
    """(the example's model, its loss object), the layers named as `facts` names them: the
    hidden Dense `hidden`, the head `head` (a ReLU Dense `logits` before a Softmax `head`),
    a Dropout after it `drop`."""
    inputs = keras.Input((FEATURES,), name="x")
    hidden_act = None if example.structure == "linear_hidden" else "relu"
    hidden = keras.layers.Dense(32, activation=hidden_act, name="hidden")(inputs)
    if example.structure == "relu_before":
        logits = keras.layers.Dense(example.units, activation="relu", name="logits")(hidden)
        out = keras.layers.Softmax(name="head")(logits)
    else:
        out = keras.layers.Dense(example.units, activation=example.activation, name="head")(hidden)
        if example.structure == "dropout_after":
            out = keras.layers.Dropout(0.5, name="drop")(out)
    model = keras.Model(inputs, out)
    name = LOSS_CLASSES.get(example.loss)
    loss = getattr(keras.losses, name)(from_logits=example.from_logits) if name else example.loss
    return model, loss
