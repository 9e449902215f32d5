"""Hostile model files, one test per class of attack: each run in a fresh process, measured.

Every refusal must exit 2 with one line naming what was found (for `check`: that file fails,
the others keep their verdicts), finish well within the timeout and stay within a small
memory bound: a few-MB file that declares GBs must cost what it stores. A process that
imports TensorFlow peaks near 700 MB here, so the 300 MB bound also proves a refusal came
before TensorFlow. Independent truths: Keras itself loading (or refusing) the same file,
the zip and HDF5 libraries, and counts worked out from how each file was built.
"""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path
from typing import Any

import h5py
import hostile as H
import numpy as np
import pytest
from click.testing import CliRunner
from helpers import keras
from hostile import INSPECT, TIMEOUT, bounded, refused

from layergrad.cli.app import main
from layergrad.files.file_info import read_file_info
from layergrad.model.graph import ModelGraph


def check_json(*paths: Path | str, extra: tuple[str, ...] = ()) -> tuple[H.Measured, dict]:
    """`check --static-only --json` on several files; exit 1 (one failed) and bounded."""
    m = H.measure(["check", "--static-only", "--json", *extra, *map(str, paths)], TIMEOUT)
    assert m.returncode == 1, m.stderr
    bounded(m)
    return m, {f["path"]: f for f in json.loads(m.stdout)["files"]}


def failed_check(verdict: dict, name: str) -> str:
    assert not verdict["passed"]
    item = next(c for c in verdict["checks"] if c["name"] == name)
    assert not item["passed"]
    return item["message"]


# 1 ----------------------------------------------------------------------------------------------


def test_polyglot_zip_and_hdf5_is_refused(root: Path, base: dict[str, Path]) -> None:
    poly = H.polyglot(base, root / "poly.keras")
    assert zipfile.is_zipfile(poly)
    with h5py.File(poly, "r") as h5:  # the HDF5 part is the clean model...
        assert "lambda" not in h5.attrs["model_config"]
    with pytest.raises(ValueError, match="Lambda"):  # ...but Keras loads the zip part
        keras.saving.load_model(poly, safe_mode=True)
    before = H.digest(poly)
    phrase = "is both a zip archive and an HDF5 file (a polyglot)"
    refused(["layers", str(poly)], phrase)
    refused(["inspect", str(poly), *INSPECT], phrase)
    poly_h5 = root / "poly.h5"
    poly_h5.write_bytes(poly.read_bytes())
    _, files = check_json(poly, poly_h5, base["good.keras"])
    assert phrase in failed_check(files[str(poly)], "readable")
    assert phrase in failed_check(files[str(poly_h5)], "readable")
    assert files[str(base["good.keras"])]["passed"]
    assert H.digest(poly) == before


# 2 ----------------------------------------------------------------------------------------------


MEMBERS = ["config.json", "metadata.json", "model.weights.h5"]


def test_decompression_bomb_members_are_refused(root: Path, base: dict[str, Path]) -> None:
    bombs = {m: H.zip_bomb(base, root / f"bomb_{m.split('.')[0]}.keras", m) for m in MEMBERS}
    phrases = {}
    for member, path in bombs.items():
        assert path.stat().st_size < 4 * H.MiB
        with zipfile.ZipFile(path) as zf:  # a real bomb: it inflates to what it declares
            info = zf.getinfo(member)
            assert info.file_size == H.BOMB_MB * H.MiB
            with zf.open(info) as fh:
                assert fh.read(H.MiB) == b"\0" * H.MiB
        phrases[member] = f"member '{member}' declares 2.0 GB but stores 2.0 MB (a decompression"
        refused(["layers", str(path)], phrases[member])
    refused(["inspect", str(bombs["model.weights.h5"]), *INSPECT], phrases["model.weights.h5"])
    _, files = check_json(*bombs.values(), base["good.keras"])
    for member, path in bombs.items():
        assert phrases[member] in failed_check(files[str(path)], "readable")
    assert files[str(base["good.keras"])]["passed"]


def test_overlapping_zip_members_are_refused(root: Path, base: dict[str, Path]) -> None:
    """Directory entries that share one member's bytes (the non-recursive zip bomb) claim
    more stored data than the file holds."""
    members = [H.stored(n, d) for n, d in H.members_of(base["good.keras"]).items()]
    path = H.write_zip(root / "overlap.keras", members, aliases=40)
    with zipfile.ZipFile(path) as zf:  # the directory really lists 40 more copies
        assert len(zf.infolist()) == len(members) + 40
        claimed = sum(i.compress_size for i in zf.infolist())
    assert claimed > path.stat().st_size
    refused(["layers", str(path)], "members overlap, a zip bomb")


# 3 ----------------------------------------------------------------------------------------------


def test_hdf5_shape_bombs_cost_what_they_store(root: Path, base: dict[str, Path]) -> None:
    files = {k: H.shape_bomb(base, root / f"shape_{k}.h5", k) for k in ("sparse", "lazy", "huge",
                                                                           "inflating")}  # fmt: skip
    for path in files.values():
        assert path.stat().st_size < 8 * H.MiB
    docs = {}
    for kind, path in files.items():
        m = H.measure(["layers", str(path), "--json"], TIMEOUT)
        assert m.returncode == 0, m.stderr
        bounded(m)
        docs[kind] = json.loads(m.stdout)
    dense = {k: next(r for r in d["layers"] if r["path"] == "dense") for k, d in docs.items()}
    # declared sizes are reported as declared (kernel + the 4-element bias)
    assert dense["sparse"]["params"] == dense["lazy"]["params"] == 1_500_000_000 + 4
    assert dense["huge"]["params"] == 200_000 * 200_000 + 4
    # never-written storage reads as its fill value (0): exact without reading 6 GB
    assert dense["sparse"]["weights"]["zero_tensors"] == 2 and not docs["sparse"]["notes"]
    assert dense["lazy"]["weights"]["zero_tensors"] == 2
    # one stored chunk of ones: the kernel is not all zero, nothing is NaN
    assert dense["huge"]["weights"] == {"tensors": 2, "nan": 0, "inf": 0, "zero_tensors": 1,
                                        "unchecked": 0}  # fmt: skip
    # chunks that inflate ~1000x are listed, not scanned, and the output says so
    assert dense["inflating"]["weights"]["unchecked"] == 1
    assert "a chunk inflates more than 100x" in docs["inflating"]["notes"][0]
    text = H.measure(["layers", str(files["inflating"])], TIMEOUT).stdout
    assert "1/2 not scanned" in text and "weights not scanned:" in text
    # Keras would allocate the declared size: inspect refuses before loading
    refused(["inspect", str(files["sparse"]), *INSPECT], "declares 5.6 GB but stores 0 B",
            "an HDF5 shape bomb")  # fmt: skip
    # and the CI gate fails them without TensorFlow
    _, verdicts = check_json(*files.values(), base["good.h5"])
    for path in files.values():
        assert "an HDF5 shape bomb" in failed_check(verdicts[str(path)], "weights")
    assert verdicts[str(base["good.h5"])]["passed"]


# 4 ----------------------------------------------------------------------------------------------


OUTSIDE = {
    "external": "HDF5 external link",
    "soft": "HDF5 soft link",
    "storage": "keeps its data in other files ('/etc/passwd')",
    "virtual": "is a virtual dataset mapping other files",
    "fifo": "keeps its data in other files",
}


def test_hdf5_links_and_outside_storage_are_refused(root: Path, base: dict[str, Path]) -> None:
    source = root / "source.h5"
    with h5py.File(source, "w") as h5:
        h5["data"] = np.ones((5, 4), "f4")
    fifo = root / "weights.fifo"
    os.mkfifo(fifo)
    files = {}
    for kind in OUTSIDE:
        target = {"virtual": str(source), "fifo": str(fifo)}.get(kind, "/etc/passwd")
        method = "storage" if kind == "fifo" else kind
        files[kind] = H.outside_storage(base, root / f"outside_{kind}.h5", method, target)
        refused(["layers", str(files[kind])], OUTSIDE[kind])
    refused(["inspect", str(files["fifo"]), *INSPECT], OUTSIDE["fifo"], str(fifo))
    _, verdicts = check_json(*files.values(), base["good.h5"])
    for kind, path in files.items():
        assert OUTSIDE[kind] in failed_check(verdicts[str(path)], "readable")
    assert verdicts[str(base["good.h5"])]["passed"]


def test_hdf5_hard_link_cycles_and_twice_linked_weights_are_read_once(
    root: Path, base: dict[str, Path]
) -> None:
    path = root / "cycle.h5"
    path.write_bytes(base["good.h5"].read_bytes())
    with h5py.File(path, "r+") as h5:
        found: list[h5py.Dataset] = []  # h5py visits each object once
        h5.visititems(lambda _n, o: found.append(o) if isinstance(o, h5py.Dataset) else None)
        expected = sum(int(np.prod(d.shape)) * d.dtype.itemsize for d in found)
        h5["model_weights/dense/back"] = h5["/"]  # a cycle back to the root
        h5["model_weights/twice"] = found[0]  # a second hard link to a stored weight
        h5["empty"] = h5py.Empty("f4")  # a dataset without a shape declares nothing
    for read_weights in (False, True):
        info = read_file_info(path, read_weights=read_weights)
        assert info.stored.declared_bytes == expected and not info.stored.hollow


def test_external_link_inside_a_keras_archive_is_refused(root: Path, base: dict[str, Path]) -> None:
    members = H.members_of(base["good.keras"])
    weights = root / "weights.h5"
    weights.write_bytes(members["model.weights.h5"])
    with h5py.File(weights, "r+") as h5:
        h5["layers/dense/vars/extra"] = h5py.ExternalLink("/etc/passwd", "/x")
    members["model.weights.h5"] = weights.read_bytes()
    path = H.write_zip(root / "linked.keras", [H.stored(n, d) for n, d in members.items()])
    refused(["layers", str(path)], "model.weights.h5: HDF5 external link", "/etc/passwd")


# 5 ----------------------------------------------------------------------------------------------


def test_special_files_are_refused_before_opening(root: Path, base: dict[str, Path]) -> None:
    folder = root / "special"
    folder.mkdir()
    special = H.special_files(folder)
    kinds = {
        "fifo.keras": "is a FIFO (named pipe), not a regular file",
        "socket.keras": "is a socket, not a regular file",
        "zero.keras": "is a character device, not a regular file",
        "/dev/zero": "is a character device, not a regular file",
    }
    for name, phrase in kinds.items():
        refused(["layers", str(special[name])], phrase)
    refused(["inspect", str(special["fifo.keras"]), *INSPECT], "FIFO")
    for name in ("fifo.npy", "/dev/zero"):
        refused(["inspect", str(base["good.keras"]), *INSPECT, "--input", str(special[name])],
                "--input", "not a regular file")  # fmt: skip
    _, files = check_json(special["fifo.keras"], special["zero.keras"], base["good.keras"])
    assert "FIFO" in failed_check(files[str(special["fifo.keras"])], "readable")
    assert "character device" in failed_check(files[str(special["zero.keras"])], "readable")
    assert files[str(base["good.keras"])]["passed"]


# 6 ----------------------------------------------------------------------------------------------


def test_runaway_nested_graph_is_linear_to_read_and_refused_to_run(root: Path) -> None:
    depth, calls = 8, 8
    path = H.config_only(root / "runaway.keras", H.runaway_config(depth, calls))
    assert path.stat().st_size < 32 * 1024
    m = H.measure(["layers", str(path), "--json"], TIMEOUT)
    assert m.returncode == 0, m.stderr
    bounded(m)
    rows = {r["path"]: r for r in json.loads(m.stdout)["layers"]}
    inner = "/".join(f"m{level}" for level in range(depth - 1, -1, -1)) + "/d"
    assert rows[inner]["calls"] == calls**depth  # 16,777,216 calls, counted, not expanded
    # by hand: the top input once; each level's input and nested model 8**level times; the
    # innermost input and Dense 8**8 times each
    total = 1 + 2 * sum(calls**level for level in range(1, depth + 1)) + calls**depth
    refused(["inspect", str(path), "--from", inner, "--to", inner],
            f"runs its layers {total:,} times", "at most 1,000,000")  # fmt: skip
    static = H.measure(["check", "--static-only", str(path)], TIMEOUT)
    assert static.returncode == 0, static.stdout
    bounded(static)
    graph = ModelGraph.from_config(H.runaway_config(depth, calls))
    with pytest.raises(Exception, match="at most 1,000,000 layer calls"):
        graph.depends(inner, f"m{depth - 1}")
    small = ModelGraph.from_config(H.runaway_config(2, 3))  # within budget: expanded, exact
    assert small.get("m1/m0/d").num_calls == 9 and len(small.order) == small.calls


# 7 ----------------------------------------------------------------------------------------------


def _units(config: dict[str, Any]) -> None:
    config["config"]["layers"][1]["config"]["units"] = 10**12


def _wide_input(config: dict[str, Any]) -> None:
    config["config"]["layers"][0]["config"]["batch_shape"] = [None, 200_000_000]


def test_declared_sizes_are_refused_before_keras_allocates(
    root: Path, base: dict[str, Path]
) -> None:
    units = H.with_config(base["good.keras"], root / "units.keras", _units)
    wide = H.with_config(base["good.keras"], root / "wide.keras", _wide_input)
    m = refused(["inspect", str(units), *INSPECT], "the probe would need about",
                "more than the 8.0 GB budget", "--max-memory")  # fmt: skip
    # by hand, float32: dense 5 x 1e12 + 1e12, dense_1 1e12 x 2 + 2: 3.2e13 bytes = 29.1 TB
    assert "weights 29.1 TB" in m.stderr
    m = refused(["scan", str(wide)], "the probe would need about", "a smaller --batch-size")
    # by hand: the input, 8 rows x 2e8 float32 = 6.4e9 bytes = 6.0 GB, held 4 times
    assert "activations for 8 rows" in m.stderr
    refused(
        ["inspect", str(units), *INSPECT, "--max-memory", "100TB"], "more than the 100 TB budget"
    )
    result = CliRunner().invoke(main, ["check", "--json", str(units), str(base["good.keras"])])
    assert result.exit_code == 1, result.output
    files = {f["path"]: f for f in json.loads(result.stdout)["files"]}
    assert "the probe would need about" in failed_check(files[str(units)], "loads")
    assert files[str(base["good.keras"])]["passed"]


# 8 ----------------------------------------------------------------------------------------------


def _string_config(config: dict[str, Any]) -> None:
    config["config"]["layers"][1]["config"] = "oops"


def _string_nodes(config: dict[str, Any]) -> None:
    config["config"]["layers"][1]["inbound_nodes"] = "oops"


def test_one_bad_file_does_not_sink_check(root: Path, base: dict[str, Path]) -> None:
    bad = H.with_config(base["good.keras"], root / "string_config.keras", _string_config)
    nodes = H.with_config(base["good.keras"], root / "string_nodes.keras", _string_nodes)
    empty = root / "empty_dir"
    empty.mkdir(exist_ok=True)
    through_file = base["good.keras"] / "x.keras"
    refused(["layers", str(bad)], "config.json is malformed", "has a config that is a string")
    m, files = check_json(base["good.keras"], bad, nodes, through_file, empty, base["good.h5"])
    assert "unexpected" not in m.stdout + m.stderr
    assert "has a config that is a string" in failed_check(files[str(bad)], "readable")
    assert "inbound_nodes that are not a list" in failed_check(files[str(nodes)], "readable")
    assert "Not a directory" in failed_check(files[str(through_file)], "readable")
    assert "directory without .keras, .h5 or .hdf5 files" in failed_check(
        files[str(empty)], "readable"
    )
    assert files[str(base["good.keras"])]["passed"] and files[str(base["good.h5"])]["passed"]


def test_an_unforeseen_failure_is_that_files_error(
    base: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever goes wrong inside one file's checks is that file's failed check."""
    from layergrad.commands.check import check_files as check

    real = check.read_file_info

    def flaky(path: Any, **kwargs: Any) -> Any:
        if str(path).endswith(".h5"):
            raise RuntimeError("something nobody foresaw")
        return real(path, **kwargs)

    monkeypatch.setattr(check, "read_file_info", flaky)
    options = check.CheckOptions(static_only=True)
    verdicts = check.check_files([base["good.h5"], base["good.keras"]], options)
    assert [v.passed for v in verdicts] == [False, True]
    (item,) = verdicts[0].checks
    assert item.name == "readable" and item.findings == ("error",)
    assert item.message == "failed unexpectedly: RuntimeError: something nobody foresaw"


# 13 ---------------------------------------------------------------------------------------------


def _builtins_class(config: dict[str, Any]) -> None:
    config["config"]["layers"][1]["config"]["kernel_initializer"] = {
        "module": "builtins", "class_name": "dict", "config": {}, "registered_name": None}  # fmt: skip


def _function_ref(config: dict[str, Any]) -> None:
    config["config"]["layers"][1]["config"]["activation"] = {
        "module": "builtins", "class_name": "function", "config": "eval",
        "registered_name": "function"}  # fmt: skip


def _legacy_lambda(config: dict[str, Any]) -> None:
    config["config"]["layers"].append({"class_name": "Lambda", "config": {
        "name": "lam", "trainable": True, "function": "system", "function_type": "function",
        "module": "os", "output_shape": None, "output_shape_type": "raw",
        "output_shape_module": None, "arguments": {}}})  # fmt: skip


def test_audit_refuses_builtins_function_references_and_named_legacy_functions(
    root: Path, base: dict[str, Path]
) -> None:
    files = {
        "builtins": H.with_config(base["good.keras"], root / "builtins.keras", _builtins_class),
        "function": H.with_config(base["good.keras"], root / "function.keras", _function_ref),
        "legacy": H.with_h5_config(base["good.h5"], root / "legacy.h5", _legacy_lambda),
    }
    for path in files.values():  # Keras refuses each too, but only after it starts loading
        with pytest.raises(TypeError):
            keras.saving.load_model(path, safe_mode=True)
    _, verdicts = check_json(*files.values(), base["good.keras"])
    safe = {k: failed_check(verdicts[str(p)], "safe") for k, p in files.items()}
    assert "dict is a class from module 'builtins', not Keras" in safe["builtins"]
    assert "function reference 'eval' names a Python builtin" in safe["function"]
    assert "Lambda layer calls function 'system' from module 'os'" in safe["legacy"]
    assert verdicts[str(base["good.keras"])]["passed"]
    refused(["layers", str(files["legacy"])], "refusing to load", "module 'os'")
