"""Fixtures shared by the tests, and the check that they exercise the installed package.

Independent references (manual tapes, finite differences) live in helpers.py.
"""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent

# Subprocesses (`python -c`, `python -m layergrad`) must not put the working directory first on
# sys.path either, or they would import ./layergrad instead of the installed package.
os.environ["PYTHONSAFEPATH"] = "1"
# The reports' width follows COLUMNS when it is set (a terminal exports it; pytest-xdist sets 80
# in its workers); a test that wants a width passes its own.
os.environ.pop("COLUMNS", None)
# Under pytest-xdist every worker is a process of its own: one TensorFlow thread per op in each
# (they share the cores; the models here are small), and two for concurrent ops (replicas on
# logical devices run their collectives side by side). Set before TensorFlow is imported.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("TF_NUM_INTRAOP_THREADS", "1")
    os.environ.setdefault("TF_NUM_INTEROP_THREADS", "2")


def _refuse_the_source_tree() -> None:
    """Stop the run when the tests would exercise ./layergrad instead of the installed package.

    `python -m pytest` from the repository root puts the root on sys.path, which hides a wheel
    that lacks a module. An editable install is the source tree by design and is allowed, unless
    LAYERGRAD_REQUIRE_INSTALLED=1 (CI) asks for the package exactly as users get it.
    """
    import importlib.metadata
    import json

    import layergrad

    imported = Path(layergrad.__file__).resolve().parent
    if imported != ROOT / "layergrad":
        return
    try:
        found = importlib.metadata.distribution("layergrad")
        direct = found.read_text("direct_url.json") or "{}"
        editable = bool(json.loads(direct).get("dir_info", {}).get("editable"))
        # a build's `layergrad.egg-info` in the root is metadata beside the source, no install
        installed = Path(str(found.locate_file(""))).resolve() != ROOT
    except importlib.metadata.PackageNotFoundError:
        editable = installed = False
    if os.environ.get("LAYERGRAD_REQUIRE_INSTALLED") == "1" or (installed and not editable):
        raise pytest.UsageError(
            f"the tests imported the source tree ({imported}), not the installed package; "
            'run `pytest` (not `python -m pytest`) after `pip install ".[test]"`'
        )


_refuse_the_source_tree()

# tests/ on sys.path, so that `from helpers import ...` works from every folder of the suite
sys.path.insert(0, str(Path(__file__).resolve().parent))

from helpers import keras  # noqa: E402  (after the check above)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files with slow tests first, each file's tests together and in their order.

    pytest-xdist hands out whole files in this order (`--dist loadfile
    --no-loadscope-reorder`): the long files start first and the short ones fill the end of
    the run, instead of one worker running a long file alone at the end."""
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow)  # a stable sort: the order is kept


@pytest.fixture(autouse=True, scope="module")
def _old_objects_left_out_of_the_collector() -> Iterator[None]:
    """After each test file: its garbage collected, then what survives frozen (`gc.freeze`).

    A worker lives through hundreds of files; without this, each full pass of the cyclic
    collector walks every object they left alive (TensorFlow and Keras state), memory that
    has gone cold: in a 2-worker run one pass took 20 to 35 s of wall time for 0.4 s of CPU,
    charged to whichever test allocated at that moment (the import-graph check's AST walk
    took 38 s there, 1.4 s alone). Frozen objects are never walked again; each file's own
    garbage is still collected, here and during its tests."""
    yield
    gc.collect()
    gc.freeze()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--overwrite", action="store_true", help="Rewrite the golden files in tests/golden/."
    )


@pytest.fixture
def golden(request: pytest.FixtureRequest) -> Callable[[str, str], None]:
    """Compare rendered text with tests/golden/NAME (or rewrite it with --overwrite)."""

    def check(name: str, text: str) -> None:
        path = ROOT / "tests" / "golden" / name
        if request.config.getoption("--overwrite"):
            path.parent.mkdir(exist_ok=True)
            path.write_text(text, encoding="utf-8")
        assert path.exists(), f"no golden file {path}; run pytest --overwrite and review it"
        assert text == path.read_text(encoding="utf-8")

    return check


@pytest.fixture
def write_input(tmp_path: Path) -> Callable[..., str]:
    """Save a probe batch to .npy (one array) or .npz (keyword arrays); return its path."""

    def write(array: np.ndarray | None = None, **named: np.ndarray) -> str:
        if array is not None:
            path = tmp_path / "x.npy"
            np.save(path, array)
        else:
            path = tmp_path / "x.npz"
            np.savez(path, **named)  # type: ignore[arg-type]
        return str(path)

    return write


@pytest.fixture
def softmax_head(tmp_path: Path) -> str:
    """x(4) -> Dense 'h'(3) -> Dense 'probs'(3, softmax), saved; its path."""
    x = keras.Input((4,), name="x")
    h = keras.layers.Dense(3, name="h")(x)
    out = keras.layers.Dense(3, activation="softmax", name="probs")(h)
    path = tmp_path / "softmax.keras"
    keras.Model(x, out).save(path)
    return str(path)
