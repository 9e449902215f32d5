"""Hostile inputs and colliding outputs: `--input` files, `--junit`, `--save-gradient`, and
where Keras puts its temporary files.

Refusals that come before TensorFlow run in a fresh, measured process (exit code, one line,
time and peak memory bounded); the rest run through CliRunner in this process. Independent
truths: numpy reading back what was written, a hand-written GradientTape, byte digests of
every file that must stay untouched, and Keras's own choice of temporary folder observed
when it is given the model directly.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import hostile as H
import numpy as np
import pytest
from click.testing import CliRunner
from helpers import keras, manual_gradient, normal
from hostile import INSPECT, bounded, refused

from layergrad.cli.app import main
from layergrad.engine import loader

layers = keras.layers


def invoke(*args: str) -> Any:
    return CliRunner().invoke(main, [str(a) for a in args])


def one_line_error(result: Any, *phrases: str) -> None:
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr
    for phrase in phrases:
        assert phrase in result.stderr, (phrase, result.stderr)


# 2, 12: --input files ---------------------------------------------------------------------------


def _huge_header(path: Path) -> Path:
    """A version-2 `.npy` whose header claims 200,000 bytes (numpy's safe limit is 10,000)."""
    path.write_bytes(b"\x93NUMPY\x02\x00" + (200_000).to_bytes(4, "little") + b"{" + b" " * 199_998
                     + b"\n")  # fmt: skip
    return path


def _unclosed_header(path: Path) -> Path:
    """A `.npy` whose header stops inside its dict (numpy's second reading of it raises
    `tokenize`'s own error, which was reported as an unexpected one)."""
    text = b'{"descr": "<f4", "fortran_order": False, "shape": (8, 5), '
    path.write_bytes(b"\x93NUMPY\x01\x00" + len(text).to_bytes(2, "little") + text + b"\0" * 160)
    return path


def test_input_files_refused_from_their_headers(root: Path, base: dict[str, Path]) -> None:
    """Everything a header shows is refused before TensorFlow, within a small bound."""
    objects = root / "objects.npz"
    np.savez(objects, x=np.array([{"a": 1}] * 8, dtype=object))
    empty = root / "empty.npy"
    empty.write_bytes(b"")
    batch0 = root / "batch0.npy"
    np.save(batch0, np.zeros((0, 5), "float32"))
    scalar = root / "scalar.npy"
    np.save(scalar, np.float32(3.0))  # shape (): no batch axis at all, not an empty batch
    cases = {
        H.npz_bomb(root / "bomb.npz"): "member 'x.npy' declares 2.0 GB but stores 2.0 MB",
        H.forged_npy(root / "forged.npy", (10**9, 5)): "declares shape (1000000000, 5) (18.6 GB)"
        " but holds 64 B of data",
        objects: "array 'x', holds Python objects (dtype object)",
        empty: "is empty (0 bytes)",
        _huge_header(root / "huge_header.npy"): "has a header over 10,000 bytes",
        _unclosed_header(root / "bad.npy"): "damaged .npy header (ValueError: the header ends",
        batch0: "its array has shape (0, 5), a batch of 0 rows",
        scalar: "its array has shape (), one value, with no batch axis",
    }
    for path, phrase in cases.items():
        before = H.digest(path)
        refused(["inspect", str(base["good.keras"]), *INSPECT, "--input", str(path)], phrase)
        assert H.digest(path) == before


def test_input_data_that_does_not_fit_gets_a_clear_message(
    root: Path, base: dict[str, Path]
) -> None:
    ok = root / "ok.npz"
    np.savez(ok, x=np.ones((8, 5), "float32"))
    stored = H.members_of(ok)["x.npy"]
    broken = bytearray(stored)
    broken[-20:] = b"\xff" * 20  # the data no longer matches its CRC
    corrupt = H.write_zip(root / "corrupt.npz", [H.Member("x.npy", bytes(broken), 0,
                                                          H.zlib.crc32(stored), len(broken))])  # fmt: skip
    overflow = root / "overflow.npy"
    np.save(overflow, np.full((8, 5), 1e300))
    ids = root / "ids.npz"
    cases = {
        corrupt: "array 'x', is damaged (BadZipFile: Bad CRC-32",
        overflow: "holds 1e+300, which overflows float32",
    }
    model = str(base["good.keras"])
    for path, phrase in cases.items():
        one_line_error(invoke("inspect", model, *INSPECT, "--input", path), "--input", phrase)
    ids_model = root / "ids.keras"
    tokens = keras.Input((3,), dtype="int32", name="ids")
    keras.Model(tokens, layers.Dense(2, name="dense_1")(layers.Embedding(10, 4, name="dense")(tokens))).save(ids_model)  # fmt: skip
    np.savez(ids, ids=np.full((2, 3), 2**40, "int64"))
    one_line_error(invoke("inspect", ids_model, *INSPECT, "--input", ids),
                   "holds 1099511627776, outside int32")  # fmt: skip


# 9: outputs never over a model or an input --------------------------------------------------------


def test_junit_never_lands_on_a_model_or_another_file(root: Path, base: dict[str, Path]) -> None:
    a = root / "a.keras"
    a.write_bytes(base["good.keras"].read_bytes())
    before = H.digest(a)
    # the mistake: --junit swallows the first model file as its value
    refused(["check", "--static-only", "--junit", str(a), str(base["good.h5"])],
            "a report named like a model or data file")  # fmt: skip
    assert H.digest(a) == before
    notes = root / "notes.txt"
    notes.write_text("my notes\n")
    one_line_error(invoke("check", "--static-only", "--junit", notes, base["good.keras"]),
                   "exists and is not a JUnit report written by layergrad")  # fmt: skip
    assert notes.read_text() == "my notes\n"
    linked = root / "linked.xml"
    linked.symlink_to(base["good.h5"])
    one_line_error(invoke("check", "--static-only", "--junit", linked, base["good.h5"]),
                   "which this run reads")  # fmt: skip


def test_junit_creates_its_folder_and_replaces_an_old_report(
    root: Path, base: dict[str, Path]
) -> None:
    target = root / "reports" / "ci" / "layergrad.xml"
    first = invoke("check", "--static-only", "--junit", target, base["good.keras"])
    assert first.exit_code == 0 and "PASS" in first.stdout
    assert first.stderr == f"wrote the JUnit report to {target}\n"
    assert target.read_text().startswith("<?xml")
    again = invoke("check", "--static-only", "--junit", target, base["good.keras"])
    assert again.stderr == f"wrote the JUnit report to {target} (replaced it)\n"
    assert not [p for p in target.parent.iterdir() if p.name != target.name]  # no temp left


def test_unwritable_junit_is_refused_before_the_work(root: Path, base: dict[str, Path]) -> None:
    blocker = root / "blocker"
    blocker.write_text("a file where a folder should be")
    result = invoke("check", "--static-only", "--junit", blocker / "x.xml", base["good.keras"])
    assert result.exit_code == 2
    assert "PASS" not in result.stdout  # refused before any file was checked
    assert result.stderr.startswith("error: --junit") and "is not a folder" in result.stderr
    assert result.stderr.count("\n") == 1 and "unexpected" not in result.stderr


def test_save_gradient_never_lands_on_an_input(root: Path, base: dict[str, Path]) -> None:
    batch = root / "batch.npz"
    np.savez(batch, input_layer=normal(8, 5))
    before = H.digest(batch)
    model = str(base["good.keras"])
    one_line_error(invoke("inspect", model, *INSPECT, "--input", batch, "--save-gradient", batch),
                   "which this run reads")  # fmt: skip
    assert H.digest(batch) == before
    link = root / "model_link.npy"
    link.symlink_to(base["good.keras"])
    one_line_error(
        invoke("inspect", model, *INSPECT, "--save-gradient", link), "which this run reads"
    )
    text = root / "g.npy"
    text.write_text("keep me")
    one_line_error(invoke("inspect", model, *INSPECT, "--save-gradient", text),
                   "exists and is not a .npy array")  # fmt: skip
    assert text.read_text() == "keep me"
    text.unlink()
    first = invoke("inspect", model, *INSPECT, "--save-gradient", text)
    assert first.exit_code == 0 and first.stderr == f"wrote the gradient of dense_1 to {text}\n"
    again = invoke("inspect", model, *INSPECT, "--save-gradient", text)
    assert again.stderr == f"wrote the gradient of dense_1 to {text} (replaced it)\n"


def _branches(path: Path) -> Path:
    x = keras.Input((5,), name="x")
    a = layers.Dense(4, name="a")(x)
    b = layers.Dense(3, name="b")(a)
    c = layers.Dense(2, name="c")(x)  # does not depend on a
    keras.Model(x, [b, c], name="branches").save(path)
    return path


def test_a_none_gradient_is_not_written_for_npy_or_npz(root: Path) -> None:
    model = _branches(root / "branches.keras")
    npy = root / "none.npy"
    result = invoke("inspect", model, "--from", "a", "--to", "c", "--save-gradient", npy)
    assert result.exit_code == 0 and not npy.exists()
    assert result.stderr == f"--save-gradient {npy}: not written, the gradient of c is None\n"
    assert invoke("inspect", model, "--from", "a", "--to", "c", "--save-gradient", npy,
                  "--fail-on", "none").exit_code == 1  # fmt: skip
    npz = root / "some.npz"
    result = invoke(
        "inspect", model, "--from", "a", "--to", "b", "--to", "c", "--save-gradient", npz
    )
    assert result.exit_code == 0
    assert result.stderr == f"wrote the gradient of b to {npz} (left out c: the gradient is None)\n"
    with np.load(npz) as data:
        assert data.files == ["b"]


# 10: any layer name round-trips -------------------------------------------------------------------


def test_layer_names_that_are_numpy_keywords_round_trip(root: Path) -> None:
    names = ["file", "allow_pickle", "arr_0", "x.npy", "fix_imports"]
    x = keras.Input((5,), name="x")
    h = layers.Dense(4, name="src")(x)
    stack = {}
    for name in names:
        stack[name] = layers.Dense(3, name=name)
        h = stack[name](h)
    outer = keras.Sequential([keras.Input((3,)), layers.Dense(2, name="inner")], name="outer")
    model = keras.Model(x, outer(h), name="keywords")
    path = root / "keywords.keras"
    model.save(path)
    target = root / "g.npz"
    refs = [*names, "outer/inner"]
    batch = normal(8, 5)
    batch_file = root / "keywords_x.npy"
    np.save(batch_file, batch)
    args = ["inspect", path, "--from", "src", "--input", batch_file, "--save-gradient", target]
    result = invoke(*args, *(a for ref in refs for a in ("--to", ref)))
    assert result.exit_code == 0, result.output
    with np.load(target) as data:
        assert sorted(data.files) == sorted(refs)
        got = {ref: data[ref] for ref in refs}
    src = model.get_layer("src")
    chain = [stack[n] for n in names]
    for k, name in enumerate(names):  # d sum(name) / d src, by the seeds' hand-written tape
        want = manual_gradient(src, lambda t, k=k: _run(chain[: k + 1], t), batch)
        np.testing.assert_allclose(got[name], want, rtol=1e-5, atol=1e-6)
    want = manual_gradient(src, lambda t: outer(_run(chain, t)), batch)
    np.testing.assert_allclose(got["outer/inner"], want, rtol=1e-5, atol=1e-6)


def _run(chain: list[Any], t: Any) -> Any:
    for layer in chain:
        t = layer(t)
    return t


# 11: Keras's temporary files stay in the system temp directory ------------------------------------


def test_keras_extracts_weights_into_the_system_temp_directory(
    root: Path, base: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over half the free memory Keras extracts the weights into a folder next to the file it
    is given; layergrad gives it a link in the system temp directory instead."""
    from keras.src.saving import saving_lib

    folder = root / "models"
    folder.mkdir()
    model = folder / "big.keras"
    model.write_bytes(base["good.keras"].read_bytes())
    chosen: list[str] = []
    real = tempfile.TemporaryDirectory

    def spy(*args: Any, **kwargs: Any) -> Any:
        if "dir" in kwargs:  # Keras's extraction folder (layergrad's own folder takes none)
            chosen.append(str(kwargs["dir"]))
        return real(*args, **kwargs)

    monkeypatch.setattr(saving_lib, "is_memory_sufficient", lambda _model: False)  # a big model
    monkeypatch.setattr(saving_lib.tempfile, "TemporaryDirectory", spy)
    keras.saving.load_model(model, compile=False)  # Keras alone: beside the model
    assert chosen == [str(folder)]
    chosen.clear()
    before = sorted(os.listdir(folder))
    loaded, _ = loader.load_model(model)
    assert loaded.model.name == "good"
    (used,) = chosen
    assert Path(used).resolve().is_relative_to(Path(tempfile.gettempdir()).resolve())
    assert sorted(os.listdir(folder)) == before and not Path(used).exists()


def test_psutil_is_declared_so_keras_measures_free_memory() -> None:
    pyproject = (H.ROOT / "pyproject.toml").read_text()
    assert '"psutil' in pyproject
    from keras.src.saving import saving_lib

    assert saving_lib.psutil is not None


def test_a_large_stored_tensor_is_scanned_in_slabs(root: Path, base: dict[str, Path]) -> None:
    """A real 160 MB kernel in one row is read a slab at a time: memory stays far below its
    size, and the NaN count is exact (two, placed by hand at both ends)."""
    path = root / "wide_kernel.h5"
    path.write_bytes(base["good.h5"].read_bytes())
    import h5py

    with h5py.File(path, "r+") as h5:
        group = h5["model_weights/dense"]
        name = next(n.decode() if isinstance(n, bytes) else n
                    for n in group.attrs["weight_names"] if "kernel" in str(n))  # fmt: skip
        del group[name]
        data = np.ones((1, 40_000_000), "float32")
        data[0, 7] = data[0, -1] = np.nan
        group.create_dataset(name, data=data)
    del data
    m = H.measure(["layers", str(path), "--json"])
    assert m.returncode == 0, m.stderr
    bounded(m, mb=150)
    rows = {r["path"]: r for r in json.loads(m.stdout)["layers"]}
    assert rows["dense"]["weights"]["nan"] == 2 and rows["dense"]["params"] == 40_000_004
