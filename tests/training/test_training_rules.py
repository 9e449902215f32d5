"""The training rules' table (`layergrad/training/rules.RULES`): every example run of every
rule (a loss curve or checkpoints made by hand, benchmarks/training_examples.py) is found by
that rule, every near miss is not; the table's severity is `fit --fail-on`'s default; and a
run's findings carry their rule's severity."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from training_examples import EXAMPLES

from layergrad.core.vocab import DEFAULT_FIT_FAIL_ON, TRAINING_FINDINGS, Severity
from layergrad.training.rules import BY_CODE, RULES, TrainingRule, findings

DURING = [r for r in RULES if r.find is not None]


def _cases(kind: str) -> list:
    return [
        pytest.param(rule, name, id=f"{rule.code}-{name}")
        for rule in DURING
        for name in getattr(rule, kind)
    ]


@pytest.mark.parametrize(("rule", "name"), _cases("examples"))
def test_each_example_is_found_by_its_rule(rule: TrainingRule, name: str):
    assert rule.find is not None
    found = rule.find(EXAMPLES[name]())
    assert [f.code for f in found] == [rule.code], found
    assert found[0].layer is not None and found[0].message


@pytest.mark.parametrize(("rule", "name"), _cases("near_misses"))
def test_no_near_miss_is_found_by_the_rule(rule: TrainingRule, name: str):
    assert rule.find is not None
    assert rule.find(EXAMPLES[name]()) == []


def test_every_rule_has_examples_and_near_misses_and_every_example_is_named_once():
    assert not [r.code for r in DURING if not (r.examples and r.near_misses)]
    named = [n for r in RULES for n in (*r.examples, *r.near_misses)]
    assert sorted(named) == sorted(EXAMPLES)


def test_one_entry_per_training_finding_and_failures_are_the_fail_on_default():
    assert [r.code for r in RULES] == list(dict.fromkeys(r.code for r in RULES))
    assert {r.code for r in RULES} == set(TRAINING_FINDINGS)
    failing = {r.code for r in RULES if r.severity == Severity.FAIL}
    assert failing == set(DEFAULT_FIT_FAIL_ON)


def test_a_runs_findings_carry_their_rules_severity():
    run = EXAMPLES["flat_tiny_ratios"]()
    (found,) = findings(run.losses, run.checkpoints, None, chance_loss=run.chance)
    assert found.severity == BY_CODE[found.code].severity == Severity.FAIL
    assert found.rule == "not_learning"
    run = EXAMPLES["units_die"]()
    found = findings(run.losses, run.checkpoints, None)
    assert [(f.code, f.severity) for f in found] == [("dying_units", Severity.WARN)]
