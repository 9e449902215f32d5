"""`layergrad fit` refuses what cannot train before it trains, and never ends a run in
silence: empty, endless and stalled data, a data function that ends the process, signals,
options that cannot work, `--log-dir` that is not a folder."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from click.testing import CliRunner
from helpers import keras

from layergrad.cli.app import main

FUNCTIONS = """
import os, time
import numpy as np

def endless():
    rng = np.random.default_rng(0)
    while True:
        x = rng.random((500, 4)).astype("float32")
        yield x, (x[:, 0] > 0.5).astype("int32")

def sleeper():
    x = np.ones((32, 4), "float32")
    yield x, np.zeros(32, "int32")
    time.sleep(3600)

def dies():
    x = np.ones((32, 4), "float32")
    for i in range(100):
        if i == 3:
            os._exit(0)
        yield x, np.zeros(32, "int32")

def dies_at_once():
    os._exit(0)
"""


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fitguards")
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [keras.Input((4,), name="x"), keras.layers.Dense(3, activation="relu"),
         keras.layers.Dense(2, activation="softmax", name="head")]
    )  # fmt: skip
    model.compile("adam", "sparse_categorical_crossentropy")
    model.save(folder / "m.keras")
    rng = np.random.default_rng(0)
    x = rng.random((64, 4)).astype("float32")
    np.savez(folder / "train.npz", x=x, y=(x[:, 0] > 0.5).astype("int32"))
    np.savez(folder / "empty.npz", x=x[:0], y=np.zeros(0, "int32"))
    (folder / "funcs.py").write_text(FUNCTIONS)
    return folder


def run(*args: str):
    return CliRunner().invoke(main, ["fit", *args])


def layergrad(*args: str, cwd, timeout: float = 240) -> subprocess.CompletedProcess:
    """The real command line in its own process (a data function may end a process)."""
    return subprocess.run(
        [sys.executable, "-m", "layergrad", *args],
        capture_output=True, text=True, timeout=timeout, cwd=cwd,
    )  # fmt: skip


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


def test_data_with_no_rows_is_refused(files):
    result = run(str(files / "m.keras"), "--data", str(files / "empty.npz"), "--steps", "3")
    assert result.exit_code == 2, result.output
    assert "no samples" in result.output


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--learning-rate", "inf"], "positive number, finite"),
        (["--learning-rate", "nan"], "positive number, finite"),
        (["--optimizer", ""], "--optimizer is empty"),
        (["--loss", " "], "--loss is empty"),
        (["--optimizer", "LossScaleOptimizer"], "needs the argument 'inner_optimizer'"),
        (["--distribute", "multi-worker"], "fit trains on one machine"),
    ],
)
def test_options_that_cannot_train_are_one_line_and_exit_2(files, args, says, monkeypatch):
    monkeypatch.setenv("TF_CONFIG", '{"cluster": {"worker": ["localhost:1"]}, "task": '
                       '{"type": "worker", "index": 0}}')  # fmt: skip
    result = run(str(files / "m.keras"), "--data", str(files / "train.npz"), "--steps", "3",
                 *args)  # fmt: skip
    assert result.exit_code == 2, result.output
    assert says in result.output and "Traceback" not in result.output


def test_log_dir_that_is_not_a_folder_is_refused_before_the_model_loads(files, tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    not_a_model = tmp_path / "broken.keras"
    not_a_model.write_bytes(b"not a zip")  # loading it would fail: the log dir fails first
    notes = tmp_path / "notes.txt"
    notes.write_text("mine\n")
    for target in (str(notes), "/dev/null", str(fifo)):
        result = run(str(not_a_model), "--data", str(files / "train.npz"), "--log-dir", target)
        assert result.exit_code == 2, result.output
        assert "--log-dir" in result.output and "not a folder" in result.output
    result = run(str(files / "m.keras"), "--data", str(files / "train.npz"), "--log-dir",
                 str(files / "train.npz"))  # fmt: skip
    assert result.exit_code == 2 and "which this run reads" in result.output


def test_an_endless_function_under_epochs_is_said_and_bounded(files, monkeypatch):
    from layergrad.commands.fit import checks as fit_checks
    from layergrad.commands.fit.train import FitOptions, fit_model
    from layergrad.core.errors import InputError

    monkeypatch.setattr(fit_checks, "MAX_UNSIZED_EPOCH", 5_000)
    said: list[str] = []
    with pytest.raises(InputError, match="more than 5,000 samples and no end"):
        fit_model(files / "m.keras", f"{files / 'funcs.py'}:endless", FitOptions(epochs=1),
                  on_notice=said.append)  # fmt: skip
    assert len(said) == 1 and "--steps N or --limit N" in said[0]
    # --limit bounds it: the run ends
    report = fit_model(files / "m.keras", f"{files / 'funcs.py'}:endless", FitOptions(epochs=1),
                       limit=200)  # fmt: skip
    assert report.steps == 7  # ceil(200 / 32)


def test_a_stalled_source_stops_with_an_error_after_the_stall_timeout(files):
    start = time.monotonic()
    done = layergrad("fit", "m.keras", "--data", "funcs.py:sleeper", "--steps", "5",
                     "--stall-timeout", "3", "--json", cwd=files)  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    lines = error_lines(done.stderr)
    assert len(lines) == 1 and "no batch for" in lines[0] and "--stall-timeout" in lines[0]
    assert time.monotonic() - start < 200


@pytest.mark.parametrize("function", ["dies", "dies_at_once"])
@pytest.mark.parametrize("command", [["fit", "--steps", "10"], ["scan"]])
def test_a_data_function_calling_os_exit_is_an_error_naming_it(files, function, command):
    name, *rest = command
    done = layergrad(name, "m.keras", "--data", f"funcs.py:{function}", *rest, "--json",
                     cwd=files)  # fmt: skip
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stdout == ""
    lines = error_lines(done.stderr)
    assert len(lines) == 1, done.stderr
    assert f"funcs.py:{function}" in lines[0] and "os._exit(0)" in lines[0]


@pytest.mark.parametrize(("sent", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_stops_the_run_with_its_own_exit_code(files, sent, code):
    process = subprocess.Popen(
        [sys.executable, "-m", "layergrad", "fit", "m.keras", "--data", "funcs.py:sleeper",
         "--steps", "5", "--stall-timeout", "0", "--json"],
        cwd=files, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        time.sleep(4)  # any moment after start-up: in the import, the load or the data
        process.send_signal(sent)
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == code, err
    assert out == ""
    assert "error: stopped by" in err


def test_the_model_file_is_never_written(files):
    before = hashlib.sha256((files / "m.keras").read_bytes()).hexdigest()
    result = run(str(files / "m.keras"), "--data", str(files / "train.npz"), "--steps", "3")
    assert result.exit_code == 0, result.output
    assert hashlib.sha256((files / "m.keras").read_bytes()).hexdigest() == before


@pytest.mark.parametrize(
    ("activation", "units", "loss"),
    [
        ("sigmoid", 1, "binary_crossentropy"),
        ("softmax", 2, "sparse_categorical_crossentropy"),
        (None, 1, "mean_squared_error"),
    ],
)
def test_an_uncompiled_model_is_told_a_loss_that_fits_its_head(files, activation, units, loss):
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [keras.Input((4,), name="x"), keras.layers.Dense(units, activation=activation)]
    )
    path = files / f"uncompiled_{activation}.keras"
    model.save(path)
    both = run(str(path), "--data", str(files / "train.npz"), "--steps", "3")
    assert both.exit_code == 2, both.output
    assert f"without a loss or an optimizer (no model.compile); pass --loss NAME --optimizer " \
           f"NAME, e.g. --loss {loss} --optimizer adam" in both.output  # fmt: skip
    given = run(str(path), "--data", str(files / "train.npz"), "--steps", "3", "--loss", loss,
                "--optimizer", "adam")  # fmt: skip
    assert given.exit_code == 0, given.output
