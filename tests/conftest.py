"""Shared fixtures and independent references for gradient tests.

The references never use layergrad: the seeds' layer-by-layer GradientTape recipe, central
finite differences through hand-written forward functions, and values worked out on paper.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent

# Subprocesses (`python -c`, `python -m layergrad`) must not put the working directory first on
# sys.path either, or they would import ./layergrad instead of the installed package.
os.environ["PYTHONSAFEPATH"] = "1"


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
        direct = importlib.metadata.distribution("layergrad").read_text("direct_url.json") or "{}"
        editable = bool(json.loads(direct).get("dir_info", {}).get("editable"))
        installed = True
    except importlib.metadata.PackageNotFoundError:
        editable = installed = False
    if os.environ.get("LAYERGRAD_REQUIRE_INSTALLED") == "1" or (installed and not editable):
        raise pytest.UsageError(
            f"the tests imported the source tree ({imported}), not the installed package; "
            "run `pytest` (not `python -m pytest`) after `pip install \".[test]\"`"
        )


_refuse_the_source_tree()

from layergrad._tf import quiet_import  # noqa: E402  (after the check above)

SAMPLES = ROOT / "sample_models"
CUSTOM_LAYERS = str(SAMPLES / "custom_layers.py")

tf, keras = quiet_import()


def sample(name: str) -> str:
    """Path of a committed sample model."""
    path = SAMPLES / name
    assert path.exists(), f"missing sample model {path}; run sample_models/make_samples.py"
    return str(path)


def load_sample(name: str):
    """Load a sample model with Keras directly (the reference side of a comparison)."""
    if str(SAMPLES) not in sys.path:
        sys.path.insert(0, str(SAMPLES))
    import custom_layers  # noqa: F401  (registers the sample custom layers)

    return keras.saving.load_model(sample(name), compile=False, safe_mode=True)


def manual_gradient(
    first: Callable[[object], object], rest: Callable[[object], object], x: np.ndarray
) -> np.ndarray:
    """The seeds' recipe: h1 = first(x); tape.watch(h1); h2 = rest(h1); d sum(h2) / d h1."""
    with tf.GradientTape() as tape:
        h1 = first(tf.constant(x))
        tape.watch(h1)
        h2 = rest(h1)
    return tape.gradient(h2, h1).numpy()


def finite_difference(
    f: Callable[[np.ndarray], float], h: np.ndarray, eps: float = 1e-3
) -> np.ndarray:
    """Central differences of a scalar function at `h`, element by element (float64)."""
    h = np.asarray(h, dtype=np.float64)
    grad = np.zeros_like(h)
    for idx in np.ndindex(h.shape):
        up, down = h.copy(), h.copy()
        up[idx] += eps
        down[idx] -= eps
        grad[idx] = (f(up) - f(down)) / (2 * eps)
    return grad


def summed(fn: Callable[[object], object]) -> Callable[[np.ndarray], float]:
    """Wrap a forward function as f(h) = sum(fn(h)) evaluated in float32, returned as float."""
    return lambda h: float(np.sum(np.asarray(fn(tf.constant(h, dtype=tf.float32)), np.float64)))


def per_sample_jacobians(first, rest, x):
    """J_i = d rest(h)[i] / d h[i], h = first(x), one sample at a time, one element at a time."""
    h_all = np.asarray(first(tf.constant(x)))
    out = []
    for i in range(len(x)):
        h = tf.constant(h_all[i : i + 1])
        with tf.GradientTape(persistent=True) as tape:
            tape.watch(h)
            y = tf.reshape(rest(h), [-1])
            elements = [y[j] for j in range(int(y.shape[0]))]
        rows = [np.asarray(tape.gradient(e, h)).reshape(-1) for e in elements]
        out.append(np.stack(rows))
    return out


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


def normal(*shape: int, seed: int = 1) -> np.ndarray:
    """A float32 standard-normal array (test inputs)."""
    return np.random.default_rng(seed).standard_normal(shape).astype("float32")


@pytest.fixture
def softmax_head(tmp_path: Path) -> str:
    """x(4) -> Dense 'h'(3) -> Dense 'probs'(3, softmax), saved; its path."""
    x = keras.Input((4,), name="x")
    h = keras.layers.Dense(3, name="h")(x)
    out = keras.layers.Dense(3, activation="softmax", name="probs")(h)
    path = tmp_path / "softmax.keras"
    keras.Model(x, out).save(path)
    return str(path)


def _lowbias32(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.uint32)
    with np.errstate(over="ignore"):
        x = x ^ (x >> np.uint32(16))
        x = x * np.uint32(0x7FEB352D)
        x = x ^ (x >> np.uint32(15))
        x = x * np.uint32(0x846CA68B)
        return x ^ (x >> np.uint32(16))


def projection_r(seed: int, output: int, shape: tuple[int, ...], first_sample: int = 0):
    """The default scan target's R for one output, by the formula in layergrad/projection.py,
    written again in numpy: R[i, j] from (seed, output, sample i, position j) alone."""
    rows, width = shape[0], int(np.prod(shape[1:], dtype=np.int64))
    head = _lowbias32(_lowbias32(np.uint32(seed & 0xFFFFFFFF)) ^ np.uint32(output))
    samples = np.arange(first_sample, first_sample + rows, dtype=np.uint32)
    base = _lowbias32(head ^ samples)[:, None]
    j = np.arange(width, dtype=np.uint64)
    first = _lowbias32((2 * j).astype(np.uint32))[None, :]
    second = _lowbias32((2 * j + 1).astype(np.uint32))[None, :]
    u1 = ((_lowbias32(base ^ first) >> np.uint32(8)).astype(np.float64) + 1) / 2**24
    u2 = (_lowbias32(base ^ second) >> np.uint32(8)).astype(np.float64) / 2**24
    r = np.sqrt(-2 * np.log(u1)) * np.cos(2 * np.pi * u2)
    return tf.constant(r.reshape(shape), tf.float32)
