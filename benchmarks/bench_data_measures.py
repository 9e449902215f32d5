"""Benchmark: the measures over `--data` against hand-written loops, and their memory.

In one run, side by side (time ratios are medians of per-round ratios, alternating order):

  scan      `scan_model(..., data=X.npy)` on a small CNN (28x28x1 -> conv 16 -> pool ->
            conv 32 -> pool -> dense 64 -> dense 10) vs a hand-written compiled tf.function
            loop over the same batches: one forward pass watching every layer's output, the
            backward pass of the same seeded projection of the outputs, and per layer the
            same statistics (sum of squares, sum |g|, max |g|, zeros, non-finite, per-unit
            alive and sum |g|, per-sample L2 moments) added up in float64 variables.
            Goal <= 1.2x.
  jacobian  `inspect_model(..., measure="jacobian", exact=True, data=...)` on a tanh MLP of
            four Dense(WIDTH) layers, first to third layer, vs a hand-written loop of
            `tape.batch_jacobian` over the same batches computing each sample's Frobenius
            norm and the per-unit column norms (no spectral norm, which layergrad also
            computes). Goal <= 1.3x.
  weights   `scan_weights_model(..., data=D.npz)` on the CNN compiled with sparse categorical
            cross-entropy vs a hand-written compiled loop of `tape.gradient(loss,
            trainable_variables)` with the same accumulation (n_b g_b per variable and
            n_b ||g_b||^2 per layer, in float64 variables). Goal <= 1.2x.
  memory    peak RSS of fresh `layergrad` processes on N and on 10 N samples, each measure.
            Goal <= 1.1x.

    python benchmarks/bench_data_measures.py [--rounds 3] [--samples 5000] [--width 512]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
BATCH, JAC_BATCH = 32, 64

HAND = """
import numpy as np, tensorflow as tf, keras

def projection(outputs, samples, seed=0):
    from layergrad.engine.projection import project
    return project(outputs, samples, seed, tf.reduce_sum)

def stats(g):
    g = tf.cast(g, tf.float64)
    rows = tf.reshape(g, [tf.shape(g)[0], -1])
    units = tf.reshape(g, [-1, tf.shape(g)[-1]])
    norms = tf.norm(rows, axis=1)
    finite = tf.math.is_finite(g)
    return tf.concat([
        tf.stack([tf.reduce_sum(g * g), tf.reduce_sum(tf.abs(g)), tf.reduce_max(tf.abs(g)),
                  tf.cast(tf.size(g), tf.float64) - tf.cast(tf.math.count_nonzero(g), tf.float64),
                  tf.reduce_sum(tf.cast(~finite, tf.float64)),
                  tf.reduce_sum(norms), tf.reduce_sum(norms * norms), tf.reduce_max(norms)]),
        tf.cast(tf.reduce_any(units != 0, axis=0), tf.float64),
        tf.reduce_sum(tf.abs(units), axis=0)], 0)

def scan_loop(model_path, data_path, batch_size):
    model = keras.saving.load_model(model_path, compile=False)
    x = np.load(data_path, mmap_mode="r")
    dataset = tf.data.Dataset.from_tensor_slices(x).batch(batch_size)
    dataset = dataset.enumerate().prefetch(tf.data.AUTOTUNE)
    totals = None

    def forward(batch):
        outs, h = [batch], batch
        for layer in model.layers:
            h = layer(h)
            outs.append(h)
        return outs

    @tf.function
    def step(index, batch):
        with tf.GradientTape() as tape:
            tape.watch(batch)
            h, watched = batch, [batch]
            for layer in model.layers:
                h = layer(h)
                tape.watch(h)
                watched.append(h)
            start = tf.cast(index, tf.int64) * batch_size
            samples = start + tf.range(tf.cast(tf.shape(batch)[0], tf.int64))
            target = projection(h, samples)
        grads = tape.gradient(target, watched)
        return [stats(g) for g in grads]

    for index, batch in dataset:
        out = step(index, batch)
        if totals is None:
            totals = [tf.Variable(tf.zeros_like(o)) for o in out]
        for t, o in zip(totals, out):
            t.assign_add(o)
    return [t.numpy() for t in totals]

def jacobian_loop(model_path, data_path, batch_size):
    model = keras.saving.load_model(model_path, compile=False)
    d0, d1, d2 = (model.get_layer(n) for n in ("d0", "d1", "d2"))
    x = np.load(data_path, mmap_mode="r")
    norms, unit_sq = [], 0.0
    for start in range(0, len(x), batch_size):
        with tf.GradientTape() as tape:
            h0 = d0(tf.constant(x[start:start + batch_size]))
            tape.watch(h0)
            h2 = d2(d1(h0))
        jac = tape.batch_jacobian(h2, h0)
        norms.append(tf.norm(jac, axis=(1, 2)).numpy())
        unit_sq = unit_sq + tf.reduce_sum(tf.square(jac), axis=(0, 1)).numpy()
    return np.concatenate(norms), np.sqrt(unit_sq / len(x))

def weights_loop(model_path, data_path, batch_size):
    model = keras.saving.load_model(model_path, compile=False)
    loss_fn = keras.losses.SparseCategoricalCrossentropy()
    arrays = np.load(data_path)
    dataset = tf.data.Dataset.from_tensor_slices((arrays["x"], arrays["y"])).batch(batch_size)
    dataset = dataset.prefetch(tf.data.AUTOTUNE)
    variables = model.trainable_variables
    sums = [tf.Variable(tf.zeros(v.shape, tf.float64)) for v in variables]
    layer_of = [v.path.split("/")[0] for v in variables]
    names = list(dict.fromkeys(layer_of))
    squares = tf.Variable(tf.zeros([len(names)], tf.float64))
    count = tf.Variable(tf.zeros([2], tf.float64))

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=False))
        grads = tape.gradient(loss, variables)
        n = tf.cast(tf.shape(x)[0], tf.float64)
        per_layer = [tf.zeros([], tf.float64) for _ in names]
        for s, g, layer in zip(sums, grads, layer_of):
            wide = tf.cast(g, tf.float64)
            s.assign_add(n * wide)
            per_layer[names.index(layer)] += tf.reduce_sum(wide * wide)
        squares.assign_add(n * tf.stack(per_layer))
        count.assign_add(tf.stack([n, n * n]))

    for x, y in dataset:
        step(x, y)
    n = count.numpy()[0]
    return [s.numpy() / n for s in sums], squares.numpy()
"""


def make_files(folder: Path, samples: int, width: int) -> None:
    """The CNN (compiled), the MLP, and the data at N and 10 N samples."""
    from layergrad.core.keras_backend import quiet_import

    _, keras = quiet_import()
    keras.utils.set_random_seed(0)
    layers = keras.layers
    cnn = keras.Sequential(
        [
            keras.Input((28, 28, 1), name="x"),
            layers.Conv2D(16, 3, activation="relu", name="conv1"),
            layers.MaxPooling2D(name="pool1"),
            layers.Conv2D(32, 3, activation="relu", name="conv2"),
            layers.MaxPooling2D(name="pool2"),
            layers.Flatten(name="flatten"),
            layers.Dense(64, activation="relu", name="dense"),
            layers.Dense(10, activation="softmax", name="head"),
        ]
    )
    cnn.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
    cnn.save(folder / "cnn.keras")
    x = keras.Input((width,), name="x")
    h = x
    for i in range(4):
        h = layers.Dense(width, activation="tanh", name=f"d{i}")(h)
    keras.Model(x, h, name="mlp").save(folder / "mlp.keras")
    rng = np.random.default_rng(0)
    jac_samples = max(samples // 20, JAC_BATCH + 1)
    for suffix, scale in (("", 1), ("10", 10)):
        n = samples * scale
        images = rng.random((n, 28, 28, 1), dtype=np.float32)
        np.save(folder / f"x{suffix}.npy", images)
        np.savez(folder / f"d{suffix}.npz", x=images, y=rng.integers(0, 10, n))
        np.save(
            folder / f"m{suffix}.npy", rng.standard_normal((jac_samples * scale, width), np.float32)
        )


def peak_rss_mb(cmd: list[str]) -> float:
    """Peak resident memory of one fresh process (its own, from wait4)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    if status != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{proc.stderr.read().decode()[-2000:]}")
    return usage.ru_maxrss / 1024


def rounds_of(jobs: dict[str, Callable[[], object]], rounds: int) -> dict[str, list[float]]:
    """Wall seconds per round, alternating which job goes first (after a warm-up run)."""
    for job in jobs.values():
        job()
    times: dict[str, list[float]] = {name: [] for name in jobs}
    order = list(jobs)
    for _ in range(rounds):
        for name in order:
            start = time.perf_counter()
            jobs[name]()
            times[name].append(time.perf_counter() - start)
        order.reverse()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--samples", type=int, default=5000)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--only", choices=["scan", "jacobian", "weights", "memory"])
    parser.add_argument("--make", metavar="DIR", help=argparse.SUPPRESS)  # internal
    args = parser.parse_args()
    if args.make:  # in a child, so this process stays small until memory is measured
        make_files(Path(args.make), args.samples, args.width)
        return
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        subprocess.run(
            [sys.executable, __file__, "--make", tmp, "--samples", str(args.samples),
             "--width", str(args.width)],
            check=True, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        lg = [sys.executable, "-m", "layergrad"]
        commands = {
            "scan --data": [*lg, "scan", str(t / "cnn.keras"), "--quiet", "--data"],
            "inspect --measure jacobian --exact --data": [
                *lg, "inspect", str(t / "mlp.keras"), "--from", "d0", "--to", "d2",
                "--measure", "jacobian", "--exact", "--batch-size", str(JAC_BATCH),
                "--quiet", "--data",
            ],
            "scan --wrt weights --data": [
                *lg, "scan", str(t / "cnn.keras"), "--wrt", "weights", "--quiet", "--data"
            ],
        }  # fmt: skip
        files = {
            "scan --data": ("x.npy", "x10.npy"),
            "inspect --measure jacobian --exact --data": ("m.npy", "m10.npy"),
            "scan --wrt weights --data": ("d.npz", "d10.npz"),
        }
        memory = {}
        if args.only in (None, "memory"):
            for name, cmd in commands.items():
                small, large = files[name]
                memory[name] = (
                    peak_rss_mb([*cmd, str(t / small)]),
                    peak_rss_mb([*cmd, str(t / large)]),
                )
        ratios = {} if args.only == "memory" else _times(t, args)
    print(f"{args.samples:,} CNN samples (28x28x1, batch {BATCH}); MLP width {args.width}, "
          f"batch {JAC_BATCH}; {args.rounds} rounds")  # fmt: skip
    goals = {"scan": 1.2, "jacobian": 1.3, "weights": 1.2}
    for name, (per_round, med) in ratios.items():
        shown = ", ".join(f"{r:.2f}" for r in per_round)
        ratio = statistics.median(per_round)
        print(f"  {name:9s} layergrad / hand-written: {ratio:.2f}x (rounds {shown}; "
              f"{med[0]:.2f} s vs {med[1]:.2f} s; goal <= {goals[name]})")  # fmt: skip
    for name, (small, large) in memory.items():
        print(f"  peak RSS {name}: N {small:.0f} MB, 10 N {large:.0f} MB: "
              f"{large / small:.3f}x (goal <= 1.1)")  # fmt: skip


Ratios = dict[str, tuple[list[float], tuple[float, float]]]


def _times(t: Path, args: argparse.Namespace) -> Ratios:
    from layergrad.commands.api import inspect_model, scan_model, scan_weights_model

    hand: dict[str, object] = {"__name__": "hand"}
    exec(HAND, hand)
    pairs = {
        "scan": {
            "layergrad": lambda: scan_model(t / "cnn.keras", data=t / "x.npy", batch_size=BATCH),
            "hand": lambda: hand["scan_loop"](str(t / "cnn.keras"), str(t / "x.npy"), BATCH),
        },
        "jacobian": {
            "layergrad": lambda: inspect_model(
                t / "mlp.keras", "d0", ["d2"], data=t / "m.npy", batch_size=JAC_BATCH,
                measure="jacobian", exact=True,
            ),
            "hand": lambda: hand["jacobian_loop"](
                str(t / "mlp.keras"), str(t / "m.npy"), JAC_BATCH
            ),
        },
        "weights": {
            "layergrad": lambda: scan_weights_model(
                t / "cnn.keras", data=t / "d.npz", batch_size=BATCH
            ),
            "hand": lambda: hand["weights_loop"](str(t / "cnn.keras"), str(t / "d.npz"), BATCH),
        },
    }  # fmt: skip
    out = {}
    for name, jobs in pairs.items():
        if args.only not in (None, name):
            continue
        times = rounds_of(jobs, args.rounds)  # type: ignore[arg-type]
        per_round = [a / b for a, b in zip(times["layergrad"], times["hand"], strict=True)]
        med = (statistics.median(times["layergrad"]), statistics.median(times["hand"]))
        out[name] = (per_round, med)
    return out


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
