"""Benchmark: `layergrad inspect` on the seed model vs a minimal hand-written script.

Both run as fresh processes (each pays the TensorFlow import), alternating, N rounds; prints
the median time of each and the median of the per-round ratios. Goal: ratio <= 1.05.
layergrad's bytecode is compiled first, as `pip install` compiles it (the script's own
imports, TensorFlow and Keras, are compiled already): a source tree whose bytecode is never
written (`PYTHONDONTWRITEBYTECODE`) would otherwise compile every module in every run.

    python benchmarks/bench_inspect.py [--rounds 7] [--model sample_models/seed.keras]
"""

from __future__ import annotations

import argparse
import compileall
import statistics
import subprocess
import sys
from pathlib import Path

from timing import timed

ROOT = Path(__file__).resolve().parent.parent

BASELINE = """
import os, sys
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np, tensorflow as tf, keras
model = keras.saving.load_model(sys.argv[1], compile=False, safe_mode=True)
x = tf.constant(np.random.default_rng(0).standard_normal((8, 5)).astype("float32"))
a, b = model.get_layer("dense"), model.get_layer("dense_1")
with tf.GradientTape() as tape:
    h1 = a(x)
    tape.watch(h1)
    h2 = b(h1)
g = tape.gradient(h2, h1).numpy()
print(float(np.sqrt((g * g).sum())), float(np.abs(g).mean()), float(np.abs(g).max()))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--model", default=str(ROOT / "sample_models" / "seed.keras"))
    args = parser.parse_args()
    ours = [sys.executable, "-m", "layergrad", "inspect", args.model,
            "--from", "dense", "--to", "dense_1"]  # fmt: skip
    base = [sys.executable, "-c", BASELINE, args.model]
    compileall.compile_dir(_package_dir(), quiet=1)
    timed(ours), timed(base)  # warm the file cache
    t_ours, t_base = [], []
    for _ in range(args.rounds):
        t_ours.append(timed(ours))
        t_base.append(timed(base))
    ratios = [o / b for o, b in zip(t_ours, t_base, strict=True)]
    print(f"baseline script : median {statistics.median(t_base):.2f} s")
    print(f"layergrad inspect: median {statistics.median(t_ours):.2f} s")
    print(f"ratio (median of per-round ratios): {statistics.median(ratios):.3f}  (goal <= 1.05)")


def _package_dir() -> str:
    """The folder of the layergrad that `python -m layergrad` imports from here."""
    code = "import layergrad, os; print(os.path.dirname(layergrad.__file__))"
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return found.stdout.strip()


if __name__ == "__main__":
    main()
