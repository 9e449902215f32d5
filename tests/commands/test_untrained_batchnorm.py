"""The never-trained BatchNormalization rule is one rule: `inspect`, `scan` and `check`, on one
batch or over `--data`, probe such a model again in training mode when the probe in
inference finds something wrong, and say so in the same words.

The net: conv (bias +50) -> BatchNormalization 'bn', never trained -> ReLU(6) -> pool -> head.
In inference bn only divides by sqrt(1 + 0.001), every unit stays near 50, past ReLU6's cap,
and d head / d conv is exactly zero (checked here with a tape): every command finds something
wrong. In training mode bn subtracts each channel's batch mean and the gradient flows.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from helpers import manual_gradient, normal, sample, untrained_bn_net

from layergrad.cli.app import main

SAID = (
    "probed in training mode (batch statistics): 1 BatchNormalization layers (bn) hold their "
    "initial moving statistics, so the model was never trained and inference does not "
    "normalize; training runs them like this"
)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("untrained_bn")
    model = untrained_bn_net(folder / "bn.keras")
    data = normal(20, 8, 8, 3, seed=3)
    np.savez(folder / "x.npz", x=data)
    rest = [model.get_layer(n) for n in ("bn", "act", "pool", "head")]

    def after(h):
        for layer in rest:
            h = layer(h, training=False) if layer.name == "bn" else layer(h)
        return h

    assert not np.any(manual_gradient(model.get_layer("conv"), after, data))
    return folder


def run(*args: str) -> str:
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def said_by(command: str, args: list[str]) -> tuple[dict, list[str]]:
    """The command's JSON document, and its sentences that speak of the never-trained layers
    (inspect's warnings are in its table only: as one line, however wrapped)."""
    doc = json.loads(run(*args, "--json"))
    if command == "inspect":
        table = " ".join(run(*args).split())
        texts = table.split("warning: d head / d conv: ")[1:]
    elif command == "scan":
        texts = doc["notes"]
    else:
        texts = [c["message"] for f in doc["files"] for c in f["checks"]]
    return doc, [t for t in texts if "BatchNormalization layers" in t]


@pytest.mark.parametrize("command", ["inspect", "scan", "check"])
@pytest.mark.parametrize("over_data", [False, True], ids=["one_batch", "data"])
def test_every_command_probes_in_training_mode_and_says_it_in_the_same_words(
    files, command, over_data
):
    args = [command, str(files / "bn.keras")]
    if command == "inspect":
        args += ["--from", "conv", "--to", "head"]
    if over_data:
        args += ["--data", str(files / "x.npz"), "--batch-size", "8"]
    doc, texts = said_by(command, args)
    (text,) = texts
    if command == "check":  # said at the end of its forward message
        assert doc["passed"] and text.endswith(f"; {SAID}")
    else:
        assert doc["probe"]["training"] is True
        assert text.startswith(SAID) if command == "inspect" else text == SAID


def test_an_untrained_model_that_inference_finds_healthy_is_judged_as_it_is():
    # cause_training.keras: dense -> bn, never trained; in inference the gradient is fine
    path = sample("cause_training.keras")
    for command, extra in (("inspect", ["--from", "dense", "--to", "bn"]), ("scan", [])):
        doc, texts = said_by(command, [command, path, *extra])
        assert doc["probe"]["training"] is False and not texts
