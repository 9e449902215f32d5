"""`--data` and `--input` are checked against the model's config before TensorFlow loads.

Each case runs in a fresh interpreter and asserts that the error came while `tensorflow` was
still absent from `sys.modules` (a fact, not a timing).
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from helpers import normal, sample

CODE = """
import json, sys
from click.testing import CliRunner
from layergrad.cli.app import main
r = CliRunner().invoke(main, json.loads(sys.argv[1]))
print(json.dumps({"code": r.exit_code, "stderr": r.stderr, "tf": "tensorflow" in sys.modules}))
"""


def run_fresh(*args: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", CODE, json.dumps(list(args))], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.splitlines()[-1])


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("preflight")
    np.savez(d / "keys.npz", a=normal(3, 5))  # seed.keras's input is `input`
    np.save(d / "narrow.npy", normal(3, 4))  # seed.keras takes (batch, 5)
    np.save(d / "one.npy", normal(3, 4))
    return d


SEED = sample("seed.keras")
INSPECT = ["inspect", SEED, "--from", "dense", "--to", "dense_1"]
CASES = {
    "data missing": (INSPECT, "--data", "missing.npy", "--data missing.npy: no such file"),
    "data missing folder": (["scan", SEED], "--data", "nowhere/", "no such file or folder"),
    "data missing .py": (["scan", SEED], "--data", "nofile.py:batches", "no such file nofile.py"),
    "input missing": (INSPECT, "--input", "missing.npy", "--input missing.npy: no such file"),
    "data keys": (INSPECT, "--data", "{d}/keys.npz", "missing: input."),
    "input keys": (INSPECT, "--input", "{d}/keys.npz", "missing: input."),
    "data shape": (["scan", SEED], "--data", "{d}/narrow.npy", "has shape (3, 4), expected"),
    "input shape": (["scan", SEED], "--input", "{d}/narrow.npy", "has shape (3, 4), expected"),
    "npy for two inputs": (
        ["scan", sample("two_input.keras")], "--data", "{d}/one.npy", "holds one array but",
    ),
    "check data keys": (["check", SEED], "--data", "{d}/keys.npz", "missing: input."),
    "check input missing": (["check", SEED], "--input", "missing.npy", "no such file"),
    "fit data missing": (["fit", SEED], "--data", "missing.npy", "--data missing.npy: no such file"),
    "fix data missing": (["fix", SEED], "--data", "nofile.py:fn", "no such file nofile.py"),
}  # fmt: skip


@pytest.mark.parametrize("case", CASES)
def test_the_error_comes_before_tensorflow_loads(case, files):
    command, option, value, message = CASES[case]
    got = run_fresh(*command, option, value.format(d=files))
    assert got["code"] == 2, got
    assert message in got["stderr"] and got["stderr"].count("\n") == 1
    assert got["tf"] is False
