"""`layergrad fit` on the cases a new user met: a learning rate of 1e-9, shuffled labels, a
softmax over one unit, class ids for a loss that needs one-hot rows, a Fortran-order `.npz`;
and every label problem a finding before training or one clear error, never a traceback."""

from __future__ import annotations

import json
import resource
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from helpers import keras

from layergrad.cli.app import main


def task(n: int = 2000, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A learnable 4-class task: the signs of the first two of 10 features."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 10)).astype("float32")
    return x, (x[:, 0] > 0).astype("int64") + 2 * (x[:, 1] > 0).astype("int64")


def classifier(path: Path, hidden: dict[str, int], head: tuple[str, int], loss: str) -> None:
    """Save 10 features -> ReLU Dense layers `hidden` (name: units) -> a softmax `head`
    (name, units), compiled with `loss`."""
    model = keras.Sequential(
        [
            keras.Input((10,)),
            *(keras.layers.Dense(units, activation="relu", name=n) for n, units in hidden.items()),
            keras.layers.Dense(head[1], activation="softmax", name=head[0]),
        ]
    )
    model.compile("adam", loss)
    model.save(path)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cases")
    keras.utils.set_random_seed(0)
    classifier(folder / "mlp.keras", {"dense_a": 32, "dense_b": 32}, ("head", 4),
               "sparse_categorical_crossentropy")  # fmt: skip
    classifier(folder / "one_softmax.keras", {"hidden": 16}, ("out", 1), "binary_crossentropy")
    classifier(folder / "seven.keras", {"hidden": 16}, ("seven", 7), "categorical_crossentropy")
    x, y = task()
    np.savez(folder / "good.npz", x=x, y=y)
    np.savez(folder / "shuffled.npz", x=x, y=np.random.default_rng(1).permutation(y))
    np.savez(folder / "binary.npz", x=x, y=(x[:, 0] > 0).astype("float32"))
    np.savez(folder / "ids7.npz", x=x, y=np.random.default_rng(2).integers(0, 7, len(x)))
    np.savez(folder / "fortran.npz", x=np.asfortranarray(x), y=y)
    return folder


def fit(*args: str):
    return CliRunner().invoke(main, ["fit", *args, "--json"])


def findings(result) -> list[tuple[str, str, int]]:
    doc = json.loads(result.output)
    return [(f["finding"], f["layer"], f["step"]) for f in doc["findings"]]


def test_learning_rate_1e_9_is_not_learning(files):
    result = fit(str(files / "mlp.keras"), "--data", str(files / "good.npz"), "--steps", "300",
                 "--learning-rate", "1e-9")  # fmt: skip
    assert result.exit_code == 1, result.output
    assert [f[0] for f in findings(result)] == ["not_learning"]


def test_shuffled_labels_plateau_at_chance(files):
    result = fit(str(files / "mlp.keras"), "--data", str(files / "shuffled.npz"), "--steps", "300")
    assert result.exit_code == 1, result.output
    assert [f[:2] for f in findings(result)] == [("plateau_at_chance", "head")]


def test_a_softmax_over_one_unit_is_constant_predictions(files):
    result = fit(str(files / "one_softmax.keras"), "--data", str(files / "binary.npz"),
                 "--steps", "100")  # fmt: skip
    assert result.exit_code == 1, result.output
    assert findings(result) == [("constant_predictions", "out", 1)]
    doc = json.loads(result.output)
    assert all(
        r["constant_fraction"] == 1.0 for c in doc["checkpoints"] for r in c["layers"]
        if r["layer"] == "out"
    )  # fmt: skip


def test_class_ids_for_a_one_hot_loss_are_a_target_mismatch_before_training(files):
    result = fit(str(files / "seven.keras"), "--data", str(files / "ids7.npz"), "--steps", "50")
    assert result.exit_code == 1, result.output
    doc = json.loads(result.output)
    assert doc["training"]["steps"] == 0 and doc["losses"] == []
    assert doc["training"]["stopped"] == "target_mismatch"
    ((finding, layer, step),) = findings(result)
    assert (finding, layer, step) == ("target_mismatch", "seven", 0)
    message = doc["findings"][0]["message"]
    for said in ("'seven'", "7 units", "categorical_crossentropy", "class ids 0 to 6"):
        assert said in message
    text = CliRunner().invoke(main, ["fit", str(files / "seven.keras"), "--data",
                                     str(files / "ids7.npz"), "--fail-on", "nonfinite"])  # fmt: skip
    assert text.exit_code == 1 and "not started" in text.output


def test_check_data_says_the_same_target_mismatch(files):
    result = CliRunner().invoke(
        main, ["check", str(files / "seven.keras"), "--data", str(files / "ids7.npz"), "--json"]
    )
    assert result.exit_code == 1
    assert "target_mismatch" in result.output and "class ids 0 to 6" in result.output


def test_an_npz_saved_in_fortran_order_trains_as_the_same_arrays_in_c_order(files):
    a = fit(str(files / "mlp.keras"), "--data", str(files / "fortran.npz"), "--steps", "20")
    b = fit(str(files / "mlp.keras"), "--data", str(files / "good.npz"), "--steps", "20")
    assert a.exit_code == 0, a.output
    assert json.loads(a.output)["losses"] == json.loads(b.output)["losses"]


def test_a_fortran_npy_reads_the_same_rows():
    from layergrad.files.array_files import NpyRows

    x = np.arange(7 * 3 * 5, dtype="float32").reshape(7, 3, 5)
    import io

    buffer = io.BytesIO()
    np.save(buffer, np.asfortranarray(x))
    size = buffer.tell()
    buffer.seek(0)
    rows = NpyRows(buffer, "x.npy", size)
    got = np.concatenate([rows.read(3), rows.read(3), rows.read(3)])
    assert np.array_equal(got, x) and rows.read(3).shape == (0, 3, 5)


BAD_IDS = {
    "nan": (np.where(np.arange(200) == 5, np.nan, np.arange(200) % 4), "NaN or Inf"),
    "inf": (np.where(np.arange(200) == 5, np.inf, np.arange(200) % 4), "NaN or Inf"),
    "negative": (np.where(np.arange(200) == 5, -1, np.arange(200) % 4), "0 or more"),
    "beyond": (np.where(np.arange(200) == 5, 4, np.arange(200) % 4), "0 to 3 for 4 units"),
    "huge": (np.where(np.arange(200) == 5, 2_000_000_000, np.arange(200) % 4), "0 to 3"),
    "rank_3": (np.zeros((200, 2, 2), "int64"), "shape (2, 2)"),
}


@pytest.mark.parametrize("case", sorted(BAD_IDS))
def test_every_bad_class_id_is_a_target_mismatch_before_training(files, tmp_path, case):
    y, said = BAD_IDS[case]
    x, _ = task(200)
    np.savez(tmp_path / "bad.npz", x=x, y=y)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result = fit(str(files / "mlp.keras"), "--data", str(tmp_path / "bad.npz"), "--steps", "20")
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert result.exit_code == 1, result.output
    doc = json.loads(result.output)
    assert [f["finding"] for f in doc["findings"]] == ["target_mismatch"]
    assert doc["training"]["steps"] == 0
    assert said in doc["findings"][0]["message"]
    assert grown_kib < 1 << 20  # an id of 2e9 allocates nothing of its size (< 1 GiB)


FRACTIONS = {"fraction": 0.5, "one_and_a_half": 1.5}


@pytest.mark.parametrize("case", sorted(FRACTIONS))
def test_fractional_class_ids_warn_and_the_run_goes_on(files, tmp_path, case):
    """The `fractional_ids` rule warns (the loss cuts a fraction to the id below it, and such
    models train): `fit` says so at step 0, trains, and the warning alone does not fail it."""
    x, y = task(200)
    np.savez(tmp_path / "frac.npz", x=x, y=np.where(np.arange(200) == 5, FRACTIONS[case], y))
    result = fit(str(files / "mlp.keras"), "--data", str(tmp_path / "frac.npz"), "--steps", "20")
    doc = json.loads(result.output)
    assert findings(result) == [("target_mismatch", "head", 0)]
    said = doc["findings"][0]["message"]
    assert "whole numbers" in said and "Fix: pass integer class ids" in said
    assert doc["training"]["steps"] == 20 and doc["training"]["stopped"] is None
    assert result.exit_code == 0, result.output


def test_string_labels_are_one_error_naming_the_labels(files, tmp_path):
    x, y = task(200)
    np.savez(tmp_path / "words.npz", x=x, y=np.array(["cat", "dog"])[y % 2])
    result = CliRunner().invoke(
        main, ["fit", str(files / "mlp.keras"), "--data", str(tmp_path / "words.npz")]
    )
    assert result.exit_code == 2
    assert "labels 'y' are not numbers" in result.output and "Traceback" not in result.output


def test_an_optimizer_config_keras_cannot_make_is_one_short_line(tmp_path):
    """A file whose optimizer is some other object's config (here a layer's, with a long name):
    one clear line, exit 2, the config it repeats cut short."""
    import zipfile

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
    saved, path = tmp_path / "saved.keras", tmp_path / "odd.keras"
    model.save(saved)
    with zipfile.ZipFile(saved) as src, zipfile.ZipFile(path, "w") as out:
        for item in src.infolist():
            data = src.read(item)
            if item.filename == "config.json":
                config = json.loads(data)
                config["compile_config"]["optimizer"] = {
                    "module": "keras.layers", "class_name": "Dense",
                    "config": {"units": 1, "name": "n" * 2000}, "registered_name": None,
                }  # fmt: skip
                data = json.dumps(config).encode()
            out.writestr(item, data)
    data = tmp_path / "d.npz"
    rng = np.random.default_rng(0)
    np.savez(data, x=rng.standard_normal((8, 3)), y=rng.standard_normal((8, 1)))
    result = CliRunner().invoke(main, ["fit", str(path), "--data", str(data)])
    assert result.exit_code == 2, result.output
    (line,) = result.output.strip().splitlines()
    assert "the optimizer in the file is not one Keras can make" in line
    assert len(line) < 600
