"""`fit`'s training findings on real buggy programs and their human fixes (real_programs.py).

Each program's human-fixed version and its buggy version are saved with the first SMALL rows of
their own data (`.npz`, `x` and `y`) and trained by `fit_model` (what `layergrad fit --data`
runs) with the program's own compile, for each seed. A finding on a human-fixed version is a
false alarm (those train); on a buggy version it is a catch, counted over the buggy versions
that train without crashing (recall; a version refused before its first step, as
`target_mismatch`, or that crashes, is listed apart). Prints one row per program and seed, then
the counts for docs/training.md.

    python benchmarks/bench_real_fit.py [--seeds 3] [--samples 64] [--programs relu_head]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).resolve().parent)]
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from real_programs import BY_NAME, PROGRAMS, Program  # noqa: E402

from layergrad.commands.fit.checks import FitOptions  # noqa: E402
from layergrad.commands.fit.train import fit_model  # noqa: E402
from layergrad.core.errors import LayergradError  # noqa: E402

BEFORE_TRAINING = {"target_mismatch"}  # refused before the first step: it did not train


def findings(program: Program, fixed: bool, folder: Path, samples: int, seed: int) -> list[str]:
    """The training findings of one version ('finding@layer'), or ['crash: ...']."""
    import keras

    x, y = program.data(fixed)
    name = f"{program.name}_{'fixed' if fixed else 'buggy'}_{seed}"
    keras.utils.set_random_seed(seed)
    program.build(fixed).save(folder / f"{name}.keras")  # type: ignore[attr-defined]
    np.savez(folder / f"{name}.npz", x=x[:samples], y=y[:samples])
    try:
        report = fit_model(folder / f"{name}.keras", folder / f"{name}.npz",
                           FitOptions(seed=seed))  # fmt: skip
    except LayergradError as exc:
        return [f"refused: {exc}".splitlines()[0][:60]]
    except Exception as exc:  # the buggy program crashes in training
        return [f"crash: {type(exc).__name__}"]
    return [f"{r.code}@{r.layer}" if r.layer else str(r.code) for r in report.findings]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--programs", default=",".join(p.name for p in PROGRAMS))
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--samples", type=int, default=64)
    args = parser.parse_args()
    start = time.perf_counter()
    alarms = fixed_runs = caught = trained = untrained = 0
    with tempfile.TemporaryDirectory() as folder:
        for name in args.programs.split(","):
            for seed in range(args.seeds):
                for fixed in (True, False):
                    found = findings(BY_NAME[name], fixed, Path(folder), args.samples, seed)
                    said = {f.split("@")[0] for f in found}
                    if fixed:
                        fixed_runs += 1
                        alarms += bool(found)
                    elif said & BEFORE_TRAINING or any(f.startswith(("crash", "refused"))
                                                       for f in found):  # fmt: skip
                        untrained += 1
                    else:
                        trained += 1
                        caught += bool(found)
                    print(f"{name:<22} seed {seed} {'fixed' if fixed else 'buggy'}  {found}",
                          flush=True)  # fmt: skip
    print(f"\nhuman-fixed versions with a finding (false alarms): {alarms} of {fixed_runs}")
    print(f"buggy versions that train, flagged (recall): {caught} of {trained}")
    print(f"buggy versions refused before training or crashing: {untrained}")
    print(f"{args.samples} samples, {args.seeds} seeds; {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
