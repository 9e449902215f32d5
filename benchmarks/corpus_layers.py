"""The custom classes of the verdict corpus (see verdict_corpus.py), registered for safe loading.

A model of the corpus that uses one of them is checked with this file as an import
(`layergrad check MODEL --import benchmarks/corpus_layers.py`), the way a user passes the
module that defines their layers. Each class serializes every argument it takes, activations
included (`keras.activations.serialize`), so a fault operator that changes one survives saving.
"""

from __future__ import annotations

from typing import Any

import keras

PACKAGE = "verdict_corpus"
layers = keras.layers


def _act(value: Any) -> Any:
    return keras.activations.serialize(keras.activations.get(value))


@keras.saving.register_keras_serializable(package=PACKAGE)
class ClassifierHead(layers.Layer):
    """A hidden Dense layer and the output Dense layer, as one layer (a head users wrap)."""

    def __init__(self, hidden: int, units: int, activation: Any = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.hidden, self.units = int(hidden), int(units)
        self.activation = keras.activations.get(activation)
        self.inner = layers.Dense(self.hidden, activation="relu")
        self.out = layers.Dense(self.units, activation=self.activation)

    def build(self, input_shape: Any) -> None:
        self.inner.build(input_shape)
        self.out.build((*input_shape[:-1], self.hidden))

    def call(self, inputs: Any) -> Any:
        return self.out(self.inner(inputs))

    def compute_output_shape(self, input_shape: Any) -> Any:
        return (*input_shape[:-1], self.units)

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(hidden=self.hidden, units=self.units, activation=_act(self.activation))
        return config


@keras.saving.register_keras_serializable(package=PACKAGE)
class TokenEmbedding(layers.Layer):
    """Token ids (of any dtype) to one vector per sample: an Embedding and its average."""

    def __init__(self, vocabulary: int, dim: int, **kwargs: Any):
        super().__init__(**kwargs)
        self.vocabulary, self.dim = int(vocabulary), int(dim)
        self.embedding = layers.Embedding(self.vocabulary, self.dim)
        self.pool = layers.GlobalAveragePooling1D()

    def build(self, input_shape: Any) -> None:
        self.embedding.build(input_shape)

    def call(self, inputs: Any) -> Any:
        return self.pool(self.embedding(inputs))

    def compute_output_shape(self, input_shape: Any) -> Any:
        return (input_shape[0], self.dim)

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(vocabulary=self.vocabulary, dim=self.dim)
        return config


@keras.saving.register_keras_serializable(package=PACKAGE)
class SubclassedClassifier(keras.Model):
    """A subclassed model: two hidden Dense layers and a head, written in `call`."""

    def __init__(
        self,
        units: int,
        hidden_activation: Any = "relu",
        activation: Any = "softmax",
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.units = int(units)
        self.hidden_activation = keras.activations.get(hidden_activation)
        self.activation = keras.activations.get(activation)
        self.h1 = layers.Dense(16, activation=self.hidden_activation, name="h1")
        self.h2 = layers.Dense(8, activation=self.hidden_activation, name="h2")
        self.head = layers.Dense(self.units, activation=self.activation, name="head")

    def call(self, inputs: Any) -> Any:
        return self.head(self.h2(self.h1(inputs)))

    def get_config(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "units": self.units,
            "hidden_activation": _act(self.hidden_activation),
            "activation": _act(self.activation),
        }
