"""Benchmark: every hostile file, through the commands that read it: time and peak memory.

Builds each file of tests/hostile.py in a temp dir (bombs are a few MB on disk), runs each
command as a fresh process, and prints the exit code, the wall time and the peak resident
memory, each also as a ratio to the same command on a healthy model measured in the same
run. A refusal should cost about what reading a healthy file costs (ratios near 1); a ratio
that grows means a guard was lost.

    python benchmarks/bench_hostile.py [--rounds 3] [--only bomb]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import hostile as H  # noqa: E402

from layergrad.core.keras_backend import quiet_import  # noqa: E402

INSPECT = ["--from", "dense", "--to", "dense_1"]


def build(root: Path) -> dict[str, Path]:
    """Every hostile file, by name."""
    _, keras = quiet_import()
    base = H.base_models(root, keras)
    files = {"healthy .keras": base["good.keras"], "healthy .h5": base["good.h5"]}
    files["polyglot"] = H.polyglot(base, root / "poly.keras")
    for member in ("config.json", "model.weights.h5"):
        files[f"zip bomb: {member}"] = H.zip_bomb(base, root / f"bomb_{member[:5]}.keras", member)
    files["overlapping members"] = H.write_zip(
        root / "overlap.keras",
        [H.stored(n, d) for n, d in H.members_of(base["good.keras"]).items()],
        aliases=40,
    )
    for kind in ("sparse", "lazy", "huge", "inflating"):
        files[f"shape bomb: {kind}"] = H.shape_bomb(base, root / f"shape_{kind}.h5", kind)
    for kind in ("external", "storage"):
        files[f"outside: {kind}"] = H.outside_storage(
            base, root / f"outside_{kind}.h5", kind, "/etc/passwd"
        )
    special = root / "special"
    special.mkdir()
    files.update(
        {f"special: {k}": v for k, v in H.special_files(special).items() if "npy" not in k}
    )
    files["runaway graph 8^8"] = H.config_only(root / "runaway.keras", H.runaway_config(8, 8))
    files["Dense(units=1e12)"] = H.with_config(base["good.keras"], root / "units.keras", _units)
    return files


def _units(config: dict[str, Any]) -> None:
    config["config"]["layers"][1]["config"]["units"] = 10**12


def inputs(root: Path) -> dict[str, Path]:
    """Hostile `--input` files (and a healthy one)."""
    import numpy as np

    healthy = root / "healthy.npy"
    np.save(healthy, np.ones((8, 5), "float32"))
    fifo = root / "input.fifo.npy"
    os.mkfifo(fifo)
    return {
        "healthy .npy": healthy,
        "npz bomb": H.npz_bomb(root / "bomb.npz"),
        "forged .npy shape": H.forged_npy(root / "forged.npy", (10**9, 5)),
        "FIFO as --input": fifo,
    }


COMMANDS: dict[str, Callable[[Path], list[str]]] = {
    "layers": lambda p: ["layers", str(p)],
    "check --static-only": lambda p: ["check", "--static-only", str(p)],
    "inspect": lambda p: ["inspect", str(p), *INSPECT],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="runs per command (median)")
    parser.add_argument("--only", default="", help="only cases whose name contains this")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="layergrad-bench-") as folder:
        root = Path(folder)
        files = build(root)
        models = root / "inputs"
        models.mkdir()
        batches = inputs(models)
        rows = []
        base: dict[str, tuple[float, float]] = {}
        for name, path in files.items():
            if args.only and args.only not in name and "healthy" not in name:
                continue
            for command, make in COMMANDS.items():
                if name == "healthy .h5" and command == "inspect":
                    continue
                rows.append(_row(name, command, make(path), args.rounds, base))
        model = files["healthy .keras"]
        for name, path in batches.items():
            if args.only and args.only not in name and "healthy" not in name:
                continue
            cmd = ["inspect", str(model), *INSPECT, "--input", str(path)]
            rows.append(_row(name, "inspect --input", cmd, args.rounds, base))
    _print(rows)


def _row(
    name: str, command: str, cmd: list[str], rounds: int, base: dict[str, tuple[float, float]]
) -> dict[str, Any]:
    runs = [H.measure(cmd, timeout=300) for _ in range(rounds)]
    seconds = statistics.median(r.seconds for r in runs)
    peak = statistics.median(r.peak_mb for r in runs)
    if name.startswith("healthy"):
        base.setdefault(command, (seconds, peak))
    ref = base.get(command, (seconds, peak))
    return {
        "case": name,
        "command": command,
        "exit": runs[-1].returncode,
        "seconds": seconds,
        "peak_mb": peak,
        "time_ratio": seconds / ref[0],
        "memory_ratio": peak / ref[1],
        "message": (runs[-1].stderr.strip().splitlines() or [""])[-1][:90],
    }


def _print(rows: list[dict[str, Any]]) -> None:
    head = (
        f"{'case':<26} {'command':<20} {'exit':>4} {'seconds':>8} {'peak MB':>8} "
        f"{'time x':>7} {'mem x':>6}"
    )
    print(head)
    print("-" * len(head))
    for r in rows:
        print(
            f"{r['case']:<26} {r['command']:<20} {r['exit']:>4} {r['seconds']:>8.2f} "
            f"{r['peak_mb']:>8.0f} {r['time_ratio']:>7.2f} {r['memory_ratio']:>6.2f}"
        )
    worst = max(rows, key=lambda r: r["memory_ratio"])
    print(
        f"\nlargest memory ratio: {worst['memory_ratio']:.2f} ({worst['case']}, {worst['command']})"
    )
    if os.environ.get("BENCH_JSON"):
        Path(os.environ["BENCH_JSON"]).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
