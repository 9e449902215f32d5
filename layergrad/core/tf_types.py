"""Names for the TensorFlow, Keras and h5py objects that cross layergrad's seams.

TensorFlow, Keras and h5py ship no type stubs, so to a type checker each of these is `Any`;
the name says what the value is, and importing this module never imports any of them.
"""

from __future__ import annotations

from typing import Any, TypeAlias

KerasModel: TypeAlias = Any  # keras.Model: Sequential, functional or subclassed
KerasLayer: TypeAlias = Any  # keras.layers.Layer
KerasVariable: TypeAlias = Any  # keras.Variable (a tf.Variable underneath)
Tensor: TypeAlias = Any  # tf.Tensor, or a NumPy array where TensorFlow accepts one
TensorTree: TypeAlias = Any  # a tensor, or a nest (list, tuple, dict) of them: keras.tree
GradientTape: TypeAlias = Any  # tf.GradientTape
Dataset: TypeAlias = Any  # tf.data.Dataset
Strategy: TypeAlias = Any  # tf.distribute.Strategy
TFFunction: TypeAlias = Any  # a tf.function, or one of its concrete functions
TFOperation: TypeAlias = Any  # tf.Operation: a node of a traced graph
TFGraph: TypeAlias = Any  # tf.Graph: a traced function's graph
H5Object: TypeAlias = Any  # an h5py.File, Group or Dataset
TensorSpec: TypeAlias = Any  # tf.TensorSpec: the shape and dtype of a traced argument
TFVariable: TypeAlias = Any  # tf.Variable: a running total of the compiled step
InputContext: TypeAlias = Any  # tf.distribute.InputContext: which shard a worker reads
KerasOptimizer: TypeAlias = Any  # keras.optimizers.Optimizer
KerasCallback: TypeAlias = Any  # keras.callbacks.Callback
SummaryWriter: TypeAlias = Any  # tf.summary.SummaryWriter: TensorBoard event files
TFDType: TypeAlias = Any  # tf.DType: the dtype of a tensor
