"""Measure `fix` against the human fix on real buggy programs (real_programs.py).

For each program: the buggy model is saved with its data (`.npz`, `x` and `y`) and `fix_model`
runs on it with that data. Then, on the same batches (the same shuffled order of the samples
`fix` trains on: all but every fifth, which `fix` holds back), three models train for the same
steps in plain Keras: (i) the buggy model, (ii) `fix`'s copy when it wrote one, (iii) the
human-fixed version on its data. Each is scored on the held-back samples: the accuracy against
the true class ids and the loss of its own compile on its own labels. It prints one row per
program, and what `fix` said when it wrote no copy.

    python benchmarks/bench_real_fix.py [--programs linear_high_lr,missing_flatten] [--steps 300]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
from real_programs import BY_NAME, PROGRAMS, Program

from layergrad.commands.fix.evidence import HOLD_BACK
from layergrad.commands.fix.repair import FixOptions, fix_model

BATCH = 32


def split(n: int) -> tuple[np.ndarray, np.ndarray]:
    """The rows trained on and the rows held back, as `fix` splits them."""
    held = np.arange(n) % HOLD_BACK == HOLD_BACK - 1
    return np.flatnonzero(~held), np.flatnonzero(held)


def trained(model: object, x: np.ndarray, y: np.ndarray, truth: np.ndarray, steps: int,
            seed: int) -> str:  # fmt: skip
    """Train `model` on the kept rows for `steps` steps (the same shuffled batches for every
    model), score it on the held-back rows: 'accuracy / loss', or why it could not train."""
    import keras

    keep, held = split(len(x))
    order = np.random.default_rng(seed)
    rows = np.concatenate([order.permutation(keep) for _ in range(steps * BATCH // len(keep) + 1)])
    keras.utils.set_random_seed(seed)
    try:
        for step in range(steps):
            batch = rows[step * BATCH : (step + 1) * BATCH]
            model.train_on_batch(x[batch], y[batch])  # type: ignore[attr-defined]
        loss = model.evaluate(x[held], y[held], verbose=0, return_dict=True)["loss"]  # type: ignore[attr-defined]
        guess = np.asarray(model.predict(x[held], verbose=0))  # type: ignore[attr-defined]
    except Exception as exc:  # the buggy program crashes in training
        return f"crash: {type(exc).__name__}"
    if guess.ndim != 2 or guess.shape[-1] < 2:
        return f"- / {loss:.3f}"
    accuracy = float(np.mean(np.argmax(guess, axis=-1) == truth[held]))
    return f"{accuracy:.2f} / {loss:.3f}"


def measure(program: Program, folder: Path, steps: int, seed: int) -> tuple[str, str, str, str]:
    import keras

    x, y = program.data(False)
    fx, fy = program.data(True)
    truth = fy.argmax(-1).reshape(-1) if fy.ndim > 1 else fy.reshape(-1).astype("int64")
    path = folder / f"{program.name}.keras"
    keras.utils.set_random_seed(seed)
    program.build(False).save(path)  # type: ignore[attr-defined]
    data = folder / f"{program.name}.npz"
    np.savez(data, x=x, y=y)
    copy = folder / f"{program.name}.fixed.keras"
    report = fix_model(path, data, FixOptions(output=str(copy), force=True, steps=steps,
                                              seed=seed))  # fmt: skip
    buggy = trained(keras.models.load_model(path), x, y, truth, steps, seed)
    if report.output:
        repaired = trained(keras.models.load_model(report.output), x, y, truth, steps, seed)
    else:
        repaired = "no copy"
    keras.utils.set_random_seed(seed)
    human = trained(program.build(True), fx, fy, truth, steps, seed)
    said = "; ".join(
        f"{r.finding}: {' / '.join(r.code) or r.change} ({r.verdict.value})" for r in report.repairs
    ) or "; ".join(f"{u.code}: {u.hint or u.message}" for u in report.unrepaired)
    return buggy, repaired, human, said


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--programs", default=",".join(p.name for p in PROGRAMS))
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    start = time.perf_counter()
    print(f"{'program':<22} {'buggy':>16} {'fix copy':>16} {'human fix':>16}   fix's repairs")
    with tempfile.TemporaryDirectory() as folder:
        for name in args.programs.split(","):
            row = measure(BY_NAME[name], Path(folder), args.steps, args.seed)
            print(f"{name:<22} {row[0]:>16} {row[1]:>16} {row[2]:>16}   {row[3]}", flush=True)
    print(f"accuracy / loss on the held-back fifth; {args.steps} steps of {BATCH}; "
          f"{time.perf_counter() - start:.0f} s")  # fmt: skip


if __name__ == "__main__":
    main()
