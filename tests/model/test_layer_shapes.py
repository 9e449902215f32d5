"""Static shapes and weight counts (layer_shapes, footprint) against Keras's own.

Truth: each live Keras layer's ``count_params()`` and ``compute_output_shape`` for the same
input shape; and for whole models, the bytes of their variables and outputs.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from helpers import keras

from layergrad.core.errors import LoadError
from layergrad.files.file_info import read_file_info
from layergrad.model.memory_estimate import (
    ACTIVATION_COPIES,
    LARGEST_COPIES,
    estimate,
    layer_shapes,
    require_within,
)

layers = keras.layers

CASES: list[tuple[Any, tuple[int, ...]]] = [
    (layers.Dense(7), (5,)),
    (layers.Dense(3), (4, 6)),
    (layers.EinsumDense("ab,bc->ac", output_shape=9, bias_axes="c"), (5,)),
    (layers.Embedding(50, 8), (6,)),
    (layers.Conv1D(4, 3, padding="same"), (10, 3)),
    (layers.Conv2D(16, 3, strides=2, padding="same"), (32, 32, 3)),
    (layers.Conv2D(8, (3, 5), padding="same", data_format="channels_first"), (3, 12, 12)),
    (layers.DepthwiseConv2D(3, depth_multiplier=2, padding="same"), (8, 8, 4)),
    (layers.SeparableConv2D(6, 3, padding="same"), (8, 8, 4)),
    (layers.Conv2DTranspose(5, 3, strides=2, padding="same"), (7, 7, 3)),
    (layers.MaxPooling2D(), (8, 8, 3)),
    (layers.GlobalAveragePooling2D(), (8, 8, 3)),
    (layers.LSTM(12, return_sequences=True), (10, 5)),
    (layers.GRU(6), (10, 5)),
    (layers.SimpleRNN(4), (10, 5)),
    (layers.Bidirectional(layers.LSTM(3, return_sequences=True)), (10, 5)),
    (layers.TimeDistributed(layers.Dense(4)), (10, 5)),
    (layers.BatchNormalization(), (6,)),
    (layers.LayerNormalization(), (5, 6)),
    (layers.Flatten(), (4, 5, 2)),
    (layers.Reshape((10, -1)), (4, 5, 2)),
    (layers.RepeatVector(3), (5,)),
    (layers.UpSampling2D(2), (4, 4, 3)),
    (layers.ZeroPadding2D(1), (4, 4, 3)),
    (layers.Cropping1D(2), (10, 3)),
    (layers.CategoryEncoding(num_tokens=20, output_mode="multi_hot"), (5,)),
    (layers.Dropout(0.5), (5,)),
]


@pytest.mark.parametrize(("layer", "shape"), CASES, ids=lambda c: type(c).__name__)
def test_shapes_and_weights_match_keras(layer: Any, shape: tuple[int, ...]) -> None:
    layer.build((None, *shape))
    outs, weights = layer_shapes(type(layer).__name__, layer.get_config(), [shape])
    want = layer.compute_output_shape((None, *shape))
    assert outs[0] == tuple(want[1:])
    assert weights == layer.count_params()


def test_attention_counts_its_weights_and_its_scores() -> None:
    mha = layers.MultiHeadAttention(num_heads=4, key_dim=8)
    q = np.zeros((1, 10, 16), "float32")
    mha(q, q)
    outs, weights = layer_shapes("MultiHeadAttention", mha.get_config(), [(10, 16), (10, 16)])
    assert weights == mha.count_params() and outs == [(10, 16), (4, 10, 10)]


def test_model_estimate_matches_keras_bytes(tmp_path: Any) -> None:
    x = keras.Input((16, 16, 3), name="x")
    h = layers.Conv2D(8, 3, padding="same", name="conv")(x)
    h = layers.GlobalAveragePooling2D(name="pool")(h)
    model = keras.Model(x, layers.Dense(10, name="head")(h))
    path = tmp_path / "m.keras"
    model.save(path)
    found = estimate(read_file_info(path), batch_size=4)
    assert found.weights == 4 * model.count_params()
    # by hand, float32, 4 rows: input 16*16*3, conv 16*16*8, pool 8, head 10
    assert found.activations == 4 * 4 * (16 * 16 * 3 + 16 * 16 * 8 + 8 + 10)
    assert found.largest_output == 4 * 4 * 16 * 16 * 8  # the conv's output
    assert found.total == (
        found.weights
        + ACTIVATION_COPIES * found.activations
        + LARGEST_COPIES * found.largest_output
    )
    with pytest.raises(LoadError, match="pass --max-memory 1MB"):
        require_within(read_file_info(path), 4, max_memory=found.total - 1)
