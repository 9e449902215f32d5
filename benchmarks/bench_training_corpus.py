"""The training findings on a corpus of real training runs: recall and false alarms.

Every run of `tests/training_runs.py` (healthy runs on an MLP classifier, a regression MLP,
a small conv net, a small LSTM and a binary MLP; runs with one problem injected each) is
trained with `GradientMonitor` for each seed. Prints, per run, how many seeds got the
expected finding (on the expected layer, where it has one) and what else was found; per
finding, its recall; and the false alarms on healthy runs. `--markdown` prints the table of
docs/training.md. Also prints the cost of the rules themselves against the training time.

The severity evidence: a run trains when its final loss on its data is finite and below
`TRAINED` (0.9) times the trivial loss. Per finding, how many of its injected runs trained,
and for the runs that carry the finding's repair (`Run.repaired`: the same run with what
`fix` changes), how many repaired copies trained. A finding may fail a run only when its
flagged runs do not train.

    python benchmarks/bench_training_corpus.py              # 5 seeds (0-4)
    python benchmarks/bench_training_corpus.py --seeds 2 --runs mlp,lr_tiny
    python benchmarks/bench_training_corpus.py --results benchmarks/results/training_corpus.json

`--results` writes the recall and false alarms per finding that `docs/make_tables.py` prints
in docs/training.md's rule table.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import training_runs as T  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--runs", default="", help="comma-separated run names (default: all)")
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--results", default="", help="write recall and false alarms as JSON")
    args = parser.parse_args()
    chosen = [r for r in T.RUNS if not args.runs or r.name in args.runs.split(",")]
    outcomes: list[T.Outcome] = []
    repairs: list[T.Outcome] = []
    started = time.perf_counter()
    for run in chosen:
        for seed in range(args.seeds):
            t = time.perf_counter()
            outcome = T.train(run, seed)
            outcomes.append(outcome)
            ok = outcome.named or (run.expected is None and not outcome.findings)
            print(
                f"{run.name:14} seed {seed}  {'ok ' if ok else 'MISS'}  "
                f"{time.perf_counter() - t:5.1f} s  trained {outcome.trained!s:5}  "
                f"{[f[:2] for f in outcome.findings]}",
                flush=True,
            )
            if run.repaired is not None:
                repairs.append(T.train(run, seed, repaired=True))
                print(f"{'':14} repaired  trained {repairs[-1].trained}", flush=True)
    print(f"\n{len(outcomes)} runs in {time.perf_counter() - started:.0f} s")
    rows = table(chosen, outcomes)
    print("\n".join(rows))
    recall: Counter[str] = Counter()
    total: Counter[str] = Counter()
    for o in outcomes:
        if o.run.expected is not None:
            total[o.run.expected] += 1
            recall[o.run.expected] += o.named
    print("\nrecall per finding:")
    for finding in sorted(total):
        print(f"  {finding:22} {recall[finding]}/{total[finding]}")
    healthy = [o for o in outcomes if o.run.expected is None]
    alarms = sum(o.false_alarm for o in healthy)
    print(f"false alarms on healthy runs: {alarms}/{len(healthy)}")
    if args.results:
        write_results(Path(args.results), outcomes, repairs, args.seeds)
    print(f"rules: {rule_cost(outcomes):.2f} ms per run at the end of training")


def table(runs: list[T.Run], outcomes: list[T.Outcome]) -> list[str]:
    """The markdown table of docs/training.md: one row per run."""
    out = [
        "| run | injected | expected finding | named (seeds) | also found |",
        "| --- | --- | --- | --- | --- |",
    ]
    for run in runs:
        mine = [o for o in outcomes if o.run is run]
        if run.expected is None:
            named = f"{sum(not o.findings for o in mine)}/{len(mine)} without a finding"
        else:
            named = f"{sum(o.named for o in mine)}/{len(mine)}"
        others = Counter(
            f for o in mine for f, _, _ in o.findings if f != run.expected
        )  # fmt: skip
        also = ", ".join(f"`{f}` ({n})" for f, n in sorted(others.items())) or "-"
        expected = f"`{run.expected}`" if run.expected else "none"
        if run.layer:
            expected += f" at `{run.layer}`"
        out.append(f"| `{run.name}` | {run.injected} | {expected} | {named} | {also} |")
    return out


def write_results(
    path: Path, outcomes: list[T.Outcome], repairs: list[T.Outcome], seeds: int
) -> None:
    """Per finding: the runs injected for it, how many named it and how many trained, the
    healthy runs it fired on, and the repaired copies and how many of those trained."""
    healthy = [o for o in outcomes if o.run.expected is None]
    keys = ("named", "runs", "false_alarms", "trained", "repaired", "repaired_trained")
    found: dict[str, dict[str, int]] = {}
    for o in outcomes:
        for code in {f for f, _, _ in o.findings} | ({o.run.expected} - {None}):
            found.setdefault(str(code), dict.fromkeys(keys, 0))
        if o.run.expected is not None:
            found[o.run.expected]["runs"] += 1
            found[o.run.expected]["named"] += int(o.named)
            found[o.run.expected]["trained"] += int(o.trained)
    for o in repairs:
        found[str(o.run.expected)]["repaired"] += 1
        found[str(o.run.expected)]["repaired_trained"] += int(o.trained)
    for o in healthy:
        for code in {f for f, _, _ in o.findings}:
            found[str(code)]["false_alarms"] += 1
    runs = len(outcomes) + len(repairs)
    source = (
        f"benchmarks/bench_training_corpus.py --seeds {seeds}: {len(outcomes)} runs and "
        f"{len(repairs)} repaired copies ({runs} in all), seeds 0 to {seeds - 1}"
    )
    healthy_trained = sum(o.trained for o in healthy)
    document = {"source": source, "healthy_runs": len(healthy),
                "healthy_trained": healthy_trained, "findings": found}  # fmt: skip
    path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")


def rule_cost(outcomes: list[T.Outcome]) -> float:
    """Milliseconds the findings rules take on a 300-step record (they run once, at the
    end of training, on numbers the monitor recorded anyway)."""
    import numpy as np

    from layergrad.core.fit_results import Checkpoint, LayerStats
    from layergrad.training import rules

    rng = np.random.default_rng(0)
    losses = list(1.4 + rng.normal(0, 0.1, 300))
    rows = tuple(LayerStats(f"l{i}", 1.0, 1.0, 1e-3, 0.0, 0, 0, 0.0) for i in range(10))
    points = [Checkpoint(s, 0, s, 1.0, 1e-3, rows, ()) for s in range(1, 301, 10)]
    t = time.perf_counter()
    for _ in range(20):
        rules.findings(losses, points, None, chance_loss=1.386)
    return (time.perf_counter() - t) / 20 * 1000


if __name__ == "__main__":
    main()
