"""How a corpus model is written: the head, the loss and the activations in each form Keras takes.

`Spec` is everything a fault operator can change (the hidden activation, the head's activation,
units and loss, `from_logits`, the initialisation, a Dropout after the head, a ReLU before the
softmax, the input rescaling); `Build` turns it into layers in one of three forms:

  str   activations and losses by name            Dense(8, activation="relu"), loss="mse"
  fn    as function objects                       keras.activations.relu, keras.losses.mse
  obj   as class instances (with arguments)       ReLU() / Activation layers,
                                                  keras.losses.MeanSquaredError()

`from_logits=True` exists only in the `obj` form (a loss name or function cannot carry it).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import keras
import numpy as np

layers = keras.layers
FORMS = ("str", "fn", "obj")

# loss name -> (the function object, the class)
LOSSES = {
    "binary_crossentropy": ("binary_crossentropy", "BinaryCrossentropy"),
    "categorical_crossentropy": ("categorical_crossentropy", "CategoricalCrossentropy"),
    "sparse_categorical_crossentropy": (
        "sparse_categorical_crossentropy",
        "SparseCategoricalCrossentropy",
    ),
    "mean_squared_error": ("mean_squared_error", "MeanSquaredError"),
    "mean_absolute_error": ("mean_absolute_error", "MeanAbsoluteError"),
    "huber": ("huber", "Huber"),
    "poisson": ("poisson", "Poisson"),
    "hinge": ("hinge", "Hinge"),
    "squared_hinge": ("squared_hinge", "SquaredHinge"),
}
CROSS_ENTROPY = (
    "binary_crossentropy",
    "categorical_crossentropy",
    "sparse_categorical_crossentropy",
)


@dataclass(frozen=True)
class Head:
    """One output: what it predicts (`kind`), its units, activation and loss.

    kind: binary, multilabel, categorical, sparse, regression, reconstruction.
    """

    kind: str
    units: int
    activation: str | None
    loss: str
    from_logits: bool = False

    @property
    def classifier(self) -> bool:
        return self.kind in ("binary", "multilabel", "categorical", "sparse")


@dataclass(frozen=True)
class Spec:
    """What the fault operators change; the healthy model is the default."""

    head: Head
    form: str = "str"
    hidden: str | None = "relu"  # every hidden activation the builder marks as changeable
    kernel_init: Any = "glorot_uniform"  # of those hidden layers
    dropout_after_head: bool = False
    relu_before_softmax: bool = False
    rescale: bool = True  # image models: Rescaling(1/255) first
    optimizer: Any = "adam"
    extra: dict[str, Any] = field(default_factory=dict)

    def with_head(self, **changes: Any) -> Spec:
        return replace(self, head=replace(self.head, **changes))


class Build:
    """Layers and the compiled loss for one `Spec`, named so a finding can be matched."""

    def __init__(self, spec: Spec):
        self.spec = spec

    def act(self, name: str | None) -> Any:
        if name is None:
            return None
        return name if self.spec.form == "str" else getattr(keras.activations, name)

    def activation_layer(self, h: Any, name: str | None, layer_name: str | None = None) -> Any:
        """`h` through activation `name` as a separate layer (the `obj` form)."""
        if name is None:
            return h
        if name == "relu":
            return layers.ReLU(name=layer_name)(h)
        if name == "softmax":
            return layers.Softmax(name=layer_name)(h)
        return layers.Activation(getattr(keras.activations, name), name=layer_name)(h)

    def dense(self, h: Any, units: int, name: str, hidden: bool = True) -> Any:
        """A hidden Dense layer with the spec's hidden activation and initialisation."""
        act = self.spec.hidden if hidden else "relu"
        init = self.spec.kernel_init if hidden else "glorot_uniform"
        if self.spec.form == "obj":
            h = layers.Dense(units, kernel_initializer=init, name=name)(h)
            return self.activation_layer(h, act, f"{name}_act")
        return layers.Dense(units, activation=self.act(act), kernel_initializer=init, name=name)(h)

    def head(self, h: Any, head: Head | None = None, name: str = "head") -> Any:
        """The output layer, as the spec writes it (Dropout after it, ReLU before softmax)."""
        head = head or self.spec.head
        mutated = head is self.spec.head
        act = head.activation
        if mutated and self.spec.relu_before_softmax:
            h = layers.Dense(head.units, activation=self.act("relu"), name=name)(h)
            out = layers.Softmax(name=f"{name}_act")(h)
        elif self.spec.form == "obj":
            h = layers.Dense(head.units, name=name)(h)
            out = self.activation_layer(h, act, f"{name}_act")
        else:
            out = layers.Dense(head.units, activation=self.act(act), name=name)(h)
        if mutated and self.spec.dropout_after_head:
            out = layers.Dropout(0.3, name=f"{name}_dropout")(out)
        return out

    def loss(self, head: Head | None = None) -> Any:
        head = head or self.spec.head
        function, cls = LOSSES[head.loss]
        if self.spec.form == "str":
            return head.loss
        if self.spec.form == "fn":
            return getattr(keras.losses, function)
        kwargs: dict[str, Any] = {}
        if head.loss in (
            "binary_crossentropy",
            "categorical_crossentropy",
            "sparse_categorical_crossentropy",
        ):
            kwargs["from_logits"] = head.from_logits
        if head.loss in ("binary_crossentropy", "categorical_crossentropy"):
            kwargs["label_smoothing"] = 0.0
        if head.loss == "huber":
            kwargs["delta"] = 1.0
        return getattr(keras.losses, cls)(**kwargs)

    def compile(self, model: keras.Model, others: dict[str, Head] | None = None) -> None:
        if others:
            losses = {"head": self.loss(), **{k: self.loss(v) for k, v in others.items()}}
            model.compile(optimizer=self.spec.optimizer, loss=losses)
        else:
            model.compile(optimizer=self.spec.optimizer, loss=self.loss())


def labels(head: Head, rng: np.random.Generator, n: int, classes: int | None = None) -> Any:
    """Realistic labels for a head: imbalanced classes, regression targets of any range."""
    k = classes or head.units
    if head.kind == "binary":
        return (rng.random((n, 1)) < 0.2).astype("float32")  # 20% positives
    if head.kind == "multilabel":
        return (rng.random((n, k)) < 0.3).astype("float32")
    if head.kind in ("categorical", "sparse"):
        weights = np.arange(k, 0, -1, dtype=float) ** 2  # the first class dominates
        ids = rng.choice(k, size=n, p=weights / weights.sum())
        if head.kind == "sparse":
            return ids.astype("int64")
        return np.eye(k, dtype="float32")[ids]
    if head.kind == "regression":  # house prices: 50 to 500 (thousands), one column each
        return rng.uniform(50, 500, (n, k)).astype("float32")
    raise ValueError(head.kind)
