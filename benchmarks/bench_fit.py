"""Benchmark: the cost of `GradientMonitor` against the same `model.fit` without it.

A small convolutional classifier (16x16x3 inputs, batch 64, 0.1 M weights) trains on
random data. Time: in one process, after one warm-up fit each (tracing: each variant keeps
one callback, which runs the steps it traced again in later fits of the same model, as Keras
does the plain step), alternating rounds of `--steps` steps each (the order reversed every
other round), timed from the end of step 10 to the end of the last step:
  plain       model.fit without the callback
  every=100   GradientMonitor(every=100)      goal <= 1.05x
  every=1     GradientMonitor(every=1)        goal <= 1.5x
First fit: `--first-rounds` times, a fresh model's first fit of 20 steps with and without
GradientMonitor(every=100), alternating; the median difference is what tracing the monitored
steps adds once.
Memory: fresh processes, peak RSS of a plain fit and of a fit with every=1 (goal <= 1.1x).
Printed: the median per-step wall and CPU time of each and the median of the per-round
ratios (on a shared machine the CPU time, all threads, is the steadier of the two).

    python benchmarks/bench_fit.py [--rounds 15] [--steps 200] [--first-rounds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

SETUP = """
import os
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np
import keras
from layergrad import GradientMonitor

def build():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([
        keras.Input((16, 16, 3)),
        keras.layers.Conv2D(16, 3, activation="relu", padding="same"),
        keras.layers.Conv2D(32, 3, activation="relu", padding="same"),
        keras.layers.MaxPooling2D(),
        keras.layers.Conv2D(32, 3, activation="relu", padding="same"),
        keras.layers.MaxPooling2D(),
        keras.layers.Flatten(),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(10, activation="softmax"),
    ])
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    return model

rng = np.random.default_rng(0)
x = rng.standard_normal((64 * STEPS, 16, 16, 3)).astype("float32")
y = rng.integers(0, 10, 64 * STEPS)
"""

MEMORY = """
import sys
every = int(sys.argv[1])
model = build()
callbacks = [GradientMonitor(every=every)] if every else []
model.fit(x, y, batch_size=64, epochs=1, verbose=0, callbacks=callbacks)
"""


def peak_rss_mb(code: str, *args: str) -> float:
    """Peak resident memory of one fresh process."""
    proc = subprocess.Popen(
        [sys.executable, "-c", code, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    _, status, usage = os.wait4(proc.pid, 0)
    if status != 0:
        assert proc.stderr is not None
        raise SystemExit(proc.stderr.read().decode()[-2000:])
    return usage.ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--first-rounds", type=int, default=5)
    args = parser.parse_args()
    namespace: dict[str, object] = {}
    exec(SETUP.replace("STEPS", str(args.steps)), namespace)  # the same code as the memory runs
    keras, monitor, build = namespace["keras"], namespace["GradientMonitor"], namespace["build"]
    x, y = namespace["x"], namespace["y"]

    class StepTimer(keras.callbacks.Callback):  # type: ignore[attr-defined, name-defined, misc]
        def on_train_batch_end(self, batch: int, logs: object = None) -> None:
            if batch == 10:
                self.start = (time.perf_counter(), time.process_time())
            self.end = (time.perf_counter(), time.process_time())

    variants = {"plain": None, "every=100": 100, "every=1": 1}
    models = {name: build() for name in variants}  # type: ignore[operator]
    callbacks = {
        name: [monitor(every=every)] if every else []  # type: ignore[operator]
        for name, every in variants.items()
    }

    def fit(name: str) -> tuple[float, float]:
        """(wall, CPU) seconds per step."""
        timer = StepTimer()
        models[name].fit(
            x,
            y,
            batch_size=64,
            epochs=1,
            verbose=0,
            shuffle=False,
            callbacks=[*callbacks[name], timer],
        )
        steps = args.steps - 11
        return tuple((e - s) / steps for s, e in zip(timer.start, timer.end, strict=True))  # type: ignore[return-value]

    for name in variants:
        fit(name)  # warm-up: trace
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}
    order = list(variants)
    for r in range(args.rounds):
        for name in order if r % 2 == 0 else order[::-1]:  # drift falls on each alike
            times[name].append(fit(name))
    for name in variants:
        line = [f"{name:10s}"]
        for k, what in ((0, "wall"), (1, "CPU")):
            mine = [t[k] for t in times[name]]
            ratios = [t[k] / p[k] for t, p in zip(times[name], times["plain"], strict=True)]
            line.append(
                f"{what} {statistics.median(mine) * 1e3:7.2f} ms/step, ratio "
                f"{statistics.median(ratios):.3f}x"
            )
        print("   ".join(line))
    first: dict[str, list[float]] = {"plain": [], "every=100": []}
    for r in range(args.first_rounds):
        names = ["plain", "every=100"] if r % 2 == 0 else ["every=100", "plain"]
        for name in names:
            model = build()  # type: ignore[operator]
            extra = [monitor(every=100)] if name != "plain" else []  # type: ignore[operator]
            start = time.perf_counter()
            model.fit(x[: 64 * 20], y[: 64 * 20], batch_size=64, epochs=1, verbose=0,
                      shuffle=False, callbacks=extra)  # fmt: skip
            first[name].append(time.perf_counter() - start)
    if args.first_rounds:
        added = [m - p for m, p in zip(first["every=100"], first["plain"], strict=True)]
        print(
            f"first fit  plain {statistics.median(first['plain']):.2f} s, every=100 "
            f"{statistics.median(first['every=100']):.2f} s   the monitor adds "
            f"{statistics.median(added):.2f} s (min {min(added):.2f}, max {max(added):.2f})"
        )
    memory_code = SETUP.replace("STEPS", str(min(args.steps, 100))) + MEMORY
    rounds = min(args.rounds, 3)  # fresh processes: each pays the TensorFlow import
    plain, watched = [], []
    for _ in range(rounds):
        plain.append(peak_rss_mb(memory_code, "0"))
        watched.append(peak_rss_mb(memory_code, "1"))
    ratios = [w / p for w, p in zip(watched, plain, strict=True)]
    print(
        f"memory     plain {statistics.median(plain):.0f} MB, every=1 "
        f"{statistics.median(watched):.0f} MB   ratio {statistics.median(ratios):.3f}x"
    )


if __name__ == "__main__":
    main()
