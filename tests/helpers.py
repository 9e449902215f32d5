"""Independent references for the tests, and paths of the repository's files.

The references never use layergrad: the seeds' layer-by-layer GradientTape recipe, central
finite differences through hand-written forward functions, and values worked out on paper.
Tests import them with `from helpers import ...`; fixtures live in conftest.py.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from layergrad.core.keras_backend import quiet_import

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_models"


CUSTOM_LAYERS = str(SAMPLES / "custom_layers.py")

tf, keras = quiet_import()


def fresh_python(*args: str, **run: Any) -> str:
    """stdout of `python ARGS` in a new interpreter: what it imports is its own."""
    done = subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, check=True, **run
    )
    return done.stdout


def sample(name: str) -> str:
    """Path of a committed sample model."""
    path = SAMPLES / name
    assert path.exists(), f"missing sample model {path}; run sample_models/make_samples.py"
    return str(path)


def seed_inspect(*options: str) -> list[str]:
    """The README's first call, `inspect seed.keras --from dense --to dense_1`, then `options`."""
    return ["inspect", sample("seed.keras"), "--from", "dense", "--to", "dense_1", *options]


def load_sample(name: str):
    """Load a sample model with Keras directly (the reference side of a comparison)."""
    if str(SAMPLES) not in sys.path:
        sys.path.insert(0, str(SAMPLES))
    import custom_layers  # noqa: F401  (registers the sample custom layers)

    return keras.saving.load_model(sample(name), compile=False, safe_mode=True)


def nested_layers() -> tuple:
    """encoder/dense, encoder/dense_1 and head of nested.keras, loaded by Keras directly."""
    m = load_sample("nested.keras")
    encoder = m.get_layer("encoder")
    return encoder.get_layer("dense"), encoder.get_layer("dense_1"), m.get_layer("head")


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


def normal(*shape: int, seed: int = 1) -> np.ndarray:
    """A float32 standard-normal array (test inputs)."""
    return np.random.default_rng(seed).standard_normal(shape).astype("float32")


def diagonal_blocks(forward: Callable[[object], object], h) -> list[np.ndarray]:
    """Per-sample diagonal blocks d forward(h)[i] / d h[i] of a 2-D `forward`, element by
    element on one tape over the whole batch (right where `forward` mixes samples)."""
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(h)
        y = forward(h)
        elements = [[y[i, j] for j in range(y.shape[1])] for i in range(y.shape[0])]
    return [
        np.stack([np.asarray(tape.gradient(e, h))[i] for e in row])
        for i, row in enumerate(elements)
    ]


def save_built(built: tuple[Any, str], path: Path) -> str:
    """Compile a (model, loss) pair that a test builds with adam, save it at `path`."""
    model, loss = built
    model.compile("adam", loss)
    model.save(path)
    return str(path)


def untrained_bn_net(path: Path):
    """Save and return conv (bias +50) -> BatchNormalization 'bn', never trained -> ReLU(6)
    -> pool -> head, on 8x8x3 inputs 'x'.

    In inference the untrained bn divides by sqrt(1 + 0.001) and nothing more, so every unit
    stays near 50, past ReLU6's cap: d head / d conv is exactly zero. With batch statistics
    (training) bn subtracts each channel's mean and the gradient flows."""
    keras.utils.set_random_seed(0)
    x = keras.Input((8, 8, 3), name="x")
    h = keras.layers.Conv2D(8, 3, padding="same", name="conv",
                            bias_initializer=keras.initializers.Constant(50.0))(x)  # fmt: skip
    h = keras.layers.BatchNormalization(name="bn")(h)
    h = keras.layers.ReLU(6.0, name="act")(h)
    h = keras.layers.GlobalAveragePooling2D(name="pool")(h)
    model = keras.Model(x, keras.layers.Dense(3, name="head")(h), name="bn_net")
    model.save(path)
    return model


def small_conv_net(path: Path) -> None:
    """Save conv (4 filters, ReLU) -> flatten -> head (3 units) on 8x8x3 images."""
    keras.utils.set_random_seed(4)
    keras.Sequential(
        [keras.Input((8, 8, 3)), keras.layers.Conv2D(4, 3, activation="relu", name="conv"),
         keras.layers.Flatten(name="flat"), keras.layers.Dense(3, name="head")]
    ).save(path)  # fmt: skip


def assert_stats_match(stats, values: np.ndarray) -> None:
    """Statistics added up in parts against numpy over every value: count, moments and extremes
    to rounding, p50 and p95 within the log histogram's 1.2%."""
    assert stats.count == len(values)
    assert (stats.mean, stats.std, stats.min, stats.max) == pytest.approx(
        (values.mean(), values.std(), values.min(), values.max()), rel=1e-12
    )
    for q, got in ((50, stats.p50), (95, stats.p95)):
        assert got == pytest.approx(np.percentile(values, q, method="inverted_cdf"), rel=0.012)


def _lowbias32(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.uint32)
    with np.errstate(over="ignore"):
        x = x ^ (x >> np.uint32(16))
        x = x * np.uint32(0x7FEB352D)
        x = x ^ (x >> np.uint32(15))
        x = x * np.uint32(0x846CA68B)
        return x ^ (x >> np.uint32(16))


def _uniforms(seed: int, output: int, rows: int, width: int, first_sample: int = 0):
    """(u1, u2) of engine/projection.py's formula, written again in numpy: [rows, width] from
    (seed, output, sample, position) alone."""
    head = _lowbias32(_lowbias32(np.uint32(seed & 0xFFFFFFFF)) ^ np.uint32(output))
    samples = np.arange(first_sample, first_sample + rows, dtype=np.uint32)
    base = _lowbias32(head ^ samples)[:, None]
    j = np.arange(width, dtype=np.uint64)
    first = _lowbias32((2 * j).astype(np.uint32))[None, :]
    second = _lowbias32((2 * j + 1).astype(np.uint32))[None, :]
    u1 = ((_lowbias32(base ^ first) >> np.uint32(8)).astype(np.float64) + 1) / 2**24
    u2 = (_lowbias32(base ^ second) >> np.uint32(8)).astype(np.float64) / 2**24
    return u1, u2


def projection_r(seed: int, output: int, shape: tuple[int, ...], first_sample: int = 0):
    """The default scan target's R for one output, by the formula in engine/projection.py,
    written again in numpy: R[i, j] from (seed, output, sample i, position j) alone."""
    width = int(np.prod(shape[1:], dtype=np.int64))
    u1, u2 = _uniforms(seed, output, shape[0], width, first_sample)
    r = np.sqrt(-2 * np.log(u1)) * np.cos(2 * np.pi * u2)
    return tf.constant(r.reshape(shape), tf.float32)


def random_labels(seed: int, output: int, shape: tuple[int, ...], kind: str, first_sample: int = 0):
    """The random labels layergrad draws for an output of `shape` whose loss reads `kind` (ids,
    one_hot, bits, positive, normal), by the formula in engine/projection.py, in numpy."""
    if kind == "normal":
        return projection_r(seed + 1, output, shape, first_sample).numpy()
    size = shape[:-1] if kind in ("ids", "one_hot") else shape
    width = int(np.prod(size[1:], dtype=np.int64))
    u = _uniforms(seed + 1, output, size[0], width, first_sample)[1].astype(np.float32)
    u = u.reshape(size)
    if kind == "positive":
        return u
    n = shape[-1] if kind in ("ids", "one_hot") else 2
    ids = np.minimum((u * n).astype(np.int32), n - 1)
    if kind == "ids":
        return ids
    return np.eye(n, dtype=np.float32)[ids] if kind == "one_hot" else ids.astype(np.float32)


def image_folder(root: Path, counts: dict[str, int], size: int = 8, seed: int = 0) -> Path:
    """Write a folder of small RGB PNGs, `counts[name]` of them in sub-folder `name` (the last
    one of each in a nested `name/more/`; an empty name puts them in `root` itself), each
    class's pixels in its own range; return `root`."""
    rng = np.random.default_rng(seed)
    for c, (name, count) in enumerate(counts.items()):
        for i in range(count):
            where = root / name / "more" if name and i == count - 1 else root / name
            where.mkdir(parents=True, exist_ok=True)
            pixels = rng.integers(0, 120, (size, size, 3)) + 40 * (c % 4)
            (where / f"{i:02d}.png").write_bytes(tf.io.encode_png(pixels.astype(np.uint8)).numpy())
    return root


class _OnTrainingCall(keras.layers.Layer):
    """Passes its input through, but for what `poisoned` makes of it on the given training
    call (0-based)."""

    def __init__(self, at: int, **kwargs):
        super().__init__(**kwargs)
        self.at = at
        self.calls = self.add_weight(shape=(), initializer="zeros", trainable=False, name="calls")

    def call(self, x, training=None):
        if not training:
            return x
        self.calls.assign_add(1.0)
        return self.poisoned(x, tf.equal(self.calls, float(self.at + 1)))


class NanAt(_OnTrainingCall):
    """Puts a NaN into its output on the given training call."""

    def poisoned(self, x, now):
        poison = tf.where(now, float("nan"), 0.0)
        return x + poison * tf.one_hot(0, tf.shape(x)[-1])


class NanGradientAt(_OnTrainingCall):
    """On the given training call the output is x + sqrt(0 * x): the same values, and a
    gradient of Inf * 0 = NaN for every input."""

    def poisoned(self, x, now):
        return tf.cond(now, lambda: x + tf.sqrt(x * 0.0), lambda: tf.identity(x))


def scan_json(path: Path, rows: list[dict[str, Any]], **probe: Any) -> Path:
    """A `layergrad.scan/1` document written by hand: the rows given, a random probe."""
    import json

    doc = {
        "schema": "layergrad.scan/1",
        "model": {"path": "good.keras", "format": "keras", "class": "Sequential", "name": "good"},
        "probe": {"source": "random", "seed": 0, "batch_size": 8, "training": False,
                  "reduce": "sum", **probe},
        "target": None,
        "layers": rows,
    }  # fmt: skip
    path.write_text(json.dumps(doc))
    return path


def scan_row(name: str, mean: Any = 0.5) -> dict[str, Any]:
    """One ok row of a hand-written scan document, its mean |g| given."""
    return {"layer": name, "status": "ok", "gradient": {"mean_abs": mean}, "flags": []}
