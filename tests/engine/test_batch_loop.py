"""One loop over batches on a `tf.distribute` strategy (`step_calls.over_batches`): every
command over `--data` runs its batches through it, and it adds up every sample once."""

from __future__ import annotations

import numpy as np
from click.testing import CliRunner
from helpers import keras

from layergrad.cli.app import main
from layergrad.engine import step_calls

ROWS, BATCH = 10, 4  # three batches, the last one partial


def test_scan_weights_and_check_over_data_all_run_the_one_loop(tmp_path, monkeypatch):
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((3,)),
            keras.layers.Dense(4, activation="relu", name="hidden"),
            keras.layers.Dense(2, name="out"),
        ]
    )
    model.compile(optimizer="sgd", loss="mse")
    path = str(tmp_path / "m.keras")
    model.save(path)
    rng = np.random.default_rng(1)
    data = tmp_path / "d.npz"
    x = rng.standard_normal((ROWS, 3)).astype("float32")
    np.savez(data, x=x, y=rng.standard_normal((ROWS, 2)).astype("float32"))
    seen: list[tuple[int, int]] = []
    loop = step_calls.over_batches

    def counted(*args, **kwargs):
        summed = loop(*args, **kwargs)
        seen.append((summed.samples, summed.batches))
        return summed

    monkeypatch.setattr(step_calls, "over_batches", counted)
    commands = {
        "scan": ["scan", path],
        "scan --wrt weights": ["scan", path, "--wrt", "weights"],
        "check": ["check", path],
    }
    for name, args in commands.items():
        seen.clear()
        out = CliRunner().invoke(main, [*args, "--data", str(data), "--batch-size", str(BATCH)])
        assert out.exit_code in (0, 1), (name, out.output)
        assert seen, f"{name} --data did not run the loop over batches"
        assert set(seen) == {(ROWS, 3)}, (name, seen)
