"""Benchmark: `scan` of every ResNet50 layer vs one plain forward+backward pass, and vs a loop.

ResNet50 (weights=None, 64x64 input, batch 2; `--model mobilenetv2` for MobileNetV2) is saved
once, compiled with the mean squared error, to a temp dir. In one process, alternating rounds
time:
  baseline   load the model; one forward and one backward pass w.r.t. its weights
  scan       load the model; layergrad's scan of every layer (one forward, one backward)
  weights    load the model; `scan --wrt weights` of the probe batch (`x`, `y` in a .npz)
  loop       load the model; one GradientTape per layer (what scan avoids), on --loop-layers
Printed: the medians (wall and CPU time, all threads) and the medians of the per-round
ratios scan/baseline (goal <= 1.2), weights/baseline, and loop/scan.

    python benchmarks/bench_scan.py [--rounds 5] [--loop-layers 40] [--model resnet50]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from layergrad.commands.api import scan_model, scan_weights_model
from layergrad.core.keras_backend import quiet_import

tf, keras = quiet_import()


def baseline(path: Path, x: np.ndarray) -> None:
    model = keras.saving.load_model(path, compile=False)
    with tf.GradientTape() as tape:
        y = model(x, training=False)
        loss = tf.reduce_sum(y)
    tape.gradient(loss, model.trainable_weights)


def scan(path: Path, x_file: Path) -> None:
    scan_model(path, input_file=x_file)


def weights(path: Path, xy_file: Path) -> None:
    scan_weights_model(path, input_file=xy_file)


def loop(path: Path, x: np.ndarray, layers: int) -> None:
    """One tape per layer: capture that layer's output, watch it, differentiate the output."""
    model = keras.saving.load_model(path, compile=False)
    for layer in model.layers[1 : 1 + layers]:
        original = layer.call
        with tf.GradientTape() as tape:
            seen = {}

            def watched(*a, _call=original, _seen=seen, _tape=tape, **k):
                _seen["h"] = _call(*a, **k)
                _tape.watch(_seen["h"])
                return _seen["h"]

            layer.call = watched
            try:
                y = model(x, training=False)
            finally:
                del layer.call
        tape.gradient(y, seen["h"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--loop-layers", type=int, default=40)
    parser.add_argument("--model", choices=["resnet50", "mobilenetv2"], default="resnet50")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{args.model}.keras"
        build = {"resnet50": keras.applications.ResNet50,
                 "mobilenetv2": keras.applications.MobileNetV2}[args.model]  # fmt: skip
        model = build(weights=None, input_shape=(64, 64, 3), classes=10, classifier_activation=None)
        model.compile(loss="mse")
        model.save(path)
        rng = np.random.default_rng(0)
        x = rng.standard_normal((2, 64, 64, 3)).astype("float32")
        x_file, xy_file = Path(tmp) / "x.npy", Path(tmp) / "xy.npz"
        np.save(x_file, x)
        np.savez(xy_file, x=x, y=rng.standard_normal((2, 10)).astype("float32"))
        n_layers = len(keras.saving.load_model(path, compile=False).layers)
        jobs = {
            "baseline": lambda: baseline(path, x),
            "scan": lambda: scan(path, x_file),
            "weights": lambda: weights(path, xy_file),
        }
        if args.loop_layers:
            jobs["loop"] = lambda: loop(path, x, args.loop_layers)
        for job in jobs.values():  # warm up: graph tracing, file cache
            job()
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in jobs}
        for _ in range(args.rounds):
            for name, job in jobs.items():
                start = (time.perf_counter(), time.process_time())
                job()
                times[name].append((time.perf_counter() - start[0], time.process_time() - start[1]))
    print(f"{args.model}, {n_layers} layers, 64x64, batch 2; medians of {args.rounds} rounds")
    med = {name: statistics.median(t[0] for t in ts) for name, ts in times.items()}
    for name, ts in times.items():
        cpu = statistics.median(t[1] for t in ts)
        print(f"  {name:8s} {med[name]:6.2f} s   CPU {cpu:6.2f} s")
    for name, goal in (("scan", "  (goal <= 1.2)"), ("weights", "")):
        ratios = [
            statistics.median(
                j[k] / b[k] for j, b in zip(times[name], times["baseline"], strict=True)
            )
            for k in (0, 1)
        ]
        what = "scan" if name == "scan" else "scan --wrt weights"
        print(f"{what} / baseline: {ratios[0]:.2f}x wall, {ratios[1]:.2f}x CPU{goal}")
    if not args.loop_layers:
        return
    per_layer = med["loop"] / args.loop_layers
    print(
        f"per-layer loop: {per_layer:.2f} s per layer, so ~{per_layer * n_layers:.1f} s for all "
        f"{n_layers} layers = {per_layer * n_layers / med['scan']:.1f}x the scan"
    )


if __name__ == "__main__":
    main()
