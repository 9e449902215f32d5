"""`check --baseline`: a committed scan JSON is the reference; its probe is reused; a baseline
that cannot be reproduced is refused (exit 2), never reported as a regression."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from chains import chain_weights, save_chain, scaled
from click.testing import CliRunner
from helpers import normal

from layergrad import cli
from layergrad.commands.check.check_files import CheckOptions, check_files

CHECKS = [
    "readable",
    "safe",
    "weights",
    "loss",
    "loads",
    "forward",
    "gradient",
    "trainable",
    "baseline",
]


def run(*args: str):
    return CliRunner().invoke(cli.main, list(args))


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A tanh chain, the same with l2's kernel x 1e-4, and baselines made by `scan --json`."""
    d = tmp_path_factory.mktemp("baseline")
    w = chain_weights()
    out = {
        "dir": d,
        "base": save_chain(d / "base.keras", w),
        "broken": save_chain(d / "broken.keras", scaled(w, "l2", 1e-4)),
        "other": save_chain(d / "other.keras", chain_weights(seed=5), name="other"),
    }
    np.save(d / "x.npy", normal(5, 6, seed=4))
    out["input"] = str(d / "x.npy")
    for name, args in {
        "scan": [],
        "scan_b3": ["--batch-size", "3", "--seed", "7", "--reduce", "mean", "--training"],
        "scan_to": ["--to", "l3"],
        "scan_input": ["--input", out["input"]],
    }.items():
        out[name] = baseline(d / f"{name}.json", out["base"], *args)
    out["scan_other"] = baseline(d / "scan_other.json", out["other"])
    return out


def baseline(path: Path, model: str, *args: str) -> str:
    result = run("scan", model, "--json", *args)
    assert result.exit_code == 0, result.output
    path.write_text(result.output, encoding="utf-8")
    return str(path)


def checks_of(result) -> dict:
    (file,) = json.loads(result.output)["files"]
    return {c["name"]: c for c in file["checks"]}


def test_the_base_file_passes_and_the_broken_one_fails(files):
    ok = run("check", files["base"], "--baseline", files["scan"], "--json")
    assert ok.exit_code == 0, ok.output
    checks = checks_of(ok)
    assert list(checks) == CHECKS
    assert checks["baseline"]["passed"] and checks["baseline"]["findings"] == []
    assert checks["baseline"]["message"] == (
        f"no regression against {files['scan']}: 7 layers compared"
    )  # the scan check runs is the baseline's scan: nothing changed at all
    broken = run("check", files["broken"], "--baseline", files["scan"], "--json")
    assert broken.exit_code == 1
    base_check = checks_of(broken)["baseline"]
    assert not base_check["passed"] and base_check["findings"] == ["regression"]
    assert base_check["message"].startswith(f"3 regressions against {files['scan']}: x: mean |g|")


def test_regression_is_a_default_finding_that_fail_on_can_drop(files):
    args = ["check", files["broken"], "--baseline", files["scan"], "--json"]
    lenient = run(*args, "--fail-on", "blocked,nonfinite")
    assert lenient.exit_code == 0
    assert checks_of(lenient)["baseline"]["findings"] == ["regression"]  # reported, not failing
    assert run(*args, "--tolerance", "5").exit_code == 0


def test_the_baselines_probe_is_reused(files):
    # made with batch 3, seed 7, mean, training: check's own default is batch 2, seed 0
    result = run("check", files["base"], "--baseline", files["scan_b3"], "--json")
    assert result.exit_code == 0, result.output
    checks = checks_of(result)
    assert checks["forward"]["message"] == "finite and varying on a random batch of 3"
    assert checks["baseline"]["message"].endswith("7 layers compared")  # identical scans
    with_input = run(
        "check",
        files["base"],
        "--baseline",
        files["scan_input"],
        "--input",
        files["input"],
        "--json",
    )
    assert with_input.exit_code == 0, with_input.output
    assert checks_of(with_input)["baseline"]["message"].endswith("7 layers compared")


@pytest.mark.parametrize(
    ("baseline_key", "extra", "message"),
    [
        ("scan_to", [], "was made with --to l3"),
        ("scan_input", [], "was probed with --input .*x.npy; pass the same batch"),
        ("scan", ["--input", "INPUT"], "was probed with a random batch .* but --input"),
        ("scan_input", ["--input", "OTHER"], "not .*other.npy; pass the same file"),
    ],
)
def test_a_baseline_from_another_probe_is_refused(files, baseline_key, extra, message):
    import re

    extra = [files["input"] if a == "INPUT" else a for a in extra]
    if "OTHER" in extra:
        other = files["dir"] / "other.npy"
        np.save(other, normal(5, 6, seed=4))
        extra = ["--input", str(other)]
    result = run("check", files["base"], "--baseline", files[baseline_key], *extra)
    assert result.exit_code == 2
    assert result.output.startswith("error: --baseline ") and result.output.count("\n") == 1
    assert re.search(message, result.output), result.output


def test_a_baseline_of_a_model_with_other_inputs_is_refused(files, tmp_path):
    from chains import WIDTH  # noqa: F401  (the chain's input width is 6)
    from helpers import keras

    x = keras.Input((7,), name="x")
    out = keras.layers.Dense(3, name="head")(keras.layers.Dense(6, name="l0")(x))
    wider = tmp_path / "wider.keras"
    keras.Model(x, out).save(wider)
    result = run("check", str(wider), "--baseline", files["scan"])
    assert result.exit_code == 2
    assert "model input 'x' was probed with shape (8, 6) in the base scan and (8, 7)" in (
        result.output
    )


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"not json", "is not a JSON document"),
        (b"\x89HDF\r\n", "not UTF-8 text"),
        (b"[]", "the document is"),
        (b'{"schema": "layergrad.inspect/1"}', "is a layergrad inspect document"),
        (b'{"schema": "layergrad.scan/2"}', "this version of layergrad reads layergrad.scan/1"),
        (b'{"schema": "x"}', "is not a layergrad scan document"),
        (b"[" * 200_000, "nested too deeply"),
    ],
)
def test_a_file_that_is_not_a_scan_json_is_refused(tmp_path, files, content, message):
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    result = run("check", files["base"], "--baseline", str(path))
    assert result.exit_code == 2 and message in result.output
    assert "Traceback" not in result.output and result.output.count("\n") == 1


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d["layers"][1].update(status="bogus"), 'layers[1].status is "bogus"'),
        (
            lambda d: d["layers"][0].update(gradient={"l2": 1}),
            "layers[0].gradient.mean_abs is missing",
        ),
        (
            lambda d: d["layers"][0]["gradient"].update(mean_abs="big"),
            "expected an integer or a number",
        ),
        (lambda d: d["probe"].update(batch_size=True), "probe.batch_size is true"),
        (lambda d: d["probe"].update(reduce="max"), 'probe.reduce is "max"'),
        (lambda d: d.pop("model"), "model is missing"),
        (lambda d: d["layers"].append(dict(d["layers"][0])), "layers name x more than once"),
    ],
)
def test_a_malformed_scan_json_names_the_member(tmp_path, files, edit, message):
    doc = json.loads(Path(files["scan"]).read_text())
    edit(doc)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    result = run("check", files["base"], "--baseline", str(path))
    assert result.exit_code == 2 and message in result.output, result.output


def test_a_nan_in_a_scan_json_is_refused(tmp_path, files):
    text = Path(files["scan"]).read_text()
    doc = json.loads(text)
    doc["layers"][0]["gradient"]["mean_abs"] = float("nan")
    path = tmp_path / "nan.json"
    path.write_text(json.dumps(doc))  # Python writes NaN, which JSON does not have
    result = run("check", files["base"], "--baseline", str(path))
    assert result.exit_code == 2 and "NaN is not valid JSON" in result.output


def test_several_files_are_matched_by_the_path_recorded_in_each_baseline(files, monkeypatch):
    monkeypatch.chdir(files["dir"])  # the baselines recorded absolute paths; relative ones match
    verdicts = check_files(
        ["base.keras", "other.keras"],
        CheckOptions(baselines=(files["scan"], files["scan_other"])),
    )
    messages = {v.path: {c.name: c.message for c in v.checks} for v in verdicts}
    assert messages["base.keras"]["baseline"].startswith(f"no regression against {files['scan']}")
    assert messages["other.keras"]["baseline"].startswith(
        f"no regression against {files['scan_other']}"
    )
    # broken.keras has no baseline of its own: it is said, not silently skipped
    verdicts = check_files(
        [files["broken"], files["base"]], CheckOptions(baselines=(files["scan"],))
    )
    assert [c.message for c in verdicts[0].checks if c.name == "baseline"] == [
        "no baseline given for this file"
    ]
    assert verdicts[1].passed


def test_a_baseline_for_no_checked_file_or_two_for_one_are_refused(files):
    result = run("check", files["broken"], files["other"], "--baseline", files["scan"])
    assert result.exit_code == 2 and "which is not among the files checked" in result.output
    twice = run(
        "check", files["base"], files["other"], "--baseline", files["scan"],
        "--baseline", files["scan_b3"],
    )  # fmt: skip
    assert twice.exit_code == 2 and "are both for" in twice.output


def test_one_file_and_one_baseline_match_whatever_the_path(files):
    # the simple case: the baseline was made from base.keras, broken.keras is checked against it
    result = run("check", files["broken"], "--baseline", files["scan"])
    assert result.exit_code == 1 and "regression" in result.output


def test_static_only_cannot_compare(files):
    result = run("check", files["base"], "--baseline", files["scan"], "--static-only")
    assert result.exit_code == 2 and "drop --static-only" in result.output


def test_junit_carries_the_baseline_check(files, tmp_path):
    from xml.etree import ElementTree as ET

    junit = tmp_path / "out.xml"
    run("check", files["broken"], "--baseline", files["scan"], "--junit", str(junit))
    cases = {c.get("name"): c for c in ET.parse(junit).getroot().iter("testcase")}
    assert cases["baseline"].find("failure") is not None


def test_check_input_is_the_probe_batch_and_must_fit(files, tmp_path):
    result = run("check", files["base"], "--input", files["input"], "--json")
    assert result.exit_code == 0, result.output
    assert (
        checks_of(result)["forward"]["message"]
        == f"finite and varying on the batch in {files['input']} of 5"
    )
    wrong = tmp_path / "wrong.npy"
    np.save(wrong, normal(5, 7))
    bad = run("check", files["base"], "--input", str(wrong))
    assert bad.exit_code == 2 and "has shape (5, 7), expected (batch, 6)" in bad.output


def test_a_file_with_a_loss_is_compared_with_a_weights_baseline(tmp_path):
    from chains import save_compiled

    w = chain_weights(seed=2)
    base = save_compiled(tmp_path / "base.keras", w)
    broken = save_compiled(tmp_path / "broken.keras", scaled(w, "l2", 1e-4))
    weights_json = baseline(tmp_path / "w.json", base, "--wrt", "weights")
    ok = run("check", base, "--baseline", weights_json, "--json")
    assert ok.exit_code == 0, ok.output
    assert checks_of(ok)["baseline"]["message"] == (
        f"no regression against {weights_json}: 12 variables compared"
    )
    bad = run("check", broken, "--baseline", weights_json, "--json")
    assert bad.exit_code == 1
    message = checks_of(bad)["baseline"]["message"]
    assert "regressions against" in message and "l0/kernel: mean |g| fell" in message
    # a plain scan is not what check runs on a file with a loss: refused, not compared
    plain = baseline(tmp_path / "plain.json", base)
    refused = run("check", base, "--baseline", plain)
    assert refused.exit_code == 2 and "--wrt weights --json" in refused.output
    other_loss = run("check", base, "--baseline", weights_json, "--loss", "mae")
    assert other_loss.exit_code == 2 and "the same --loss" in other_loss.output


def test_a_weights_baseline_for_a_file_without_a_loss_is_refused(files, tmp_path):
    from chains import save_compiled

    compiled = save_compiled(tmp_path / "c.keras", chain_weights(seed=2))
    weights_json = baseline(tmp_path / "w.json", compiled, "--wrt", "weights")
    result = run("check", files["base"], "--baseline", weights_json)
    assert result.exit_code == 2 and "has none compiled" in result.output


def renamed(weights, names: dict[str, str]):
    return {names.get(k, k): v for k, v in weights.items()}


def test_a_baseline_of_another_model_is_a_usage_error(files, tmp_path):
    from helpers import sample

    seed = run("scan", sample("seed.keras"), "--json")  # 4 rows: input, dense, dense_1, dense_2
    (tmp_path / "seed.json").write_text(seed.stdout)
    residual = sample("residual.keras")
    out = run("check", residual, "--baseline", str(tmp_path / "seed.json"))
    assert out.exit_code == 2, out.output
    assert out.stderr.strip() == (
        f"error: --baseline {tmp_path / 'seed.json'} is the baseline of another model: "
        f"{residual} has 0 of the baseline's 4 layers (at least 50% must match by name); make "
        f"the baseline from this file with `layergrad scan {residual} --json`."
    )


def test_half_of_the_baselines_layers_must_be_in_the_model(files, tmp_path):
    w = chain_weights()
    # 7 rows (x, l0..l4, head): with 3 renamed, 4 of 7 remain; with 4 renamed, 3 of 7
    most = save_chain(tmp_path / "most.keras", renamed(w, {"l0": "a0", "l1": "a1", "l2": "a2"}))
    few = save_chain(
        tmp_path / "few.keras", renamed(w, {"l0": "a0", "l1": "a1", "l2": "a2", "l3": "a3"})
    )
    kept = run("check", most, "--baseline", files["scan"], "--json")
    assert kept.exit_code == 0, kept.output
    assert checks_of(kept)["baseline"]["message"] == (
        f"no regression against {files['scan']}: 4 layers compared, 3 added, 3 removed"
    )
    gone = run("check", few, "--baseline", files["scan"])
    assert gone.exit_code == 2
    assert "has 3 of the baseline's 7 layers (at least 50% must match by name)" in gone.stderr
