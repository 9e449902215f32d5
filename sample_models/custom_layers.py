"""Custom layers used by the failure-cause sample models.

Every layer here is registered under the package ``layergrad_samples`` so a
saved model that uses it loads with ``safe_mode=True`` once this file has been
imported (``layergrad inspect ... --import sample_models/custom_layers.py``).
No lambdas: safe mode refuses them.

Each layer is deliberately "broken" for gradients in one specific way:

=================  =========================================  ==================
layer              forward                                    gradient
=================  =========================================  ==================
ArgMaxOneHot       one_hot(argmax(x, axis)) as float          None (ArgMax)
RoundLayer         tf.round(x)                                None (Round)
CastToInt          cast(cast(x, int32), float32)              None (int cast)
StopGrad           tf.stop_gradient(x)                        None
NumpyFunction      tf.numpy_function(numpy copy of x)         None (PyFunc)
SqrtLayer          tf.sqrt(x + epsilon)                       inf/NaN at x == 0
IgnoreSecond       [a, b] -> a (b is never used)              None for b
=================  =========================================  ==================

One is healthy: ``TokenAndPositionEmbedding`` (token ids plus their positions, each through
an ``Embedding``, as in Keras's transformer text classifier). Its config shows neither
embedding, so a float input that feeds it carries ids only its traced graph can show.
"""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

PACKAGE = "layergrad_samples"

__all__ = [
    "PACKAGE",
    "ArgMaxOneHot",
    "CastToInt",
    "IgnoreSecond",
    "NumpyFunction",
    "RoundLayer",
    "SqrtLayer",
    "StopGrad",
    "TokenAndPositionEmbedding",
]


@keras.saving.register_keras_serializable(package=PACKAGE)
class ArgMaxOneHot(keras.layers.Layer):
    """Replace each vector by the one-hot encoding of its largest entry."""

    def __init__(self, axis: int = -1, **kwargs):
        super().__init__(**kwargs)
        self.axis = int(axis)

    def call(self, inputs):
        depth = inputs.shape[self.axis]
        index = tf.argmax(inputs, axis=self.axis)
        return tf.one_hot(index, depth=depth, axis=self.axis, dtype=inputs.dtype)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update({"axis": self.axis})
        return config


@keras.saving.register_keras_serializable(package=PACKAGE)
class RoundLayer(keras.layers.Layer):
    """Round to the nearest integer (the Round op's gradient is None)."""

    def call(self, inputs):
        return tf.round(inputs)

    def compute_output_shape(self, input_shape):
        return input_shape


@keras.saving.register_keras_serializable(package=PACKAGE)
class CastToInt(keras.layers.Layer):
    """Truncate through an int32 cast and come back to the float dtype."""

    def call(self, inputs):
        return tf.cast(tf.cast(inputs, tf.int32), inputs.dtype)

    def compute_output_shape(self, input_shape):
        return input_shape


@keras.saving.register_keras_serializable(package=PACKAGE)
class StopGrad(keras.layers.Layer):
    """Identity in the forward pass, blocks the gradient."""

    def call(self, inputs):
        return tf.stop_gradient(inputs)

    def compute_output_shape(self, input_shape):
        return input_shape


def _numpy_copy(array):
    """Plain NumPy work the tape cannot see (module-level: no lambdas)."""
    return np.array(array, dtype=np.float32, copy=True)


@keras.saving.register_keras_serializable(package=PACKAGE)
class NumpyFunction(keras.layers.Layer):
    """Identity computed in NumPy through tf.numpy_function (no gradient)."""

    def call(self, inputs):
        out = tf.numpy_function(_numpy_copy, [tf.cast(inputs, tf.float32)], tf.float32)
        out.set_shape(inputs.shape)
        return tf.cast(out, inputs.dtype)

    def compute_output_shape(self, input_shape):
        return input_shape


@keras.saving.register_keras_serializable(package=PACKAGE)
class SqrtLayer(keras.layers.Layer):
    """Elementwise sqrt(x + epsilon), a "safe norm" whose epsilon defaults to 0.

    With epsilon == 0 the derivative 0.5 / sqrt(x) is inf wherever x == 0
    (e.g. after a ReLU), so the backward pass produces inf/NaN although the
    forward values are all finite.
    """

    def __init__(self, epsilon: float = 0.0, **kwargs):
        super().__init__(**kwargs)
        self.epsilon = float(epsilon)

    def call(self, inputs):
        return tf.sqrt(inputs + self.epsilon)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update({"epsilon": self.epsilon})
        return config


@keras.saving.register_keras_serializable(package=PACKAGE)
class IgnoreSecond(keras.layers.Layer):
    """Takes two inputs and returns the first: the second is never used (a classic bug in a
    custom merge layer), so everything that feeds only it gets no gradient."""

    def call(self, inputs):
        first, _second = inputs
        return first

    def compute_output_shape(self, input_shape):
        return input_shape[0]


@keras.saving.register_keras_serializable(package=PACKAGE)
class TokenAndPositionEmbedding(keras.layers.Layer):
    """Embed token ids and their positions (0 ... maxlen - 1) and add them; the ids may come
    in a float tensor (the Embedding casts them)."""

    def __init__(self, maxlen: int, vocab_size: int, embed_dim: int, **kwargs):
        super().__init__(**kwargs)
        self.maxlen, self.vocab_size, self.embed_dim = int(maxlen), int(vocab_size), int(embed_dim)
        self.token_emb = keras.layers.Embedding(self.vocab_size, self.embed_dim)
        self.pos_emb = keras.layers.Embedding(self.maxlen, self.embed_dim)

    def build(self, input_shape):
        self.token_emb.build(input_shape)
        self.pos_emb.build((self.maxlen,))
        self.built = True

    def call(self, x):
        positions = tf.range(start=0, limit=tf.shape(x)[-1], delta=1)
        return self.token_emb(x) + self.pos_emb(positions)

    def compute_output_shape(self, input_shape):
        return (*input_shape, self.embed_dim)

    def get_config(self):
        config = super().get_config()
        config.update(
            {"maxlen": self.maxlen, "vocab_size": self.vocab_size, "embed_dim": self.embed_dim}
        )
        return config
