"""`--distribute mirrored` / `--cpu-replicas N`: the distributed run equals the single-device
run (rtol 1e-5). Logical CPU devices must be set before TensorFlow initialises its devices,
so the runs on two CPU replicas are made in a fresh process, one for the module (each command
invoked in turn); the single-device runs are made here."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from helpers import normal, sample, small_conv_net, tf
from workers import one_process

from layergrad.cli.app import main
from layergrad.core.errors import InputError
from layergrad.data import devices

pytestmark = pytest.mark.slow  # a fresh process: a few seconds


def layergrad(*args: str) -> dict:
    done = CliRunner().invoke(main, [*args, "--json"])
    assert done.exit_code in (0, 1), done.output
    return json.loads(done.stdout)


def numbers(doc: object) -> list[float]:
    """Every number of a JSON document, in order (probe settings left out)."""
    if isinstance(doc, dict):
        return [v for k, x in doc.items() if k != "probe" for v in numbers(x)]
    if isinstance(doc, list):
        return [v for x in doc for v in numbers(x)]
    return [float(doc)] if isinstance(doc, (int, float)) and not isinstance(doc, bool) else []


COMMANDS = {  # name -> the command, run on one device here and on two CPU replicas
    # gradients that are not zero (a saturated model's are: its report would hold only
    # zeros, shapes and counts, equal whatever the replicas computed)
    "inspect": ["inspect", sample("residual.keras"), "--from", "stem", "--to", "head",
                "--to", "side", "--data", "r.npy", "--batch-size", "16"],
    "scan-residual": ["scan", sample("residual.keras"), "--data", "r.npy", "--batch-size", "16"],
    "scan-seed": ["scan", sample("seed.keras"), "--data", "s.npy", "--batch-size", "16"],
    # 9 rows in batches of 4: the last batch's one row leaves replica 1 nothing; the model is
    # never run on zero rows (a fused CPU convolution returns its input's shape for them)
    "conv": ["scan", "m.keras", "--data", "x9.npy", "--batch-size", "4"],
}  # fmt: skip


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    where = tmp_path_factory.mktemp("data")
    x = normal(33, 6, seed=21)  # batches of 16, 16 and 1: one replica gets an empty share
    x[:, 0] *= 3.0
    np.save(where / "x.npy", x)
    np.save(where / "r.npy", normal(33, 8, seed=22))
    np.save(where / "s.npy", normal(33, 5, seed=23))
    small_conv_net(where / "m.keras")
    np.save(where / "x9.npy", normal(9, 8, 8, 3, seed=24))
    return where


@pytest.fixture(scope="module")
def two(folder):
    """name -> the report of the command on two CPU replicas, all from one fresh process."""
    outcomes = one_process(
        [[*command, "--cpu-replicas", "2", "--json"] for command in COMMANDS.values()], folder
    )
    for outcome in outcomes:
        assert outcome["code"] in (0, 1) and not outcome["error"], outcome
    return {name: json.loads(o["stdout"]) for name, o in zip(COMMANDS, outcomes, strict=True)}


def one(folder, name: str) -> dict:
    """The report of command `name` on one device, in this process."""
    here = {"x.npy", "r.npy", "s.npy", "x9.npy", "m.keras"}  # the files of `folder`
    return layergrad(*(str(folder / a) if a in here else a for a in COMMANDS[name]))


@pytest.mark.parametrize("name", ["inspect", "scan-residual", "scan-seed"])
def test_two_cpu_replicas_equal_one_device(name, folder, two):
    single, double = one(folder, name), two[name]
    assert single["probe"]["replicas"] == 1 and double["probe"]["replicas"] == 2
    assert single["probe"]["samples"] == double["probe"]["samples"] == 33
    assert numbers(double) == pytest.approx(numbers(single), rel=1e-5, abs=1e-12)
    assert len(numbers(single)) > 20
    assert sum(abs(n) > 1e-3 for n in numbers(single)) > 10  # measures, not only counts


def test_a_conv_net_with_an_empty_replica_share(folder, two):
    single, double = one(folder, "conv"), two["conv"]
    assert double["probe"]["replicas"] == 2 and double["probe"]["samples"] == 9
    assert numbers(double) == pytest.approx(numbers(single), rel=1e-5, abs=1e-12)


def test_mirrored_on_a_machine_without_gpus_runs_on_the_cpu(folder):
    doc = layergrad("inspect", sample("cause_saturated.keras"), "--from", "x", "--to",
                    "squash", "--data", str(folder / "x.npy"), "--distribute", "mirrored")  # fmt: skip
    assert doc["probe"]["replicas"] >= 1
    assert doc["results"][0]["status"] in ("ok", "zero")


def test_cpu_replicas_after_tensorflow_started_is_refused():
    tf.constant(1.0)  # TensorFlow has started, with one CPU device
    with pytest.raises(InputError, match="can only be set before it starts"):
        devices.strategy_for("mirrored", cpu_replicas=64)
