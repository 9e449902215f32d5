"""The head rules' table (`layergrad/model/head_rules.py`): every example of every rule, built as
a real Keras model and saved, is found by that rule from the file; every near miss is not;
a rule fails a file only with evidence; `fix` repairs each example so that the rule no longer
applies; and the cases whose severity the evidence settled, through the command line.

What each example must trigger is the rule it is listed under (stated by hand in the table);
the file is read back by the same reader `check` uses, so a rule that misreads a saved form
fails here."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from helpers import keras

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from rule_examples import build

from layergrad import cli
from layergrad.core.vocab import Finding, Severity
from layergrad.files.file_info import read_file_info
from layergrad.model.head_rules import RULES, Example, HeadRule
from layergrad.model.loss_fit import read_file

FROM_FILE = [r for r in RULES if r.needs == "file"]


def _saved(example: Example, path: Path) -> Path:
    model, loss = build(example)
    model.compile(optimizer="adam", loss=loss)
    model.save(path)
    return path


def _fired(path: Path) -> list[str]:
    """The rules that judged the file, in the order check reports them."""
    info = read_file_info(path)
    reading = read_file(info.config, info.graph, info.compile_config)
    return [m.rule for m in (*reading.mismatches, *reading.stacks)]


def _cases(kind: str) -> list:
    return [
        pytest.param(rule, example, id=f"{rule.name}-{example.label}")
        for rule in FROM_FILE
        for example in getattr(rule, kind)
    ]


@pytest.mark.parametrize("suffix", [".keras", ".h5"])
@pytest.mark.parametrize(("rule", "example"), _cases("examples"))
def test_each_example_is_found_by_its_rule(tmp_path, rule: HeadRule, example: Example, suffix):
    fired = _fired(_saved(example, tmp_path / f"m{suffix}"))
    assert fired[:1] == [rule.name], fired


@pytest.mark.parametrize(("rule", "example"), _cases("near_misses"))
def test_no_near_miss_is_found_by_the_rule(tmp_path, rule: HeadRule, example: Example):
    assert rule.name not in _fired(_saved(example, tmp_path / "m.keras"))


def test_every_rule_from_the_file_has_an_example_and_a_near_miss():
    bare = [r.name for r in FROM_FILE if not (r.examples and r.near_misses)]
    assert not bare, bare


@pytest.mark.parametrize("rule", RULES, ids=[r.name for r in RULES])
def test_a_rule_fails_a_file_only_with_its_evidence(rule: HeadRule):
    if rule.severity == Severity.FAIL:
        assert rule.evidence is not None and rule.evidence.supports_failing, rule.evidence


def test_rule_names_are_unique_and_codes_are_findings():
    assert len({r.name for r in RULES}) == len(RULES)
    assert {r.code for r in RULES} <= set(Finding)


@pytest.mark.parametrize(
    ("rule", "example"),
    [pytest.param(rule, rule.examples[0], id=rule.name) for rule in FROM_FILE if rule.examples],
)
def test_fix_repairs_each_rule_so_that_it_no_longer_applies(tmp_path, rule, example):
    from layergrad.commands.fix.repair import FixOptions, fix_model

    path = _saved(example, tmp_path / "m.keras")
    report = fix_model(path, options=FixOptions(output=str(tmp_path / "fixed.keras")))
    repaired = [r for r in report.repairs if r.finding == str(rule.code)]
    assert repaired, (rule.name, report.unrepaired)
    assert rule.name not in _fired(tmp_path / "fixed.keras")


def _check(path: Path, *more: str) -> tuple[int, dict]:
    result = CliRunner().invoke(cli.main, ["check", str(path), "--json", *more])
    return result.exit_code, json.loads(result.output)


def test_two_softmax_units_under_binary_crossentropy_warn_three_fail(tmp_path):
    # over two units and one-hot labels binary cross-entropy is categorical cross-entropy
    two = _saved(Example("softmax", 2, "binary_crossentropy"), tmp_path / "two.keras")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 16)).astype("float32")
    np.savez(tmp_path / "d.npz", x=x, y=np.eye(2, dtype="float32")[rng.integers(0, 2, 64)])
    for more in ((), ("--data", str(tmp_path / "d.npz"))):
        code, report = _check(two, *more)
        (file,) = report["files"]
        assert code == 0 and file["warnings"] == ["loss_mismatch"], (more, file)
    three = _saved(Example("softmax", 3, "binary_crossentropy"), tmp_path / "three.keras")
    code, report = _check(three)
    assert code == 1 and report["files"][0]["failures"] == ["loss_mismatch"]


def test_a_time_distributed_sigmoid_head_under_sparse_crossentropy_warns(tmp_path):
    # Keras divides the sigmoids by their sum before the cross-entropy: it trains
    model = keras.Sequential([
        keras.Input((5, 4)),
        keras.layers.TimeDistributed(keras.layers.Dense(2, activation="sigmoid"), name="td"),
    ])  # fmt: skip
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    model.save(tmp_path / "td.keras")
    code, report = _check(tmp_path / "td.keras")
    (file,) = report["files"]
    assert code == 0 and "loss_mismatch" in file["warnings"], file
    assert not file["failures"], file


@pytest.mark.parametrize("loss", ["categorical_crossentropy", "sparse_categorical_crossentropy"])
def test_a_sigmoid_head_under_categorical_crossentropy_warns(tmp_path, loss):
    # its evidence: every flagged run trained (Keras divides the sigmoids by their sum)
    labels = "ids" if loss.startswith("sparse") else "one_hot"
    path = _saved(Example("sigmoid", 3, loss, labels=labels), tmp_path / "m.keras")
    code, report = _check(path)
    (file,) = report["files"]
    assert code == 0 and file["warnings"] == ["loss_mismatch"] and not file["failures"], file
