"""Benchmark: peak memory of `layergrad scan` on ResNet50 against a plain forward+backward.

ResNet50 (weights=None, 64x64 input, 10 classes) is saved once with a batch of 64 random
images. Fresh processes, alternating, N rounds, each measured by its own peak RSS:
  baseline  load the model; one forward and one backward pass w.r.t. its weights
  scan      `layergrad scan MODEL --input x.npy --json` (every layer's gradient statistics)
Printed: the median peak of each and the median of the per-round ratios (goal <= 1.1).

    python benchmarks/bench_scan_memory.py [--rounds 3] [--batch 64]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

MAKE = """
import os, sys
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np, keras
keras.applications.ResNet50(weights=None, input_shape=(64, 64, 3), classes=10,
                            classifier_activation=None).save(sys.argv[1])
np.save(sys.argv[2], np.random.default_rng(0).standard_normal(
    (int(sys.argv[3]), 64, 64, 3)).astype("float32"))
"""

BASELINE = """
import os, sys
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np, tensorflow as tf, keras
model = keras.saving.load_model(sys.argv[1], compile=False)
x = tf.constant(np.load(sys.argv[2]))
with tf.GradientTape() as tape:
    loss = tf.reduce_sum(model(x, training=False))
grads = tape.gradient(loss, model.trainable_weights)
print(sum(float(tf.reduce_sum(tf.square(g))) for g in grads))
"""


def peak_rss_mb(cmd: list[str]) -> float:
    """Peak resident memory of one fresh process (from wait4; this process stays small, and
    a child's peak counts its parent's memory at the fork)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    if status != 0:
        assert proc.stderr is not None
        raise SystemExit(f"failed: {' '.join(cmd)}\n{proc.stderr.read().decode()[-2000:]}")
    return usage.ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model, x = Path(tmp) / "resnet50.keras", Path(tmp) / "x.npy"
        subprocess.run([sys.executable, "-c", MAKE, str(model), str(x), str(args.batch)],
                       check=True, stderr=subprocess.DEVNULL)  # fmt: skip
        commands = {
            "baseline": [sys.executable, "-c", BASELINE, str(model), str(x)],
            "scan": [sys.executable, "-m", "layergrad", "scan", str(model), "--input", str(x),
                     "--json"],
        }  # fmt: skip
        peaks: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(args.rounds):
            for name, cmd in commands.items():
                peaks[name].append(peak_rss_mb(cmd))
    ratio = statistics.median(s / b for s, b in zip(peaks["scan"], peaks["baseline"], strict=True))
    print(f"ResNet50, 64x64, batch {args.batch}; peak RSS, medians of {args.rounds} rounds")
    for name, values in peaks.items():
        print(f"  {name:8s} {statistics.median(values):7.0f} MB")
    print(f"scan / baseline: {ratio:.2f}x  (goal <= 1.1)")


if __name__ == "__main__":
    main()
