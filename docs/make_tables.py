"""Regenerate the docs' rule tables from the rule tables (layergrad/model/head_rules.py,
layergrad/model/target_fit.py, layergrad/training/rules.py, and layergrad/diagnose/causes.py
for the README's cause table).

    python docs/make_tables.py

Rewrites every `<!-- rules: NAME -->` ... `<!-- end rules -->` block of the pages below;
tests/project/test_docs.py fails when a page differs from what this writes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from layergrad.model.head_rules import Evidence  # noqa: E402
from layergrad.render.rule_tables import (  # noqa: E402
    cause_table,
    fix_table,
    target_table,
    training_table,
    verdict_table,
    with_tables,
)
from layergrad.training.rules import RULES  # noqa: E402

RESULTS = ROOT / "benchmarks/results"
# every generated table: those of the stages below render, and the training rules' (a stage
# above it, so passed in here), with what the corpus of training runs and the label rules'
# benchmark measured
MEASURED = json.loads((RESULTS / "training_corpus.json").read_text("utf-8"))
LABELS = json.loads((RESULTS / "label_rules.json").read_text("utf-8"))["rules"]


def _evidence(found: dict[str, Any]) -> Evidence:
    """A label rule's evidence as the benchmark wrote it."""
    never = tuple((int(i), str(o)) for i, o in found["untrained"])
    hits, mutants, false, healthy = found["corpus"]
    return Evidence(found["runs"], found["flagged_trained"], found["repaired_trained"], never,
                    (hits, mutants, false, healthy))  # fmt: skip


EVIDENCE = {name: _evidence(found) for name, found in LABELS.items()}
ALL = {
    "verdicts": verdict_table,
    "repairs": fix_table,
    "causes": cause_table,
    "targets": lambda: target_table(EVIDENCE),
    "training": lambda: training_table(RULES, MEASURED["findings"], MEASURED["healthy_runs"]),
}

PAGES = ("README.md", "docs/verdicts.md", "docs/fix.md", "docs/training.md")


def main() -> None:
    for name in PAGES:
        page = ROOT / name
        text = page.read_text(encoding="utf-8")
        page.write_text(with_tables(text, ALL), encoding="utf-8")


if __name__ == "__main__":
    main()
