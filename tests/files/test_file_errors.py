"""Every broken, hostile or mismatched file through the CLI, for `layers` and `inspect`.

Each case must exit 2 with one line on stderr that names what was found, what was expected
and the next step; no traceback (unless --debug); the file's bytes and mtime unchanged; and,
for a file that cannot be read, TensorFlow never imported. The files are real: saved by
Keras, then cut, emptied or rewritten by hand.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
from click.testing import CliRunner
from helpers import keras, tf
from hostile import members_of

from layergrad.cli.app import main

layers = keras.layers
INSPECT = ["--from", "dense", "--to", "dense_1"]


def _model(name: str, widths: tuple[int, ...]) -> Any:
    """A Sequential on (5,) inputs with Dense layers `dense`, `dense_1`, ... of these widths."""
    names = ["dense"] + [f"dense_{i}" for i in range(1, len(widths))]
    stack = [layers.Dense(w, name=n) for w, n in zip(widths, names, strict=True)]
    return keras.Sequential([keras.Input((5,)), *stack], name=name)


def _zip(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return path


def _with_weights_of(path: Path, donor: Path, out: Path) -> Path:
    """`path`'s config with `donor`'s model.weights.h5."""
    members = members_of(path)
    members["model.weights.h5"] = members_of(donor)["model.weights.h5"]
    return _zip(out, members)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("file_errors")
    return _build(root)


def _build(root: Path) -> dict[str, Path]:
    good = _model("good", (4, 2))
    out = {"keras": root / "good.keras", "h5": root / "good.h5"}
    good.save(out["keras"])
    good.save(out["h5"])
    for name, widths in {"wide": (7, 2), "short": (4,), "long": (4, 2, 3)}.items():
        _model(name, widths).save(root / f"{name}.keras")
    keras_bytes, h5_bytes = out["keras"].read_bytes(), out["h5"].read_bytes()
    for name, data in {
        "empty.keras": b"",
        "random.keras": bytes(np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8)),
        "truncated.keras": keras_bytes[: len(keras_bytes) // 2],
        "truncated.h5": h5_bytes[: len(h5_bytes) // 2],
    }.items():
        out[name] = root / name
        out[name].write_bytes(data)
    out["missing"] = root / "missing.keras"
    out["directory"] = root / "a_directory"
    out["directory"].mkdir()
    members = members_of(out["keras"])
    out["no_config"] = _zip(root / "no_config.keras", {"metadata.json": members["metadata.json"]})
    out["bad_json"] = _zip(root / "bad_json.keras", {**members, "config.json": b'{"class_name": '})
    out["shape_mismatch"] = _with_weights_of(out["keras"], root / "wide.keras", root / "s.keras")
    out["fewer_weights"] = _with_weights_of(out["keras"], root / "short.keras", root / "f.keras")
    out["more_weights"] = _with_weights_of(out["keras"], root / "long.keras", root / "m.keras")
    out["h5_mismatch"] = root / "mismatch.h5"
    out["h5_mismatch"].write_bytes(h5_bytes)
    with h5py.File(out["h5_mismatch"], "r+") as h5:
        group = h5["model_weights/dense"]
        kernel = next(n.decode() if isinstance(n, bytes) else n for n in group.attrs["weight_names"]
                      if "kernel" in str(n))  # fmt: skip
        del group[kernel]
        group.create_dataset(kernel, data=np.ones((6, 4), "float32"))
    out["bad_name.h5"] = root / "bad_name.h5"  # a layer name that is not UTF-8
    out["bad_name.h5"].write_bytes(h5_bytes)
    with h5py.File(out["bad_name.h5"], "r+") as h5:
        names = list(h5["model_weights"].attrs["layer_names"])
        h5["model_weights"].attrs["layer_names"] = np.array([*names[:-1], b"dense\xff"], "S")
    hostile = keras.Sequential(
        [
            keras.Input((5,)),
            layers.Dense(4, name="dense"),
            layers.Lambda(lambda t: t * 2.0, name="dense_1"),
        ],
        name="hostile",
    )
    out["lambda"] = root / "lambda.keras"
    hostile.save(out["lambda"])
    out["saved_model"] = root / "saved_model"
    tf.saved_model.save(good, str(out["saved_model"]))
    out["exported"] = root / "exported"
    good.export(str(out["exported"]), verbose=False)
    out["bad_shape.npy"] = root / "bad_shape.npy"
    np.save(out["bad_shape.npy"], np.zeros((8, 7), "float32"))
    out["bad_dtype.npy"] = root / "bad_dtype.npy"
    np.save(out["bad_dtype.npy"], np.full((8, 5), "a"))
    return out


def _state(path: Path) -> Any:
    """Bytes and mtime of a file; names, sizes and mtimes under a directory; None if absent."""
    if path.is_file():
        return hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns
    if path.is_dir():
        return sorted((str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in path.rglob("*"))
    return None


# case -> phrases the one-line message must contain (after the file name)
UNREADABLE = {
    "missing": ["no such file", "expected a Keras model file", "check the path"],
    "directory": ["is a directory", "expected a .keras or .h5 file", "pass the model file"],
    "saved_model": ["TensorFlow SavedModel directory", "cannot address the layers",
                    'model.save("model.keras")'],
    "exported": ["TensorFlow SavedModel directory", "cannot address the layers",
                 'model.save("model.keras")'],
    "empty.keras": ["is empty (0 bytes)", "expected a .keras or .h5 model", "re-save it"],
    "random.keras": ["neither a zip (.keras) nor an HDF5 (.h5) file", "expected a model saved",
                     "re-save"],
    "truncated.keras": ["truncated or damaged", "expected an intact model file", "re-save"],
    "truncated.h5": ["truncated or damaged", "expected an intact model file", "re-save"],
    "no_config": ["zip archive without config.json", "expected a .keras model",
                  'model.save("model.keras")'],
    "bad_json": ["config.json is not valid JSON (Expecting", "expected the model's saved config",
                 "re-save"],
    "lambda": ["refusing to load", "layer 'dense_1' (Lambda)", "Python bytecode",
               "pass --unsafe"],
}  # fmt: skip
MISMATCH = ["do not match its architecture", "re-save the model"]
INSPECT_ONLY = {
    "shape_mismatch": ([*MISMATCH, "variable.shape=(5, 4)"], []),
    "fewer_weights": ([*MISMATCH, "expected 2 variables, but received 0"], []),
    "h5_mismatch": ([*MISMATCH, "expects shape (5, 4)", "(6, 4)"], []),
    "bad_shape.npy": (["has shape (8, 7)", "expected (batch, 5)"], ["--input"]),
    "bad_dtype.npy": (["has dtype <U1", "expects float32"], ["--input"]),
}


def _invoke(args: list[str]) -> Any:
    return CliRunner().invoke(main, args)


def _assert_one_line_error(result: Any, phrases: list[str], shown: str) -> None:
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr
    assert "Traceback" not in result.output
    for phrase in (shown, *phrases):
        assert phrase in result.stderr, (phrase, result.stderr)


@pytest.mark.parametrize("command", ["layers", "inspect"])
@pytest.mark.parametrize("case", list(UNREADABLE))
def test_unreadable_or_hostile_file(files: dict[str, Path], case: str, command: str) -> None:
    path = files[case]
    before = _state(path)
    extra = INSPECT if command == "inspect" else []
    result = _invoke([command, str(path), *extra])
    _assert_one_line_error(result, UNREADABLE[case], path.name)
    assert _state(path) == before


def test_a_weight_name_that_is_not_utf8_marks_the_file_damaged(files: dict[str, Path]) -> None:
    """Names of weights are matched to layers: one that cannot be decoded is a damaged file,
    never a layer whose weights are skipped without a word."""
    result = _invoke(["check", str(files["bad_name.h5"])])
    assert result.exit_code == 1, result.output
    assert "truncated or damaged (UnicodeDecodeError" in result.output
    assert "0 passed, 1 failed" in result.output


@pytest.mark.parametrize("case", list(INSPECT_ONLY))
def test_inspect_mismatched_weights_or_input(files: dict[str, Path], case: str) -> None:
    phrases, option = INSPECT_ONLY[case]
    model = files["keras"] if option else files[case]
    watched = [model, files[case]]
    before = [_state(p) for p in watched]
    result = _invoke(
        ["inspect", str(model), *INSPECT, *option, *([str(files[case])] if option else [])]
    )
    _assert_one_line_error(result, phrases, files[case].name)
    assert [_state(p) for p in watched] == before


def test_layers_lists_weights_it_cannot_match(files: dict[str, Path]) -> None:
    """`layers` reads only stored shapes, so a weight file from a different architecture is
    listed; a group the config has no layer for is flagged (Keras would silently skip it)."""
    result = _invoke(["layers", str(files["more_weights"])])
    assert result.exit_code == 0
    assert "dense_2: weights stored for a layer the config does not have" in result.stdout
    shape = _invoke(["layers", str(files["shape_mismatch"]), "--json"])
    assert shape.exit_code == 0 and '"params": 42' in shape.stdout  # stored (5, 7) + (7,)


def test_unsafe_loads_the_lambda_file(files: dict[str, Path]) -> None:
    before = _state(files["lambda"])
    result = _invoke(["inspect", str(files["lambda"]), *INSPECT, "--unsafe", "--json"])
    assert result.exit_code == 0, result.output
    assert '"status": "ok"' in result.stdout
    assert _state(files["lambda"]) == before


def test_a_lambda_that_fails_once_loaded_unsafe_is_one_line(tmp_path: Path) -> None:
    """With --unsafe the Lambda is loaded; its function then sees none of the modules its
    code used (Keras loads it with its own globals): the call raises NameError, which every
    command says in one line naming the layer's code, and `check` fails at `forward`. A
    Lambda whose output shape Keras cannot infer does not load at all: that is said as
    Keras's own message, not as a refusal that --unsafe would lift, and without the terminal
    styles Keras puts in it."""
    x = keras.Input((4,), name="x")
    h = layers.Dense(8, name="dense")(x)
    square = layers.Lambda(lambda t: keras.ops.square(t), output_shape=(8,), name="sq")(h)
    keras.Model(x, layers.Dense(1, name="dense_1")(square)).save(tmp_path / "names.keras")
    unshaped = layers.Lambda(lambda t: keras.ops.square(t), name="sq")(h)
    keras.Model(x, layers.Dense(1, name="dense_1")(unshaped)).save(tmp_path / "shape.keras")
    names = str(tmp_path / "names.keras")
    before = _state(tmp_path / "names.keras")
    for args in (
        ["inspect", names, *INSPECT],
        ["scan", names],
        ["scan", names, "--wrt", "weights", "--loss", "mse"],
    ):
        result = _invoke([*args, "--unsafe"])
        said = "the model failed on the probe batch: NameError: "
        _assert_one_line_error(result, [said, "name 'keras' is not defined", "--import"], "")
        assert "unexpected" not in result.stderr
    check = _invoke(["check", names, "--unsafe", "--json"])
    assert check.exit_code == 1, check.output
    (forward,) = [
        c for c in json.loads(check.stdout)["files"][0]["checks"] if c["name"] == "forward"
    ]
    assert not forward["passed"] and "NameError" in forward["message"]
    assert _state(tmp_path / "names.keras") == before
    result = _invoke(["inspect", str(tmp_path / "shape.keras"), *INSPECT, "--unsafe"])
    _assert_one_line_error(result, ["Keras could not load", "output_shape"], "")
    assert "--unsafe" not in result.stderr and "\x1b" not in result.stderr


def test_a_custom_layer_whose_call_raises_is_one_line_naming_its_error(tmp_path: Path) -> None:
    """A registered custom layer (given with --import) whose call raises KeyError on a real
    batch (not on the symbolic one Keras builds the model with): one line naming the error
    and the layer's code, exit 2; no word of Lambdas."""
    module = tmp_path / "broken_layers.py"
    module.write_text(
        "import keras\n\n"
        "@keras.saving.register_keras_serializable(package='broken')\n"
        "class Lookup(keras.layers.Layer):\n"
        "    def call(self, x):\n"
        "        if x.shape[0] is not None:\n"
        "            raise KeyError('no such entry')\n"
        "        return x\n"
    )
    import importlib.util

    spec = importlib.util.spec_from_file_location("broken_layers", module)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    x = keras.Input((4,), name="x")
    out = layers.Dense(1, name="dense_1")(
        mod.Lookup(name="lookup")(layers.Dense(4, name="dense")(x))
    )
    keras.Model(x, out).save(tmp_path / "custom.keras")
    path = str(tmp_path / "custom.keras")
    result = _invoke(["inspect", path, *INSPECT, "--import", str(module)])
    _assert_one_line_error(result, ["KeyError", "the layer's own code raised it"], "")
    assert "Lambda" not in result.stderr and "unexpected" not in result.stderr


@pytest.mark.parametrize("command", ["layers", "inspect"])
@pytest.mark.parametrize("case", ["truncated.keras", "lambda"])
def test_debug_shows_the_traceback(files: dict[str, Path], case: str, command: str) -> None:
    extra = INSPECT if command == "inspect" else []
    result = _invoke([command, str(files[case]), *extra, "--debug"])
    assert result.exit_code == 2
    assert "Traceback (most recent call last)" in result.stderr
    assert result.stderr.rstrip().splitlines()[-1].startswith("error: ")


def test_unreadable_files_never_import_tensorflow(files: dict[str, Path]) -> None:
    code = textwrap.dedent(
        """
        import sys
        from click.testing import CliRunner
        from layergrad.cli.app import main
        for path in sys.argv[1:]:
            for args in (["layers", path], ["inspect", path, "--from", "a", "--to", "b"]):
                result = CliRunner().invoke(main, args)
                assert result.exit_code == 2, (args, result.output)
                assert "Traceback" not in result.output
        print(sorted(m for m in ("tensorflow", "keras") if m in sys.modules))
        """
    )
    paths = [str(files[case]) for case in UNREADABLE]
    env = dict(os.environ)
    done = subprocess.run(
        [sys.executable, "-c", code, *paths], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_an_error_of_layergrads_own_code_in_a_layer_call_is_not_blamed_on_the_model(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """layergrad's capture runs inside each layer's call, so Keras marks its errors as the
    layer's: one raised there (a bug of layergrad's, made here by hand) must come out as
    itself (the CLI's unexpected-error line), never as the model's fault."""
    from layergrad.commands.api import inspect_model
    from layergrad.core.errors import one_line
    from layergrad.engine import capture

    def broken(self: object, *args: object, **kwargs: object) -> None:
        one_line(None)  # type: ignore[arg-type]  # fails inside layergrad: AttributeError

    monkeypatch.setattr(capture.Recorder, "_record", broken)
    with pytest.raises(AttributeError, match="split"):
        inspect_model(str(Path(__file__).parents[2] / "sample_models" / "seed.keras"),
                      "dense", ["dense_1"])  # fmt: skip
