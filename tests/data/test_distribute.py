"""`--distribute mirrored` / `--cpu-replicas N`: the distributed run equals the single-device
run (rtol 1e-5). Logical CPU devices must be set before TensorFlow initialises its devices,
so each run is a fresh process."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from helpers import ROOT, normal, sample, small_conv_net, tf

from layergrad.core.errors import InputError
from layergrad.data import devices

pytestmark = pytest.mark.slow  # fresh processes: a few seconds each


def layergrad(*args: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "layergrad", *args, "--json"],
        capture_output=True, text=True, cwd=ROOT, timeout=300,
    )  # fmt: skip
    assert done.returncode in (0, 1), done.stderr
    return json.loads(done.stdout)


def numbers(doc: object) -> list[float]:
    """Every number of a JSON document, in order (probe settings left out)."""
    if isinstance(doc, dict):
        return [v for k, x in doc.items() if k != "probe" for v in numbers(x)]
    if isinstance(doc, list):
        return [v for x in doc for v in numbers(x)]
    return [float(doc)] if isinstance(doc, (int, float)) and not isinstance(doc, bool) else []


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "x.npy"
    x = normal(33, 6, seed=21)  # batches of 16, 16 and 1: one replica gets an empty share
    x[:, 0] *= 3.0
    np.save(path, x)
    return str(path)


@pytest.mark.parametrize(
    "command",
    [
        ["inspect", sample("cause_saturated.keras"), "--from", "x", "--to", "squash",
         "--to", "head"],
        ["scan", sample("residual.keras")],
        ["scan", sample("seed.keras")],
    ],
    ids=["inspect", "scan-residual", "scan-seed"],
)  # fmt: skip
def test_two_cpu_replicas_equal_one_device(command, data, tmp_path):
    name = os.path.basename(command[1])  # the checkout's folder may be named anything
    if name == "residual.keras":
        path = tmp_path / "r.npy"
        np.save(path, normal(33, 8, seed=22))
        data = str(path)
    elif name == "seed.keras":
        path = tmp_path / "s.npy"
        np.save(path, normal(33, 5, seed=23))
        data = str(path)
    one = layergrad(*command, "--data", data, "--batch-size", "16")
    two = layergrad(*command, "--data", data, "--batch-size", "16", "--cpu-replicas", "2")
    assert one["probe"]["replicas"] == 1 and two["probe"]["replicas"] == 2
    assert one["probe"]["samples"] == two["probe"]["samples"] == 33
    assert numbers(two) == pytest.approx(numbers(one), rel=1e-5, abs=1e-12)
    assert len(numbers(one)) > 20


def test_a_conv_net_with_an_empty_replica_share(tmp_path):
    # 9 rows in batches of 4: the last batch's one row leaves replica 1 nothing; the model is
    # never run on zero rows (a fused CPU convolution returns its input's shape for them)
    small_conv_net(tmp_path / "m.keras")
    np.save(tmp_path / "x.npy", normal(9, 8, 8, 3, seed=24))
    args = ["scan", str(tmp_path / "m.keras"), "--data", str(tmp_path / "x.npy"),
            "--batch-size", "4"]  # fmt: skip
    one, two = layergrad(*args), layergrad(*args, "--cpu-replicas", "2")
    assert two["probe"]["replicas"] == 2 and two["probe"]["samples"] == 9
    assert numbers(two) == pytest.approx(numbers(one), rel=1e-5, abs=1e-12)


def test_mirrored_on_a_machine_without_gpus_runs_on_the_cpu(data):
    doc = layergrad("inspect", sample("cause_saturated.keras"), "--from", "x", "--to",
                    "squash", "--data", data, "--distribute", "mirrored")  # fmt: skip
    assert doc["probe"]["replicas"] >= 1
    assert doc["results"][0]["status"] in ("ok", "zero")


def test_cpu_replicas_after_tensorflow_started_is_refused():
    tf.constant(1.0)  # TensorFlow has started, with one CPU device
    with pytest.raises(InputError, match="can only be set before it starts"):
        devices.strategy_for("mirrored", cpu_replicas=64)
