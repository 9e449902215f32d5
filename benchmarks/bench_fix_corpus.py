"""Measure `fix` on the verdict corpus: is each fault with a mechanical repair repaired, and
with data, verified?

Builds part of the verdict corpus (verdict_corpus.py: healthy architectures times fault
operators, saved as .keras and .h5) in a temp dir and runs `fix_model` on each file. Per
operator it prints:
  faults    files whose injected finding `fix` reports (check, and with data training)
  repaired  of those, files where a repair is planned for that finding and the repaired copy
            (read back and checked) no longer has it
  at layer  of those, the repair names one of the fault's layers
  verified  with --data: of the repaired, files whose repair of that finding is `verified`
            (the finding gone from the trained copy and its loss clearly below the original's)
Healthy files must get "nothing to fix" (false repairs are counted). With `--data` every file
is trained on labelled data for `fix`'s default steps: the faults that need data on their own
labels, the static faults and the healthy files on the healthy architecture's labels (the
model is wrong, not the data), from a rule of the inputs; the faults whose repair adds a
non-linearity (NONLINEAR_OPS) on labels no linear map fits.

    python benchmarks/bench_fix_corpus.py [--archs seq_mlp_binary,mlp_sparse] [--saves keras,h5]
        [--forms str,obj] [--ops units_one,loss_bce] [--data --steps 300] [--verbose]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
from corpus_forms import Head
from verdict_corpus import BY_NAME, Case, _arrays, _write_data, build_corpus

from layergrad.commands.fix.repair import DEFAULT_STEPS, FixOptions, fix_model
from layergrad.core.fix_results import FixReport, Verdict

DEFAULT_ARCHS = "seq_mlp_binary,mlp_sparse,nested,multi_input,multi_output,residual,conv"
COLUMNS = ("faults", "repaired", "at layer", "verified")
# the faults whose repair adds non-linearity: a rule of the inputs that a linear map fits
# cannot show it, so they train on labels from |x| (NONLINEAR_ROWS samples)
NONLINEAR_OPS = ("hidden_linear", "relu_before_softmax")
NONLINEAR_ROWS = 1024
OTHER_SCALE = 500.0  # the regression targets of a second output, brought to (0, 1]
# the optimizer's faults (corpus_faults.training_only): no finding from the file, so healthy
# without data; with data, training finds them and the repair is the learning rate
RATE_OPS = ("learning_rate_huge", "sgd_learning_rate_tiny")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--archs", default=DEFAULT_ARCHS)
    parser.add_argument("--saves", default="keras,h5")
    parser.add_argument("--forms", default=None, help="written forms (str,fn,obj); all if unset")
    parser.add_argument("--ops", default=None, help="mutant names (e.g. units_one); all if unset")
    parser.add_argument("--data", action="store_true", help="train every file: verdicts")
    parser.add_argument("--steps", type=int, default=DEFAULT_STEPS)
    parser.add_argument("--verbose", action="store_true", help="a line per file as it is done")
    parser.add_argument(
        "--random-labels",
        action="store_true",
        help="train the data faults on the corpus's own (random) labels",
    )
    args = parser.parse_args()
    rows: dict[str, list[int]] = defaultdict(lambda: [0] * len(COLUMNS))
    healthy = [0, 0]  # files, of which "nothing to fix"
    false_repairs: list[str] = []
    misses: list[str] = []
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        ops = None if args.ops is None else ["healthy", *args.ops.split(",")]
        forms = None if args.forms is None else tuple(args.forms.split(","))
        cases = build_corpus(folder, archs=args.archs.split(","), forms=forms, ops=ops,
                             saves=tuple(args.saves.split(",")), healthy_data=False)  # fmt: skip
        labelled: dict[str, Path] = {}
        for case in cases:
            if case.path is None or (case.data is not None and not args.data):
                continue
            data = case.data
            if args.data and data is None:  # a static fault (or healthy) on the right labels
                key = f"{case.arch}__{case.op in NONLINEAR_OPS}"
                data = labelled.get(key) or _healthy_data(case, Path(folder), labelled, key)
            elif data is not None and not args.random_labels:  # a data fault: same form, learnable
                data = _learnable_like(Path(data))
            out = Path(folder) / "copy.keras"
            options = FixOptions(output=str(out), force=True, steps=args.steps)
            try:
                report = fix_model(case.path, data, options, imports=case.imports)
            except Exception as exc:  # a refused file is a miss, not a crash
                misses.append(f"{case.name}: {type(exc).__name__}: {exc}"[:200])
                continue
            if args.verbose:
                said = "; ".join(
                    f"{r.finding} {r.verdict.value} {r.why}"[:160] for r in report.repairs
                )
                print(f"{case.name}: {said or 'nothing to fix'}", flush=True)
            if case.expect is None and args.data and case.op in RATE_OPS:
                _count_rate(rows[case.op], case, report, misses)
                continue
            if case.expect is None:
                healthy[0] += 1
                if report.repairs:
                    false_repairs.append(f"{case.name}: {report.repairs[0].code}")
                else:
                    healthy[1] += 1
                continue
            _count(rows[case.op], case, report, misses, trained=args.data)
    print(f"{'operator':<28} " + " ".join(f"{c:>8}" for c in COLUMNS))
    for op, counts in sorted(rows.items()):
        print(f"{op:<28} " + " ".join(f"{n:>8}" for n in counts))
    total = [sum(r[i] for r in rows.values()) for i in range(len(COLUMNS))]
    print(f"{'all':<28} " + " ".join(f"{n:>8}" for n in total))
    print(f"healthy files: {healthy[0]}, nothing to fix: {healthy[1]}, "
          f"false repairs: {len(false_repairs)}")  # fmt: skip
    for line in false_repairs[:20] + misses[:60]:
        print("  " + line)
    print(f"{time.perf_counter() - start:.0f} s")


def _healthy_data(case: Case, folder: Path, labelled: dict[str, Path], key: str) -> Path:
    """The healthy architecture's labelled data: labels a rule of the inputs gives (learnable;
    per output by each output's head) when every input is numeric, else the corpus's (drawn
    at random: nothing can be verified on them, as no model beats the class prior). The
    faults of NONLINEAR_OPS get a rule no linear map fits, on more samples."""
    arch = BY_NAME[case.arch]
    x, y = _arrays(arch, arch.head, seed=1)
    nonlinear = case.op in NONLINEAR_OPS
    if nonlinear:
        x = arch.data(np.random.default_rng(1), NONLINEAR_ROWS)
    if all(v.dtype.kind in "fiu" for v in x.values()):
        if isinstance(y, dict):  # each output's labels by its own head
            heads = {"head": arch.head, **arch.others}
            y = {k: _rule_labels(x, heads[k], v, nonlinear=nonlinear) for k, v in y.items()}
            # the other outputs' regression targets at unit scale: at 50-500 their squared
            # error (~2e4) swamps the shared layers and the healthy file does not train
            # (its classification head ends above the class prior; training says exploding)
            y = {k: v if k == "head" else v / OTHER_SCALE for k, v in y.items()}
        else:
            y = _rule_labels(x, arch.head, y, nonlinear=nonlinear)
    labelled[key] = _write_data(folder / f"{key}__labels.npz", x, y)
    return labelled[key]


def _learnable_like(path: Path) -> Path:
    """The data of a data fault with its labels redrawn by `_rule_labels` in the same form
    (class ids, one-hot rows, 0/1, values) and width, so that a repaired copy can learn them;
    the file as it is when an input is not numeric or the labels are per output."""
    with np.load(path) as arrays:
        x = {k: arrays[k] for k in arrays.files if not k.startswith("y")}
        ys = [k for k in arrays.files if k.startswith("y")]
        if ys != ["y"] or not all(v.dtype.kind in "fiu" for v in x.values()):
            return path
        y = arrays["y"]
    flat = y.reshape(len(y), -1)
    if y.dtype.kind in "iu":
        head = Head("sparse", int(y.max()) + 1, "softmax", "")
    elif set(np.unique(flat)) <= {0.0, 1.0} and flat.shape[1] > 1 and np.all(flat.sum(1) == 1):
        head = Head("categorical", flat.shape[1], "softmax", "")
    elif set(np.unique(flat)) <= {0.0, 1.0}:
        head = Head("binary", flat.shape[1], "sigmoid", "")
    else:
        head = Head("regression", flat.shape[1], None, "")
    out = path.with_name(path.stem + "__learnable.npz")
    np.savez(out, **x, y=_rule_labels(x, head, y).reshape(y.shape))
    return out


def _rule_labels(
    x: dict[str, np.ndarray], head: Head, drawn: np.ndarray, nonlinear: bool = False
) -> np.ndarray:
    """Labels of the head's kind and shape from fixed projections of the standardised inputs;
    `nonlinear`: from the magnitudes of differences of features (`_magnitude_labels`)."""
    flat = np.concatenate([_features(v) for v in x.values()], axis=1)
    if nonlinear:
        return _magnitude_labels(flat, head, max(head.units, 1), drawn)
    flat = (flat - flat.mean(0)) / (flat.std(0) + 1e-9)
    k = max(head.units, 1)
    scores = flat @ np.random.default_rng(7).normal(size=(flat.shape[1], k))
    if head.kind == "binary":
        return (scores[:, :1] > np.quantile(scores[:, 0], 0.8)).astype("float32")
    if head.kind == "multilabel":
        return (scores > np.quantile(scores, 0.7, axis=0)).astype("float32")
    if head.kind in ("categorical", "sparse"):
        ids = np.argmax(scores, axis=1)
        return ids.astype("int64") if head.kind == "sparse" else np.eye(k, dtype="float32")[ids]
    if head.kind == "regression":
        return (50 + 450 / (1 + np.exp(-scores))).astype("float32")
    return drawn


def _features(v: np.ndarray) -> np.ndarray:
    """The values a label rule reads from one input: its values, or for images (rows of
    height x width x channels) what a small convolutional net reads, each channel's mean
    brightness over the whole image and over its central half (a projection of single
    pixels, mostly noise, is no task for convolutions and pooling)."""
    if v.ndim != 4:
        return v.reshape(len(v), -1).astype("float64")
    h, w = v.shape[1] // 4, v.shape[2] // 4
    centre = v[:, h : v.shape[1] - h, w : v.shape[2] - w]
    return np.concatenate([v.mean(axis=(1, 2)), centre.mean(axis=(1, 2))], axis=1)


def _magnitude_labels(flat: np.ndarray, head: Head, k: int, drawn: np.ndarray) -> np.ndarray:
    """Labels no linear map fits but a ReLU layer reaches in a few hundred steps: from
    |u| where u = x_a / mean_a - x_b / mean_b (two features, each over its mean; over its
    spread when the mean is about 0), a difference that crosses 0 inside the data without a
    bias, so a ReLU unit drawn as Keras draws it already bends there (centring on the means
    would ask the biases to travel as far as the unscaled inputs are from 0). Binary: |u|
    above its median (one pair of features per column); classes: k equally full bands of |u|.
    """
    mean, spread = flat.mean(0), flat.std(0) + 1e-9
    scaled = flat / np.where(np.abs(mean) > 0.1 * spread, mean, spread)
    width = scaled.shape[1]
    pairs = [((2 * i) % width, (2 * i + 1) % width) for i in range(k)]
    size = np.stack([np.abs(scaled[:, a] - scaled[:, b]) for a, b in pairs], axis=1)
    if head.kind in ("binary", "multilabel"):
        return (size > np.median(size, axis=0)).astype("float32")
    if head.kind in ("categorical", "sparse"):
        edges = np.quantile(size[:, 0], np.linspace(0, 1, k + 1)[1:-1])
        ids = np.digitize(size[:, 0], edges)
        return ids.astype("int64") if head.kind == "sparse" else np.eye(k, dtype="float32")[ids]
    if head.kind == "regression":
        return (50 + 150 * size).astype("float32")
    return drawn


def _count(row: list[int], case: Case, report: FixReport, misses: list[str], trained: bool) -> None:
    assert case.expect is not None
    finding, where = case.expect
    if finding not in report.before:
        return  # the fault is not found: not fix's to repair
    row[0] += 1
    mine = [r for r in report.repairs if r.finding == finding or finding in r.gone]
    if not (mine and _made(report) and finding not in report.after):
        why = mine[0].why if mine else "no repair planned"
        misses.append(f"{case.name}: {finding}: {why}"[:240])
        return
    row[1] += 1
    row[2] += any(r.layer in where or r.layer is None for r in mine)
    if not trained:
        return
    if any(r.verdict == Verdict.VERIFIED for r in mine):
        row[3] += 1
    else:
        why = "; ".join(f"{r.finding}: {r.why}" for r in mine)
        misses.append(f"{case.name}: not verified: {why}"[:300])


def _made(report: FixReport) -> bool:
    """A copy with the repairs was built and checked: written, or (with data) trained; with
    data a copy is written only when a repair is verified, which the last column counts."""
    return report.output is not None or report.together is not None


def _count_rate(row: list[int], case: Case, report: FixReport, misses: list[str]) -> None:
    """An optimizer's fault, trained: found when training finds anything, repaired by a
    learning-rate change (a repair at no layer), verified as its verdict says."""
    if not report.before:
        misses.append(f"{case.name}: training found nothing")
        return
    row[0] += 1
    mine = [r for r in report.repairs if r.layer is None and "learning_rate" in r.code[0]]
    if not (mine and _made(report)):
        misses.append(f"{case.name}: {', '.join(report.before)}: no learning-rate repair")
        return
    row[1] += 1
    row[2] += 1
    if any(r.verdict == Verdict.VERIFIED for r in mine):
        row[3] += 1
    else:
        misses.append(f"{case.name}: not verified: {mine[0].why}"[:300])


if __name__ == "__main__":
    main()
