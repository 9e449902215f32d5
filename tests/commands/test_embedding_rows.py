"""An Embedding's gradient reaches only the rows of the batch's ids, so over the whole table its
update ratio shrinks with the vocabulary, far below a dense layer's by construction. A healthy
wide-and-deep model with a large vocabulary gets no `vanishing`: an embedding is judged on
the rows the data touches. A deep sigmoid stack behind the same embedding still vanishes. The
truth: the rows are the distinct ids of the data, read with numpy."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import keras

from layergrad import scan_weights
from layergrad.commands.check.check_files import CheckOptions, check_file
from layergrad.core.probe_options import ProbeOptions

layers = keras.layers
VOCAB, N = 300_000, 256  # a large vocabulary: over the whole table, 3 decades below the head


def _wide_and_deep(deep=("relu",) * 3):
    keras.utils.set_random_seed(0)
    wide = keras.Input((8,), name="wide")
    ids = keras.Input((3,), dtype="int32", name="ids")
    h = layers.Flatten(name="flat")(layers.Embedding(VOCAB, 16, name="embedding")(ids))
    for i, activation in enumerate(deep):
        h = layers.Dense(32, activation=activation, name=f"deep{i + 1}")(h)
    h = layers.Concatenate(name="both")([wide, h])
    model = keras.Model([wide, ids], layers.Dense(1, activation="sigmoid", name="click")(h))
    model.compile("adam", "binary_crossentropy")
    return model


def _data(tmp_path):
    rng = np.random.default_rng(0)
    wide = rng.standard_normal((N, 8)).astype("float32")
    ids = rng.integers(0, VOCAB, (N, 3)).astype("int32")
    y = (wide[:, 0] + ids[:, 0] % 2 > 0.5).astype("float32")
    np.savez(tmp_path / "clicks.npz", wide=wide, ids=ids, y=y)
    return str(tmp_path / "clicks.npz"), ids


def _check(tmp_path, model, data):
    path = tmp_path / "model.keras"
    model.save(path)
    verdict = check_file(path, CheckOptions(probe=ProbeOptions(data=data, batch_size=N)))
    trainable = next(c for c in verdict.checks if c.name == "trainable")
    return {f for c in verdict.checks for f in c.findings}, trainable.message, path


def test_a_healthy_wide_and_deep_model_is_judged_on_the_rows_its_ids_touch(tmp_path):
    data, ids = _data(tmp_path)
    model = _wide_and_deep()
    found, message, path = _check(tmp_path, model, data)
    assert "vanishing" not in found, message
    report = scan_weights(path, data=data, batch_size=64)  # over the data, 4 batches
    row = next(r for r in report.variables if r.variable == "embedding/embeddings")
    assert row.flags == ()
    table = model.get_layer("embedding").embeddings.numpy().astype(np.float64)
    touched = np.linalg.norm(table[np.unique(ids)])  # the rows of the data's distinct ids
    assert row.update_ratio == pytest.approx(row.gradient.l2 / touched, rel=1e-5)
    assert row.update_ratio > 10 * row.gradient.l2 / np.linalg.norm(table)  # not the table's


def test_a_vanishing_stack_behind_an_embedding_still_vanishes(tmp_path):
    """The near miss: eight sigmoid layers between the embedding and the head."""
    data, _ = _data(tmp_path)
    found, message, _ = _check(tmp_path, _wide_and_deep(("sigmoid",) * 8), data)
    assert "vanishing" in found, message
    assert "deep1" in message, message
