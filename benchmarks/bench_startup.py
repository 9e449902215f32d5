"""Benchmark: start-up cost of `layergrad --help` and `layergrad layers` vs importing TensorFlow.

Three commands run as fresh processes, alternating, N rounds: `python -c "import tensorflow"`,
`layergrad --help`, and `layergrad layers` on a ResNet50 `.keras` file (weights=None, about
100 MB) that the script saves in a temporary directory first. Prints the median of each and
the ratio of each median to the TensorFlow import. Goals: --help <= 0.10x, layers <= 0.20x.

    python benchmarks/bench_startup.py [--rounds 7]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from timing import timed

GOALS = {"layergrad --help": 0.10, "layergrad layers": 0.20}
SAVE_RESNET = """
import os, sys
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import keras
keras.applications.ResNet50(weights=None).save(sys.argv[1])
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "resnet50.keras"
        subprocess.run([sys.executable, "-c", SAVE_RESNET, str(model)], check=True,
                       stderr=subprocess.DEVNULL)  # fmt: skip
        size = model.stat().st_size / 1e6
        commands = {
            "import tensorflow": [sys.executable, "-c", "import tensorflow"],
            "layergrad --help": [sys.executable, "-m", "layergrad", "--help"],
            "layergrad layers": [sys.executable, "-m", "layergrad", "layers", str(model)],
        }
        env_note = os.environ.get("TF_CPP_MIN_LOG_LEVEL", "unset")
        for cmd in commands.values():  # warm the file cache and bytecode
            timed(cmd)
        times: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(args.rounds):
            for name, cmd in commands.items():
                times[name].append(timed(cmd))
    base = statistics.median(times["import tensorflow"])
    print(f"{args.rounds} rounds, ResNet50 file {size:.0f} MB, TF_CPP_MIN_LOG_LEVEL={env_note}")
    print(f"{'import tensorflow':<18}: median {base:.3f} s")
    for name, goal in GOALS.items():
        median = statistics.median(times[name])
        ratio = median / base
        verdict = "ok" if ratio <= goal else "OVER"
        print(f"{name:<18}: median {median:.3f} s  {ratio:.3f}x  (goal <= {goal:.2f}x, {verdict})")


if __name__ == "__main__":
    main()
