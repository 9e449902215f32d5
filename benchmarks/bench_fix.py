"""Benchmark: the cost of `layergrad fix` against `check` and against two plain `fit`s.

A bundled model with one failing finding (`bug_softmax_one_unit.keras`: one repair) and
learnable labelled data (2048 rows, 6 features, y = x0 + x1 > 0) in a temp dir. Each command
runs as a fresh process (TensorFlow's import included, as a user runs it), in alternating
rounds, the order reversed every other round:
  check            layergrad check MODEL
  fix              layergrad fix MODEL                       goal <= 1.5x check
  fit x2           layergrad fit MODEL --data D --steps N, twice
  fix --data       layergrad fix MODEL --data D --steps N    goal <= 2.2x (fit x2)
Printed: the median of each and the median of the per-round ratios.

    python benchmarks/bench_fix.py [--rounds 3] [--steps 300]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
MODEL = str(ROOT / "sample_models" / "bug_softmax_one_unit.keras")
CLI = [sys.executable, "-m", "layergrad"]


def timed(cmd: list[str]) -> float:
    """Wall-clock seconds of one run of `cmd` (exit 0 or 1: the bug model fails check)."""
    start = time.perf_counter()
    done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    if done.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(cmd)} exited {done.returncode}")
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        rng = np.random.default_rng(0)
        x = rng.standard_normal((2048, 6)).astype("float32")
        data = str(Path(folder) / "train.npz")
        np.savez(data, x=x, y=(x[:, 0] + x[:, 1] > 0).astype("float32")[:, None])
        out = str(Path(folder) / "copy.keras")
        steps = ["--steps", str(args.steps)]
        runs = {
            "check": lambda: timed([*CLI, "check", MODEL]),
            "fix": lambda: timed([*CLI, "fix", MODEL, "--output", out, "--force"]),
            "fit x2": lambda: sum(
                timed([*CLI, "fit", MODEL, "--data", data, *steps]) for _ in range(2)
            ),
            "fix --data": lambda: timed(
                [*CLI, "fix", MODEL, "--data", data, *steps, "--output", out, "--force"]
            ),
        }
        times: dict[str, list[float]] = {name: [] for name in runs}
        for round_ in range(args.rounds):
            order = list(runs) if round_ % 2 == 0 else list(reversed(runs))
            for name in order:
                times[name].append(runs[name]())
    for name, values in times.items():
        print(f"{name:<12} median {statistics.median(values):6.2f} s")
    static = statistics.median(f / c for f, c in zip(times["fix"], times["check"], strict=True))
    trained = statistics.median(
        f / p for f, p in zip(times["fix --data"], times["fit x2"], strict=True)
    )
    print(f"fix / check            {static:.2f}x (goal <= 1.5x)")
    print(f"fix --data / fit x2    {trained:.2f}x (goal <= 2.2x)")


if __name__ == "__main__":
    main()
