"""Token ids in a float input: `Input(shape=(maxlen,))` (float32) in front of an `Embedding`,
directly, in a nested model, or inside a custom layer whose config does not show it, is an id
input: probed over the valid ids, not differentiable (`integer`), never `blocked`. Real saved
models built the way the Keras examples build them; gradients against the seeds' manual tape."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from click.testing import CliRunner
from helpers import CUSTOM_LAYERS, SAMPLES, keras, manual_gradient, save_built, tf

from layergrad.cli.app import main
from layergrad.commands.api import inspect_model, scan_model
from layergrad.commands.check.check_files import CheckOptions, check_file
from layergrad.core.probe_options import ProbeOptions
from layergrad.data import id_trace
from layergrad.data.id_trace import hidden_ids
from layergrad.data.input_kinds import integer_ranges
from layergrad.data.probe_input import input_specs, random_batch

if str(SAMPLES) not in sys.path:
    sys.path.insert(0, str(SAMPLES))
import custom_layers  # registers TokenAndPositionEmbedding

layers = keras.layers
MAXLEN, VOCAB = 10, 40


def _sequential():
    return keras.Sequential(
        [
            keras.Input((MAXLEN,)),
            layers.Embedding(VOCAB, 6, name="embedding"),
            layers.GlobalAveragePooling1D(name="pool"),
            layers.Dense(1, activation="sigmoid", name="head"),
        ]
    ), "binary_crossentropy"


def _lstm():
    x = keras.Input((MAXLEN,), name="tokens")
    h = layers.Embedding(VOCAB, 6, mask_zero=True, name="embedding")(x)
    h = layers.LSTM(4, name="lstm")(h)
    return keras.Model(x, layers.Dense(3, activation="softmax", name="head")(h)), (
        "sparse_categorical_crossentropy"
    )


def _nested():
    inner = keras.Sequential(
        [
            keras.Input((MAXLEN,)),
            layers.Embedding(VOCAB, 6, name="embedding"),
            layers.GlobalAveragePooling1D(name="pool"),
        ],
        name="encoder",
    )
    x = keras.Input((MAXLEN,), name="tokens")
    return keras.Model(x, layers.Dense(1, activation="sigmoid", name="head")(inner(x))), (
        "binary_crossentropy"
    )


def _custom():
    x = keras.Input((MAXLEN,), name="tokens")
    h = custom_layers.TokenAndPositionEmbedding(MAXLEN, VOCAB, 6, name="embed")(x)
    h = layers.GlobalAveragePooling1D(name="pool")(h)
    h = layers.Dense(8, activation="relu", name="hidden")(h)
    return keras.Model(x, layers.Dense(2, activation="softmax", name="head")(h)), (
        "sparse_categorical_crossentropy"
    )


BUILDERS = {"sequential": _sequential, "lstm": _lstm, "nested": _nested, "custom": _custom}


def _saved(tmp_path, kind: str, suffix: str = ".keras") -> str:
    keras.utils.set_random_seed(0)
    return save_built(BUILDERS[kind](), tmp_path / f"{kind}{suffix}")


@pytest.mark.parametrize(
    "kind,suffix",
    [
        ("sequential", ".keras"),
        ("sequential", ".h5"),
        ("lstm", ".keras"),
        ("nested", ".keras"),
        ("custom", ".keras"),
    ],
)
def test_a_float_input_of_ids_passes_check(tmp_path, kind, suffix):
    # Before: `gradient` failed with "blocked: input_layer (non_differentiable_op at embedding)".
    path = _saved(tmp_path, kind, suffix)
    verdict = check_file(path, CheckOptions(imports=(CUSTOM_LAYERS,)))
    assert verdict.passed, [(c.name, c.message) for c in verdict.checks]
    assert all(not c.findings for c in verdict.checks), [
        (c.name, c.message) for c in verdict.checks
    ]
    forward = next(c for c in verdict.checks if c.name == "forward")
    assert "takes ids" in forward.message
    rows = scan_model(path, imports=[CUSTOM_LAYERS]).rows
    assert rows[0].status == "integer" and rows[0].dtype == "int32"
    assert all(r.status == "ok" for r in rows[1:] if r.dtype.startswith("float"))


def test_ids_hidden_in_a_custom_layer_are_drawn_below_the_vocabulary_not_maxlen(tmp_path):
    model = keras.saving.load_model(_saved(tmp_path, "custom"), compile=False)
    (spec,) = input_specs(model)
    assert (spec.dtype, spec.ids) == ("int32", "TokenAndPositionEmbedding 'embed'")
    # the token table has VOCAB rows; the position table (MAXLEN rows) is not fed the ids
    assert integer_ranges(model) == {"tokens": VOCAB}
    batch = random_batch([spec], 512, 0, integer_ranges(model))
    (ids,) = batch.arrays
    assert ids.dtype == np.int32 and ids.min() == 0 and ids.max() == VOCAB - 1


def test_a_custom_layer_that_uses_the_values_as_numbers_keeps_a_float_input():
    class ScaledTokens(layers.Layer):  # holds an Embedding, but also scales by the values
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.embedding = layers.Embedding(VOCAB, 4)

        def call(self, x):
            return self.embedding(x) * tf.reduce_mean(x, axis=-1, keepdims=True)[..., None]

    x = keras.Input((MAXLEN,), name="tokens")
    model = keras.Model(x, layers.Dense(1)(layers.Flatten()(ScaledTokens()(x))))
    assert hidden_ids(model) == {}
    (spec,) = input_specs(model)
    assert (spec.dtype, spec.ids) == ("float32", None)


def test_a_float_input_that_also_feeds_a_dense_stays_a_float_input(tmp_path):
    x = keras.Input((MAXLEN,), name="mixed")
    a = layers.GlobalAveragePooling1D()(layers.Embedding(VOCAB, 4)(x))
    model = keras.Model(x, layers.Dense(1)(layers.Concatenate()([a, layers.Dense(4)(x)])))
    (spec,) = input_specs(model)
    assert (spec.dtype, spec.ids) == ("float32", None)


def _loaded_parts(path):
    model = keras.saving.load_model(path, compile=False)
    layer = {la.name: la for la in model.layers}
    return model, layer


def test_the_gradient_from_the_embedding_matches_a_manual_tape(tmp_path, write_input):
    path = _saved(tmp_path, "sequential")
    ids = np.random.default_rng(1).integers(0, VOCAB, (5, MAXLEN)).astype("float32")
    (res,) = inspect_model(path, "embedding", ["head"], input_file=write_input(ids)).results
    _, layer = _loaded_parts(path)
    expected = manual_gradient(
        layer["embedding"], lambda h: layer["head"](layer["pool"](h)), ids.astype("int32")
    )
    assert res.status == "ok"
    np.testing.assert_allclose(res.array, expected, rtol=1e-5, atol=1e-7)


def test_ids_and_features_in_one_model(tmp_path, write_input):
    ids_in = keras.Input((MAXLEN,), name="ids")
    features_in = keras.Input((5,), name="features")
    pooled = layers.GlobalAveragePooling1D(name="pool")(
        layers.Embedding(VOCAB, 4, name="emb")(ids_in)
    )
    dense = layers.Dense(4, activation="tanh", name="dense")(features_in)
    joined = layers.Concatenate(name="concat")([pooled, dense])
    model = keras.Model(
        [ids_in, features_in], layers.Dense(1, activation="sigmoid", name="head")(joined)
    )
    model.compile("adam", "binary_crossentropy")
    path = str(tmp_path / "two.keras")
    model.save(path)

    verdict = check_file(path)
    assert verdict.passed and all(not c.findings for c in verdict.checks), verdict.checks
    rows = {r.layer: r for r in scan_model(path).rows}
    assert rows["ids"].status == "integer" and rows["features"].status == "ok"

    rng = np.random.default_rng(2)
    ids = rng.integers(0, VOCAB, (6, MAXLEN)).astype("float32")
    features = rng.standard_normal((6, 5)).astype("float32")
    batch = write_input(ids=ids, features=features)
    (res,) = inspect_model(path, "features", ["head"], input_file=batch).results
    _, layer = _loaded_parts(path)
    fixed = layer["pool"](layer["emb"](tf.constant(ids.astype("int32"))))
    expected = manual_gradient(
        lambda x: x, lambda f: layer["head"](layer["concat"]([fixed, layer["dense"](f)])), features
    )
    np.testing.assert_allclose(res.array, expected, rtol=1e-5, atol=1e-7)


def test_float_ids_over_data_and_bad_ids(tmp_path):
    path = _saved(tmp_path, "lstm")
    ids = np.random.default_rng(3).integers(0, VOCAB, (40, MAXLEN)).astype("float32")
    np.save(tmp_path / "ids.npy", ids)
    report = scan_model(path, options=ProbeOptions(data=str(tmp_path / "ids.npy"), batch_size=16))
    assert report.rows[0].status == "integer"
    assert report.probe.samples == 40
    ids[3, 2] = np.nan
    np.save(tmp_path / "bad.npy", ids)
    result = CliRunner().invoke(main, ["scan", path, "--input", str(tmp_path / "bad.npy")])
    assert result.exit_code == 2
    assert "holds ids" in result.output and "Traceback" not in result.output


def test_an_integer_input_into_a_custom_embedding_is_drawn_below_its_table():
    x = keras.Input((MAXLEN,), dtype="int32", name="tokens")
    h = custom_layers.TokenAndPositionEmbedding(MAXLEN, VOCAB, 6, name="embed")(x)
    model = keras.Model(x, layers.Dense(1)(layers.GlobalAveragePooling1D()(h)))
    assert integer_ranges(model) == {"tokens": VOCAB}  # was the default 10
    (spec,) = input_specs(model)
    assert (spec.dtype, spec.ids) == ("int32", None)


def test_a_custom_lookup_on_its_own_weight_table_takes_ids():
    class Lookup(layers.Layer):  # no Embedding: indexes its own table
        def build(self, input_shape):
            self.table = self.add_weight(shape=(VOCAB, 3), initializer="random_normal")

        def call(self, x):
            return keras.ops.take(self.table, keras.ops.cast(x, "int32"), axis=0)

    x = keras.Input((MAXLEN,), name="tokens")
    model = keras.Model(x, layers.Dense(1)(layers.Flatten()(Lookup(name="lookup")(x))))
    assert hidden_ids(model) == {"tokens": VOCAB}
    (spec,) = input_specs(model)
    assert (spec.dtype, spec.ids) == ("int32", "Lookup 'lookup'")
    assert integer_ranges(model) == {"tokens": VOCAB}


def test_a_custom_layer_that_casts_to_integers_and_back_keeps_a_float_input():
    x = keras.Input((6,), name="x")  # CastToInt: cast(cast(x, int32), float32), no table
    model = keras.Model(x, layers.Dense(1)(custom_layers.CastToInt(name="cast")(x)))
    assert hidden_ids(model) == {}
    assert input_specs(model)[0].dtype == "float32"


def test_ids_cast_by_an_operation_of_the_functional_model(tmp_path):
    x = keras.Input((MAXLEN,), name="tokens")  # keras.ops.cast is an operation, not a layer
    h = layers.Embedding(VOCAB, 4, name="embedding")(keras.ops.cast(x, "int32"))
    model = keras.Model(x, layers.Dense(1, name="head")(layers.Flatten()(h)))
    path = tmp_path / "op_cast.keras"
    model.save(path)
    loaded = keras.saving.load_model(path, compile=False)
    assert input_specs(loaded)[0].dtype == "int32"
    assert integer_ranges(loaded) == {"tokens": VOCAB}
    assert scan_model(str(path)).rows[0].status == "integer"


def test_a_float_input_scaled_by_an_operation_stays_float_and_is_not_traced():
    x = keras.Input((8, 8, 3), name="image")  # x / 255 is an operation; nothing takes ids
    h = layers.Conv2D(2, 3, name="conv")(x / 255.0)
    model = keras.Model(x, layers.Dense(1)(layers.Flatten()(h)))
    assert input_specs(model)[0].dtype == "float32" and not input_specs(model)[0].ids
    assert model not in id_trace._FOUND  # no trace: the model holds no layer that takes ids


@pytest.mark.parametrize("dtype", ["int64", "float32"])
def test_integer_lookup_ids_are_drawn_from_its_vocabulary(tmp_path, dtype):
    """Years through an IntegerLookup with no out-of-vocabulary index: ids from a numeric
    range (0-9) are all out of vocabulary and the layer raises; the probe draws the years."""
    years = [1990, 2001, 2010, 2020]
    x = keras.Input((1,), dtype=dtype, name="year")
    ids = layers.IntegerLookup(vocabulary=years, num_oov_indices=0, name="lookup")(x)
    h = layers.Flatten(name="flat")(layers.Embedding(len(years), 4, name="embedding")(ids))
    model = keras.Model(x, layers.Dense(1, activation="sigmoid", name="head")(h))
    model.compile("adam", "binary_crossentropy")
    path = str(tmp_path / "years.keras")
    model.save(path)
    verdict = check_file(path)
    assert verdict.passed, [(c.name, c.message) for c in verdict.checks]
    loaded = keras.models.load_model(path)
    from layergrad.commands.session import probe_batch

    batch = probe_batch(loaded, ProbeOptions(batch_size=64, seed=3))
    drawn = set(np.asarray(batch.arrays[0]).ravel().tolist())
    assert drawn <= set(years) and len(drawn) > 1, drawn
    assert "vocabulary of IntegerLookup 'lookup'" in (batch.drawn or "")
