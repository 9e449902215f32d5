"""Values in the data that no model takes are refused where they are read, in one line naming
the sample, with exit code 2 in every command (`inspect`, `scan`, `check`, `fit`, `fix`):
text that is not valid Unicode, float ids that are NaN, Inf or beyond int32, integers beyond
the input's dtype. Unsigned 32- and 64-bit arrays are read and cast like any other integers.
Labels keyed by an output name that two outputs share, and a compiled loss list longer than
the outputs, are said in one line too. Real saved models, real `.npy` / `.npz` files saved
the way a careless user saves them."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from helpers import keras, save_built

from layergrad.cli.app import main

layers = keras.layers
STEPS = ["--steps", "2"]


def run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def refused(result, *said: str) -> str:
    """The one error line of a run that exits 2, holding each of `said`."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and "unexpected" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for text in said:
        assert text in lines[0], lines[0]
    return lines[0]


def every_command(model: str, data: str, tmp_path, frm: str, to: str) -> list:
    """`inspect`, `scan`, `check`, `fit` and `fix` over `--data`."""
    out = str(tmp_path / "repaired.keras")
    return [
        run("inspect", model, "--from", frm, "--to", to, "--data", data),
        run("scan", model, "--data", data),
        run("check", model, "--data", data),
        run("fit", model, "--data", data, *STEPS),
        run("fix", model, "--data", data, *STEPS, "--output", out),
    ]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """The models a careless user brings: a dense classifier, a text classifier, token ids in
    a float input (the Keras text example), an int32 id input, and two outputs from one
    shared head."""
    root = tmp_path_factory.mktemp("bad_values")
    keras.utils.set_random_seed(0)
    x = keras.Input((5,), name="x")
    h = layers.Dense(8, activation="relu", name="dense")(x)
    dense = keras.Model(x, layers.Dense(3, activation="softmax", name="head")(h))
    vectorize = layers.TextVectorization(max_tokens=30, output_sequence_length=6, name="vec")
    vectorize.adapt(["the cat sat on the mat", "a dog ran far away", "hello world again"])
    t = keras.Input((1,), dtype="string", name="text")
    h = layers.GlobalAveragePooling1D(name="pool")(
        layers.Embedding(30, 4, name="emb")(vectorize(t))
    )
    text = keras.Model(t, layers.Dense(1, activation="sigmoid", name="head")(h))
    f = keras.Input((4,), name="tokens")  # float32, as Input((maxlen,)) declares it
    h = layers.GlobalAveragePooling1D(name="pool")(layers.Embedding(20, 4, name="emb")(f))
    ids = keras.Model(f, layers.Dense(3, activation="softmax", name="head")(h))
    i = keras.Input((4,), dtype="int32", name="tokens")
    h = layers.GlobalAveragePooling1D(name="pool")(layers.Embedding(20, 4, name="emb")(i))
    int_ids = keras.Model(i, layers.Dense(3, activation="softmax", name="head")(h))
    x = keras.Input((5,), name="x")
    shared = layers.Dense(3, activation="softmax", name="shared_head")
    two = keras.Model(
        x, [shared(layers.Dense(4, name="a")(x)), shared(layers.Dense(4, name="b")(x))]
    )
    sparse = "sparse_categorical_crossentropy"
    return {
        "dense": save_built((dense, sparse), root / "dense.keras"),
        "text": save_built((text, "binary_crossentropy"), root / "text.keras"),
        "ids": save_built((ids, sparse), root / "ids.keras"),
        "int_ids": save_built((int_ids, sparse), root / "int_ids.keras"),
        "two": save_built((two, sparse), root / "two.keras"),
    }


def labels(n: int = 16) -> np.ndarray:
    return np.random.default_rng(3).integers(0, 3, n)


# 5: unsigned arrays -------------------------------------------------------------------------


def test_bool_features_for_a_float_input_are_read_as_0_and_1(models, tmp_path):
    # data.md lists bool among the dtypes a file may hold: True/False feed a float input as
    # 1.0/0.0, the same numbers as the array saved as float32
    flags = np.random.default_rng(1).integers(0, 2, (16, 5)).astype(bool)
    scans = []
    for name, values in (("bool", flags), ("float", flags.astype("float32"))):
        np.save(tmp_path / f"{name}.npy", values)
        for option in ("--data", "--input"):
            result = run("scan", models["dense"], option, str(tmp_path / f"{name}.npy"),
                         "--format", "json")  # fmt: skip
            assert result.exit_code == 0, result.output
            scans.append(json.loads(result.stdout)["layers"])
    assert scans[0] == scans[2] and scans[1] == scans[3]


@pytest.mark.parametrize("dtype", ["uint32", "uint64"])
def test_unsigned_inputs_and_labels_are_read_as_the_same_numbers(models, tmp_path, dtype):
    values = np.random.default_rng(1).integers(0, 9, (16, 5))
    unsigned, signed = tmp_path / "unsigned.npz", tmp_path / "signed.npz"
    np.savez(unsigned, x=values.astype(dtype), y=labels().astype(dtype))
    np.savez(signed, x=values.astype("float32"), y=labels())
    scans = []
    for data in (unsigned, signed):
        result = run("scan", models["dense"], "--data", str(data), "--format", "json")
        assert result.exit_code == 0, result.output
        scans.append(json.loads(result.stdout)["layers"])
    assert scans[0] == scans[1]  # the same statistics as the values saved as float32
    for args in (["fit", models["dense"], *STEPS],
                 ["fix", models["dense"], *STEPS, "--output", str(tmp_path / "o.keras")],
                 ["check", models["dense"]]):  # fmt: skip
        result = run(*args, "--data", str(unsigned))
        assert result.exit_code in (0, 1) and "error" not in result.stderr, result.output
    result = run("check", models["dense"], "--data", str(tmp_path / "unsigned.npz"))
    assert "PASS" in result.stdout, result.stdout


def test_unsigned_ids_beyond_int32_name_the_sample_and_value(models, tmp_path):
    ids = np.random.default_rng(1).integers(0, 20, (16, 4)).astype("uint64")
    ids[11, 2] = 2**63 + 5  # a wrapped -1 stored as unsigned
    data = tmp_path / "ids.npz"
    np.savez(data, tokens=ids, y=labels())
    for result in every_command(models["int_ids"], str(data), tmp_path, "emb", "head"):
        refused(result, "sample 11 of input 'tokens' holds 9223372036854775813, outside int32")


# 6: text that is not Unicode ----------------------------------------------------------------


def test_a_lone_surrogate_in_text_is_one_line_in_every_command(models, tmp_path):
    texts = np.array([["the cat sat"]] * 12)
    texts[5, 0] = "\ud800 hello"  # what errors='surrogateescape' leaves of a bad byte
    said = ("sample 5 of input 'text' holds text that is not valid Unicode (U+D800",)
    data, compressed = tmp_path / "texts.npz", tmp_path / "packed.npz"
    np.savez(data, text=texts, y=np.ones(12))
    np.savez_compressed(compressed, text=texts, y=np.ones(12))
    for result in every_command(models["text"], str(data), tmp_path, "emb", "head"):
        refused(result, "--data", *said)
    refused(run("scan", models["text"], "--data", str(compressed)), *said)
    np.save(tmp_path / "texts.npy", texts)
    refused(run("scan", models["text"], "--data", str(tmp_path / "texts.npy")), *said)
    batch = tmp_path / "batch.npy"
    np.save(batch, texts[:8])
    refused(run("inspect", models["text"], "--from", "emb", "--to", "head", "--input", str(batch)),
            "--input", *said)  # fmt: skip
    refused(run("check", models["text"], "--input", str(batch)), "--input", *said)


# 7: float ids that are no ids ---------------------------------------------------------------


@pytest.mark.parametrize("bad,shown", [(np.nan, "nan"), (np.inf, "inf"), (3e9, "3e+09")])
def test_float_ids_that_are_no_ids_are_refused_as_input_refuses_them(models, tmp_path, bad, shown):
    ids = np.random.default_rng(1).integers(0, 20, (16, 4)).astype("float32")
    ids[9, 1] = bad
    said = ("input 'tokens' holds ids (Embedding 'emb' takes them), but sample 9 holds "
            f"{shown}, which is not finite or does not fit int32",)  # fmt: skip
    data = tmp_path / "ids.npz"
    np.savez(data, tokens=ids, y=labels())
    for result in every_command(models["ids"], str(data), tmp_path, "emb", "head"):
        line = refused(result, "--data", *said)
        assert "2147483" not in line  # no garbage id cast from the value
    np.savez_compressed(tmp_path / "packed.npz", tokens=ids, y=labels())  # read in Python
    refused(run("fit", models["ids"], "--data", str(tmp_path / "packed.npz"), *STEPS), *said)
    np.save(tmp_path / "batch.npy", ids)
    batch = str(tmp_path / "batch.npy")
    refused(run("inspect", models["ids"], "--from", "emb", "--to", "head", "--input", batch),
            "--input", *said)  # fmt: skip
    refused(run("scan", models["ids"], "--data", batch, "--batch-size", "4"), "--data", *said)


TF_DATA = """
import numpy as np
import tensorflow as tf


def batches():
    ids = np.random.default_rng(1).integers(0, 20, (16, 4)).astype("float32")
    ids[13, 0] = np.nan
    return tf.data.Dataset.from_tensor_slices((ids, np.zeros(16, "int64"))).batch(5)
"""


def test_float_ids_from_a_tf_data_function_are_checked_as_the_files_are(models, tmp_path):
    (tmp_path / "tf_batches.py").write_text(TF_DATA)
    data = f"{tmp_path / 'tf_batches.py'}:batches"
    said = "input 'tokens' holds ids (Embedding 'emb' takes them), but sample 13 holds nan"
    for args in (["scan"], ["check"], ["fit", *STEPS]):
        refused(run(args[0], models["ids"], "--data", data, *args[1:]), said)


def test_an_id_beyond_the_vocabulary_is_said_with_its_value_by_every_command(models, tmp_path):
    ids = np.random.default_rng(1).integers(0, 20, (16, 4)).astype("float32")
    ids[6, 2] = 25  # a whole number within int32: the Embedding (20 rows) refuses it
    data = tmp_path / "ids.npz"
    np.savez(data, tokens=ids, y=labels())
    for args in (["scan"], ["fit", *STEPS]):  # fit's op error is more than its stack
        line = refused(run(args[0], models["ids"], "--data", str(data), *args[1:]))
        # TensorFlow's words for the lookup differ when XLA compiles the step (fit's may be)
        said = ("= 25 is not in [0, 20)", "= [25] does not index into shape [20]")
        assert any(s in line for s in said) and "Detected at node" not in line, line


# 8: outputs that share a name ---------------------------------------------------------------


def test_labels_for_two_outputs_of_one_shared_layer_are_one_line(models, tmp_path):
    data = tmp_path / "two.npz"
    x = np.random.default_rng(1).standard_normal((16, 5)).astype("float32")
    np.savez(data, x=x, **{"y:shared_head": labels()})
    said = "the model has 2 outputs named 'shared_head' (one layer called 2 times)"
    out = str(tmp_path / "o.keras")
    for args in (["fit", *STEPS], ["fix", *STEPS, "--output", out], ["check"],
                 ["scan", "--wrt", "weights"]):  # fmt: skip
        refused(run(args[0], models["two"], "--data", str(data), *args[1:]), said)


def test_a_loss_list_longer_than_the_outputs_is_said(tmp_path):
    keras.utils.set_random_seed(0)
    x = keras.Input((5,), name="x")
    model = keras.Model(x, [layers.Dense(3, activation="softmax", name=n)(x) for n in "ab"])
    model.compile("adam", ["sparse_categorical_crossentropy"] * 3)
    path = str(tmp_path / "three_losses.keras")
    model.save(path)
    data = tmp_path / "d.npz"
    x_rows = np.random.default_rng(1).standard_normal((16, 5)).astype("float32")
    np.savez(data, x=x_rows, **{"y:a": labels(), "y:b": labels()})
    said = "the compiled loss is a list of 3 losses"
    refused(run("fit", path, "--data", str(data), *STEPS), said, "but the model has 2 outputs")
    gate = run("check", path)
    assert gate.exit_code == 1 and said in " ".join(gate.stdout.split()), gate.stdout
    assert "zip()" not in gate.stdout


# negative ids -------------------------------------------------------------------------------

NEGATIVE_IDS = """
import numpy as np


def batches():
    ids = np.random.default_rng(1).integers(0, 20, (16, 4)).astype("int32")
    ids[9, 1] = -3
    yield ids[:8]
    yield ids[8:]
"""


@pytest.mark.parametrize("model", ["int_ids", "ids"])
def test_a_negative_id_is_refused_with_its_sample_as_an_id_beyond_the_table_is(
    models, tmp_path, model
):
    """An Embedding of 20 rows would read id -3 as id 17 (Keras's `take` counts a negative
    index from the end) and every command would pass: refused in one line, exit 2, from
    `--input`, a `--data` file and a data function, as ids of the table's size are."""
    ids = np.random.default_rng(1).integers(0, 20, (16, 4)).astype("int32")
    ids[9, 1] = -3
    kept = ids.copy()
    kept[9, 1] = 17  # the id the Embedding would have read
    (tmp_path / "fn.py").write_text(NEGATIVE_IDS)
    said = "sample 9 of input 'tokens' holds id -3, below 0: Embedding 'emb' takes ids from 0"
    path = models[model]
    for dtype in ("int32", "float32" if model == "ids" else "int64"):
        np.save(tmp_path / "neg.npy", ids.astype(dtype))
        np.save(tmp_path / "kept.npy", kept.astype(dtype))
        data = str(tmp_path / "neg.npy")
        commands = [["inspect", "--from", "emb", "--to", "head", "--input", data]]
        if dtype == "int32":  # every way in once; the other dtype through --input
            commands += [["inspect", "--from", "emb", "--to", "head", "--data", data],
                         ["scan", "--data", data], ["check", "--data", data]]  # fmt: skip
        for args in commands:
            refused(run(args[0], path, *args[1:]), said)
    kept_ok = run("inspect", path, "--from", "emb", "--to", "head", "--input",
                  str(tmp_path / "kept.npy"))  # fmt: skip
    assert kept_ok.exit_code == 0, kept_ok.output
    function = f"{tmp_path / 'fn.py'}:batches"
    for args in (["scan", "--data", function], ["check", "--data", function]):
        refused(run(args[0], path, *args[1:]), said)
