"""`layergrad fix` under hostile or careless input: options out of bounds, a saved compile
that cannot train, labels `fit` refuses, one label id that would widen the head past memory,
a folder given for a file, learning rates `fix` must not misread.

Each input is built as a careless user or an attacker would (a real saved model, a real
`.npz`); the CLI runs on it. Truth from outside `fix`: `fit`'s own exit code and message on
the same file, the option bounds written here by hand, the bytes of the model hashed before
and after, the output folder listed.
"""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner, Result
from helpers import keras

from layergrad import cli
from layergrad.commands.fix.repair import FixOptions, fix_model
from layergrad.core.errors import UsageError

layers = keras.layers


def _digest(path: Path | str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _run(*args: str) -> Result:
    return CliRunner().invoke(cli.main, list(args))


def _refused(result: Result, *phrases: str) -> str:
    """Exit 2 and one clear error line on stderr holding every phrase (after click's usage
    lines, for an option click refuses); that line."""
    assert result.exit_code == 2, (result.exit_code, result.output)
    errors = [x for x in result.stderr.splitlines() if x.lower().startswith("error")]
    assert len(errors) == 1, result.stderr
    line = errors[0]
    assert "Traceback" not in result.output
    for phrase in phrases:
        assert phrase in line, (phrase, line)
    return line


def _classifier(path: Path, units: int = 3, compile_args: dict | None = None) -> Path:
    """6 features -> Dense(8, relu) -> Dense(units, softmax) 'head', saved."""
    keras.utils.set_random_seed(0)
    x = keras.Input((6,), name="x")
    h = layers.Dense(8, activation="relu", name="dense")(x)
    model = keras.Model(x, layers.Dense(units, activation="softmax", name="head")(h))
    if compile_args is not None:
        model.compile(**compile_args)
    model.save(path)
    return path


def _ids(path: Path, rows: int = 64, classes: int = 3, **changed: int) -> Path:
    """Features and class ids 0..classes-1 (row `i` set to `changed[f"row{i}"]`)."""
    rng = np.random.default_rng(0)
    y = rng.integers(0, classes, size=rows).astype("int64")
    for key, value in changed.items():
        y[int(key.removeprefix("row"))] = value
    np.savez(path, x=rng.normal(size=(rows, 6)).astype("float32"), y=y)
    return path


def _edit_compile(source: Path, target: Path, edit) -> Path:
    """A copy of `source` whose config.json's compile_config went through `edit` (by hand, as
    a careless user or an attacker edits the archive)."""
    with zipfile.ZipFile(source) as zf:
        members = {name: zf.read(name) for name in zf.namelist()}
    config = json.loads(members["config.json"])
    edit(config["compile_config"])
    members["config.json"] = json.dumps(config).encode()
    with zipfile.ZipFile(target, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return target


# 10: every option of fix has fit's bounds, checked before any work -----------------------------

BOUNDS = [  # (option, value, the bound said), written by hand
    ("--seed", "-1", "0<=x<=4294967295"),
    ("--seed", str(2**32), "0<=x<=4294967295"),
    ("--batch-size", "99999999999", "1<=x<=1048576"),
    ("--batch-size", "0", "1<=x<=1048576"),
    ("--steps", str(2**63), "1<=x<=1000000"),
    ("--limit", "0", "1<=x<=9007199254740992"),
]


@pytest.mark.parametrize(("command", "option", "value", "bound"),
                         [(c, *b) for c in ("fix", "fit") for b in BOUNDS])  # fmt: skip
def test_every_option_of_fix_has_fits_bounds_before_any_work(
    tmp_path, command, option, value, bound
):
    missing = tmp_path / "no_such_model.keras"  # nothing is read: the options come first
    out = tmp_path / "o.keras"
    extra = ["--output", str(out)] if command == "fix" else []
    result = _run(command, str(missing), "--data", str(tmp_path / "d.npz"), option, value, *extra)
    _refused(result, option, bound)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("options", [dict(seed=-1), dict(seed=2**32), dict(steps=2**63),
                                     dict(batch_size=99999999999), dict(steps=0)])  # fmt: skip
def test_the_api_refuses_the_same_values_before_any_work(tmp_path, options):
    with pytest.raises(UsageError, match="must be"):
        fix_model(tmp_path / "missing.keras", tmp_path / "d.npz",
                  FixOptions(output=str(tmp_path / "o.keras"), **options))  # fmt: skip
    assert list(tmp_path.iterdir()) == []


def test_a_seed_at_its_bound_trains(tmp_path):
    model = _classifier(tmp_path / "m.keras", compile_args=dict(optimizer="adam",
                        loss="sparse_categorical_crossentropy"))  # fmt: skip
    data = _ids(tmp_path / "d.npz")
    result = _run("fix", str(model), "--data", str(data), "--steps", "2",
                  "--seed", str(2**32 - 1), "--output", str(tmp_path / "o.keras"))  # fmt: skip
    assert result.exit_code in (0, 1), result.output
    assert "unexpected" not in result.output


# 3: what fit cannot train, fix does not pass -----------------------------------------------------

SGD = dict(optimizer=keras.optimizers.SGD(0.01), loss="sparse_categorical_crossentropy")


def _no_compile(tmp_path: Path) -> Path:
    return _classifier(tmp_path / "plain.keras")


def _string_rate(tmp_path: Path) -> Path:
    source = _classifier(tmp_path / "sgd.keras", compile_args=SGD)
    edit = lambda c: c["optimizer"]["config"].__setitem__("learning_rate", "fast")  # noqa: E731
    return _edit_compile(source, tmp_path / "rate.keras", edit)


def _unknown_loss(tmp_path: Path) -> Path:
    source = _classifier(tmp_path / "sgd.keras", compile_args=SGD)
    loss = {"module": "keras.losses", "class_name": "NoSuchLoss", "config": {},
            "registered_name": None}  # fmt: skip
    return _edit_compile(source, tmp_path / "loss.keras", lambda c: c.__setitem__("loss", loss))


@pytest.mark.parametrize("make", [_no_compile, _string_rate, _unknown_loss])
def test_a_compile_fit_cannot_train_is_exit_2_with_fits_message(tmp_path, make):
    model = make(tmp_path)
    before = _digest(model)
    data = _ids(tmp_path / "d.npz")
    out = tmp_path / "o.keras"
    fitted = _run("fit", str(model), "--data", str(data), "--steps", "2")
    fit_line = _refused(fitted)  # the truth: fit refuses this file
    result = _run("fix", str(model), "--data", str(data), "--steps", "2", "--output", str(out))
    line = _refused(result)
    assert line.split("; ")[0] == fit_line.split("; ")[0]  # what is wrong, in fit's words
    assert "--loss" not in line and "--optimizer" not in line  # fix has neither option
    assert not out.exists() and _digest(model) == before


# 9: labels fit refuses before its first step: fit's check and message, not TensorFlow's ----------


def test_labels_fit_refuses_are_fits_target_mismatch_not_a_graph_error(tmp_path):
    model = _classifier(tmp_path / "m.keras", compile_args=SGD)
    data = _ids(tmp_path / "d.npz", row5=7)  # one id beyond the 3 units
    fitted = _run("fit", str(model), "--data", str(data), "--steps", "2", "--json")
    assert fitted.exit_code == 1, fitted.output
    (said,) = json.loads(fitted.stdout)["findings"]  # the truth: fit stops before a step
    assert said["finding"] == "target_mismatch" and said["step"] == 0
    result = _run("fix", str(model), "--data", str(data), "--steps", "2", "--json",
                  "--output", str(tmp_path / "o.keras"))  # fmt: skip
    assert result.exit_code == 1, result.output
    doc = json.loads(result.stdout)
    (repair,) = doc["repairs"]
    error = repair["original"]["error"]
    assert repair["original"]["losses"] == []  # never trained
    assert said["message"] in error and "target_mismatch" in error, error
    assert "Graph execution" not in result.output and "Detected at node" not in result.output


# 2: one label id must not make fix build a head of its size ----------------------------------


@pytest.mark.parametrize("stray", [60_000_000, 2_000_000_000])
def test_one_stray_label_id_is_a_data_problem_not_a_head_of_its_size(tmp_path, stray):
    import hostile as H

    model = _classifier(tmp_path / "m.keras", compile_args=SGD)
    before = _digest(model)
    data = _ids(tmp_path / "d.npz", row5=stray)  # a few KB
    assert data.stat().st_size < 10_000
    out = tmp_path / "o.keras"
    m = H.measure(["fix", str(model), "--data", str(data), "--steps", "2", "--json",
                   "--output", str(out)], 300)  # fmt: skip
    assert m.returncode == 1, m.stderr[-500:]
    doc = json.loads(m.stdout)
    assert doc["repairs"] == [] and doc["output"] is None
    (left,) = doc["unrepaired"]
    assert left["finding"] == "target_mismatch" and left["layer"] == "head"
    assert f"class ids run to {stray:,} in 64 labels" in left["message"]
    assert "data problem" in left["message"]
    assert not out.exists() and _digest(model) == before
    assert m.peak_mb < 1500, m.peak_mb  # TensorFlow and a tiny model: no head of its size


def test_a_repaired_copy_over_max_memory_is_not_built(tmp_path):
    model = _classifier(tmp_path / "m.keras", compile_args=SGD)
    data = _ids(tmp_path / "d.npz", rows=2000, classes=2000)  # real classes: a 2000-unit head
    out = tmp_path / "o.keras"
    args = ["fix", str(model), "--data", str(data), "--steps", "2", "--json",
            "--output", str(out)]  # fmt: skip
    result = _run(*args, "--max-memory", "1MB")  # the model fits it, the copy does not
    assert result.exit_code == 1, result.output
    (repair,) = json.loads(result.stdout)["repairs"]
    assert repair["applied"] is False
    assert "refusing to build the repaired copy" in repair["why"]
    assert "pass --max-memory 4MB" in repair["why"], repair["why"]
    assert not out.exists()


# 11: a folder given for the model ---------------------------------------------------------------


def test_a_folder_holding_a_model_is_named_not_called_empty(tmp_path):
    folder = tmp_path / "models"
    (folder / "v1").mkdir(parents=True)
    model = _classifier(folder / "v1" / "m.keras")
    out = tmp_path / "o.keras"
    line = _refused(_run("fix", str(folder), "--output", str(out)), "is a directory")
    assert "without" not in line and str(model) in line  # the file to pass instead
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "without .keras, .h5 or .hdf5 files" in _refused(
        _run("fix", str(empty), "--output", str(out))
    )
    assert not out.exists()


# 12: a schedule, a negative rate, nothing to train ----------------------------------------------


def _learnable_ids(path: Path) -> Path:
    """Class ids 0-4 a fixed rule of the inputs gives (learnable, not random)."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(512, 6)).astype("float32")
    np.savez(path, x=x, y=np.argmax(x @ rng.normal(size=(6, 5)), axis=1))
    return path


def test_a_learning_rate_schedule_is_scaled_not_replaced_by_a_constant(tmp_path):
    schedule = keras.optimizers.schedules.ExponentialDecay(30.0, decay_steps=1000,
                                                           decay_rate=0.9)  # fmt: skip
    keras.utils.set_random_seed(0)
    x = keras.Input((6,), name="x")
    h = layers.Dense(16, activation="relu", name="dense")(x)
    model = keras.Model(x, layers.Dense(5, activation="softmax", name="head")(h))
    # Adam: the scaled rate trains within the steps (the copy is written only when verified)
    model.compile(optimizer=keras.optimizers.Adam(schedule),
                  loss="sparse_categorical_crossentropy")  # fmt: skip
    path = tmp_path / "m.keras"
    model.save(path)
    out = tmp_path / "o.keras"
    report = fix_model(path, _learnable_ids(tmp_path / "d.npz"),
                       FixOptions(output=str(out), steps=60))  # fmt: skip
    (repair,) = [r for r in report.repairs if r.layer is None]  # the learning rate's
    assert repair.verdict == "verified", repair.why  # else no copy is written
    with zipfile.ZipFile(out) as zf:
        rate = json.loads(zf.read("config.json"))["compile_config"]["optimizer"]["config"][
            "learning_rate"
        ]
    assert isinstance(rate, dict) and rate["class_name"] == "ExponentialDecay"  # still one
    new = rate["config"]["initial_learning_rate"]
    assert new <= 10.0  # at least 3x down from 30
    assert (rate["config"]["decay_steps"], rate["config"]["decay_rate"]) == (1000, 0.9)
    assert repair.code == (
        "optimizer=Adam(learning_rate=ExponentialDecay(initial_learning_rate=30, ...)) -> "
        f"optimizer=Adam(learning_rate=ExponentialDecay(initial_learning_rate={new:g}, ...))",
    )
    assert "schedule ExponentialDecay is scaled" in repair.change


def test_a_negative_learning_rate_is_refused_not_read_as_too_high(tmp_path):
    source = _classifier(tmp_path / "sgd.keras", compile_args=SGD)
    edit = lambda c: c["optimizer"]["config"].__setitem__("learning_rate", -0.5)  # noqa: E731
    model = _edit_compile(source, tmp_path / "neg.keras", edit)
    data = _ids(tmp_path / "d.npz")
    out = tmp_path / "o.keras"
    for args in (["fit", str(model)], ["fix", str(model), "--output", str(out)]):
        line = _refused(_run(*args, "--data", str(data), "--steps", "3"),
                        "learning_rate=-0.5", "climbs the loss")  # fmt: skip
        assert "too high" not in line
    assert not out.exists()


def test_a_model_with_nothing_to_train_is_said_so_not_still_falling(tmp_path):
    keras.utils.set_random_seed(0)
    x = keras.Input((6,), name="x")
    h = layers.Dense(8, activation="relu", name="dense", trainable=False)(x)
    head = layers.Dense(1, activation="softmax", name="head", trainable=False)(h)
    model = keras.Model(x, head)  # a softmax over one unit: a repair, but nothing trains
    model.compile(optimizer="adam", loss="binary_crossentropy")
    path = tmp_path / "frozen.keras"
    model.save(path)
    rng = np.random.default_rng(0)
    features = rng.normal(size=(256, 6)).astype("float32")
    data = tmp_path / "d.npz"
    np.savez(data, x=features, y=(features[:, 0] > 0).astype("float32")[:, None])
    report = fix_model(path, data, FixOptions(output=str(tmp_path / "o.keras"), steps=20))
    (repair,) = report.repairs
    assert repair.verdict == "not verified"
    assert "no trainable weights" in repair.why and "--steps" not in repair.why, repair.why
    assert report.original is not None and "no trainable weights" in str(report.original.error)
