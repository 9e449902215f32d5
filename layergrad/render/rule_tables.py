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

END = "<!-- end rules -->"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


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
    lines = [
        "| rule | finding | severity | when | trained: flagged / repaired | flagged runs "
        "that never trained | corpus recall | false alarms |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for rule in RULES:
        trained, never, recall, alarms = _evidence(rule)
        lines.append(
            f"| `{rule.name}` | `{rule.code}` | {rule.severity} | {_cell(rule.condition)} | "
            f"{trained} | {_cell(never)} | {recall} | {alarms} |"
        )
    return "\n".join(lines)


def fix_table() -> str:
    """Each rule's repair."""
    lines = ["| rule | finding: when | repair |", "| --- | --- | --- |"]
    for rule in RULES:
        lines.append(
            f"| `{rule.name}` | `{rule.code}`: {_cell(rule.condition)} | "
            f"{_cell(rule.repair_words)} |"
        )
    return "\n".join(lines)


def cause_table() -> str:
    """Each cause code: what it means, how it is detected, what fixes it."""
    lines = ["| code | meaning | how layergrad detects it | fix |", "| --- | --- | --- | --- |"]
    for kind in KINDS:
        cells = " | ".join(_cell(text) for text in (kind.meaning, kind.detected, kind.fix))
        lines.append(f"| `{kind.code}` | {cells} |")
    return "\n".join(lines)


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
