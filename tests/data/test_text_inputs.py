"""String inputs (`Input(shape=(1,), dtype="string")` or `shape=()`) through
`TextVectorization` / `StringLookup`: probed with text drawn from the vocabulary the file
keeps, read from `--input` and `--data` (.npy, .npz, functions), checked without findings when
healthy. Real saved models; gradients against the seeds' manual tape."""

from __future__ import annotations

import json
import textwrap

import numpy as np
import pytest
from click.testing import CliRunner
from helpers import keras, manual_gradient, save_built, tf

from layergrad.cli.app import main
from layergrad.commands.api import scan_model
from layergrad.commands.check.check_files import check_file
from layergrad.core.probe_options import ProbeOptions
from layergrad.data.input_kinds import text_draws
from layergrad.data.probe_input import input_specs, random_batch

layers = keras.layers
CORPUS = [
    "the cat sat on the mat",
    "a dog ran far away from home",
    "hello world this is the end",
    "green trees grow near the river",
]
COLOURS = ["red", "green", "blue", "yellow"]


def _vectorized(adapt: bool = True):
    keras.utils.set_random_seed(0)
    vectorize = layers.TextVectorization(max_tokens=40, output_sequence_length=8, name="vectorize")
    if adapt:
        vectorize.adapt(CORPUS)
    x = keras.Input((1,), dtype="string", name="text")
    h = layers.Embedding(40, 6, name="embedding")(vectorize(x))
    h = layers.GlobalAveragePooling1D(name="pool")(h)
    return keras.Model(
        x, layers.Dense(1, activation="sigmoid", name="head")(h)
    ), "binary_crossentropy"


def _listed():  # a vocabulary given as a list lives in the config: .h5 keeps it too
    keras.utils.set_random_seed(0)
    words = sorted({w for line in CORPUS for w in line.split()})
    vectorize = layers.TextVectorization(
        vocabulary=words, output_sequence_length=8, name="vectorize"
    )
    x = keras.Input((1,), dtype="string", name="text")
    h = layers.Embedding(len(words) + 2, 6, name="embedding")(vectorize(x))
    h = layers.LSTM(4, name="lstm")(h)
    return keras.Model(x, layers.Dense(3, activation="softmax", name="head")(h)), (
        "sparse_categorical_crossentropy"
    )


def _lookup_scalar():  # shape (): one string per sample
    keras.utils.set_random_seed(0)
    lookup = layers.StringLookup(vocabulary=COLOURS, name="lookup")
    x = keras.Input((), dtype="string", name="colour")
    h = layers.Embedding(lookup.vocabulary_size(), 4, name="embedding")(lookup(x))
    return keras.Model(
        x, layers.Dense(1, activation="sigmoid", name="head")(h)
    ), "binary_crossentropy"


def _lookup_one_hot():
    keras.utils.set_random_seed(0)
    lookup = layers.StringLookup(vocabulary=COLOURS, output_mode="one_hot", name="lookup")
    x = keras.Input((1,), dtype="string", name="colour")
    h = layers.Dense(8, activation="relu", name="hidden")(lookup(x))
    return keras.Model(x, layers.Dense(3, activation="softmax", name="head")(h)), (
        "sparse_categorical_crossentropy"
    )


BUILDERS = {
    "adapted": _vectorized,
    "listed": _listed,
    "lookup_scalar": _lookup_scalar,
    "lookup_one_hot": _lookup_one_hot,
}


def _saved(tmp_path, kind: str, suffix: str = ".keras") -> str:
    return save_built(BUILDERS[kind](), tmp_path / f"{kind}{suffix}")


@pytest.mark.parametrize(
    "kind,suffix",
    [
        ("adapted", ".keras"),
        ("listed", ".keras"),
        ("listed", ".h5"),
        ("lookup_scalar", ".keras"),
        ("lookup_scalar", ".h5"),
        ("lookup_one_hot", ".keras"),
    ],
)
def test_a_healthy_string_model_gets_no_finding(tmp_path, kind, suffix):
    # Before: "targets: failed unexpectedly: TypeError: data type 'string' not understood".
    path = _saved(tmp_path, kind, suffix)
    verdict = check_file(path)
    assert verdict.passed, [(c.name, c.message) for c in verdict.checks]
    assert all(not c.findings for c in verdict.checks), [
        (c.name, c.message) for c in verdict.checks
    ]
    forward = next(c for c in verdict.checks if c.name == "forward")
    assert "vocabulary of" in forward.message
    rows = scan_model(path).rows
    assert rows[0].status == "string" and rows[0].dtype == "string"


def test_the_random_text_is_drawn_from_the_stored_vocabulary(tmp_path):
    model = keras.saving.load_model(_saved(tmp_path, "adapted"), compile=False)
    (draw,) = text_draws(model).values()
    words = {w for line in CORPUS for w in line.split()}
    assert set(draw.tokens) == words and draw.words == 8
    batch = random_batch(input_specs(model), 64, 0, {}, texts=text_draws(model))
    (texts,) = batch.arrays
    assert texts.shape == (64, 1) and texts.dtype.kind == "U"
    drawn = [w for t in texts.ravel() for w in t.split()]
    assert set(drawn) <= words and len(set(drawn)) > len(words) // 2
    assert all(1 <= len(t.split()) <= 8 for t in texts.ravel())


def test_without_a_readable_vocabulary_simple_tokens_are_drawn_and_said(tmp_path):
    model, _ = _vectorized(adapt=False)  # never adapted: only the mask and OOV tokens
    (draw,) = text_draws(model).values()
    assert "simple tokens" in draw.why and draw.tokens
    x = keras.Input((1,), dtype="string", name="text")  # Hashing needs no vocabulary
    h = layers.Flatten()(layers.Embedding(16, 4)(layers.Hashing(num_bins=16, name="hash")(x)))
    path = tmp_path / "hashed.keras"
    keras.Model(x, layers.Dense(1)(h)).save(path)
    report = scan_model(str(path))
    assert "simple tokens" in report.probe.drawn and "Hashing 'hash'" in report.probe.drawn
    assert report.rows[-1].status == "ok"


def test_inspect_from_the_embedding_of_a_text_npy_matches_a_manual_tape(tmp_path):
    path = _saved(tmp_path, "adapted")
    texts = np.array([["the cat sat"], ["hello world"], ["a dog ran far"], ["unknown words"]])
    np.save(tmp_path / "text.npy", texts)
    assert np.load(tmp_path / "text.npy", allow_pickle=False).dtype.kind == "U"
    args = ["inspect", path, "--from", "embedding", "--to", "head", "--input"]
    args += [str(tmp_path / "text.npy"), "--json", "--save-gradient", str(tmp_path / "g.npy")]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.stdout)["results"]
    assert row["status"] == "ok" and row["from"]["shape"] == [4, 8, 6]
    model = keras.saving.load_model(path, compile=False)
    layer = {la.name: la for la in model.layers}
    ids = layer["vectorize"](tf.constant(texts))
    expected = manual_gradient(
        layer["embedding"], lambda h: layer["head"](layer["pool"](h)), ids.numpy()
    )
    np.testing.assert_allclose(np.load(tmp_path / "g.npy"), expected, rtol=1e-5, atol=1e-7)


DATA = textwrap.dedent(
    """
    import numpy as np
    import tensorflow as tf

    LINES = [["the cat sat"], ["a dog"], ["hello world the end"], ["green"]] * 5

    def batches():
        for start in range(0, len(LINES), 6):
            yield np.array(LINES[start : start + 6], dtype=object)  # Python str in an array

    def dataset():
        return tf.data.Dataset.from_tensor_slices(np.array(LINES)).batch(4)
    """
)


@pytest.mark.parametrize("source", ["npy", "npz", "compressed", "batches", "dataset"])
def test_text_over_data(tmp_path, source):
    path = _saved(tmp_path, "adapted")
    lines = np.array([["the cat sat"], ["a dog"], ["hello world the end"], ["green"]] * 5)
    if source == "npy":
        data = tmp_path / "text.npy"
        np.save(data, lines)
    elif source == "npz":
        data = tmp_path / "text.npz"
        np.savez(data, text=lines)
    elif source == "compressed":
        data = tmp_path / "text.npz"
        np.savez_compressed(data, x=lines)
    else:
        (tmp_path / "text_data.py").write_text(DATA)
        data = f"{tmp_path / 'text_data.py'}:{source}"
    report = scan_model(path, options=ProbeOptions(data=str(data), batch_size=8))
    assert report.probe.samples in (20, None)
    by_layer = {r.layer: r for r in report.rows}
    assert by_layer["text"].status == "string" and by_layer["embedding"].status == "ok"
    assert by_layer["embedding"].data is not None


def test_text_check_over_data_has_no_finding(tmp_path):
    path = _saved(tmp_path, "lookup_one_hot")
    np.savez(tmp_path / "d.npz", x=np.array([[c] for c in COLOURS * 4]), y=np.arange(16) % 3)
    result = CliRunner().invoke(main, ["check", path, "--data", str(tmp_path / "d.npz")])
    assert result.exit_code == 0, result.output


def test_text_inputs_refuse_numbers_and_numbers_refuse_text(tmp_path):
    text_model = _saved(tmp_path, "adapted")
    np.save(tmp_path / "numbers.npy", np.zeros((3, 1), "float32"))
    np.save(tmp_path / "text.npy", np.array([["a"], ["b"]]))
    numbers_model = tmp_path / "dense.keras"
    keras.Sequential([keras.Input((1,)), layers.Dense(1)]).save(numbers_model)
    for model, array in [(text_model, "numbers.npy"), (str(numbers_model), "text.npy")]:
        for option in ("--input", "--data"):
            result = CliRunner().invoke(main, ["scan", model, option, str(tmp_path / array)])
            assert result.exit_code == 2, result.output
            (line,) = [x for x in result.output.splitlines() if x.startswith("error:")]
            assert "dtype" in line and "Traceback" not in result.output


def test_a_batch_of_text_wider_than_its_budget_is_refused(tmp_path, monkeypatch):
    from layergrad.data import value_checks  # the one budget of `--data` and `--input`

    path = _saved(tmp_path, "adapted")
    lines = np.array([["word " * 200]] * 16)  # <U1000: 4,000 bytes a row
    np.save(tmp_path / "wide.npy", lines)
    monkeypatch.setattr(value_checks, "MAX_TEXT_BATCH_BYTES", 10_000)
    result = CliRunner().invoke(main, ["scan", path, "--data", str(tmp_path / "wide.npy")])
    assert result.exit_code == 2, result.output
    assert "--batch-size 2 or less" in result.output
    result = CliRunner().invoke(main, ["scan", path, "--input", str(tmp_path / "wide.npy")])
    assert result.exit_code == 2, result.output
    assert "save 2 rows or fewer" in result.output


def test_scan_calls_a_string_input_string_and_its_lookup_integer(tmp_path):
    """The text input has no gradient because it holds text, the lookup's ids because they
    are integers: each row says which (the string input read `integer`)."""
    path = _saved(tmp_path, "lookup_scalar")
    result = CliRunner().invoke(main, ["scan", path, "--json"])
    assert result.exit_code == 0, result.output
    rows = {r["layer"]: r for r in json.loads(result.output)["layers"]}
    assert (rows["colour"]["status"], rows["colour"]["dtype"]) == ("string", "string")
    assert rows["lookup"]["status"] == "integer" and rows["embedding"]["status"] == "ok"
    table = CliRunner().invoke(main, ["scan", path])
    assert table.exit_code == 0, table.output
    line = next(ln for ln in table.output.splitlines() if ln.strip().startswith("colour"))
    assert " string " in line and "integer" not in line
