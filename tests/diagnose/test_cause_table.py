"""The cause table: every entry renders from the facts its templates read, and nothing else."""

from __future__ import annotations

import pytest

from layergrad.core.vocab import CAUSE_CODES
from layergrad.diagnose.causes import BY_NAME, KINDS, cause

# a value of the right type for every fact an entry reads
SAMPLE = {
    "source": "enc", "target": "head", "used": 1, "probed": 0, "dtype": "int32",
    "why": "Round has no gradient", "fraction": 0.5, "kind": "sigmoid", "bad": 3, "size": 8,
    "position": 1, "feeding": "branch", "output": "out", "input": "pixels", "mean_abs": 120.0,
    "pinned": 0.75, "ops": "MatMul, AddV2", "status": "none", "variable": "kernel",
    "before": "--to head:logits", "operation": "round",
}  # fmt: skip


def test_the_table_has_one_entry_per_cause_code_in_vocabulary_order():
    assert tuple(kind.code for kind in KINDS) == CAUSE_CODES


@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_each_entry_is_said_from_the_facts_it_reads(name):
    kind, says = BY_NAME[name]
    facts = {fact: SAMPLE[fact] for fact in says.reads if fact != "layer"}
    found = cause(name, "dense_1", **facts)
    assert (found.code, found.layer, found.rule) == (kind.code, "dense_1", name)
    assert dict(found.facts) == facts
    assert "{" not in found.message + found.hint  # every placeholder was filled
    for fact, value in facts.items():  # each fact read shows in the words, as it is formatted
        shown = {0.5: "50%", 0.75: "75%", 120.0: "120"}.get(value, str(value))
        if fact == "pinned" and name == "input_range/units":  # a root mean square, not a share
            shown = "0.75"
        if not (fact == "pinned" and name == "input_range/pixels"):
            assert shown in found.message + found.hint, (fact, shown)
    with pytest.raises(KeyError):  # a fact the entry reads cannot be left out
        if facts:
            cause(name, "dense_1")
        else:
            raise KeyError(name)


def test_a_name_for_the_shell_is_quoted_in_the_hint():
    hint = cause("reversed_order", "b c", source="a").hint
    assert hint == "swap them: --from 'b c' --to a"


def test_the_op_is_the_entrys_own_or_the_fact():
    assert cause("stop_gradient", "d").op == "StopGradient"
    assert cause("non_differentiable_op", "d", why="x", op="Round").op == "Round"
    assert cause("dead_relu", "d", fraction=1.0).op is None


def test_a_cause_is_written_as_the_one_finding_record():
    """code, layer, severity, facts, message and hint (DESIGN: one finding record for every
    command and report; `repair` only when the rule has one)."""
    from layergrad.files.report_json import to_json

    doc = to_json(cause("dead_relu", "dense", fraction=0.5))
    assert isinstance(doc, dict)
    assert set(doc) == {"code", "layer", "severity", "facts", "message", "hint"}
    assert (doc["code"], doc["layer"], doc["severity"]) == ("dead_relu", "dense", "failure")
    assert doc["facts"] == {"fraction": 0.5} and "50%" in doc["message"]
