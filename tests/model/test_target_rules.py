"""The label rules' table (`layergrad/model/target_fit.RULES`): every example of every rule is
found by that rule (the first that applies names the finding), every near miss is not, and a
finding keeps its rule's name and the facts it read."""

from __future__ import annotations

import pytest

from layergrad.core.vocab import Finding
from layergrad.model.head_rules import HeadFacts
from layergrad.model.target_fit import IDS_SPARSE, RULES, TargetExample, TargetRule, judge


def _spec(facts: HeadFacts) -> tuple[str, bool] | None:
    """The loss as `label_repair` takes it: (name, from_logits), None when unknown."""
    return (facts.loss, facts.from_logits) if facts.loss is not None else None


def _cases(kind: str) -> list:
    return [
        pytest.param(rule, example, id=f"{rule.name}-{i}")
        for rule in RULES
        for i, example in enumerate(getattr(rule, kind))
    ]


@pytest.mark.parametrize(("rule", "example"), _cases("examples"))
def test_each_example_is_found_by_its_rule(rule: TargetRule, example: TargetExample):
    found = judge(example.facts())
    assert found is not None and found.rule == rule.name, found
    assert found.code == Finding.TARGET_MISMATCH and found.severity == rule.severity
    assert found.message.endswith(rule.message(example.facts())) and found.hint


@pytest.mark.parametrize(("rule", "example"), _cases("near_misses"))
def test_no_near_miss_is_found_by_the_rule(rule: TargetRule, example: TargetExample):
    found = judge(example.facts())
    assert found is None or found.rule != rule.name, found


def test_every_rule_has_an_example_and_a_near_miss_and_a_unique_name():
    assert not [r.name for r in RULES if not (r.examples and r.near_misses)]
    assert len({r.name for r in RULES}) == len(RULES)


def test_a_custom_loss_is_judged_only_by_the_rules_every_loss_holds_to():
    # a custom loss reads its labels its own way: class ids beyond a sigmoid's range are not
    # judged, text is
    ids = TargetExample("sigmoid", 1, "custom", (0, 3, 7)).facts()
    assert judge(ids) is None
    text = judge(TargetExample("sigmoid", 1, "custom", ("a", "b")).facts())
    assert text is not None and text.rule == "labels_not_numbers" and text.loss == "custom"
    assert text.message.startswith("output 'head' (layer 'head') with a custom loss")


def test_a_finding_names_the_output_and_keeps_the_facts_it_read():
    found = judge(TargetExample("sigmoid", 1, "mean_squared_error", (50.0, 499.5)).facts())
    assert found is not None
    assert found.message == (
        "output 'head' (1 unit, sigmoid, layer 'head') with mean_squared_error: the labels are "
        "real values 50 to 499.5: a sigmoid output lies in [0, 1], so it can never reach them"
    )
    assert (found.layer, found.output, found.loss) == ("head", "head", "mean_squared_error")
    assert found.fact("units") == 1 and found.fact("activation") == "sigmoid"


@pytest.mark.parametrize(("rule", "example"), _cases("examples"))
def test_fix_repairs_a_head_only_where_a_copy_of_the_model_can(rule, example):
    from layergrad.model.target_fit import DATA, label_repair

    facts = example.facts()
    change = label_repair(facts.head, _spec(facts), facts.y)
    if rule.repair_words == DATA or facts.custom:  # the labels themselves must change
        assert change is None
    else:
        assert change is not None and change.kind in ("flatten", "loss", "activation"), change


def test_a_repair_is_the_head_and_loss_the_labels_ask_for():
    from layergrad.model.target_fit import label_repair

    facts = TargetExample("sigmoid", 1, "binary_crossentropy", (0, 1, 2, 3, 4)).facts()
    change = label_repair(facts.head, _spec(facts), facts.y)
    assert change is not None
    assert (change.activation, change.units, change.loss) == (
        "softmax", 5, "sparse_categorical_crossentropy")  # fmt: skip
    assert label_repair(facts.head, _spec(facts), None) is None  # no labels: nothing to repair


@pytest.mark.parametrize(
    ("example", "repair"),
    [
        # the rule that names the head decides the repair, as its words say
        (TargetExample("relu6", 1, "mean_squared_error", (50.0, 499.5)), ("linear", None, None)),
        (TargetExample("tanh", 1, "mean_squared_error", (0, 1, 2)), ("linear", None, None)),
        (TargetExample("softmax", 1, IDS_SPARSE, (0, 1, 1)),
         ("sigmoid", None, "binary_crossentropy")),
        (TargetExample("softmax", 3, IDS_SPARSE, (0, 1, 5)), ("softmax", 6, None)),
        (TargetExample("sigmoid", 3, "binary_crossentropy", (0.5, 1.5)), ("linear", 1, None)),
        (TargetExample("sigmoid", 1, "binary_crossentropy", ((0, 1), (1, 0))),
         ("softmax", 2, "categorical_crossentropy")),
        (TargetExample("sigmoid", 1, "binary_crossentropy", ((0, 1), (1, 1))),
         ("sigmoid", 2, None)),
    ],
)  # fmt: skip
def test_the_repair_is_the_one_the_naming_rule_makes(example, repair):
    from layergrad.model.target_fit import label_repair

    facts = example.facts()
    change = label_repair(facts.head, _spec(facts), facts.y)
    assert change is not None and change.kind == "activation", change
    assert (change.activation, change.units, change.loss) == repair, change
