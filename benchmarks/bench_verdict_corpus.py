"""Benchmark: the recall and false alarms of `check` on the verdict corpus, and its cost.

Builds the corpus (verdict_corpus.py: healthy architectures times fault operators, in every
written and saved form) in a temp dir, runs `check_files` on each file (with `--data` where
the fault needs data, and once per healthy architecture with its own realistic data), and
prints markdown tables:

  recall        per fault operator: the expected finding named at its layer, in each written
                form (str, fn, obj), each saved form (keras, h5, resaved, fitted) and with data
  false alarms  any finding (failure, warning or error) on a healthy original, or on a model
                whose only fault is one only training shows (the optimizer), per form
  cost          seconds of `check_files` per model: median and max, alone and with --data

then every miss and every false alarm, one line each.

    nice python benchmarks/bench_verdict_corpus.py [--fit-mutants] [--archs A,B] [--ops X,Y|healthy]
        [--saves keras,h5] [--jobs 2]
        [--dir DIR]   (keep the corpus in DIR; run again to re-check it without building)
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

from verdict_corpus import (
    FORMS,
    SAVES,
    Outcome,
    build_corpus,
    load_manifest,
    run_case,
    save_manifest,
)

HEALTHY = ("healthy", "learning_rate_huge", "sgd_learning_rate_tiny")


def _rate(outcomes: list[Outcome], hit: bool) -> str:
    if not outcomes:
        return "-"
    good = sum(o.hit if hit else not o.false_alarm for o in outcomes)
    return f"{good}/{len(outcomes)}"


def _columns(outcomes: list[Outcome]) -> dict[str, list[Outcome]]:
    cols: dict[str, list[Outcome]] = defaultdict(list)
    for o in outcomes:
        if o.case.data is not None:
            cols["+data"].append(o)
            continue
        cols[o.case.form].append(o)
        cols[o.case.save].append(o)
    return cols


def recall_table(outcomes: list[Outcome]) -> list[str]:
    heads = [*FORMS, *SAVES, "+data"]
    lines = [
        "| operator | finding | " + " | ".join(heads) + " | all |",
        "| --- | --- |" + " --- |" * (len(heads) + 1),
    ]
    by_op: dict[str, list[Outcome]] = defaultdict(list)
    for o in outcomes:
        if o.case.expect is not None:
            by_op[o.case.op].append(o)
    for op in sorted(by_op):
        cols = _columns(by_op[op])
        finding = " / ".join(sorted({o.case.expect[0] for o in by_op[op] if o.case.expect}))
        cells = [_rate(cols.get(h, []), True) for h in heads]
        lines.append(
            f"| {op} | {finding} | " + " | ".join(cells) + f" | {_rate(by_op[op], True)} |"
        )
    return lines


def false_alarm_table(outcomes: list[Outcome]) -> list[str]:
    heads = [*FORMS, *SAVES, "+data"]
    lines = [
        "| models | " + " | ".join(heads) + " | all |",
        "| --- |" + " --- |" * (len(heads) + 1),
    ]
    for label, ops in (("healthy", ("healthy",)), ("optimizer faults", HEALTHY[1:])):
        rows = [o for o in outcomes if o.case.op in ops]
        cols = _columns(rows)
        cells = [_rate(cols.get(h, []), False) for h in heads]
        lines.append(
            f"| {label} (clean / checked) | " + " | ".join(cells) + f" | {_rate(rows, False)} |"
        )
    return lines


def cost_table(outcomes: list[Outcome]) -> list[str]:
    lines = ["| check_files per model | files | median s | max s |", "| --- | --- | --- | --- |"]
    for label, rows in (
        ("file alone", [o for o in outcomes if o.case.data is None]),
        ("with --data (64 samples)", [o for o in outcomes if o.case.data]),
    ):
        if rows:
            secs = [o.seconds for o in rows]
            lines.append(
                f"| {label} | {len(rows)} | {statistics.median(secs):.2f} | {max(secs):.2f} |"
            )
    return lines


def details(outcomes: Iterable[Outcome]) -> list[str]:
    lines = []
    for o in outcomes:
        if o.case.expect is not None and not o.hit:
            said = "; ".join(f"{c}: {f}: {m[:140]}" for c, f, m in o.found) or "no finding"
            lines.append(f"- MISS {o.case.name} (want {o.case.expect[0]}): {said}")
        elif o.false_alarm:
            said = "; ".join(f"{c}: {f}: {m[:140]}" for c, f, m in o.found)
            lines.append(f"- FALSE ALARM {o.case.name}: {said}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--archs", help="comma-separated architecture names (default: all)")
    parser.add_argument("--saves", help="the saved forms of the mutants (default: all but fitted)")
    parser.add_argument("--jobs", type=int, default=1, help="check in this many processes")
    parser.add_argument(
        "--ops", help="comma-separated operator names (default: all; healthy: none)"
    )
    parser.add_argument(
        "--dir",
        help="build the corpus here and keep it; a folder that holds one already (its "
        "cases.json) is checked again without building",
    )
    parser.add_argument(
        "--fit-mutants", action="store_true", help="write every mutant after a fit too (slow)"
    )
    args = parser.parse_args()
    archs = args.archs.split(",") if args.archs else None
    # `--ops healthy`: the healthy originals only
    operators = [o for o in args.ops.split(",") if o != "healthy"] if args.ops else None
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.dir or tmp)
        start = time.perf_counter()
        if (root / "cases.json").exists():
            cases = load_manifest(root)
        else:
            saves = tuple(args.saves.split(",")) if args.saves else None
            cases = build_corpus(
                root, archs, operators, fit_mutants=args.fit_mutants, mutant_saves=saves
            )
            save_manifest(cases, root)
        built = time.perf_counter() - start
        skipped = [c for c in cases if c.path is None]
        todo = [c for c in cases if c.path is not None]
        if args.jobs > 1:
            with multiprocessing.get_context("spawn").Pool(args.jobs) as pool:
                outcomes = pool.map(run_case, todo, chunksize=8)
        else:
            outcomes = [run_case(c) for c in todo]
        checked = time.perf_counter() - start - built
    models = len({(c.arch, c.op, c.form) for c in cases})
    print(
        f"corpus: {models} models, {len(cases)} files and data runs; built in {built:.0f} s, "
        f"checked in {checked:.0f} s; {len(skipped)} forms Keras could not write"
    )
    for title, table in (
        ("Recall", recall_table(outcomes)),
        ("False alarms", false_alarm_table(outcomes)),
        ("Cost", cost_table(outcomes)),
    ):
        print(f"\n### {title}\n")
        print("\n".join(table))
    print("\n### Misses and false alarms\n")
    print("\n".join(details(outcomes)) or "none")
    print("\n### Forms Keras could not write\n")
    for c in skipped:
        print(f"- {c.name}: {c.skipped}")


if __name__ == "__main__":
    main()
