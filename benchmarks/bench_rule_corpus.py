"""Measure each head rule on the verdict corpus: on which faults it fires, its recall there, and
its false alarms on healthy files.

Builds the verdict corpus (verdict_corpus.py: every architecture, fault operator and written
form, saved as .keras and .h5; no data) in a temp dir and reads every file as `check`'s `loss`
check does, from the file alone (`loss_fit.read_file`). Per rule of
`layergrad/model/head_rules.RULES` it prints:
  fired      fault files whose head the rule names (the first rule that applies)
  recall     of the mutants of the operators it fires on, the share it names
  false      healthy files (and optimizer-only faults) it fires on
Copy the counts into the rule's `Evidence` (`corpus=(fired, mutants, false alarms, healthy)`).

    python benchmarks/bench_rule_corpus.py [--archs a,b] [--saves keras,h5]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections import Counter, defaultdict

from verdict_corpus import build_corpus

from layergrad.files.file_info import read_file_info
from layergrad.model.head_rules import RULES
from layergrad.model.loss_fit import read_file

CLEAN = ("healthy", "learning_rate_huge", "sgd_learning_rate_tiny")  # no finding expected


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--archs", default=None, help="architectures (all if unset)")
    parser.add_argument("--saves", default="keras,h5")
    args = parser.parse_args()
    start = time.perf_counter()
    fired: dict[str, Counter[str]] = defaultdict(Counter)  # rule -> op -> files
    mutants: Counter[str] = Counter()  # op -> fault files read
    false: Counter[str] = Counter()
    healthy = 0
    with tempfile.TemporaryDirectory() as folder:
        archs = args.archs.split(",") if args.archs else None
        cases = build_corpus(folder, archs=archs, saves=tuple(args.saves.split(",")),
                             healthy_data=False)  # fmt: skip
        for case in cases:
            if case.path is None or case.data is not None:
                continue
            info = read_file_info(case.path)
            reading = read_file(info.config, info.graph, info.compile_config)
            rules = {m.rule for m in (*reading.mismatches, *reading.stacks)}
            if case.op in CLEAN:
                healthy += 1
                false.update(rules)
                continue
            mutants[case.op] += 1
            for rule in rules:
                fired[rule][case.op] += 1
    print(f"{'rule':<34} {'fired':>6} {'recall':>12} {'false':>10}  operators")
    for rule in RULES:
        ops = fired.get(rule.name, Counter())
        hits, of = sum(ops.values()), sum(mutants[op] for op in ops)
        alarms = false[rule.name]
        print(f"{rule.name:<34} {hits:>6} {f'{hits}/{of}':>12} {f'{alarms}/{healthy}':>10}"
              f"  {', '.join(sorted(ops)) or '-'}    corpus=({hits}, {of}, {alarms}, "
              f"{healthy})")  # fmt: skip
    print(f"({len(cases)} cases, {time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
