"""Custom layers and losses as users write them, for the saved-forms tests (`--import` this
file): heads whose activation the saved config does not show, and registered custom losses."""

from __future__ import annotations

import keras

PACKAGE = "head_layers"


@keras.saving.register_keras_serializable(package=PACKAGE)
class ClassifierHead(keras.layers.Layer):
    """A hidden Dense layer and an output Dense layer with activation `final`, wrapped in one
    layer: its config shows `units` and `final`, not an activation."""

    def __init__(self, units: int, final: str | None = "sigmoid", **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.units, self.final = units, final
        self.hidden = keras.layers.Dense(16, activation="relu")
        self.out = keras.layers.Dense(units, activation=final)

    def call(self, x):  # type: ignore[no-untyped-def]
        return self.out(self.hidden(x))

    def get_config(self) -> dict[str, object]:
        return {**super().get_config(), "units": self.units, "final": self.final}


@keras.saving.register_keras_serializable(package=PACKAGE)
def weighted_mse(y_true, y_pred):  # type: ignore[no-untyped-def]
    return keras.ops.mean(2.0 * keras.ops.square(y_true - y_pred), axis=-1)


@keras.saving.register_keras_serializable(package=PACKAGE)
class FocalLoss(keras.losses.Loss):
    """A registered custom loss class with an argument."""

    def __init__(self, gamma: float = 2.0, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.gamma = gamma

    def call(self, y_true, y_pred):  # type: ignore[no-untyped-def]
        p = keras.ops.clip(y_pred, 1e-7, 1 - 1e-7)
        return -keras.ops.mean(y_true * (1 - p) ** self.gamma * keras.ops.log(p), axis=-1)

    def get_config(self) -> dict[str, object]:
        return {**super().get_config(), "gamma": self.gamma}


@keras.saving.register_keras_serializable(package=PACKAGE)
class SmallLogits(keras.layers.Layer):
    """Raw logits scaled into [0, 1] on a random batch (0.5 + 0.01 * Dense): a linear head
    whose outputs look like probabilities on the probe."""

    def __init__(self, units: int, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.units = units
        self.dense = keras.layers.Dense(units)

    def call(self, x):  # type: ignore[no-untyped-def]
        return 0.5 + 0.01 * self.dense(x)

    def get_config(self) -> dict[str, object]:
        return {**super().get_config(), "units": self.units}


@keras.saving.register_keras_serializable(package=PACKAGE)
class Classifier(keras.Model):
    """A subclassed model as users write one: its config shows `units` and `final`, no layer.
    `final="ops_softmax"` applies the softmax as an operation in `call`, after the layer."""

    def __init__(self, units: int = 4, final: str | None = "softmax", **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.units, self.final = units, final
        self.hidden = keras.layers.Dense(16, activation="relu", name="hidden")
        op = final == "ops_softmax"
        self.head = keras.layers.Dense(units, activation=None if op else final, name="head")

    def call(self, x):  # type: ignore[no-untyped-def]
        out = self.head(self.hidden(x))
        return keras.ops.softmax(out) if self.final == "ops_softmax" else out

    def get_config(self) -> dict[str, object]:
        return {"name": self.name, "units": self.units, "final": self.final}
