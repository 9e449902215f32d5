"""One loop over batches on a `tf.distribute` strategy (`step_calls.over_batches`): every
command over `--data` runs its batches through it, and `scan` and `scan --wrt weights` their
probe batch as a data source of one batch; it adds up every sample once."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
from click.testing import CliRunner
from helpers import keras

from layergrad.cli.app import main
from layergrad.engine import step_calls

ROWS, BATCH = 10, 4  # three batches, the last one partial


def test_the_scans_of_the_probe_batch_and_every_command_over_data_run_the_one_loop(
    tmp_path, monkeypatch
):
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
    np.save(tmp_path / "x.npy", x[:BATCH])
    seen: list[tuple[int, int]] = []
    loop = step_calls.over_batches

    def counted(*args, **kwargs):
        summed = loop(*args, **kwargs)
        seen.append((summed.samples, summed.batches))
        return summed

    monkeypatch.setattr(step_calls, "over_batches", counted)
    over_data = ["--data", str(data), "--batch-size", str(BATCH)]
    commands = {
        "scan --data": (["scan", path, *over_data], (ROWS, 3)),
        "scan --wrt weights --data": (["scan", path, "--wrt", "weights", *over_data], (ROWS, 3)),
        "check --data": (["check", path, *over_data], (ROWS, 3)),
        "inspect --data": (
            ["inspect", path, "--from", "hidden", "--to", "out", *over_data],
            (ROWS, 3),
        ),
        "scan": (["scan", path, "--input", str(tmp_path / "x.npy")], (BATCH, 1)),
        "scan --wrt weights": (
            ["scan", path, "--wrt", "weights", "--input", str(tmp_path / "x.npy")],
            (BATCH, 1),
        ),
    }
    for name, (args, expected) in commands.items():
        seen.clear()
        out = CliRunner().invoke(main, args)
        assert out.exit_code in (0, 1), (name, out.output)
        assert seen, f"{name} did not run the loop over batches"
        assert set(seen) == {expected}, (name, seen)


def test_every_command_over_data_reads_its_batches_from_the_one_stream_builder(
    tmp_path, monkeypatch
):
    """`sources.Opening.stream` builds every `DataStream` of `--data` (inputs alone, or with
    labels for `fit`, `fix` and `check`'s training verdicts), for a model of two named inputs."""
    from helpers import normal, sample

    from layergrad.data import sources

    path = sample("two_input.keras")  # inputs a (4,), b (3,); one output of 2
    data = tmp_path / "ab.npz"
    np.savez(data, a=normal(ROWS, 4, seed=3), b=normal(ROWS, 3, seed=4), y=normal(ROWS, 2))
    built: list[tuple[str, ...]] = []
    init = sources.DataStream.__init__

    def counted(self, *args, **kwargs):
        init(self, *args, **kwargs)
        if not self.probe:
            built.append(tuple(self.labels))

    monkeypatch.setattr(sources.DataStream, "__init__", counted)
    over_data = ["--data", str(data), "--batch-size", str(BATCH)]
    train = ["--loss", "mse", "--optimizer", "sgd", "--steps", "2"]
    commands = {
        "inspect --data": ["inspect", path, "--from", "a", "--to", "head", *over_data],
        "scan --data": ["scan", path, *over_data],
        "scan --wrt weights --data": [
            "scan",
            path,
            "--wrt",
            "weights",
            "--loss",
            "mse",
            *over_data,
        ],
        "check --data": ["check", path, *over_data],
        "fit": ["fit", path, *over_data, *train],
    }
    for name, args in commands.items():
        built.clear()
        out = CliRunner().invoke(main, args)
        assert out.exit_code in (0, 1), (name, out.output)
        assert built, f"{name} built its batches outside sources.Opening.stream"
        if name in ("fit", "scan --wrt weights --data"):  # the labels, from the same rows
            assert ("y",) in built, (name, built)
    root = Path(sources.__file__).parent.parent
    made = [
        f"{module.relative_to(root)}:{node.lineno}"
        for module in root.rglob("*.py")
        for node in ast.walk(ast.parse(module.read_text(encoding="utf-8")))
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "DataStream"
    ]
    assert made == ["data/sources.py:" + made[0].split(":")[1]], made
