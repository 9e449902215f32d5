"""Benchmark: `diff` of two scan JSONs at the size limit stays linear and lean.

Writes two scan JSONs of minimal rows just under `MAX_PROFILE_BYTES` (16 MiB), and half that
size, then runs as fresh processes, alternating:
  parse        `python -c "json.load"` of both files (the floor: reading the bytes as JSON)
  diff json    `layergrad diff A B --json`
  diff table   `layergrad diff A B` (at most 2,000 rows shown)
Printed: the medians of wall time and peak memory, each diff as a ratio to parse at the
same size, and the ratio of the full size to the half size (goal: about 2, linear).

    python benchmarks/bench_diff_large.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import hostile as H  # noqa: E402

from layergrad.files.report_json import MAX_PROFILE_BYTES  # noqa: E402


def write(path: Path, scale: float, limit: int) -> Path:
    rows, size = [], 400
    while size < limit - 200:
        row = {"layer": f"layer_{len(rows)}", "status": "ok",
               "gradient": {"mean_abs": 0.5 * scale}, "flags": []}  # fmt: skip
        rows.append(row)
        size += len(json.dumps(row)) + 2
    doc = {
        "schema": "layergrad.scan/1",
        "model": {"path": "m.keras", "format": "keras", "class": "Sequential", "name": "m"},
        "probe": {"source": "random", "seed": 0, "batch_size": 8, "training": False,
                  "reduce": "sum"},
        "target": None,
        "layers": rows,
    }  # fmt: skip
    path.write_text(json.dumps(doc))
    return path


def parse(a: Path, b: Path) -> H.Measured:
    """The floor, measured as the command is (a fresh process, its own peak memory)."""
    code = f"import json; json.load(open({str(a)!r})); json.load(open({str(b)!r}))"
    with tempfile.TemporaryDirectory() as folder:
        peak = Path(folder) / "peak"
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", H._WRAPPER, str(peak), sys.executable, "-c", code],
                       check=True)  # fmt: skip
        seconds = time.perf_counter() - start
        return H.Measured(0, "", "", seconds, float(peak.read_text()) / 1024)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    results: dict[str, dict[str, list[float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for label, limit in (("half", MAX_PROFILE_BYTES // 2), ("full", MAX_PROFILE_BYTES)):
            a = write(Path(tmp) / f"{label}_a.json", 1.0, limit)
            b = write(Path(tmp) / f"{label}_b.json", 1.5, limit)
            jobs = {
                "parse": lambda a=a, b=b: parse(a, b),
                "diff json": lambda a=a, b=b: H.measure(["diff", str(a), str(b), "--json"], 600),
                "diff table": lambda a=a, b=b: H.measure(["diff", str(a), str(b)], 600),
            }
            times = {name: [] for name in jobs}
            peaks = {name: [] for name in jobs}
            for r in range(args.rounds):
                order = list(jobs)[r % 3 :] + list(jobs)[: r % 3]
                for name in order:
                    m = jobs[name]()
                    times[name].append(m.seconds)
                    peaks[name].append(m.peak_mb)
            results[label] = {f"{n} s": t for n, t in times.items()}
            results[label].update({f"{n} MB": p for n, p in peaks.items()})
    med = {label: {k: statistics.median(v) for k, v in r.items()} for label, r in results.items()}
    for label, values in med.items():
        print(f"{label} size ({MAX_PROFILE_BYTES // (2 if label == 'half' else 1) >> 20} MiB):")
        for key, value in values.items():
            print(f"  {key:14s} {value:8.1f}")
        for name in ("diff json", "diff table"):
            ratio = values[f"{name} s"] / values["parse s"]
            print(f"  {name} / parse: {ratio:.1f}x time")
    for name in ("diff json", "diff table"):
        growth = med["full"][f"{name} s"] / med["half"][f"{name} s"]
        print(f"{name}: full / half {growth:.2f}x time (goal ~2, linear)")


if __name__ == "__main__":
    main()
