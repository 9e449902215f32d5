"""`check` runs its gradient checks by one function over a stream of batches: one batch given
as `--input x.npy` and the same batch as `--data x.npy` get the same checks and findings."""

from __future__ import annotations

import json

import numpy as np
from click.testing import CliRunner
from helpers import keras

from layergrad import cli

ROWS = 8


def checks_of(*args: str) -> dict[str, dict]:
    result = CliRunner().invoke(cli.main, ["check", *args, "--json"])
    assert result.exit_code in (0, 1), result.output
    return {c["name"]: c for c in json.loads(result.stdout)["files"][0]["checks"]}


def test_a_trained_model_on_raw_pixels_gets_the_same_forward_check_from_input_and_data(
    tmp_path,
):
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((6, 6, 3)),
            keras.layers.Conv2D(4, 3, name="conv"),
            keras.layers.Flatten(),
            keras.layers.Dense(1, name="head"),
        ]
    )
    model.compile(optimizer=keras.optimizers.SGD(1e-9), loss="mse")  # one tiny step
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (ROWS, 6, 6, 3)).astype("float32")  # raw 0-255 pixels
    model.fit(x, rng.standard_normal((ROWS, 1)), epochs=1, verbose=0)  # learnt on these pixels
    path, batch = str(tmp_path / "pixels.keras"), str(tmp_path / "x.npy")
    model.save(path)
    np.save(batch, x)
    one = checks_of(path, "--input", batch)
    over = checks_of(path, "--data", batch, "--batch-size", str(ROWS))
    assert {n: c["findings"] for n, c in one.items()} == {n: c["findings"] for n, c in over.items()}
    # the raw pixels reach the convolution unscaled, but the file records the training that
    # scaled its kernels for them: no finding, and each path says what it found (the one
    # batch path used to record an empty message here, where --data said what it found)
    assert one["forward"]["findings"] == [] and over["forward"]["findings"] == []
    assert one["forward"]["message"] == f"finite and varying on the batch in {batch} of {ROWS}"
    assert over["forward"]["message"].startswith(f"finite over {ROWS} samples; outputs vary")


def test_a_compiled_loss_that_does_not_fit_the_outputs_fails_the_file_with_or_without_data(
    tmp_path,
):
    """A list of two losses on a one-output model is the file's fault: `check` fails that file
    (exit 1) and goes on with the next, with `--data` as without (it used to stop the run as a
    usage error, exit 2, with `--data`)."""
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1, name="head")])
    model.compile(optimizer="adam", loss=["mse", "mse"])
    bad, good, data = tmp_path / "bad.keras", tmp_path / "good.keras", tmp_path / "d.npz"
    model.save(bad)
    model.compile(optimizer="adam", loss="mse")
    model.save(good)
    rng = np.random.default_rng(0)
    np.savez(data, x=rng.standard_normal((8, 3)), y=rng.standard_normal((8, 1)))
    for extra in ([], ["--data", str(data)]):
        result = CliRunner().invoke(cli.main, ["check", str(bad), str(good), *extra, "--json"])
        assert result.exit_code == 1, result.output
        files = json.loads(result.stdout)["files"]
        assert [f["verdict"] for f in files] == ["FAIL", "PASS"], extra
        said = " ".join(c["message"] for c in files[0]["checks"])
        assert "the compiled loss is a list of 2 losses" in said, extra
