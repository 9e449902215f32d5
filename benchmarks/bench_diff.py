"""Benchmark: `diff` costs two scans, `check --baseline` costs one scan (no second scan).

ResNet50 (weights=None, 64x64 input) is saved twice (the second with one kernel scaled) in a
temp dir, with one probe batch of 2 rows. In one process, alternating rounds time:
  scan x2     two `scan_model` calls, one per file (the cost `diff` should match)
  diff        `diff_models` of the two files
  check       `check_file` of the new file with the probe of the baseline
  check+base  the same with `--baseline` (a scan JSON of the first file)
The order rotates every round. Printed: the medians and the ratios diff / (scan x2) and
(check+base) / check (goals: about 1.0).

    python benchmarks/bench_diff.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from layergrad.commands.api import scan_model
from layergrad.commands.check.check_files import CheckOptions, check_file
from layergrad.commands.diff import diff_models
from layergrad.core.keras_backend import quiet_import
from layergrad.core.probe_options import ProbeOptions
from layergrad.core.vocab import OutputFormat
from layergrad.render import render

tf, keras = quiet_import()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base, new = Path(tmp) / "base.keras", Path(tmp) / "new.keras"
        model = keras.applications.ResNet50(
            weights=None, input_shape=(64, 64, 3), classes=10, classifier_activation=None
        )
        model.save(base)
        conv = model.get_layer("conv3_block1_1_conv")
        kernel, bias = conv.get_weights()
        conv.set_weights([kernel * 1e-4, bias])
        model.save(new)
        x_file = Path(tmp) / "x.npy"
        np.save(x_file, np.random.default_rng(0).standard_normal((2, 64, 64, 3)).astype("float32"))
        probe = ProbeOptions(input_file=x_file)
        baseline = Path(tmp) / "baseline.json"
        # check runs a never-trained BatchNormalization in training mode; so does the baseline,
        # or check --baseline (which takes the baseline's probe) would time another mode
        checked = ProbeOptions(input_file=x_file, training=True)
        baseline.write_text(render("scan", OutputFormat.JSON, scan_model(base, options=checked)))
        plain = CheckOptions(probe=ProbeOptions(input_file=str(x_file)))
        with_base = CheckOptions(
            probe=ProbeOptions(input_file=str(x_file)), baselines=(str(baseline),)
        )
        jobs = {
            "scan x2": lambda: [scan_model(p, options=probe) for p in (base, new)],
            "diff": lambda: diff_models(base, new, options=probe),
            "check": lambda: check_file(new, plain),
            "check+base": lambda: check_file(new, with_base, _baseline(with_base, new)),
        }
        for job in jobs.values():  # warm up: graph tracing, file cache
            job()
        times: dict[str, list[float]] = {name: [] for name in jobs}
        order = list(jobs)
        for r in range(args.rounds):
            for name in order[r % 4 :] + order[: r % 4]:  # rotate: no job always runs first
                job = jobs[name]
                start = time.perf_counter()
                job()
                times[name].append(time.perf_counter() - start)
    med = {name: statistics.median(t) for name, t in times.items()}
    print(f"ResNet50, 64x64, batch 2; medians of {args.rounds} rounds")
    for name, value in med.items():
        print(f"  {name:11s} {value:6.2f} s")
    print(f"diff / (scan x2): {_ratio(times, 'diff', 'scan x2'):.2f}x  (goal ~1.0)")
    print(f"check --baseline / check: {_ratio(times, 'check+base', 'check'):.2f}x  (goal ~1.0)")


def _baseline(options: CheckOptions, path: Path):  # type: ignore[no-untyped-def]
    from layergrad.commands.diff import load_baselines, match_baselines

    found = load_baselines(options.baselines)
    given = options.probe.input_file
    return match_baselines([str(path)], found, None if given is None else str(given))[str(path)]


def _ratio(times: dict[str, list[float]], a: str, b: str) -> float:
    return statistics.median(x / y for x, y in zip(times[a], times[b], strict=True))


if __name__ == "__main__":
    main()
