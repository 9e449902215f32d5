"""A subclassed `keras.Model` (its config describes no layer graph): `layers` names its layers
from the weight file, `--input x.npz` with labels feeds only `x`, and a model saved after it
was built is probed at the shape its file records. The truth is a GradientTape over the
model's own layers."""

from __future__ import annotations

import importlib.util
import json
import sys

import numpy as np
import pytest
from click.testing import CliRunner
from helpers import normal

from layergrad.cli.app import main

MODULE = """
import keras


@keras.saving.register_keras_serializable(package="lg_subclassed_tests")
class TwoDense(keras.Model):
    def __init__(self, **kw):
        super().__init__(**kw)
        self.hidden = keras.layers.Dense(4, activation="tanh", name="hidden")
        self.logits = keras.layers.Dense(3, name="logits")

    def call(self, x):
        return self.logits(self.hidden(x))
"""


@pytest.fixture(scope="module")
def subclassed(tmp_path_factory):
    """(model file, module file, the loaded module's model)."""
    tmp = tmp_path_factory.mktemp("subclassed")
    module_path = tmp / "lg_subclassed_two_dense.py"
    module_path.write_text(MODULE)
    spec = importlib.util.spec_from_file_location(module_path.stem, module_path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_path.stem] = module
    spec.loader.exec_module(module)
    model = module.TwoDense(name="two")
    model(normal(3, 5, seed=3).astype("float32"))  # built by a call: build_config (3, 5)
    model.save(tmp / "two.keras")
    return str(tmp / "two.keras"), str(module_path), model


def cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


def tape_l2(model, x: np.ndarray) -> float:
    import tensorflow as tf

    with tf.GradientTape() as tape:
        h = model.hidden(tf.constant(x))
        tape.watch(h)
        out = model.logits(h)
        total = tf.reduce_sum(out)
    return float(np.linalg.norm(tape.gradient(total, h).numpy()))


def test_layers_names_the_layers_not_the_weight_groups(subclassed):
    path, module, _ = subclassed
    code, out = cli("layers", path, "--import", module, "--json")
    assert code == 0, out
    rows = {r["path"]: r["params"] for r in json.loads(out)["layers"]}
    assert rows == {"hidden": 5 * 4 + 4, "logits": 4 * 3 + 3}


def test_input_npz_with_labels_feeds_only_x(subclassed, tmp_path):
    path, module, model = subclassed
    x = normal(6, 5, seed=4).astype("float32")
    np.savez(tmp_path / "xy.npz", x=x, y=np.arange(6) % 3)
    code, out = cli("inspect", path, "--import", module, "--from", "hidden", "--to", "logits",
                    "--input", str(tmp_path / "xy.npz"), "--json")  # fmt: skip
    assert code == 0, out
    result = json.loads(out)["results"][0]
    assert result["from"]["shape"] == [6, 4]
    assert result["gradient"]["l2"] == pytest.approx(tape_l2(model, x), rel=1e-5)


def test_an_error_from_the_model_is_not_cut_mid_text(subclassed, tmp_path):
    path, module, _ = subclassed
    two = normal(4, 5, seed=5).astype("float32")
    np.savez(tmp_path / "ab.npz", a=two, b=two)
    code, out = cli("inspect", path, "--import", module, "--from", "hidden", "--to", "logits",
                    "--input", str(tmp_path / "ab.npz"))  # fmt: skip
    lines = out.strip().splitlines()
    assert code == 2 and len(lines) == 1, out
    assert "received 2 input" in out and "numpy=" not in out and "tf.Tensor" not in out, out


def test_a_random_probe_at_the_shape_the_file_records(subclassed):
    path, module, model = subclassed
    code, out = cli("inspect", path, "--import", module, "--from", "hidden", "--to", "logits",
                    "--json", "--batch-size", "7", "--seed", "2")  # fmt: skip
    assert code == 0, out
    doc = json.loads(out)
    assert doc["probe"]["source"] == "random"
    result = doc["results"][0]
    assert result["from"]["shape"] == [7, 4] and result["to"]["shape"] == [7, 3]
    x = np.random.default_rng(2).standard_normal((7, 5)).astype("float32")
    assert result["gradient"]["l2"] == pytest.approx(tape_l2(model, x), rel=1e-5)


def test_data_streams_into_the_shape_the_file_records(subclassed, tmp_path):
    path, module, model = subclassed
    x = normal(21, 5, seed=6).astype("float32")
    np.save(tmp_path / "x.npy", x)
    code, out = cli("inspect", path, "--import", module, "--from", "hidden", "--to", "logits",
                    "--data", str(tmp_path / "x.npy"), "--batch-size", "8", "--json", "--quiet")  # fmt: skip
    assert code == 0, out
    result = json.loads(out)["results"][0]
    assert json.loads(out)["probe"]["samples"] == 21
    assert result["gradient"]["l2"] == pytest.approx(tape_l2(model, x), rel=1e-5)


def test_fix_says_a_subclassed_model_has_no_layers_to_change(subclassed, tmp_path):
    # linear logits under categorical cross-entropy: check judges the head from its outputs;
    # fix can name no layer of a model without a layer graph, and says so
    from layergrad.commands.fix.repair import FixOptions, fix_model

    _, module, model = subclassed
    model.compile(optimizer="adam", loss="categorical_crossentropy")
    path = tmp_path / "compiled.keras"
    model.save(path)
    report = fix_model(path, options=FixOptions(output=str(tmp_path / "o.keras")),
                       imports=[module])  # fmt: skip
    assert not report.repairs and report.output is None
    assert "loss_mismatch" in {u.code for u in report.unrepaired}
    assert any("subclassed" in note for note in report.notes)


@pytest.fixture(scope="module")
def trainable(subclassed, tmp_path_factory):
    """The subclassed model compiled for its logits, and labelled data it can learn."""
    import keras

    _, module, model = subclassed
    tmp = tmp_path_factory.mktemp("subclassed_fit")
    model.compile(
        optimizer=keras.optimizers.Adam(1e-2),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    model.save(tmp / "compiled.keras")
    x = normal(256, 5, seed=7).astype("float32")
    np.savez(tmp / "xy.npz", x=x, y=(x[:, 0] > 0).astype("int32") + (x[:, 1] > 0))
    return tmp, module


def test_fit_trains_a_subclassed_model_at_the_shape_its_file_records(trainable):
    tmp, module = trainable
    path = tmp / "compiled.keras"
    before = path.read_bytes()
    code, out = cli("fit", str(path), "--import", module, "--data", str(tmp / "xy.npz"),
                    "--steps", "60", "--json")  # fmt: skip
    assert code == 0, out
    doc = json.loads(out)
    assert doc["training"]["steps"] == 60 and doc["training"]["epochs"] == 8  # 8 batches a pass
    assert doc["model"]["class"] == "TwoDense"
    assert {r["layer"] for r in doc["checkpoints"][-1]["layers"]} == {"hidden", "logits"}
    assert np.mean(doc["losses"][-8:]) < 0.8 * np.mean(doc["losses"][:8])  # it learns
    assert path.read_bytes() == before


def test_fix_with_data_runs_on_a_subclassed_model(trainable, tmp_path):
    tmp, module = trainable
    code, out = cli("fix", str(tmp / "compiled.keras"), "--import", module, "--data",
                    str(tmp / "xy.npz"), "--steps", "30", "--json",
                    "--output", str(tmp_path / "o.keras"))  # fmt: skip
    assert code in (0, 1), out
    doc = json.loads(out)
    assert doc["schema"] == "layergrad.fix/1" and doc["model"]["class"] == "TwoDense"


def test_fit_on_a_subclassed_model_saved_unbuilt_says_what_to_do(subclassed, tmp_path):
    import importlib

    _, module, _ = subclassed
    two = importlib.import_module("lg_subclassed_two_dense").TwoDense(name="unbuilt")
    two.compile(optimizer="adam", loss="mse")
    two.save(tmp_path / "unbuilt.keras")
    np.savez(tmp_path / "xy.npz", x=normal(8, 5), y=normal(8, 3))
    code, out = cli("fit", str(tmp_path / "unbuilt.keras"), "--import", module, "--data",
                    str(tmp_path / "xy.npz"), "--steps", "2")  # fmt: skip
    assert code == 2 and len(out.strip().splitlines()) == 1, out
    assert "--input" not in out  # an option fit does not have
    assert "call it on one batch before model.save" in out
