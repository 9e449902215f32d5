"""`layergrad layers`: one row per layer, read without TensorFlow, checked against live models.

Truth comes from the Keras model that wrote the file (``model.layers``, ``count_params``,
``trainable``, ``dtype_policy``), from weights set by hand (NaN, Inf, zeros), and from the
graph as it was written in the test (inbound layers, operations, calls).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from helpers import CUSTOM_LAYERS, ROOT, SAMPLES, keras, load_sample, sample

from layergrad.cli.app import main
from layergrad.files.file_info import read_file_info
from layergrad.files.layer_listing import build_listing
from layergrad.render.layers import table as layers_text

layers = keras.layers
FORMATS = ["keras", "h5"]


def run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def _tour() -> Any:
    """A nested Sequential, a layer called twice, an operation, a mixed-precision layer, a
    frozen layer, and hand-set weights: 3 NaN + 2 Inf in `poisoned`, all zeros in `zeroed`."""
    encoder = keras.Sequential(
        [keras.Input((4,)), layers.Dense(5, name="dense"), layers.Dense(5, name="dense_1")],
        name="encoder",
    )
    x = keras.Input((4,), name="x")
    shared = layers.Dense(5, activation="tanh", name="shared")
    twice = shared(shared(encoder(x)))
    side = layers.Dense(5, name="side", dtype="mixed_float16")(x)
    frozen = layers.Dense(3, name="frozen")
    frozen.trainable = False
    poisoned = layers.Dense(2, name="poisoned")
    zeroed = layers.Dense(2, name="zeroed")
    out = zeroed(poisoned(frozen(twice + keras.ops.cast(side, "float32"))))
    model = keras.Model(x, out, name="tour")
    kernel, bias = poisoned.get_weights()
    kernel.flat[:3] = np.nan
    kernel.flat[3:5] = np.inf
    poisoned.set_weights([kernel, bias + 1.0])
    zeroed.set_weights([np.zeros((2, 2)), np.zeros(2)])
    return model


@pytest.fixture(scope="module")
def tour(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, dict[str, Path]]:
    root = tmp_path_factory.mktemp("layers_cli")
    model = _tour()
    paths = {fmt: root / f"tour.{fmt}" for fmt in FORMATS}
    for path in paths.values():
        model.save(path)
    return model, paths


def _live_rows(model: Any, prefix: str = "") -> list[tuple[str, int, Any]]:
    """(path, index in its parent's .layers, layer), nested models expanded depth-first."""
    out = []
    for index, layer in enumerate(model.layers):
        out.append((prefix + layer.name, index, layer))
        if hasattr(layer, "layers"):
            out += _live_rows(layer, f"{prefix}{layer.name}/")
    return out


def _doc(*args: str) -> dict[str, Any]:
    result = run("layers", *args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.mark.parametrize("fmt", FORMATS)
def test_rows_match_the_live_model(fmt: str, tour: tuple[Any, dict[str, Path]]) -> None:
    model, paths = tour
    doc = _doc(str(paths[fmt]))
    assert doc["schema"] == "layergrad.layers/1"
    assert doc["model"] == {
        "path": str(paths[fmt]), "format": fmt, "class": "Functional", "name": "tour",
        "keras_version": keras.__version__, "graph": True,
        "inputs": [{"name": "x", "shape": [None, 4], "dtype": "float32"}],
    }  # fmt: skip
    live = _live_rows(model)
    rows = doc["layers"]
    assert [(r["path"], r["index"]) for r in rows] == [(p, i) for p, i, _ in live]
    for row, (path, _, layer) in zip(rows, live, strict=True):
        assert row["class"] == type(layer).__name__, path
        assert row["params"] == layer.count_params(), path
        assert row["parent"] == (path.rsplit("/", 1)[0] if "/" in path else None)
        assert row["is_model"] == hasattr(layer, "layers")
        if row["class"] != "InputLayer":
            assert row["trainable"] is layer.trainable, path
            assert row["dtype"] == layer.dtype_policy.name, path
    by_path = {r["path"]: r for r in rows}
    assert by_path["side"]["dtype"] == "mixed_float16"
    assert by_path["frozen"]["trainable"] is False
    assert doc["total_params"] == model.count_params()
    assert doc["warnings"] == []


@pytest.mark.parametrize("fmt", FORMATS)
def test_inbound_calls_and_operations(fmt: str, tour: tuple[Any, dict[str, Path]]) -> None:
    model, paths = tour
    doc = _doc(str(paths[fmt]))
    rows = {r["path"]: r for r in doc["layers"]}
    (op_name,) = [op.name for op in model.operations if op.name.startswith("add")]
    (cast_name,) = [op.name for op in model.operations if op.name.startswith("cast")]
    assert {k: rows[k]["inbound"] for k in rows} == {
        "x": [], "encoder": ["x"], "encoder/dense": [], "encoder/dense_1": ["encoder/dense"],
        "shared": ["encoder", "shared"], "side": ["x"], "frozen": [op_name],
        "poisoned": ["frozen"], "zeroed": ["poisoned"],
    }  # fmt: skip
    assert rows["shared"]["calls"] == 2 and rows["frozen"]["calls"] == 1
    ops = {op["path"]: op for op in doc["operations"]}
    assert ops[op_name]["inbound"] == ["shared", cast_name]
    assert ops[cast_name]["inbound"] == ["side"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_weight_health_counts_and_flags(fmt: str, tour: tuple[Any, dict[str, Path]]) -> None:
    _, paths = tour
    rows = {r["path"]: r for r in _doc(str(paths[fmt]))["layers"]}
    assert rows["poisoned"]["weights"] == {
        "tensors": 2,
        "nan": 3,
        "inf": 2,
        "zero_tensors": 0,
        "unchecked": 0,
    }
    assert rows["zeroed"]["weights"] == {
        "tensors": 2,
        "nan": 0,
        "inf": 0,
        "zero_tensors": 2,
        "unchecked": 0,
    }
    assert rows["side"]["weights"] == {
        "tensors": 2,
        "nan": 0,
        "inf": 0,
        "zero_tensors": 1,
        "unchecked": 0,
    }
    assert rows["encoder"]["weights"] is None and rows["x"]["weights"] is None
    flagged = {p: r["problem"] for p, r in rows.items() if r["problem"]}
    assert set(flagged) == {"poisoned", "zeroed"}
    assert "3 NaN, 2 Inf" in flagged["poisoned"] and "all zero" in flagged["zeroed"]

    text = run("layers", str(paths[fmt])).stdout
    section = text.split("weights that need a look:")[1]
    assert "poisoned: 3 NaN, 2 Inf in its stored weights" in section
    assert "zeroed: every stored tensor is all zero (2 of 2)" in section
    colored = layers_text(build_listing(read_file_info(paths[fmt])), color=True)
    assert "\x1b[1;35m3 NaN, 2 Inf" in colored  # highlighted in the table too
    assert "\x1b[1;33m2/2 zero" in colored


def test_table_shows_the_columns_and_the_operation(tour: tuple[Any, dict[str, Path]]) -> None:
    model, paths = tour
    wide = CliRunner().invoke(main, ["layers", str(paths["keras"])], env={"COLUMNS": "160"})
    out = wide.stdout
    (op_name,) = [op.name for op in model.operations if op.name.startswith("add")]
    lines = out.splitlines()
    head = " ".join(out.split("━")[0].split())  # a long temporary path may wrap
    assert head.startswith(f"{paths['keras']} Functional 'tour', keras, saved by Keras 3.")
    assert "inputs: x (None, 4) float32" in lines
    header = next(line for line in lines if " layer " in line).split()
    assert header == ["#", "layer", "class", "inbound", "params", "dtype", "trainable", "weights"]
    frozen = next(line for line in lines if " frozen " in line).split()
    index = str([lay.name for lay in model.layers].index("frozen"))
    want = [index, "frozen", "Dense", op_name, "(op)", "18", "float32", "no", "1/2", "zero"]
    assert frozen == want
    assert next(line for line in lines if " shared " in line).split()[2:5] == [
        "Dense",
        "(2",
        "calls)",
    ]
    assert next(line for line in lines if "encoder/dense_1" in line).split()[0] == "1.1"
    assert f"total params {model.count_params():,}" in out
    assert "2 functional operations are not layers" in out


def test_golden_text_of_a_sample_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copyfile(sample("nested.keras"), tmp_path / "nested.keras")
    monkeypatch.chdir(tmp_path)
    out = run("layers", "nested.keras").stdout
    expected = textwrap.dedent(
        """\
        nested.keras  Functional 'nested', keras, saved by Keras 3.15.1
        inputs: x (None, 6) float32
        every layer's dtype policy is float32; every layer is trainable

           #  layer            class       inbound        params  weights
         ━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━
           0  x                InputLayer
           1  encoder          Sequential  x                  92
         1.0  encoder/dense    Dense                          56  1/2 zero
         1.1  encoder/dense_1  Dense       encoder/dense      36  1/2 zero
           2  head             Dense       encoder            10  1/2 zero

        5 layers, 3 with stored weights; total params 102 (from the stored weight shapes)
        """
    )
    assert "\n".join(line.rstrip() for line in out.splitlines()) + "\n" == expected


def test_markdown(tour: tuple[Any, dict[str, Path]]) -> None:
    _, paths = tour
    out = run("layers", str(paths["keras"]), "--format", "markdown").stdout
    assert out.startswith(f"**layergrad layers** `{paths['keras']}`: Functional `tour`")
    assert "| # | layer | class | inbound | params | dtype | trainable | weights |" in out
    assert "| 1.0 | `encoder/dense` | Dense |  | 25 | float32 | yes | 1/2 zero |" in out
    assert "- `poisoned`: **3 NaN, 2 Inf in its stored weights**" in out


SAMPLE_FILES = [*sorted(p.name for p in SAMPLES.glob("*.keras")), "seed.h5"]


@pytest.mark.parametrize("name", SAMPLE_FILES)
def test_every_sample_model(name: str) -> None:
    """Top-level rows are `model.layers` of the model Keras loads; params match Keras."""
    model = load_sample(name)
    doc = _doc(sample(name), "--import", CUSTOM_LAYERS)
    top = [(r["path"], r["class"]) for r in doc["layers"] if r["parent"] is None]
    assert top == [(lay.name, type(lay).__name__) for lay in model.layers]
    assert doc["total_params"] == model.count_params()
    inputs = [(i["name"], tuple(i["shape"]), i["dtype"]) for i in doc["model"]["inputs"]]
    assert inputs == [(t.name, tuple(t.shape), t.dtype) for t in model.inputs]
    assert [r["path"] for r in doc["layers"] if r["problem"]] == (
        ["broken"] if name == "cause_nan_weights.keras" else []
    )


def test_custom_classes_need_import_but_are_never_imported() -> None:
    refused = CliRunner().invoke(main, ["layers", sample("cause_argmax.keras")])
    assert refused.exit_code == 2
    assert "layer 'argmax' (ArgMaxOneHot)" in refused.stderr and "--import" in refused.stderr
    assert refused.stdout == ""
    assert run("layers", sample("cause_argmax.keras"), "--import", "custom_layers").exit_code == 0


def test_hostile_lambda_refused_unless_unsafe(tmp_path: Path) -> None:
    model = keras.Sequential(
        [
            keras.Input((4,)),
            layers.Dense(3, name="dense"),
            layers.Lambda(lambda t: t * 2.0, name="double"),
        ],
        name="lam",
    )
    path = tmp_path / "lambda.keras"
    model.save(path)
    refused = CliRunner().invoke(main, ["layers", str(path)])
    assert refused.exit_code == 2 and refused.stdout == ""
    assert refused.stderr.count("\n") == 1
    assert "layer 'double' (Lambda)" in refused.stderr and "--unsafe" in refused.stderr
    listed = CliRunner().invoke(main, ["layers", str(path), "--unsafe", "--json"])
    assert listed.exit_code == 0
    assert listed.stderr.startswith("warning: layer 'double' (Lambda)")
    doc = json.loads(listed.stdout)
    assert [r["path"] for r in doc["layers"]] == ["dense", "double"]
    assert doc["warnings"] == ["layer 'double' (Lambda): Lambda layer carries Python bytecode "
                               "(a serialized lambda)"]  # fmt: skip


def test_weight_groups_without_a_layer_are_flagged(tmp_path: Path) -> None:
    """A weight file from a bigger model: Keras ignores the extra group, `layers` flags it."""
    small = keras.Sequential([keras.Input((4,)), layers.Dense(3, name="d")], name="small")
    big = keras.Sequential(
        [keras.Input((4,)), layers.Dense(3, name="d"), layers.Dense(2, name="extra")], name="big"
    )
    small.save(tmp_path / "small.keras")
    big.save(tmp_path / "big.keras")
    with zipfile.ZipFile(tmp_path / "small.keras") as zf:
        members = {n: zf.read(n) for n in zf.namelist()}
    with zipfile.ZipFile(tmp_path / "big.keras") as zf:
        members["model.weights.h5"] = zf.read("model.weights.h5")
    with zipfile.ZipFile(tmp_path / "mixed.keras", "w") as zf:
        for member, data in members.items():
            zf.writestr(member, data)
    doc = _doc(str(tmp_path / "mixed.keras"))
    orphan = doc["layers"][-1]
    assert orphan["index"] is None and orphan["class"] == "?" and orphan["params"] == 8
    assert "config does not have" in orphan["problem"]


def test_compressed_archive_reads_the_same(
    tour: tuple[Any, dict[str, Path]], tmp_path: Path
) -> None:
    """Keras stores zip members uncompressed (read in place); a re-zipped, deflated copy is
    decompressed in memory and must give the same listing."""
    _, paths = tour
    deflated = tmp_path / "deflated.keras"
    with zipfile.ZipFile(paths["keras"]) as src, zipfile.ZipFile(deflated, "w") as dst:
        for member in src.namelist():
            dst.writestr(member, src.read(member), compress_type=zipfile.ZIP_DEFLATED)
    with zipfile.ZipFile(deflated) as zf:
        assert zf.getinfo("model.weights.h5").compress_type == zipfile.ZIP_DEFLATED
    same = _doc(str(paths["keras"]))
    other = _doc(str(deflated))
    assert other["layers"] == same["layers"] and other["total_params"] == same["total_params"]


def test_help_has_examples_and_the_readme_documents_the_command() -> None:
    out = run("layers", "--help").stdout
    for text in ("--json", "--format", "--import", "--unsafe", "--debug", "Example"):
        assert text in out
    assert "layers" in run("--help").stdout
    readme = (ROOT / "README.md").read_text()
    assert "## `layergrad layers`" in readme and "layergrad.layers/1" in readme


def test_no_tensorflow_import(tour: tuple[Any, dict[str, Path]], tmp_path: Path) -> None:
    """--help, layers (table and JSON, both formats) and a file error, in one fresh process;
    `layers` does not even import the loader."""
    empty = tmp_path / "empty.keras"
    empty.write_bytes(b"")
    code = textwrap.dedent(
        """
        import sys
        from click.testing import CliRunner
        from layergrad.cli.app import main
        keras_file, h5_file, empty, custom = sys.argv[1:]
        for args, code in [
            (["--help"], 0), (["layers", "--help"], 0), (["layers", keras_file], 0),
            (["layers", h5_file, "--json"], 0), (["layers", empty], 2),
            (["layers", custom, "--import", "custom_layers"], 0),
        ]:
            result = CliRunner().invoke(main, args)
            assert result.exit_code == code, (args, result.output)
        watched = ("tensorflow", "keras", "custom_layers", "layergrad.engine.loader")
        print(sorted(m for m in watched if m in sys.modules))
        """
    )
    _, paths = tour
    args = [str(paths["keras"]), str(paths["h5"]), str(empty), sample("cause_argmax.keras")]
    env = dict(os.environ)
    done = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


@pytest.mark.slow
def test_nasnet_mobile(tmp_path: Path) -> None:
    model = keras.applications.NASNetMobile(weights=None, input_shape=(32, 32, 3), classes=10)
    path = tmp_path / "nasnet.keras"
    model.save(path)
    doc = _doc(str(path))
    assert [r["path"] for r in doc["layers"]] == [lay.name for lay in model.layers]
    assert [r["params"] for r in doc["layers"]] == [lay.count_params() for lay in model.layers]
    assert doc["total_params"] == model.count_params()
