"""Benchmark: `inspect --data` throughput and memory against a hand-written compiled loop.

A small CNN (28x28x1 -> conv 16 -> pool -> conv 32 -> pool -> dense 64 -> dense 10) is saved
once, with N random samples in a `.npy` (N = --samples, default 20,000) and 10 N in another.
Side by side, in one run:

  throughput  in one process, alternating rounds: `inspect_model(..., data=X.npy)` (load,
              stream, compiled step, statistics) vs a hand-written loop: load the model, the
              same batches from memory through tf.data, one `tf.function` doing the forward
              pass, `tape.watch` on conv1's output and the backward pass, and a sum of
              squares. Goal: ours / hand-written <= 1.5 in time.
  memory      peak RSS of fresh processes: `layergrad inspect --data` on N and on 10 N
              samples (goal: 10 N / N <= 1.15, memory does not grow with the data), and of the
              hand-written loop on N samples, for scale.

    python benchmarks/bench_data.py [--rounds 3] [--samples 20000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent

BASELINE = """
import os, sys, time
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np, tensorflow as tf, keras

def run(model_path, data_path, batch_size=32):
    model = keras.saving.load_model(model_path, compile=False)
    conv1, rest = model.layers[0], model.layers[1:]
    x = np.load(data_path)
    dataset = tf.data.Dataset.from_tensor_slices(x).batch(batch_size).prefetch(tf.data.AUTOTUNE)
    total = tf.Variable(0.0, dtype=tf.float64)

    @tf.function(input_signature=[tf.TensorSpec((None, 28, 28, 1), tf.float32)])
    def step(batch):
        with tf.GradientTape() as tape:
            h = conv1(batch)
            tape.watch(h)
            y = h
            for layer in rest:
                y = layer(y)
        g = tape.gradient(y, h)
        total.assign_add(tf.reduce_sum(tf.square(tf.cast(g, tf.float64))))

    for batch in dataset:
        step(batch)
    return float(total.numpy())

if __name__ == "__main__":
    print(run(sys.argv[1], sys.argv[2]))
"""


def make_model(path: Path) -> None:
    from layergrad.core.keras_backend import quiet_import

    _, keras = quiet_import()
    keras.utils.set_random_seed(0)
    layers = keras.layers
    keras.Sequential(
        [
            keras.Input((28, 28, 1)),
            layers.Conv2D(16, 3, activation="relu", name="conv1"),
            layers.MaxPooling2D(name="pool1"),
            layers.Conv2D(32, 3, activation="relu", name="conv2"),
            layers.MaxPooling2D(name="pool2"),
            layers.Flatten(name="flatten"),
            layers.Dense(64, activation="relu", name="dense"),
            layers.Dense(10, name="head"),
        ]
    ).save(path)


def write_samples(path: Path, samples: int) -> None:
    """Random images written in blocks (the writer never holds the whole array)."""
    rng = np.random.default_rng(0)
    header = {"descr": "<f4", "fortran_order": False, "shape": (samples, 28, 28, 1)}
    with open(path, "wb") as out:
        np.lib.format.write_array_header_1_0(out, header)
        for start in range(0, samples, 10_000):
            n = min(10_000, samples - start)
            out.write(rng.random((n, 28, 28, 1), dtype=np.float32).tobytes())


def peak_rss_mb(cmd: list[str]) -> float:
    """Peak resident memory of one fresh process (its own, from wait4)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    if status != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{proc.stderr.read().decode()[-2000:]}")
    return usage.ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--samples", type=int, default=20_000)
    parser.add_argument("--make", metavar="DIR", help=argparse.SUPPRESS)  # internal
    args = parser.parse_args()
    if args.make:  # in a child: this process must stay small until the memory is measured
        make_model(Path(args.make) / "cnn.keras")
        write_samples(Path(args.make) / "x.npy", args.samples)
        write_samples(Path(args.make) / "x10.npy", 10 * args.samples)
        return
    with tempfile.TemporaryDirectory() as tmp:
        model, small, large = Path(tmp) / "cnn.keras", Path(tmp) / "x.npy", Path(tmp) / "x10.npy"
        subprocess.run(
            [sys.executable, __file__, "--make", tmp, "--samples", str(args.samples)],
            check=True, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        # A child's peak RSS counts its parent's at fork time: measure before importing here.
        cli = [sys.executable, "-m", "layergrad", "inspect", str(model), "--from", "conv1",
               "--to", "head", "--quiet", "--data"]  # fmt: skip
        base_file = Path(tmp) / "baseline.py"
        base_file.write_text(BASELINE)
        hand = [sys.executable, str(base_file), str(model), str(small)]
        rss = {
            "layergrad, N": peak_rss_mb([*cli, str(small)]),
            "layergrad, 10 N": peak_rss_mb([*cli, str(large)]),
            "hand-written, N": peak_rss_mb(hand),
        }
        times, cpu = _timings(model, small, args.rounds)
    med = {name: statistics.median(t) for name, t in times.items()}
    ratios = [o / b for o, b in zip(times["layergrad"], times["hand-written"], strict=True)]
    cpu_ratio = statistics.median(
        o / b for o, b in zip(cpu["layergrad"], cpu["hand-written"], strict=True)
    )
    print(f"small CNN, {args.samples:,} samples of 28x28x1, batch 32; medians of {args.rounds}")
    for name, value in med.items():
        print(f"  {name:13s} {value:6.2f} s  {args.samples / value:8,.0f} samples/s")
    print(f"per-round time ratios: {', '.join(f'{r:.2f}' for r in ratios)}")
    print(f"time, layergrad / hand-written: {statistics.median(ratios):.2f}x  (goal <= 1.5)")
    print(f"CPU time (all threads), layergrad / hand-written: {cpu_ratio:.2f}x")
    for name, value in rss.items():
        print(f"  peak RSS {name:16s} {value:7.0f} MB")
    growth = rss["layergrad, 10 N"] / rss["layergrad, N"]
    print(f"peak RSS, 10 N / N samples: {growth:.3f}x  (goal <= 1.15)")


def _timings(
    model: Path, data: Path, rounds: int
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Alternating rounds in this process (wall and CPU seconds): the API over the data and
    the hand-written loop, in turn first."""
    from layergrad.commands.api import inspect_model

    namespace: dict[str, object] = {"__name__": "baseline"}
    exec(BASELINE, namespace)
    jobs = {
        "layergrad": lambda: inspect_model(model, "conv1", ["head"], data=data),
        "hand-written": lambda: namespace["run"](str(model), str(data)),  # type: ignore[operator]
    }
    for job in jobs.values():  # warm up: file cache, first imports
        job()
    times: dict[str, list[float]] = {name: [] for name in jobs}
    cpu: dict[str, list[float]] = {name: [] for name in jobs}
    order = list(jobs)
    for _ in range(rounds):
        for name in order:
            start, start_cpu = time.perf_counter(), time.process_time()
            jobs[name]()
            times[name].append(time.perf_counter() - start)
            cpu[name].append(time.process_time() - start_cpu)
        order.reverse()
    return times, cpu


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
