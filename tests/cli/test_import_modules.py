"""`--import` with a custom class the model file names but no decorator registers, as a
training script saves it (Keras writes no module for a class of `__main__`): found among the
classes the imported module defines; missing, it is exit 2 naming the class, not an
unreadable file; a module that trains and saves the model when imported is refused. And a
NumPy data file given where the model goes is said to be data."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
from click.testing import CliRunner
from helpers import keras

from layergrad.cli.app import main

LAYER = """
import keras


class Tripler(keras.layers.Layer):  # not registered: found by name among this module's classes
    def __init__(self, factor=3.0, **kwargs):
        super().__init__(**kwargs)
        self.factor = factor

    def call(self, x):
        return x * self.factor

    def get_config(self):
        return {**super().get_config(), "factor": self.factor}
"""

SCRIPT = (
    LAYER
    + """

# a training script: importing it builds, "trains" and saves the model again
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2, name="other")])
model.save(MODEL)
"""
)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("imports")
    (folder / "tripler_layers.py").write_text(LAYER)
    namespace: dict[str, object] = {}
    exec(compile(LAYER, "tripler_main", "exec"), namespace)
    tripler = namespace["Tripler"]
    tripler.__module__ = "__main__"  # as `python train.py` defines it
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((4,), name="x"),
            keras.layers.Dense(5, activation="relu", name="dense"),
            tripler(name="tripler"),
            keras.layers.Dense(3, activation="softmax", name="head"),
        ]
    )
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    model.save(folder / "custom.keras")
    config = json.loads(__import__("zipfile").ZipFile(folder / "custom.keras").read("config.json"))
    assert config["config"]["layers"][2]["module"] is None  # the class of a script
    np.savez(folder / "data.npz", x=np.zeros((4, 4), "float32"), y=np.zeros(4, "int32"))
    np.save(folder / "x.npy", np.zeros((4, 4), "float32"))
    return folder


def run(*args: str):
    return CliRunner().invoke(main, list(args))


def digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_an_unregistered_class_of_an_imported_module_loads(files):
    model = str(files / "custom.keras")
    layers = str(files / "tripler_layers.py")
    result = run("check", model, "--import", layers)
    assert result.exit_code == 0, result.output
    assert "PASS" in result.output
    # d sum(tripler) / d dense is the factor, 3, everywhere: the class Keras built is the module's
    result = run(
        "inspect", model, "--from", "dense", "--to", "tripler", "--import", layers, "--json"
    )
    assert result.exit_code == 0, result.output
    gradient = json.loads(result.output)["results"][0]["gradient"]
    assert gradient["mean_abs"] == pytest.approx(3.0) and gradient["max_abs"] == pytest.approx(3.0)


@pytest.mark.parametrize("command", ["check", "scan"])
def test_a_class_no_module_defines_is_exit_2_naming_it_not_unreadable(files, command):
    result = run(command, str(files / "custom.keras"))
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    assert "custom class 'Tripler'" in lines[0] and "--import MODULE" in lines[0]
    assert "only defines classes" in lines[0]
    assert "unreadable" not in result.output and "FAIL" not in result.output


def test_a_module_that_saves_the_model_when_imported_is_refused(files, tmp_path):
    model = tmp_path / "custom.keras"
    model.write_bytes((files / "custom.keras").read_bytes())
    script = tmp_path / "train_tripler.py"
    script.write_text(SCRIPT.replace("MODEL", repr(str(model))))
    before = digest(model)
    result = run("check", str(model), "--import", str(script))
    assert digest(model) != before  # the script wrote it: nothing layergrad can prevent
    assert result.exit_code == 2, result.output
    assert "changed after --import" in result.output
    assert "only defines the custom classes" in result.output
    assert "Traceback" not in result.output and "PASS" not in result.output


def test_help_says_the_imported_module_must_only_define_classes():
    result = run("check", "--help")
    assert result.exit_code == 0
    assert "must only define classes" in " ".join(result.output.split())


@pytest.mark.parametrize("name", ["data.npz", "x.npy"])
def test_a_numpy_file_given_as_the_model_is_said_to_be_data(files, name):
    result = run("check", str(files / name), "--json")
    assert result.exit_code == 1, result.output
    (check,) = json.loads(result.output)["files"][0]["checks"]
    assert check["name"] == "readable" and check["findings"] == ["unreadable"]
    assert "is a NumPy data file, not a model" in check["message"]
    assert f"pass the model file, and the data with --data {files / name}" in check["message"]
    assert "rename" not in check["message"]


def test_a_class_named_as_a_keras_layer_does_not_replace_it(files, tmp_path):
    """A legacy .h5 file looks a class up among the custom objects first: a module's own
    `Dense` would load in place of every Keras Dense."""
    model = keras.saving.load_model(files / "custom.keras", compile=False, custom_objects={
        "Tripler": _tripler(files)})  # fmt: skip
    model.save(tmp_path / "custom.h5")
    module = tmp_path / "tripler_and_dense.py"
    module.write_text(
        LAYER
        + "\n\nclass Dense(keras.layers.Dense):  # zero outputs: a helper of the training code\n"
        "    def call(self, x):\n        return super().call(x) * 0.0\n"
    )
    result = run("inspect", str(tmp_path / "custom.h5"), "--from", "tripler", "--to", "head",
                 "--import", str(module), "--json")  # fmt: skip
    assert result.exit_code == 0, result.output
    (found,) = json.loads(result.output)["results"]
    assert found["status"] == "ok" and found["gradient"]["max_abs"] > 0


def _tripler(files):
    import importlib.util

    spec = importlib.util.spec_from_file_location("tripler_layers", files / "tripler_layers.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.Tripler


@pytest.fixture(scope="module")
def h5_with_operation(tmp_path_factory):
    """A functional model with a Keras operation between its layers (`keras.ops.sum`), saved
    in the legacy format: Keras writes the operation there but cannot load it back."""
    folder = tmp_path_factory.mktemp("h5_operation")
    x = keras.Input((5, 3), name="x")
    seq = keras.layers.Dense(2, name="dense")(x)
    out = keras.layers.Dense(1, name="head")(keras.ops.sum(seq, axis=1))
    keras.Model(x, out).save(folder / "ops.h5")
    with pytest.raises(ValueError, match="Unknown layer: 'Sum'"):
        keras.saving.load_model(folder / "ops.h5")  # Keras itself, with nothing to import
    return folder / "ops.h5"


def test_a_keras_operation_in_an_h5_file_is_not_a_missing_import(h5_with_operation):
    result = run("scan", str(h5_with_operation))
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    assert "Keras operation 'Sum'" in lines[0] and "as .keras" in lines[0]
    assert "--import" not in lines[0] and "custom" not in lines[0]
    # in `check` the file fails its `loads` check (no --import would load it), the run goes on
    result = run("check", str(h5_with_operation), "--json")
    assert result.exit_code == 1, result.output
    (report,) = json.loads(result.output)["files"]
    loads = [c for c in report["checks"] if c["name"] == "loads"]
    assert loads and not loads[0]["passed"] and loads[0]["findings"] == ["unreadable"]
    assert "Keras operation 'Sum'" in loads[0]["message"]
