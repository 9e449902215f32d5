"""Measure `fix` on the verdict corpus: is each fault with a mechanical repair repaired?

Builds part of the verdict corpus (verdict_corpus.py: healthy architectures times fault
operators, saved as .keras and .h5) in a temp dir and runs `fix_model` on each file, without
data (the faults `check` finds from the file and a random probe). Per operator it prints:
  faults    files whose injected finding `check` reports
  repaired  of those, files where a repair is planned for that finding and the repaired copy
            (read back and checked) no longer has it
  at layer  of those, the repair names one of the fault's layers
Healthy files must get "nothing to fix" (false repairs are counted). With `--data` the
faults that need data are included and each repair is trained (slow).

    python benchmarks/bench_fix_corpus.py [--archs seq_mlp_binary,mlp_sparse] [--saves keras,h5]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from verdict_corpus import build_corpus

from layergrad.commands.fix.repair import FixOptions, fix_model

DEFAULT_ARCHS = "seq_mlp_binary,mlp_sparse,nested,multi_input,multi_output,residual,conv"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--archs", default=DEFAULT_ARCHS)
    parser.add_argument("--saves", default="keras,h5")
    parser.add_argument("--data", action="store_true", help="also the faults that need data")
    parser.add_argument("--steps", type=int, default=100)
    args = parser.parse_args()
    rows: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    false_repairs: list[str] = []
    misses: list[str] = []
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        cases = build_corpus(folder, archs=args.archs.split(","),
                             saves=tuple(args.saves.split(",")), healthy_data=False)  # fmt: skip
        for case in cases:
            if case.path is None or (case.data is not None and not args.data):
                continue
            out = Path(folder) / "copy.keras"
            options = FixOptions(output=str(out), force=True, steps=args.steps)
            try:
                report = fix_model(case.path, case.data, options, imports=case.imports)
            except Exception as exc:  # a refused file is a miss, not a crash
                misses.append(f"{case.name}: {type(exc).__name__}: {exc}"[:200])
                continue
            if case.expect is None:
                if report.repairs:
                    false_repairs.append(f"{case.name}: {report.repairs[0].code}")
                continue
            finding, where = case.expect
            row = rows[case.op]
            if finding not in report.before:
                continue  # check does not find it: not fix's to repair
            row[0] += 1
            mine = [r for r in report.repairs if r.finding == finding or finding in r.gone]
            if mine and report.output and finding not in report.after:
                row[1] += 1
                row[2] += any(r.layer in where or r.layer is None for r in mine)
            else:
                why = mine[0].why if mine else "no repair planned"
                misses.append(f"{case.name}: {finding}: {why}"[:200])
    print(f"{'operator':<28} {'faults':>6} {'repaired':>8} {'at layer':>8}")
    for op, (faults, repaired, at_layer, _) in sorted(rows.items()):
        print(f"{op:<28} {faults:>6} {repaired:>8} {at_layer:>8}")
    total = [sum(r[i] for r in rows.values()) for i in range(3)]
    print(f"{'all':<28} {total[0]:>6} {total[1]:>8} {total[2]:>8}")
    print(f"false repairs on healthy files: {len(false_repairs)}")
    for line in false_repairs[:10] + misses[:30]:
        print("  " + line)
    print(f"{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
