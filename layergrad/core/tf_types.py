"""Names for the TensorFlow and Keras objects that cross layergrad's seams.

TensorFlow and Keras ship no type stubs, so to a type checker each of these is `Any`; the name
says what the value is, and importing this module never imports TensorFlow.
"""

from __future__ import annotations

from typing import Any, TypeAlias

KerasModel: TypeAlias = Any  # keras.Model: Sequential, functional or subclassed
KerasLayer: TypeAlias = Any  # keras.layers.Layer
KerasVariable: TypeAlias = Any  # keras.Variable (a tf.Variable underneath)
Tensor: TypeAlias = Any  # tf.Tensor, or a NumPy array where TensorFlow accepts one
GradientTape: TypeAlias = Any  # tf.GradientTape
Dataset: TypeAlias = Any  # tf.data.Dataset
Strategy: TypeAlias = Any  # tf.distribute.Strategy
