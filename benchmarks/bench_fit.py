"""Benchmark: the cost of `GradientMonitor` against the same `model.fit` without it.

Two models train on random data (`--model`):
  conv  a small convolutional classifier (16x16x3 inputs, batch 64, 0.1 M weights),
        1 epoch of `--steps` steps (default 200)
  mlp   4 x Dense(256, relu) and a 10-way softmax on 64 features (0.2 M weights), batch 64,
        2 epochs of 625 steps (`--epochs`, `--steps`)
Time: in one process, after one warm-up fit each (tracing: each variant keeps one callback,
which runs the steps it traced again in later fits of the same model, as Keras does the plain
step), alternating rounds (the order reversed every other round), each the whole `fit` call
(its start and end, the callback's reading and report included; no timing callback, which
would take Keras's per-batch work off its background thread for every variant):
  plain       model.fit without the callback
  every=100   GradientMonitor(every=100)      goal <= 1.05x
  every=1     GradientMonitor(every=1)        goal <= 1.5x
  idle        a callback whose batch hooks do nothing         (what a hook itself costs)
First fit: `--first-rounds` times, a fresh model's first fit of 20 steps with and without
GradientMonitor(every=100), alternating; the median difference is what tracing the monitored
steps adds once.
Memory: fresh processes, peak RSS of a plain fit and of a fit with every=1 (goal <= 1.1x).
Printed: the median seconds of each fit, wall and CPU time, and the median of the per-round
ratios (on a shared machine the CPU time, all threads, is the steadier of the two).

    python benchmarks/bench_fit.py [--model mlp] [--rounds 7] [--steps 625] [--epochs 2]
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

LAYERS = {
    "conv": lambda: [
        keras.Input((16, 16, 3)),
        keras.layers.Conv2D(16, 3, activation="relu", padding="same"),
        keras.layers.Conv2D(32, 3, activation="relu", padding="same"),
        keras.layers.MaxPooling2D(),
        keras.layers.Conv2D(32, 3, activation="relu", padding="same"),
        keras.layers.MaxPooling2D(),
        keras.layers.Flatten(),
        keras.layers.Dense(64, activation="relu"),
    ],
    "mlp": lambda: [keras.Input((64,))]
    + [keras.layers.Dense(256, activation="relu") for _ in range(4)],
}
SHAPE = {"conv": (16, 16, 3), "mlp": (64,)}

def build():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([*LAYERS["MODEL"](), keras.layers.Dense(10, activation="softmax")])
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    return model

rng = np.random.default_rng(0)
x = rng.standard_normal((64 * STEPS, *SHAPE["MODEL"])).astype("float32")
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


def setup(model: str, steps: int) -> str:
    return SETUP.replace("STEPS", str(steps)).replace("MODEL", model)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=["conv", "mlp"], default="conv")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, help="steps per epoch (conv 200, mlp 625)")
    parser.add_argument("--epochs", type=int, help="epochs per fit (conv 1, mlp 2)")
    parser.add_argument("--first-rounds", type=int, default=5)
    args = parser.parse_args()
    steps = args.steps or {"conv": 200, "mlp": 625}[args.model]
    epochs = args.epochs or {"conv": 1, "mlp": 2}[args.model]
    namespace: dict[str, object] = {}
    exec(setup(args.model, steps), namespace)  # the same code as the memory runs
    keras, monitor, build = namespace["keras"], namespace["GradientMonitor"], namespace["build"]
    x, y = namespace["x"], namespace["y"]

    class Idle(keras.callbacks.Callback):  # type: ignore[attr-defined, name-defined, misc]
        def on_train_batch_begin(self, batch: int, logs: object = None) -> None:
            pass

        def on_train_batch_end(self, batch: int, logs: object = None) -> None:
            pass

    variants = {"plain": None, "every=100": 100, "every=1": 1, "idle": 0}
    models = {name: build() for name in variants}  # type: ignore[operator]
    callbacks = {
        name: [] if every is None else [monitor(every=every)] if every else [Idle()]  # type: ignore[operator]
        for name, every in variants.items()
    }

    def fit(name: str, epochs: int = epochs) -> tuple[float, float]:
        """(wall, CPU) seconds of one whole fit."""
        start = (time.perf_counter(), time.process_time())
        models[name].fit(
            x, y, batch_size=64, epochs=epochs, verbose=0, shuffle=False, callbacks=callbacks[name]
        )
        return time.perf_counter() - start[0], time.process_time() - start[1]

    for name in variants:
        fit(name, 1)  # warm-up: trace
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}
    order = list(variants)
    for r in range(args.rounds):
        for name in order if r % 2 == 0 else order[::-1]:  # drift falls on each alike
            times[name].append(fit(name))
    print(
        f"{args.model}: {epochs} epoch(s) of {steps} steps, batch 64; medians of "
        f"{args.rounds} alternating rounds in one process"
    )
    for name in variants:
        line = [f"{name:10s}"]
        for k, what in ((0, "wall"), (1, "CPU")):
            mine = [t[k] for t in times[name]]
            ratios = [t[k] / p[k] for t, p in zip(times[name], times["plain"], strict=True)]
            line.append(
                f"{what} {statistics.median(mine):6.2f} s, ratio {statistics.median(ratios):.3f}x"
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
    memory_code = setup(args.model, min(steps, 100)) + MEMORY
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
