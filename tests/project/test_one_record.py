"""One finding record and one vocabulary of codes, whatever module a finding comes from."""

from __future__ import annotations

import dataclasses
import enum
import importlib
import pkgutil

import layergrad
from layergrad.core.results import Reason
from layergrad.core.vocab import (
    CAUSE_CODES,
    CHECK_FINDINGS,
    SCAN_FLAGS,
    TRAINING_FINDINGS,
    Finding,
    Status,
)


def _public_classes() -> set[type]:
    found: set[type] = set()
    for info in pkgutil.walk_packages(layergrad.__path__, "layergrad."):
        if info.name.rsplit(".", 1)[-1].startswith("_"):
            continue
        module = importlib.import_module(info.name)
        found |= {v for v in vars(module).values() if isinstance(v, type)}
    return found


def test_every_module_keeps_its_findings_in_one_record_with_codes_of_one_vocabulary():
    classes = _public_classes()
    records = set()
    for cls in classes:
        if dataclasses.is_dataclass(cls):
            fields = {f.name: f.type for f in dataclasses.fields(cls)}
            # a finding: a code (or a finding's name) and a message said from it
            if fields.get("message") in ("str", str) and {"code", "finding"} & set(fields):
                records.add(cls)
    assert records == {Reason}
    words = set(Finding.words())
    vocabularies = {
        cls for cls in classes
        if issubclass(cls, enum.Enum) and {getattr(m, "value", None) for m in cls} & words
    }  # fmt: skip
    # a gradient's status (ok / none / zero / nonfinite) is what a gradient is, not a finding
    assert vocabularies == {Finding, Status}


def test_each_command_names_its_subset_of_the_one_vocabulary():
    for subset in (SCAN_FLAGS, CHECK_FINDINGS, CAUSE_CODES, TRAINING_FINDINGS):
        assert all(isinstance(code, Finding) for code in subset)
    assert set(Finding) == {*CHECK_FINDINGS, *CAUSE_CODES}
    assert set(SCAN_FLAGS) <= set(CHECK_FINDINGS) and set(TRAINING_FINDINGS) <= set(Finding)
    assert layergrad.Flag is Finding and layergrad.CauseCode is Finding  # the former names
    # what scan's and check's --fail-on accept, as they did before the codes were one enum
    assert ",".join(SCAN_FLAGS) == "blocked,nonfinite,dead,vanishing,exploding"
    assert CHECK_FINDINGS[0] == "unreadable" and CHECK_FINDINGS[-1] == "slow_convergence"
    assert len(CHECK_FINDINGS) == 23 and "unknown" not in CHECK_FINDINGS


def test_a_record_keeps_the_facts_it_was_said_from():
    from layergrad.diagnose.causes import cause

    said = cause("dead_relu", "dense", fraction=0.75)
    assert (said.code, said.layer, said.facts) == (
        Finding.DEAD_RELU,
        "dense",
        (("fraction", 0.75),),
    )
    assert said.fact("fraction") == 0.75 and said.fact("missing") is None
    assert said.message.startswith("75% of the ReLU units of 'dense' output 0")
