"""The docs' tables of the rules, made from the tables themselves: the head rules
(`model/head_rules.RULES`) and the cause codes (`diagnose/causes.KINDS`).

`docs/verdicts.md` shows each head rule's condition, severity and evidence, `docs/fix.md` each
rule's repair, the README each cause code's meaning, detection and fix. A generated table sits
between a `<!-- rules: NAME -->` line and the next `<!-- end rules -->` line;
`docs/make_tables.py` rewrites them and a test fails when a page differs from what the table
makes.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from layergrad.diagnose.causes import KINDS
from layergrad.model.head_rules import RULES, HeadRule
from layergrad.render.common import md_table

END = "<!-- end rules -->"


def _evidence(rule: HeadRule) -> tuple[str, str, str, str]:
    """(trained: flagged / repaired, the runs that never trained, recall, false alarms)."""
    found = rule.evidence
    if found is None:
        return "not measured", "", "not measured", ""
    trained = f"{found.flagged_trained} / {found.repaired_trained} of {found.runs}"
    never = [f"{rule.examples[i].label}, {optimizer}" for i, optimizer in found.untrained]
    recall = alarms = "not measured"
    if found.corpus is not None:
        hits, mutants, false, healthy = found.corpus
        recall, alarms = f"{hits}/{mutants}", f"{false}/{healthy}"
    return trained, "; ".join(never) or "none", recall, alarms


def verdict_table() -> str:
    """Each rule: its finding, severity, condition and the evidence behind it."""
    header = ["rule", "finding", "severity", "when", "trained: flagged / repaired",
              "flagged runs that never trained", "corpus recall", "false alarms"]  # fmt: skip
    rows = [[f"`{r.name}`", f"`{r.code}`", str(r.severity), r.condition, *_evidence(r)]
            for r in RULES]  # fmt: skip
    return md_table(header, rows, rule="| --- ").rstrip("\n")


def fix_table() -> str:
    """Each rule's repair."""
    rows = [[f"`{r.name}`", f"`{r.code}`: {r.condition}", r.repair_words] for r in RULES]
    return md_table(["rule", "finding: when", "repair"], rows, rule="| --- ").rstrip("\n")


def cause_table() -> str:
    """Each cause code: what it means, how it is detected, what fixes it."""
    header = ["code", "meaning", "how layergrad detects it", "fix"]
    rows = [[f"`{k.code}`", k.meaning, k.detected, k.fix] for k in KINDS]
    return md_table(header, rows, rule="| --- ").rstrip("\n")


TABLES: dict[str, Callable[[], str]] = {
    "verdicts": verdict_table,
    "repairs": fix_table,
    "causes": cause_table,
}


def with_tables(page: str) -> str:
    """`page` with every generated table made anew from the rules."""

    def made(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in TABLES:
            raise ValueError(f"no generated table named {name!r}")
        return f"<!-- rules: {name} -->\n{TABLES[name]()}\n{END}"

    return re.sub(r"<!-- rules: (\w+) -->\n(?:.*?\n)?" + re.escape(END), made, page, flags=re.S)
