"""ModelGraph from real Keras 3 saved configs (.keras and legacy .h5).

Truth comes from Keras itself: the live (and reloaded) model's ``.layers`` for
indexing, and the way each test model is wired by hand for dependency.
"""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path
from typing import Any

import h5py
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
keras = pytest.importorskip("keras")
layers = keras.layers

from layergrad.model.graph import ModelGraph  # noqa: E402


def _sequential_input() -> Any:
    return keras.Sequential(
        [keras.Input((4,)), layers.Dense(8, name="dense"), layers.Dense(2, name="dense_1")],
        name="seq_input",
    )


def _sequential_add() -> Any:
    model = keras.Sequential(name="seq_add")
    model.add(keras.Input((4,)))
    model.add(layers.Dense(8, name="dense"))
    model.add(layers.Dense(2, name="dense_1"))
    return model


def _residual() -> Any:
    x = keras.Input((4,), name="x")
    a = layers.Dense(4, name="a")(x)
    b = layers.Dense(4, name="b")(a)
    r = layers.Add(name="resadd")([a, b])
    side = layers.Dense(3, name="side")(a)
    scaled = keras.ops.add(r, r * 2.0)  # two operations, not layers
    out = layers.Concatenate(name="cat")([scaled, side])
    return keras.Model(x, out, name="residual")


def _nested() -> Any:
    encoder = keras.Sequential([keras.Input((4,)), layers.Dense(5, name="dense_1")], name="encoder")
    x = keras.Input((4,), name="fin")
    h = layers.Dense(2, name="head")(encoder(x))
    return keras.Model(x, h, name="nested")


def _shared() -> Any:
    x = keras.Input((4,), name="si")
    shared = layers.Dense(4, name="shared")
    return keras.Model(x, layers.Dense(1, name="out")(shared(shared(x))), name="shared_model")


def _two_inputs() -> Any:
    left = keras.Input((3,), name="left")
    right = keras.Input((2,), name="right")
    z = layers.Concatenate(name="concatenate")([layers.Dense(2, name="l")(left), right])
    return keras.Model({"left": left, "right": right}, z, name="two_inputs")


def _inner_twice() -> Any:
    """A Functional model with two outputs, called twice inside another one."""
    ii = keras.Input((4,), name="ii")
    d = layers.Dense(3, name="d")(ii)
    inner = keras.Model(ii, [layers.Dense(2, name="o1")(d), layers.Dense(2, name="o2")(d)])
    x = keras.Input((4,), name="x")
    p, q = inner(x)
    _, q2 = inner(layers.Dense(4, name="h")(p))
    return keras.Model(x, layers.Concatenate(name="cat")([q, q2]), name="outer")


def _seq_in_seq() -> Any:
    sub = keras.Sequential([layers.Dense(3, name="in1"), layers.Dense(3, name="in2")], name="sub")
    return keras.Sequential([keras.Input((4,)), sub, layers.Dense(1, name="last")], name="ss")


BUILDERS = {
    "seq_input": _sequential_input,
    "seq_add": _sequential_add,
    "residual": _residual,
    "nested": _nested,
    "shared": _shared,
    "two_inputs": _two_inputs,
    "outer": _inner_twice,
    "ss": _seq_in_seq,
}


def _config(path: Path) -> dict[str, Any]:
    if path.suffix == ".keras":
        with zipfile.ZipFile(path) as zf:
            return json.loads(zf.read("config.json"))
    with h5py.File(path, "r") as h5:
        raw = h5.attrs["model_config"]
        return json.loads(raw.decode() if isinstance(raw, bytes) else raw)


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Any, dict[str, Path]]]:
    """Each test model, built once and saved as .keras and .h5."""
    root = tmp_path_factory.mktemp("graph_models")
    out = {}
    for name, build in BUILDERS.items():
        keras.backend.clear_session()  # op names ("add", not "add_1") whatever ran before
        model = build()
        paths = {fmt: root / f"{name}.{fmt}" for fmt in ("keras", "h5")}
        for path in paths.values():
            model.save(path)
        out[name] = (model, paths)
    return out


@pytest.fixture(scope="module", params=["keras", "h5"])
def graphs(request: pytest.FixtureRequest, saved: dict) -> dict[str, ModelGraph]:
    fmt = request.param
    return {name: ModelGraph.from_config(_config(p[fmt])) for name, (_, p) in saved.items()}


def _listed_names(graph: ModelGraph, parent: str | None) -> list[str]:
    children = [e for e in graph.layers if e.parent == parent]
    assert [e.index for e in children] == list(range(len(children)))
    return [e.name for e in children]


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_index_matches_keras_layers(name: str, saved: dict, graphs: dict) -> None:
    model, paths = saved[name]
    graph = graphs[name]
    reloaded = keras.saving.load_model(paths["keras"])
    for live in (model, reloaded):
        assert _listed_names(graph, None) == [layer.name for layer in live.layers]
        for entry in graph.layers:
            if entry.is_model and entry.parent is None:
                inner = live.get_layer(entry.name)
                assert _listed_names(graph, entry.path) == [lay.name for lay in inner.layers]


def test_sequential_chain(graphs: dict) -> None:
    for name in ("seq_input", "seq_add"):
        g = graphs[name]
        assert g.known and g.class_name == "Sequential"
        assert g.input_names and g.get(g.input_names[0]).listed is False
        assert g.depends("dense_1", "dense") is True
        assert g.depends("dense", "dense_1") is False
        assert g.depends("dense", "dense") is False
        assert g.depends("dense_1", g.input_names[0]) is True
        assert g.get("dense_1").inbound == ("dense",) and g.get("dense_1").num_calls == 1
        assert g.between(g.input_names[0], "dense_1") == ("dense", "dense_1")


def test_residual_and_side_branch(graphs: dict) -> None:
    g = graphs["residual"]
    assert g.input_names == ("x",)
    assert g.get("resadd").inbound == ("a", "b")
    assert g.depends("resadd", "a") and g.depends("resadd", "b")
    assert g.depends("cat", "b") is True  # through the two operations
    assert g.depends("side", "b") is False  # sibling branches
    assert g.depends("b", "side") is False
    assert g.depends("a", "cat") is False  # reversed order
    assert g.depends("cat", "x") is True
    assert g.between("a", "cat") == ("b", "resadd", "side", "cat")
    assert g.between("b", "cat") == ("resadd", "cat")
    assert g.between("b", "cat", include_ops=True) == ("resadd", "multiply", "add", "cat")
    assert g.between("side", "b") == ()
    ops = {e.name: e for e in g.unlisted}
    assert set(ops) == {"multiply", "add"} and not any(e.listed for e in ops.values())
    assert [e.name for e in g.layers] == ["x", "a", "b", "resadd", "side", "cat"]


def test_nested_model_is_transparent(graphs: dict) -> None:
    g = graphs["nested"]
    enc = g.get("encoder")
    inner = g.get("encoder/dense_1")
    assert enc.is_model and enc.depth == 0 and enc.inbound == ("fin",)
    assert inner.parent == "encoder" and inner.depth == 1 and inner.index == 0
    assert g.depends("encoder/dense_1", "fin") is True  # into the nested model
    assert g.depends("head", "encoder/dense_1") is True  # out of it
    assert g.depends("head", "encoder") is True
    assert g.depends("encoder", "fin") is True
    assert g.depends("encoder/dense_1", "head") is False
    assert g.depends("encoder/dense_1", "encoder") is False
    assert g.between("fin", "head") == ("encoder/dense_1", "head")
    assert g.between("encoder", "head") == ("head",)


def test_nested_model_called_twice_with_two_outputs(graphs: dict) -> None:
    g = graphs["outer"]
    inner_name = next(e.name for e in g.layers if e.is_model)
    d, o1, o2 = (f"{inner_name}/{n}" for n in ("d", "o1", "o2"))
    assert g.get(inner_name).num_calls == 2 and g.get(d).num_calls == 2
    assert g.depends("h", o1, 0, 0) is True
    assert g.depends("h", o2, 0, 0) is False  # h reads the first output only
    assert g.depends(d, "h", 1, 0) is True  # second call runs on h
    assert g.depends(d, "h", 0, 0) is False
    assert g.depends("cat", o2, 0, 0) and g.depends("cat", o2, 0, 1)
    assert g.depends(o2, d, 1, 0) is True and g.depends(o2, d, 0, 1) is False
    assert g.between("h", "cat") == (d, o2, "cat")


def test_sequential_inside_sequential(graphs: dict) -> None:
    g = graphs["ss"]
    assert [e.path for e in g.layers] == ["sub", "sub/in1", "sub/in2", "last"]
    assert g.depends("last", "sub/in1") and g.depends("sub/in2", g.input_names[0])
    assert g.between("sub/in1", "last") == ("sub/in2", "last")


def test_shared_layer_calls(graphs: dict) -> None:
    g = graphs["shared"]
    shared = g.get("shared")
    assert shared.num_calls == 2 and shared.inbound == ("si", "shared")
    assert g.depends("shared", "shared", to_call=1, frm_call=0) is True
    assert g.depends("shared", "shared", to_call=0, frm_call=1) is False
    assert g.depends("shared", "shared", 1, 1) is False
    assert g.depends("out", "shared", frm_call=0) and g.depends("out", "shared", frm_call=1)
    assert g.depends("shared", "si", to_call=1) is True
    assert g.between("shared", "out", frm_call=0) == ("shared", "out")
    assert g.depends("shared", "si", to_call=2) is None  # no third call


def test_two_named_inputs(graphs: dict) -> None:
    g = graphs["two_inputs"]
    assert g.input_names == ("left", "right")
    assert g.depends("concatenate", "left") and g.depends("concatenate", "right")
    assert g.depends("l", "right") is False
    assert g.between("right", "concatenate") == ("concatenate",)


def test_keras_and_h5_graphs_agree(saved: dict) -> None:
    for _name, (_, paths) in saved.items():
        k, h = (ModelGraph.from_config(_config(paths[f])) for f in ("keras", "h5"))
        key = [(e.path, e.index, e.inbound, e.num_calls, e.is_model, e.listed) for e in k.layers]
        assert key == [
            (e.path, e.index, e.inbound, e.num_calls, e.is_model, e.listed) for e in h.layers
        ]
        assert k.order == h.order


def test_unknown_graph_and_unknown_names() -> None:
    sub = ModelGraph.from_config({"class_name": "MyModel", "config": {"name": "mine"}})
    assert not sub.known and sub.layers == () and sub.name == "mine"
    assert sub.depends("a", "b") is None and sub.between("a", "b") == ()
    g = ModelGraph.from_config(_config_dict_legacy())
    assert g.depends("nope", "input_1") is None
    assert g.depends("dense", "input_1", to_call=5) is None
    assert g.get("nope") is None and g.get("sequential/dense_1").name == "dense_1"


def _config_dict_legacy() -> dict[str, Any]:
    """A Keras 2 (tf.keras) functional config as older .h5 files hold it: list-style
    inbound nodes, a nested Sequential referenced as node 1, a TF-op layer whose single
    ref carries another ref in its kwargs."""
    ref = [["input_1", 0, 0, {}]]
    return {
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
                    "class_name": "Dense",
                    "config": {"name": "dense", "trainable": True},
                    "name": "dense",
                    "inbound_nodes": [ref],
                },
                {
                    "class_name": "Sequential",
                    "name": "sequential",
                    "inbound_nodes": [ref],
                    "config": {
                        "name": "sequential",
                        "layers": [
                            {"class_name": "InputLayer", "config": {"name": "input_2"}},
                            {
                                "class_name": "Dense",
                                "config": {"name": "dense_1", "trainable": True},
                            },
                        ],
                    },
                },
                {
                    "class_name": "TFOpLambda",
                    "name": "tf.math.add",
                    "config": {"name": "tf.math.add", "trainable": True, "function": "math.add"},
                    "inbound_nodes": [["dense", 0, 0, {"y": ["sequential", 1, 0], "name": None}]],
                },
                {
                    "class_name": "Dense",
                    "config": {"name": "out", "trainable": True},
                    "name": "out",
                    "inbound_nodes": [[["tf.math.add", 0, 0, {}]]],
                },
            ],
            "input_layers": [["input_1", 0, 0]],
            "output_layers": [["out", 0, 0]],
        },
    }


def test_legacy_keras2_config() -> None:
    g = ModelGraph.from_config(_config_dict_legacy())
    assert [e.path for e in g.layers] == [
        "input_1",
        "dense",
        "sequential",
        "sequential/dense_1",
        "tf.math.add",
        "out",
    ]
    assert g.get("tf.math.add").inbound == ("dense", "sequential")
    assert g.depends("out", "sequential/dense_1") is True
    assert g.depends("sequential/dense_1", "input_1") is True
    assert g.depends("sequential/dense_1", "dense") is False
    assert g.between("input_1", "out") == ("dense", "sequential/dense_1", "tf.math.add", "out")


@pytest.mark.slow
def test_mobilenet_v2_graph(tmp_path: Path) -> None:
    model = keras.applications.MobileNetV2(weights=None, input_shape=(32, 32, 3))
    path = tmp_path / "mobilenet.keras"
    model.save(path)
    g = ModelGraph.from_config(_config(path))
    assert [e.name for e in g.layers] == [layer.name for layer in model.layers]
    assert [e.index for e in g.layers] == list(range(len(model.layers)))
    first, last = model.layers[1].name, model.layers[-1].name
    assert g.depends(last, first) is True and g.depends(first, last) is False
    chain = g.between(g.input_names[0], last)
    assert len(chain) == len(model.layers) - 1 and chain[-1] == last
    assert g.depends("block_2_add", "block_1_project_BN")  # the residual skip
    assert g.depends("block_2_add", "block_2_project_BN")
    assert not g.depends("block_2_expand", "block_2_project")


def test_each_entry_names_the_dtype_it_was_built_with(tmp_path: Path) -> None:
    # truth: the dtypes the layers were made with (a mixed policy by its name)
    made = {"ids": "int32", "embed": "float32", "head": "float64", "mixed": "mixed_float16"}
    ids = keras.Input((4,), dtype=made["ids"], name="ids")
    x = layers.Embedding(10, 3, name="embed")(ids)
    x = layers.Dense(3, name="mixed", dtype=made["mixed"])(x)
    model = keras.Model(ids, layers.Dense(2, name="head", dtype=made["head"])(x))
    for fmt in ("keras", "h5"):
        model.save(tmp_path / f"m.{fmt}")
        graph = ModelGraph.from_config(_config(tmp_path / f"m.{fmt}"))
        entries = {name: graph.get(name) for name in made}
        assert {n: e.dtype for n, e in entries.items() if e is not None} == made, fmt
