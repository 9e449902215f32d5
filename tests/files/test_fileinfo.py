"""read_file_info / audit on real .keras and .h5 files, without TensorFlow in the reader.

Independent truths: ``layer.count_params()`` of the live model, NaN/Inf written
with ``layer.set_weights``, and files built by hand for every broken-file case.
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
keras = pytest.importorskip("keras")
layers = keras.layers

from layergrad.core.errors import LoadError  # noqa: E402
from layergrad.files.audit import audit  # noqa: E402
from layergrad.files.file_info import FileInfo, read_file_info  # noqa: E402
from layergrad.model.graph import ModelGraph  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CUSTOM_MODULE = "lg_fileinfo_custom"
CUSTOM_SOURCE = textwrap.dedent(
    """
    import keras

    @keras.saving.register_keras_serializable(package="lgtestpkg")
    class Scale(keras.layers.Layer):
        def __init__(self, k=2.0, **kwargs):
            super().__init__(**kwargs)
            self.k = k

        def call(self, x):
            return x * self.k

        def get_config(self):
            return {**super().get_config(), "k": self.k}
    """
)


def _custom_module(root: Path) -> Any:
    source = root / f"{CUSTOM_MODULE}.py"
    source.write_text(CUSTOM_SOURCE)
    spec = importlib.util.spec_from_file_location(CUSTOM_MODULE, source)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[CUSTOM_MODULE] = module
    spec.loader.exec_module(module)
    return module


def _nested_shared() -> Any:
    encoder = keras.Sequential(
        [keras.Input((4,)), layers.Dense(5, name="dense_1"), layers.Dense(5, name="dense_2")],
        name="encoder",
    )
    x = keras.Input((4,), name="x")
    shared = layers.Dense(5, name="shared")
    h = shared(shared(encoder(x)))
    side = layers.Dense(3, name="side")(x)
    out = layers.Concatenate(name="cat")([layers.BatchNormalization(name="bn")(h), side])
    return keras.Model(x, layers.Dropout(0.1, name="drop")(out), name="nested_shared")


def _embedding() -> Any:
    ids = keras.Input((6,), dtype="int32", name="ids")
    e = layers.Embedding(50, 8, name="embed")(ids)
    return keras.Model(ids, layers.Dense(2, name="head")(layers.GlobalAveragePooling1D()(e)))


def _sequential_add() -> Any:
    model = keras.Sequential(name="seq")
    model.add(keras.Input((4,)))
    model.add(layers.Dense(3, name="dense"))
    model.add(layers.Dense(2, name="dense_1"))
    return model


def _poisoned() -> Any:
    """dense has 3 NaN and 2 +Inf in its kernel; zeroed has an all-zero kernel and bias."""
    model = keras.Sequential(
        [keras.Input((4,)), layers.Dense(3, name="dense"), layers.Dense(2, name="zeroed")],
        name="poisoned",
    )
    kernel, bias = model.get_layer("dense").get_weights()
    kernel.flat[:3] = np.nan
    kernel.flat[3:5] = np.inf
    model.get_layer("dense").set_weights([kernel, bias])
    model.get_layer("zeroed").set_weights([np.zeros((3, 2)), np.zeros(2)])
    return model


def _unsafe(custom: Any) -> Any:
    inner = keras.Sequential(
        [keras.Input((4,)), layers.Lambda(lambda t: t * 2.0, name="lam")], name="encoder"
    )
    x = keras.Input((4,), name="x")
    y = custom.Scale(name="scale")(inner(x))
    return keras.Model(x, layers.Dense(1, name="head")(y), name="unsafe")


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Any, dict[str, Path]]]:
    """Each test model, built once and saved as .keras and .h5."""
    root = tmp_path_factory.mktemp("fileinfo_models")
    custom = _custom_module(root)
    builders = {
        "nested_shared": _nested_shared,
        "embedding": _embedding,
        "seq": _sequential_add,
        "poisoned": _poisoned,
        "unsafe": lambda: _unsafe(custom),
    }
    out = {}
    for name, build in builders.items():
        model = build()
        paths = {fmt: root / f"{name}.{fmt}" for fmt in ("keras", "h5")}
        for path in paths.values():
            model.save(path)
        out[name] = (model, paths)
    return out


def _live_layer(model: Any, path: str) -> Any:
    layer = model
    for part in path.split("/"):
        layer = layer.get_layer(part)
    return layer


def _fingerprint(path: Path) -> tuple[str, int]:
    return hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns


FORMATS = ["keras", "h5"]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("name", ["nested_shared", "embedding", "seq"])
def test_params_per_layer_match_keras(name: str, fmt: str, saved: dict) -> None:
    model, paths = saved[name]
    before = _fingerprint(paths[fmt])
    info = read_file_info(paths[fmt])
    assert _fingerprint(paths[fmt]) == before
    assert info.format == fmt and info.keras_version == keras.__version__
    assert info.graph.name == model.name
    got = {w.layer: w.params for w in info.weights}
    leaves = [e.path for e in info.graph.layers if not e.is_model]
    want = {p: _live_layer(model, p).count_params() for p in leaves}
    assert got == {p: n for p, n in want.items() if n}
    assert sum(got.values()) == model.count_params()
    assert all(w.nan == 0 and w.inf == 0 for w in info.weights)


def test_nested_and_shared_paths(saved: dict) -> None:
    info = read_file_info(saved["nested_shared"][1]["keras"])
    names = [w.layer for w in info.weights]
    assert set(names) == {"encoder/dense_1", "encoder/dense_2", "shared", "side", "bn"}
    assert names == [e.path for e in info.graph.layers if e.path in names]  # graph order
    shared = {w.layer: w for w in info.weights}["shared"]
    assert shared.tensors == 2 and shared.params == 30  # stored once, called twice
    assert info.graph.get("shared").num_calls == 2
    bn = {w.layer: w for w in info.weights}["bn"]
    assert bn.tensors == 4 and bn.zero_tensors == 2  # beta and moving mean start at 0


def test_weight_groups_without_saved_names(saved: dict, tmp_path: Path) -> None:
    """Older Keras 3 files lack the layer name on ``vars`` groups: the class-based group
    names (``dense``, ``dense_1``, ``sequential``...) must still map to the right layers."""
    src = saved["nested_shared"][1]["keras"]
    with zipfile.ZipFile(src) as zf:
        members = {name: zf.read(name) for name in zf.namelist()}
    buffer = io.BytesIO(members["model.weights.h5"])
    with h5py.File(buffer, "r+") as h5:
        named: list[Any] = []
        h5.visititems(lambda _n, obj: named.append(obj) if "name" in obj.attrs else None)
        assert named
        for obj in named:
            del obj.attrs["name"]
    members["model.weights.h5"] = buffer.getvalue()
    old = _zip(tmp_path / "old_names.keras", members)
    want = {w.layer: w.params for w in read_file_info(src).weights}
    assert {w.layer: w.params for w in read_file_info(old).weights} == want


@pytest.mark.parametrize("fmt", FORMATS)
def test_nan_inf_and_zero_tensors(fmt: str, saved: dict) -> None:
    info = read_file_info(saved["poisoned"][1][fmt])
    health = {w.layer: w for w in info.weights}
    assert (health["dense"].nan, health["dense"].inf) == (3, 2)
    assert health["dense"].zero_tensors == 1  # the bias
    assert (health["zeroed"].nan, health["zeroed"].inf, health["zeroed"].zero_tensors) == (0, 0, 2)


def test_read_weights_false_and_the_name_decides_the_format(saved: dict, tmp_path: Path) -> None:
    """Keras picks the format from the name (.keras zip, .h5 HDF5) and refuses anything else;
    the reader decides the same way and names the rename that fixes a mismatch."""
    keras_path, h5_path = saved["seq"][1]["keras"], saved["seq"][1]["h5"]
    assert read_file_info(keras_path, read_weights=False).weights == ()
    cases = {
        "model_keras.bin": (keras_path, "rename it to end in .keras"),
        "model_h5.bin": (h5_path, "rename it to end in .h5"),
        "really_h5.keras": (h5_path, "rename it to end in .h5"),
        "really_zip.h5": (keras_path, "rename it to end in .keras"),
    }
    for name, (src, phrase) in cases.items():
        renamed = tmp_path / name
        shutil.copyfile(src, renamed)
        with pytest.raises(LoadError, match=phrase):
            read_file_info(renamed)
        with pytest.raises(Exception):  # noqa: B017  (Keras refuses it too, in its own words)
            keras.saving.load_model(renamed)
    for src, suffix in ((keras_path, ".keras"), (h5_path, ".hdf5")):
        ok = tmp_path / f"copy{suffix}"
        shutil.copyfile(src, ok)
        assert [w.layer for w in read_file_info(ok).weights] == ["dense", "dense_1"]


def test_reader_never_imports_tensorflow(saved: dict) -> None:
    code = textwrap.dedent(
        """
        import sys
        from layergrad.files.audit import audit
        from layergrad.files.file_info import read_file_info
        for path in sys.argv[1:]:
            info = read_file_info(path)
            audit(info)
            info.graph.depends(info.graph.layers[-1].path, info.graph.layers[0].path)
        leaked = sorted(m for m in ("tensorflow", "keras") if m in sys.modules)
        assert not leaked, leaked
        print("clean")
        """
    )
    paths = [str(p) for _, ps in saved.values() for p in ps.values()]
    env = dict(os.environ)
    done = subprocess.run(
        [sys.executable, "-c", code, *paths], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "clean"


# ----- broken files ----------------------------------------------------------------------------


def _zip(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return path


def _broken_files(tmp_path: Path, saved: dict) -> dict[str, tuple[Path, str]]:
    """name -> (path, a phrase the message must contain)."""
    good_keras = saved["seq"][1]["keras"].read_bytes()
    good_h5 = saved["seq"][1]["h5"].read_bytes()
    savedmodel = tmp_path / "exported"
    savedmodel.mkdir()
    (savedmodel / "saved_model.pb").write_bytes(b"\x08\x01")
    plain_dir = tmp_path / "plain_dir"
    plain_dir.mkdir()
    files = {
        "empty": (b"", "empty"),
        "random": (bytes(range(256)) * 4, "neither a zip"),
        "truncated_keras": (good_keras[: len(good_keras) // 2], "truncated"),
        "truncated_h5": (good_h5[: len(good_h5) // 2], "truncated"),
    }
    out = {}
    for name, (data, phrase) in files.items():
        suffix = ".h5" if name.endswith("h5") else ".keras"
        path = tmp_path / f"{name}{suffix}"
        path.write_bytes(data)
        out[name] = (path, phrase)
    out["missing"] = (tmp_path / "missing.keras", "no such file")
    out["savedmodel"] = (savedmodel, 'model.save("model.keras")')
    out["directory"] = (plain_dir, "is a directory")
    out["no_config"] = (_zip(tmp_path / "noconf.keras", {"metadata.json": b"{}"}), "config.json")
    out["bad_json"] = (
        _zip(tmp_path / "badjson.keras", {"config.json": b"{not json"}),
        "not valid JSON",
    )
    out["zip_as_bin"] = (_zip(tmp_path / "other.bin", {"readme.txt": b"hi"}), "rename it")
    return out


def test_every_broken_file_raises_one_line_load_error(saved: dict, tmp_path: Path) -> None:
    for name, (path, phrase) in _broken_files(tmp_path, saved).items():
        before = _fingerprint(path) if path.is_file() else None
        with pytest.raises(LoadError) as caught:
            read_file_info(path)
        message = str(caught.value)
        assert "\n" not in message, name
        assert phrase in message, (name, message)
        assert path.name in message and "expected" in message, (name, message)
        if before is not None:
            assert _fingerprint(path) == before, name
    with pytest.raises(LoadError, match="cannot address the layers of a SavedModel"):
        read_file_info(tmp_path / "exported")


# ----- audit -----------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_audit_finds_lambda_and_custom_class(fmt: str, saved: dict) -> None:
    info = read_file_info(saved["unsafe"][1][fmt])
    findings = audit(info)
    by_layer = {f.layer: f for f in findings}
    assert set(by_layer) == {"encoder/lam", "scale"}
    assert by_layer["encoder/lam"].class_name == "Lambda"
    assert "bytecode" in by_layer["encoder/lam"].reason
    if fmt == "keras":
        assert CUSTOM_MODULE in by_layer["scale"].reason
        assert not any(f.layer == "scale" for f in audit(info, [CUSTOM_MODULE]))
        assert not any(f.layer == "scale" for f in audit(info, [f"plugins/{CUSTOM_MODULE}.py"]))
    assert not any(f.layer == "scale" for f in audit(info, ["lgtestpkg"]))
    assert any(f.layer == "encoder/lam" for f in audit(info, [CUSTOM_MODULE, "lgtestpkg"]))


def test_audit_clean_model_has_no_findings(saved: dict) -> None:
    for name in ("nested_shared", "embedding", "seq", "poisoned"):
        for path in saved[name][1].values():
            assert audit(read_file_info(path)) == (), (name, path)


def _synthetic(config: dict[str, Any]) -> FileInfo:
    return FileInfo("x.keras", "keras", None, config, ModelGraph.from_config(config))


def test_audit_tfsmlayer_legacy_lambda_and_custom_model() -> None:
    layers_cfg = [
        {
            "module": "keras.layers",
            "class_name": "TFSMLayer",
            "name": "tfsm",
            "config": {"name": "tfsm", "filepath": "/somewhere"},
        },
        {
            "class_name": "Lambda",
            "name": "old",
            "config": {
                "name": "old",
                "function": ["4wEAAAAA", None, None],
                "function_type": "lambda",
            },
        },
        {
            "module": "keras.layers",
            "class_name": "Dense",
            "name": "d",
            "config": {
                "name": "d",
                "activation": {
                    "module": "evil.acts",
                    "class_name": "function",
                    "config": "boom",
                    "registered_name": "boom",
                },
            },
        },
    ]
    info = _synthetic({"class_name": "Sequential", "config": {"name": "s", "layers": layers_cfg}})
    reasons = {f.layer: f.reason for f in audit(info)}
    assert set(reasons) == {"tfsm", "old", "d"}
    assert "TFSMLayer" in reasons["tfsm"] and "bytecode" in reasons["old"]
    assert "evil.acts" in reasons["d"]
    assert set(f.layer for f in audit(info, ["evil"])) == {"tfsm", "old"}
    model = _synthetic({"module": "mymodels", "class_name": "Net", "config": {"name": "net"}})
    assert [(f.layer, f.class_name) for f in audit(model)] == [("net", "Net")]
    assert not model.graph.known


def test_keras2_style_h5(tmp_path: Path) -> None:
    """A tf.keras 2 file: bytes attributes, list-style nodes, a nested Sequential whose
    weights sit in one group named by ``weight_names`` such as ``sequential/dense_1/kernel:0``."""
    config = {
        "class_name": "Functional",
        "config": {
            "name": "model",
            "layers": [
                {
                    "class_name": "InputLayer",
                    "config": {"name": "input_1"},
                    "name": "input_1",
                    "inbound_nodes": [],
                },
                {
                    "class_name": "Sequential",
                    "name": "sequential",
                    "inbound_nodes": [[["input_1", 0, 0, {}]]],
                    "config": {
                        "name": "sequential",
                        "layers": [
                            {"class_name": "InputLayer", "config": {"name": "input_2"}},
                            {
                                "class_name": "Dense",
                                "config": {"name": "dense_1", "trainable": True},
                            },
                            {
                                "class_name": "Dense",
                                "config": {"name": "dense_2", "trainable": True},
                            },
                        ],
                    },
                },
                {
                    "class_name": "Dense",
                    "config": {"name": "out", "trainable": True},
                    "name": "out",
                    "inbound_nodes": [[["sequential", 1, 0, {}]]],
                },
            ],
            "input_layers": [["input_1", 0, 0]],
            "output_layers": [["out", 0, 0]],
        },
    }
    path = tmp_path / "old.h5"
    with h5py.File(path, "w") as h5:
        h5.attrs["keras_version"] = b"2.15.0"
        h5.attrs["model_config"] = json.dumps(config).encode()
        weights = h5.create_group("model_weights")
        weights.attrs["layer_names"] = [b"input_1", b"sequential", b"out"]
        for group_name, names in {
            "input_1": [],
            "out": ["out/kernel:0"],
            "sequential": [
                "sequential/dense_1/kernel:0",
                "sequential/dense_1/bias:0",
                "sequential/dense_2/kernel:0",
            ],
        }.items():
            group = weights.create_group(group_name)
            group.attrs["weight_names"] = [n.encode() for n in names]
            for n in names:
                group.create_dataset(n, data=np.ones((2, 3)) if "kernel" in n else np.zeros(3))
    info = read_file_info(path)
    assert info.keras_version == "2.15.0"
    assert {w.layer: (w.tensors, w.params) for w in info.weights} == {
        "sequential/dense_1": (2, 9),
        "sequential/dense_2": (1, 6),
        "out": (1, 6),
    }
    assert info.graph.depends("out", "sequential/dense_2") is True


@pytest.mark.slow
def test_mobilenet_v2_weights(tmp_path: Path) -> None:
    model = keras.applications.MobileNetV2(weights=None, input_shape=(32, 32, 3))
    path = tmp_path / "mobilenet.keras"
    model.save(path)
    info = read_file_info(path)
    got = {w.layer: w.params for w in info.weights}
    assert got == {lay.name: lay.count_params() for lay in model.layers if lay.count_params()}
    assert audit(info) == ()
