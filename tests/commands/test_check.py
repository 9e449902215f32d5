"""`check`: verdicts per file and check, exit codes, JSON, JUnit, static-only without TensorFlow."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from xml.etree import ElementTree as ET

import numpy as np
import pytest
from click.testing import CliRunner
from helpers import CUSTOM_LAYERS, SAMPLES, keras, sample

from layergrad import cli
from layergrad.commands.check import check_files as checks
from layergrad.commands.check.check_files import CheckOptions, check_file
from layergrad.core.vocab import CHECK_FINDINGS, DEFAULT_FAIL_ON

ALL_CHECKS = ["readable", "safe", "weights", "loss", "loads", "forward", "gradient", "trainable"]
HEALTHY = ["seed.keras", "seed.h5", "sequential_add.keras", "residual.keras", "nested.keras",
           "shared.keras", "two_input.keras", "embedding.keras", "hand_set.keras"]  # fmt: skip
WITH_CUSTOM = CheckOptions(imports=(CUSTOM_LAYERS,))


def run(*args: str):
    return CliRunner().invoke(cli.main, list(args), catch_exceptions=False)


def failed_checks(verdict):
    return {c.name: c.findings for c in verdict.checks if not c.passed}


@pytest.mark.parametrize("name", HEALTHY)
def test_healthy_models_pass_every_check(name):
    verdict = check_file(sample(name))
    assert verdict.passed
    assert [c.name for c in verdict.checks] == ALL_CHECKS


@pytest.mark.parametrize(
    ("name", "failed"),
    [
        ("cause_argmax.keras", {"gradient": ("blocked",)}),
        ("cause_stop_gradient.keras", {"gradient": ("blocked",)}),
        ("cause_sqrt.keras", {"gradient": ("nonfinite",)}),
        (
            "cause_nan_weights.keras",
            {"weights": ("nonfinite",), "forward": ("nonfinite",), "gradient": ("nonfinite",)},
        ),
    ],
)
def test_broken_models_fail_the_right_checks(name, failed):
    verdict = check_file(sample(name), WITH_CUSTOM)
    assert not verdict.passed
    assert failed_checks(verdict) == failed


def test_the_blocking_layer_is_named():
    verdict = check_file(sample("cause_argmax.keras"), WITH_CUSTOM)
    (gradient,) = [c for c in verdict.checks if c.name == "gradient"]
    assert "non_differentiable_op at argmax" in gradient.message


def test_a_blocked_gradient_says_what_to_do_in_the_message_and_each_record():
    verdict = check_file(sample("cause_round.keras"), WITH_CUSTOM)
    (item,) = [c for c in verdict.checks if c.name == "gradient"]
    assert "Fix: replace the op with a differentiable relaxation" in item.message
    assert item.reasons and all(
        r.hint.startswith("replace the op") and r.op == "Round" for r in item.reasons
    )


def test_a_layer_dead_for_the_whole_batch_makes_the_output_constant():
    verdict = check_file(sample("cause_dead_relu.keras"))
    # every ReLU unit of 'dead' outputs 0 (bias -1000): 'head' outputs its bias for every sample
    assert failed_checks(verdict) == {"forward": ("constant_output",)}
    (forward,) = [c for c in verdict.checks if c.name == "forward"]
    assert "stops varying at 'dead' (its ReLU units output 0 for every sample)" in forward.message
    (trainable,) = [c for c in verdict.checks if c.name == "trainable"]
    assert trainable.findings == ("dead",) and "dead: dead (100% of its units)" in trainable.message
    lenient = CheckOptions(fail_on=frozenset({"unreadable"}))
    assert check_file(sample("cause_dead_relu.keras"), lenient).passed


def test_custom_layers_without_import_are_unsafe():
    verdict = check_file(sample("cause_round.keras"))
    assert failed_checks(verdict) == {"safe": ("unsafe",)}
    # the message names the layer and its class, not just the file (whose name has "round")
    assert "layer 'round' (RoundLayer)" in verdict.checks[-1].message


def test_unreadable_file_is_a_failed_file_not_a_usage_error(tmp_path):
    junk = tmp_path / "junk.keras"
    junk.write_bytes(b"not a model at all")
    result = run("check", str(junk), sample("seed.keras"))
    assert result.exit_code == 1
    assert (
        "FAIL" in result.output
        and "PASS" in result.output
        and "1 passed, 1 failed" in result.output
    )


def test_fail_on_never_lets_a_file_that_cannot_be_checked_pass(tmp_path):
    # --fail-on chooses which findings fail a file; a file that cannot be read, is unsafe or
    # fails to run was never checked, so it fails whatever --fail-on names
    junk = tmp_path / "junk.keras"
    junk.write_bytes(b"PK\x03\x04 truncated")
    missing = tmp_path / "missing.keras"
    for fail_on in ("dead", ""):
        # (cause_round.keras holds a custom layer: unsafe without --import)
        result = run("check", str(junk), str(missing), sample("cause_round.keras"),
                     "--fail-on", fail_on, "--json")  # fmt: skip
        assert result.exit_code == 1, result.output
        files = json.loads(result.stdout)["files"]
        assert [f["passed"] for f in files] == [False, False, False]
    # the API takes any collection of findings (DEFAULT_FAIL_ON is a tuple)
    verdict = check_file(str(junk), CheckOptions(fail_on=DEFAULT_FAIL_ON))  # type: ignore[arg-type]
    assert not verdict.passed


def test_failures_name_each_finding_once():
    # NaN weights fail three checks (weights, forward, gradient): one finding, said once
    verdict = check_file(sample("cause_nan_weights.keras"))
    assert sum("nonfinite" in c.failures for c in verdict.checks) == 3
    assert verdict.failures == ("nonfinite",)


def test_exit_codes():
    assert run("check", sample("seed.keras")).exit_code == 0
    assert run("check", sample("cause_round.keras")).exit_code == 1
    usage = CliRunner().invoke(cli.main, ["check", sample("seed.keras"), "--fail-on", "bogus"])
    assert usage.exit_code == 2


def test_json_schema_and_junit(tmp_path):
    junit = tmp_path / "out.xml"
    result = run(
        "check", sample("seed.keras"), sample("cause_round.keras"), "--json", "--junit", str(junit)
    )
    doc = json.loads(result.stdout)
    assert result.stderr.endswith(f"wrote the JUnit report to {junit}\n")
    assert doc["schema"] == "layergrad.check/1" and doc["passed"] is False
    assert [f["passed"] for f in doc["files"]] == [True, False]
    assert set(doc["files"][0]) == {"path", "passed", "verdict", "failures", "warnings", "checks"}
    assert set(doc["files"][0]["checks"][0]) == {
        "name",
        "passed",
        "message",
        "findings",
        "warnings",
        "records",
    }
    (safe,) = [c for c in doc["files"][1]["checks"] if c["name"] == "safe"]
    assert [(r["code"], r["severity"], r["message"]) for r in safe["records"]] == [
        ("unsafe", "failure", safe["message"])
    ]
    suite = ET.parse(junit).getroot()
    cases = suite.findall("testcase")
    assert suite.get("name") == "layergrad.check" and suite.get("tests") == str(len(cases)) == str(
        8 + 2
    )  # seed: 8 checks; round: stops at safe
    failures = [c for c in cases if c.find("failure") is not None]
    assert [(c.get("classname"), c.get("name")) for c in failures] == [
        (sample("cause_round.keras"), "safe")
    ]
    assert suite.get("failures") == "1"


def test_markdown_summary():
    out = run("check", sample("seed.keras"), "--format", "markdown").output
    assert out.startswith("**layergrad check**: 1 passed, 0 failed")


def test_directory_stands_for_its_model_files(tmp_path):
    shutil.copy(SAMPLES / "seed.keras", tmp_path / "a.keras")
    shutil.copy(SAMPLES / "seed.h5", tmp_path / "b.h5")
    shutil.copy(SAMPLES / "seed.h5", tmp_path / "c.hdf5")  # (Keras's other HDF5 name)
    (tmp_path / "notes.txt").write_text("not a model")
    assert checks.expand_paths([str(tmp_path)]) == [
        str(tmp_path / "a.keras"),
        str(tmp_path / "b.h5"),
        str(tmp_path / "c.hdf5"),
    ]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert checks.expand_paths([str(empty)]) == [str(empty)]
    result = CliRunner().invoke(cli.main, ["check", str(empty), "--json"])
    assert result.exit_code == 1  # a failed entry, not a usage error
    (entry,) = json.loads(result.stdout)["files"]
    assert entry["path"] == str(empty) and not entry["passed"]
    assert "is a directory without .keras, .h5 or .hdf5 files" in entry["checks"][0]["message"]


def test_static_only_never_imports_tensorflow():
    code = (
        "import sys\nfrom click.testing import CliRunner\nfrom layergrad.cli import main\n"
        f"r = CliRunner().invoke(main, ['check', '--static-only', {sample('seed.keras')!r}, "
        f"{sample('cause_nan_weights.keras')!r}])\n"
        "print(r.exit_code, 'tensorflow' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["1", "False"]


@pytest.mark.parametrize("finding", CHECK_FINDINGS)
def test_every_finding_is_accepted_by_fail_on(finding):
    assert run("check", "--static-only", sample("seed.keras"), "--fail-on", finding).exit_code == 0


def test_forward_message_names_the_first_nonfinite_layer_in_a_whole_sentence():
    verdict = check_file(sample("cause_nan_weights.keras"))
    (forward,) = [c for c in verdict.checks if c.name == "forward"]
    # make_samples.py puts NaN in the kernel of 'broken', between 'dense' and 'head'
    assert forward.message == "activations turn non-finite (NaN/Inf) at layer 'broken'"


@pytest.mark.slow
# Uncompiled, as `keras.applications` gives them: every application compiled is in
# test_zoo.py, and an uncompiled ResNet50 at full size in test_scan.py.
@pytest.mark.parametrize("arch", ["MobileNetV2", "EfficientNetB0"])
def test_keras_applications_pass(arch, tmp_path):
    model = getattr(keras.applications, arch)(weights=None, input_shape=(32, 32, 3), classes=10)
    path = tmp_path / f"{arch}.keras"
    model.save(path)
    verdict = check_file(path)
    assert verdict.passed, failed_checks(verdict)
    assert [c.name for c in verdict.checks] == ALL_CHECKS
    assert not [(c.name, c.message) for c in verdict.checks if c.findings]  # no finding at all


def test_a_healthy_softmax_classifier_gets_no_finding(tmp_path):
    # a softmax sums to 1 for every sample, so a target that sums the outputs would make every
    # layer look vanishing; the default target must not
    x = keras.Input((16, 16, 3))
    h = keras.layers.Conv2D(8, 3, activation="relu")(x)
    h = keras.layers.Conv2D(8, 3, activation="relu")(h)
    h = keras.layers.GlobalAveragePooling2D()(h)
    out = keras.layers.Dense(10, activation="softmax")(h)
    path = tmp_path / "cnn.keras"
    keras.Model(x, out).save(path)
    verdict = check_file(path)
    assert not [(c.name, c.message) for c in verdict.checks if c.findings or not c.passed]


def test_the_loss_check_keeps_the_head_rules_own_record():
    from layergrad.model.head_rules import BY_NAME

    verdict = check_file(sample("bug_bce_on_softmax.keras"))
    (loss,) = [c for c in verdict.checks if c.name == "loss"]
    (reason,) = loss.reasons
    rule = BY_NAME["binary_on_softmax"]  # Dense(3, softmax) under binary_crossentropy
    assert (reason.code, reason.rule, reason.severity) == (rule.code, rule.name, rule.severity)
    assert (reason.layer, reason.output) == ("head", "head")  # the layer fix changes
    assert reason.fact("units") == 3 and reason.fact("loss") == "binary_crossentropy"
    assert reason.fact("activation") == "softmax" and reason.fact("from_logits") is False
    assert reason.repair is not None and reason.repair.loss == "categorical_crossentropy"
    assert str(reason) in loss.message


ODD_FLATTEN = '''
import keras


@keras.saving.register_keras_serializable(package="oddflatten")
class Doubled(keras.layers.Layer):
    """Keras runs it; only its `_flatten_layers` takes fewer arguments than Keras's."""

    def call(self, x):
        return 2.0 * x

    def _flatten_layers(self, include_self=True):
        yield from ([self] if include_self else [])
'''


def test_a_custom_layer_whose_flatten_layers_takes_other_arguments_is_checked(tmp_path):
    """Looking inside a custom layer for its inner layers must not fail the model: Keras
    loads and runs this one (it was `trainable: failed unexpectedly: TypeError`)."""
    module = tmp_path / "oddflatten.py"
    module.write_text(ODD_FLATTEN)
    sys.path.insert(0, str(tmp_path))
    try:
        import oddflatten

        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4, activation="relu"),
                                  oddflatten.Doubled(), keras.layers.Dense(2, activation="softmax")])  # fmt: skip
        model.save(tmp_path / "odd.keras")
    finally:
        sys.path.remove(str(tmp_path))
    verdict = check_file(tmp_path / "odd.keras", CheckOptions(imports=(str(module),)))
    assert verdict.checks and not failed_checks(verdict), failed_checks(verdict)


def test_every_finding_is_one_record_naming_its_layer():
    """`records`: one finding record per finding and layer (code, layer, severity, facts,
    message, hint), beside the codes `findings` lists: make_samples.py puts NaN in the kernel
    of 'broken' and kills 'dense''s ReLU units; the dead units only warn."""
    doc = json.loads(run("check", sample("cause_nan_weights.keras"), sample("bug_dead_layer.keras"),
                         "--json").stdout)  # fmt: skip
    records = {
        (path.rsplit("/", 1)[-1], c["name"]): [
            (r["code"], r["layer"], r["severity"]) for r in c["records"]
        ]
        for path, checks in ((f["path"], f["checks"]) for f in doc["files"])
        for c in checks
        if c["findings"]
    }
    assert records[("cause_nan_weights.keras", "weights")] == [("nonfinite", "broken", "failure")]
    assert records[("cause_nan_weights.keras", "forward")] == [("nonfinite", "broken", "failure")]
    assert records[("bug_dead_layer.keras", "trainable")] == [("dead", "dense", "warning")]
    for f in doc["files"]:
        for c in f["checks"]:
            assert [r["code"] for r in c["records"]] == sorted(
                (r["code"] for r in c["records"]), key=c["findings"].index
            )
            assert {r["code"] for r in c["records"]} == set(c["findings"])
            for r in c["records"]:
                assert {"code", "layer", "severity", "facts", "message", "hint"} <= set(r)


def test_a_scale_record_words_its_one_layer_and_the_message_its_several():
    """bug_sigmoid_stack.keras: a sigmoid stack whose first layers' update ratios are decades
    below the head's (make_samples.py); each record is said of its one layer."""
    doc = json.loads(run("check", sample("bug_sigmoid_stack.keras"), "--json").stdout)
    (trainable,) = [c for c in doc["files"][0]["checks"] if c["name"] == "trainable"]
    assert "of these layers is that many decades below" in trainable["message"]
    assert "so they barely learn" in trainable["message"]
    vanishing = [r for r in trainable["records"] if r["code"] == "vanishing"]
    assert len(vanishing) > 1
    for r in vanishing:
        assert r["message"].startswith(f"vanishing: {r['layer']} (")
        assert "of this layer is that many decades below" in r["message"]
        assert r["message"].endswith("so it barely learns")


def test_a_nan_in_the_data_is_said_of_the_data_not_of_a_layer(tmp_path):
    x = np.random.default_rng(0).standard_normal((40, 5)).astype("float32")
    x[20, 3] = np.nan  # sample 20: in batch 0 of 32
    np.save(tmp_path / "x.npy", x)
    doc = json.loads(run("check", sample("seed.keras"), "--data", str(tmp_path / "x.npy"),
                         "--json").stdout)  # fmt: skip
    (forward,) = [c for c in doc["files"][0]["checks"] if c["name"] == "forward"]
    assert forward["findings"] == ["nonfinite"]
    assert forward["message"].startswith(
        "the data holds NaN/Inf: input 'input' (first in batch 0), before any layer; clean the data"
    )
