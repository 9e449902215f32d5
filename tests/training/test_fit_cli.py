"""`layergrad fit`: a saved model trained in memory on --data; exit codes, formats, the file."""

from __future__ import annotations

import hashlib
import json
import math

import numpy as np
import pytest
from click.testing import CliRunner
from helpers import keras

from layergrad.cli.app import main


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fit")

    def build():
        keras.utils.set_random_seed(0)
        return keras.Sequential(
            [
                keras.Input((8,), name="x"),
                keras.layers.Dense(32, activation="relu", name="hidden"),
                keras.layers.Dense(4, activation="softmax", name="head"),
            ]
        )

    model = build()
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="sparse_categorical_crossentropy")
    model.save(folder / "m.keras")
    build().save(folder / "bare.keras")  # never compiled
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1024, 8)).astype("float32")
    y = (x[:, 0] > 0).astype("int32") + 2 * (x[:, 1] > 0).astype("int32")
    np.savez(folder / "train.npz", x=x, y=y)
    np.savez(folder / "shuffled.npz", x=x, y=rng.permutation(y))
    np.save(folder / "x.npy", x)
    return folder


def run(*args: str):
    return CliRunner().invoke(main, ["fit", *args])


def digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_healthy_model_learns_exit_0_and_the_file_is_untouched(files):
    before = digest(files / "m.keras")
    result = run(
        str(files / "m.keras"), "--data", str(files / "train.npz"), "--steps", "200", "--json"
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["schema"] == "layergrad.fit/1" and doc["findings"] == []
    assert doc["training"]["steps"] == 200 and doc["training"]["every"] == 4
    assert doc["training"]["optimizer"] == "Adam"
    assert doc["training"]["learning_rate"] == pytest.approx(1e-2)  # the compiled one
    assert [c["step"] for c in doc["checkpoints"]][:3] == [1, 5, 9]
    assert doc["checkpoints"][-1]["step"] == 200
    assert doc["losses"][-1] < 0.5 * math.log(4)
    assert digest(files / "m.keras") == before


def test_shuffled_labels_fail_with_plateau_at_chance(files):
    result = run(
        str(files / "m.keras"),
        "--data",
        str(files / "shuffled.npz"),
        "--json",
        "--learning-rate",
        "1e-3",
    )
    assert result.exit_code == 1, result.output
    doc = json.loads(result.output)
    assert [f["finding"] for f in doc["findings"]] == ["plateau_at_chance"]
    assert doc["findings"][0]["layer"] == "head" and doc["findings"][0]["step"] >= 1
    assert doc["findings"][0]["code"] == "plateau_at_chance"  # the finding record's fields too
    assert {"severity", "facts", "hint"} <= set(doc["findings"][0])
    # the chance loss is the entropy of the labels' own class frequencies
    y = np.load(files / "shuffled.npz")["y"]
    p = np.bincount(y) / len(y)
    assert f"{-(p * np.log(p)).sum():.4g}" in doc["findings"][0]["message"]


def test_fail_on_chooses_which_findings_fail(files):
    args = [
        str(files / "m.keras"),
        "--data",
        str(files / "shuffled.npz"),
        "--learning-rate",
        "1e-3",
        "--steps",
        "100",
    ]
    assert run(*args, "--fail-on", "nonfinite").exit_code == 0
    result = run(*args, "--fail-on", "plateau")
    assert result.exit_code == 2 and "unknown finding plateau" in result.output


def test_learning_rate_10_with_sgd_diverges(files):
    result = run(
        str(files / "m.keras"),
        "--data",
        str(files / "train.npz"),
        "--optimizer",
        "sgd",
        "--learning-rate",
        "10",
        "--steps",
        "60",
        "--format",
        "markdown",
    )
    assert result.exit_code == 1
    assert "`diverging`" in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "needs --data with labels"),
        (["--data", "x.npy"], "holds the inputs alone; save the labels beside them in a .npz"),
        (["--data", "train.npz", "--steps", "5", "--epochs", "1"], "exclude each other"),
        (["--data", "train.npz", "--learning-rate", "-1"], "positive number"),
        (["--data", "train.npz", "--optimizer", "nonsense"], "not an optimizer"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(files, args, message):
    args = [a if not a.endswith((".npy", ".npz")) else str(files / a) for a in args]
    result = run(str(files / "m.keras"), *args)
    assert result.exit_code == 2
    assert message in result.output
    assert "Traceback" not in result.output


def test_an_uncompiled_model_needs_loss_and_optimizer(files):
    base = [str(files / "bare.keras"), "--data", str(files / "train.npz"), "--steps", "30"]
    result = run(*base)
    assert result.exit_code == 2 and "--loss NAME" in result.output
    result = run(*base, "--loss", "sparse_categorical_crossentropy")
    assert result.exit_code == 2 and "--optimizer" in result.output
    result = run(*base, "--loss", "sparse_categorical_crossentropy", "--optimizer", "adam")
    assert result.exit_code == 0, result.output


def test_epochs_and_html(files):
    from pagecheck import read_page

    result = run(
        str(files / "m.keras"),
        "--data",
        str(files / "train.npz"),
        "--epochs",
        "1",
        "--batch-size",
        "64",
        "--format",
        "html",
    )
    assert result.exit_code == 0, result.output
    page = read_page(result.output)
    assert not page.errors
    assert "16 steps in 1 epoch" in page.text
    assert page.count("polyline") == 1


def test_table_names_each_layer(files):
    result = run(str(files / "m.keras"), "--data", str(files / "train.npz"), "--steps", "20")
    assert result.exit_code == 0, result.output
    assert "hidden" in result.output and "head" in result.output
    assert "no finding in 20 steps" in result.output


def test_a_two_input_two_output_model_takes_labels_by_output_name(tmp_path):
    keras.utils.set_random_seed(0)
    a, b = keras.Input((4,), name="a"), keras.Input((3,), name="b")
    h = keras.layers.Dense(8, activation="relu", name="trunk")(
        keras.layers.Concatenate(name="cat")([a, b])
    )
    outputs = {
        "cls": keras.layers.Dense(3, activation="softmax", name="cls")(h),
        "reg": keras.layers.Dense(1, name="reg")(h),
    }
    model = keras.Model({"a": a, "b": b}, outputs)
    model.compile(optimizer="adam", loss={"cls": "sparse_categorical_crossentropy", "reg": "mse"})
    model.save(tmp_path / "two.keras")
    rng = np.random.default_rng(0)
    xa, xb = rng.standard_normal((256, 4)), rng.standard_normal((256, 3))
    labels = {"y:cls": (xa[:, 0] > 0).astype("int32"), "y:reg": xb[:, :1]}
    np.savez(tmp_path / "two.npz", a=xa.astype("float32"), b=xb.astype("float32"), **labels)
    result = run(str(tmp_path / "two.keras"), "--data", str(tmp_path / "two.npz"), "--steps",
                 "40", "--json")  # fmt: skip
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    layers = [r["layer"] for r in doc["checkpoints"][0]["layers"]]
    assert sorted(layers) == ["cat", "cls", "reg", "trunk"]  # called layers only: no inputs
    assert layers[:2] == ["cat", "trunk"]  # the graph's order: the heads come after the trunk
    np.savez(tmp_path / "no_labels.npz", a=xa.astype("float32"), b=xb.astype("float32"))
    result = run(str(tmp_path / "two.keras"), "--data", str(tmp_path / "no_labels.npz"))
    assert result.exit_code == 2 and "y:NAME" in result.output


def test_steps_count_passes_over_the_data(files):
    """1,024 samples at batch 32 are 32 batches a pass: 100 steps are 4 passes begun, and
    each checkpoint's epoch and batch are its step's place in the passes (the steps run in
    one Keras epoch over the repeated data, which Keras would call epoch 0, batch 99)."""
    args = [str(files / "m.keras"), "--data", str(files / "train.npz"), "--steps", "100"]
    result = run(*args, "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["training"]["steps"] == 100 and doc["training"]["epochs"] == 4
    where = [(c["step"], c["epoch"], c["batch"]) for c in doc["checkpoints"]]
    assert where == [(s, *divmod(s - 1, 32)) for s, _, _ in where]
    assert where[-1] == (100, 3, 3)
    assert "100 steps in 4 epochs" in run(*args).output
