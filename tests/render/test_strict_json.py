"""Every JSON document is strict JSON: a number that is not finite is written as null.

The model has a NaN kernel, so its weights' norms, update ratios and activations are NaN;
numpy computes the reference of what is not finite.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from click.testing import CliRunner
from helpers import load_sample, sample

from layergrad.cli.app import main

NAN_MODEL = sample("cause_nan_weights.keras")


def run(*args: str):
    return CliRunner().invoke(main, list(args))


def strict_json(text: str):
    def refuse(name: str):
        raise ValueError(f"{name} is not JSON")

    return json.loads(text, parse_constant=refuse)


def test_the_sample_really_has_a_nan_kernel():
    weights = [np.asarray(w) for w in load_sample("cause_nan_weights.keras").weights]
    assert any(not np.all(np.isfinite(w)) for w in weights)


@pytest.mark.parametrize(
    "args",
    [
        ["scan", NAN_MODEL, "--wrt", "weights", "--loss", "mse"],
        ["scan", NAN_MODEL],
        ["scan", NAN_MODEL, "--measure", "jacobian"],
        ["inspect", NAN_MODEL, "--from", "0", "--to", "-1"],
        ["inspect", NAN_MODEL, "--from", "0", "--to", "-1", "--measure", "jacobian"],
        ["check", NAN_MODEL],
        ["layers", NAN_MODEL],
        ["diff", NAN_MODEL, NAN_MODEL],
        ["diff", NAN_MODEL, NAN_MODEL, "--wrt", "weights", "--loss", "mse"],
    ],
    ids=lambda a: " ".join(x for x in a if x != NAN_MODEL),
)
def test_every_json_output_is_strict(args):
    out = run(*args, "--json")
    assert out.exit_code in (0, 1), out.output
    strict_json(out.stdout)


def test_a_nan_weight_norm_is_null_in_the_weights_scan():
    weights = {f"{v.path}": np.asarray(v) for v in load_sample("cause_nan_weights.keras").weights}
    doc = strict_json(run("scan", NAN_MODEL, "--wrt", "weights", "--loss", "mse", "--json").stdout)
    nan_variables = {k.rsplit("/", 1)[0] for k, w in weights.items() if not np.all(np.isfinite(w))}
    rows = [v for v in doc["variables"] if v["layer"] in nan_variables]
    assert rows and all(v["update_ratio"] is None for v in rows)


def test_diff_and_check_read_back_a_scan_with_nulls(tmp_path):
    for name, args in (("acts", []), ("weights", ["--wrt", "weights", "--loss", "mse"])):
        text = run("scan", NAN_MODEL, *args, "--json").stdout
        (tmp_path / f"{name}.json").write_text(text)
    # a null mean |g| (a non-finite value) is read as "no number", like a missing gradient
    doc = strict_json((tmp_path / "acts.json").read_text())
    row = next(r for r in doc["layers"] if r["gradient"] is not None)
    row["gradient"]["mean_abs"] = None
    row["status"] = "nonfinite"
    (tmp_path / "nulls.json").write_text(json.dumps(doc, allow_nan=False))
    for json_file, more in (("acts", []), ("nulls", []), ("weights", ["--wrt", "weights",
                                                                       "--loss", "mse"])):  # fmt: skip
        out = run("diff", str(tmp_path / f"{json_file}.json"), NAN_MODEL, *more, "--json")
        assert out.exit_code in (0, 1), out.output
        assert strict_json(out.stdout)["schema"] == "layergrad.diff/1"
    out = run("check", NAN_MODEL, "--baseline", str(tmp_path / "nulls.json"), "--json")
    assert out.exit_code == 1, out.output  # the NaN kernel fails the file; the baseline is read
    checks = {c["name"] for c in strict_json(out.stdout)["files"][0]["checks"]}
    assert "baseline" in checks


def test_the_encoder_writes_null_for_every_non_finite_number():
    from layergrad.render.common import json_document

    doc = {"a": math.nan, "b": [math.inf, -math.inf, 1.5], "c": {"d": np.float64("nan")}}
    assert strict_json(json_document(doc)) == {"a": None, "b": [None, None, 1.5], "c": {"d": None}}


def test_fit_json_on_a_nan_kernel_is_strict(tmp_path):
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((32, 6)), rng.standard_normal((32, 2))
    np.savez(tmp_path / "train.npz", x=x.astype("float32"), y=y.astype("float32"))  # x: one input
    out = run("fit", NAN_MODEL, "--data", str(tmp_path / "train.npz"), "--loss", "mse",
              "--optimizer", "sgd", "--steps", "3", "--json")  # fmt: skip
    assert out.exit_code == 1, out.output  # the NaN is found
    doc = strict_json(out.stdout)
    assert doc["schema"] == "layergrad.fit/1"
    assert "nonfinite" in [f["finding"] for f in doc["findings"]]
