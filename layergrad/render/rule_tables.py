"""The docs' tables of the rules, made from the tables themselves: the head rules, the label
rules, the training rules (with what `docs/make_tables.py` passes in as measured) and the
cause codes (`diagnose/causes.KINDS`). A generated table sits between a
`<!-- rules: NAME -->` line and the next `<!-- end rules -->` line; a test fails when a page
differs from what the tables make.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from layergrad.diagnose.causes import KINDS
from layergrad.model.head_rules import RULES, Evidence
from layergrad.model.target_fit import RULES as TARGET_RULES
from layergrad.render.common import md_table

if TYPE_CHECKING:
    from layergrad.training.rules import TrainingRule

END = "<!-- end rules -->"
# the columns of `_evidence`
EVIDENCE = ("trained: flagged / repaired", "flagged runs that never trained", "corpus recall",
            "false alarms")  # fmt: skip


def _evidence(found: Evidence | None, examples: Sequence[str]) -> tuple[str, str, str, str]:
    """(trained: flagged / repaired, the runs that never trained, recall, false alarms), of a
    rule whose examples read `examples`."""
    if found is None:
        return "not measured", "", "not measured", ""
    trained = f"{found.flagged_trained} / {found.repaired_trained} of {found.runs}"
    never = [f"{examples[i]}, {optimizer}" for i, optimizer in found.untrained]
    recall = alarms = "not measured"
    if found.corpus is not None:
        hits, mutants, false, healthy = found.corpus
        recall, alarms = f"{hits}/{mutants}", f"{false}/{healthy}"
    return trained, "; ".join(never) or "none", recall, alarms


def _table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A markdown table: its header, then one line a row (a `|` in a cell escaped)."""
    return md_table(header, [list(row) for row in rows], rule="| --- ").rstrip("\n")


def verdict_table() -> str:
    """Each rule: its finding, severity, condition and the evidence behind it."""
    header = ("rule", "finding", "severity", "when", *EVIDENCE)
    return _table(header, ((f"`{r.name}`", f"`{r.code}`", r.severity, r.condition,
                            *_evidence(r.evidence, [e.label for e in r.examples]))
                           for r in RULES))  # fmt: skip


def fix_table() -> str:
    """Each rule's repair."""
    rows = ((f"`{r.name}`", f"`{r.code}`: {r.condition}", r.repair_words) for r in RULES)
    return _table(("rule", "finding: when", "repair"), rows)


def cause_table() -> str:
    """Each cause code: what it means, how it is detected, what fixes it."""
    rows = ((f"`{k.code}`", k.meaning, k.detected, k.fix) for k in KINDS)
    return _table(("code", "meaning", "how layergrad detects it", "fix"), rows)


def target_table(measured: Mapping[str, Evidence]) -> str:
    """Each label rule, in the order check applies them: the labels, the head and loss, what
    `fix` changes, and the evidence behind its severity. `docs/make_tables.py` passes what
    `benchmarks/bench_rule_labels.py --results` measured, by rule (a file of the repository,
    not of the installed package)."""
    rows = ((f"`{r.name}`", r.labels, r.head_and_loss, r.severity, r.repair_words,
             *_evidence(measured.get(r.name), [e.label for e in r.examples]))
            for r in TARGET_RULES)  # fmt: skip
    return _table(("rule", "labels", "head and loss", "severity", "`fix` changes", *EVIDENCE), rows)


def training_table(
    rules: Sequence[TrainingRule], counts: Mapping[str, Mapping[str, int]], healthy_runs: int
) -> str:
    """Each training finding: when it holds, its rule, layer, step and severity, its recall
    and false alarms on the corpus of training runs, what `fix` changes. `docs/make_tables.py`
    passes `training/rules.RULES` and what `benchmarks/bench_training_corpus.py --results`
    measured (a file of the repository, not of the installed package): each finding's counts
    (`named` of `runs`, `false_alarms`; of its runs how many `trained`, of its `repaired`
    copies how many trained) and the number of healthy runs."""

    def row(rule: TrainingRule) -> tuple[str, ...]:
        count = counts.get(str(rule.code), {})
        runs = count.get("runs", 0)
        recall = f"{count['named']}/{runs}" if runs else "not measured"
        alarms = f"{count['false_alarms']}/{healthy_runs}" if count else "not measured"
        trained = f"{count.get('trained', 0)}/{runs}" if runs else "not measured"
        fixed = count.get("repaired", 0)
        trained += f" / {count.get('repaired_trained', 0)}/{fixed}" if fixed else (
            " / no repaired copy" if runs else "")  # fmt: skip
        return (f"`{rule.code}`", rule.when, rule.condition, rule.layer, rule.step,
                rule.severity, recall, alarms, trained, rule.repair)  # fmt: skip

    header = ("finding", "when", "rule", "layer", "step", "severity", "corpus recall",
              "false alarms", "trained: flagged / repaired", "`fix` changes")  # fmt: skip
    return _table(header, (row(rule) for rule in rules))


def with_tables(page: str, tables: Mapping[str, Callable[[], str]]) -> str:
    """`page` with every generated table made anew by `tables` (by name)."""

    def made(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in tables:
            raise ValueError(f"no generated table named {name!r}")
        return f"<!-- rules: {name} -->\n{tables[name]()}\n{END}"

    return re.sub(r"<!-- rules: (\w+) -->\n(?:.*?\n)?" + re.escape(END), made, page, flags=re.S)
