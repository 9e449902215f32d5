"""`fix` calls a copy verified only when it trains: real models of each class, small data.

A ReLU head under categorical cross-entropy with class-id labels gets both repairs (the
sparse loss and a softmax) and its copy learns in plain Keras; a file whose repair is not
verified gets no copy; a double softmax's headline and verdict quote the same numbers.
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import replace

import numpy as np
import pytest
from click.testing import CliRunner

from layergrad import cli
from layergrad.commands.fix.evidence import judge
from layergrad.commands.fix.repair import FixOptions, fix_model
from layergrad.core.fix_results import Run, Verdict
from layergrad.render.fix import table


def _blocks(tmp_path, classes: int = 10, n: int = 400) -> tuple[str, np.ndarray, np.ndarray]:
    """8x8 images whose class id is where a bright 2x2 block sits (a conv reads it at once)."""
    rng = np.random.default_rng(0)
    y = rng.integers(0, classes, n)
    x = rng.normal(0, 0.2, (n, 8, 8, 1)).astype("float32")
    for i, c in enumerate(y):
        r, k = divmod(int(c), 4)
        x[i, 2 * r : 2 * r + 2, 2 * k : 2 * k + 2, 0] += 2.0
    path = tmp_path / "ids.npz"
    np.savez(path, x=x, y=y)
    return str(path), x, y


def _relu_head_cnn(tmp_path) -> str:
    import keras

    keras.utils.set_random_seed(0)
    inputs = keras.Input((8, 8, 1), name="image")
    h = keras.layers.Conv2D(8, 3, activation="relu", name="conv")(inputs)
    h = keras.layers.Flatten(name="flat")(h)
    model = keras.Model(inputs, keras.layers.Dense(10, activation="relu", name="head")(h))
    model.compile(optimizer="adam", loss="categorical_crossentropy")
    path = tmp_path / "cnn.keras"
    model.save(path)
    return str(path)


@pytest.mark.slow
def test_class_ids_under_a_relu_head_get_the_sparse_loss_and_a_softmax(tmp_path):
    import keras

    data, x, y = _blocks(tmp_path)
    out = tmp_path / "o.keras"
    report = fix_model(_relu_head_cnn(tmp_path), data, FixOptions(output=str(out), steps=150))
    assert {"loss_mismatch", "target_mismatch"} <= set(report.before)
    (repair,) = report.repairs  # one repair of the head: the labels' and the head rules'
    assert repair.code == (
        'Dense(10, activation="relu") -> Dense(10, activation="softmax") at "head"',
        'loss="categorical_crossentropy" -> loss="sparse_categorical_crossentropy"',
    )
    # the head's own repair is not dropped silently: a note says which repair stands for it
    assert any(n.startswith("loss_mismatch at head") and "stands for it" in n for n in report.notes)
    # every failing finding is cleared by the copy, or said to remain
    said = {u.code for u in report.unrepaired} | {r.finding for r in report.repairs}
    assert all(f not in report.after or f in said for f in report.failing)
    assert repair.verdict == Verdict.VERIFIED, repair.why
    run = repair.repaired
    assert run is not None and run.accuracy is not None and run.prior_accuracy is not None
    assert run.accuracy > run.prior_accuracy + 0.05
    # the written copy trains in plain Keras on the same data, well above chance (0.1)
    copy = keras.saving.load_model(out)
    assert copy.get_layer("head").get_config()["activation"] == "softmax"
    keras.utils.set_random_seed(1)
    copy.compile(optimizer="adam", loss=copy.loss, metrics=["accuracy"])
    history = copy.fit(x[:320], y[:320], epochs=8, batch_size=32, verbose=0)
    assert history.history["loss"][-1] < 0.5 * np.log(10)
    _, accuracy = copy.evaluate(x[320:], y[320:], verbose=0)
    prior = np.bincount(y[320:]).max() / 80
    assert accuracy > prior + 0.3


def test_a_classifier_at_chance_is_not_verified_by_a_loss_a_little_below_trivial():
    # the run: 2.04 against a trivial 2.29 (0.89 of it) while the copy answers 11%
    # right on ten balanced classes: at chance, whatever the original did
    original = Run("categorical_crossentropy", (9.0,), trivial=2.29, final=9.0)
    copy = Run("sparse_categorical_crossentropy", (2.3, 2.04), trivial=2.29, final=2.04,
               accuracy=0.11, prior_accuracy=0.105)  # fmt: skip
    verdict, why = judge("target_mismatch", original, copy)
    assert verdict == Verdict.NOT_VERIFIED
    assert "11.0%" in why and "10.5%" in why and "2.04" in why and "at chance" in why
    # above the prior it learned; a loss well below trivial counts too
    learned = replace(copy, accuracy=0.4)
    assert judge("target_mismatch", original, learned) == (Verdict.VERIFIED, "")
    assert judge("target_mismatch", original, replace(copy, final=1.0))[0] == Verdict.VERIFIED


def _double_softmax(tmp_path) -> tuple[str, str]:
    import keras

    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 6)).astype("float32")
    y = np.argmax(x @ rng.normal(size=(6, 4)), axis=1)
    data = tmp_path / "ids.npz"
    np.savez(data, x=x, y=y)
    inputs = keras.Input((6,), name="x")
    hidden = keras.layers.Dense(16, activation="relu", name="hidden")(inputs)
    model = keras.Model(inputs, keras.layers.Dense(4, activation="softmax", name="head")(hidden))
    model.compile(optimizer="adam",
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))  # fmt: skip
    path = tmp_path / "ds.keras"
    model.save(path)
    return str(path), str(data)


@pytest.mark.slow
def test_no_copy_is_written_without_a_verified_repair_and_fixs_own_copy_is_replaced(tmp_path):
    # Keras trains a softmax head through its logits whatever from_logits says: the repaired
    # loss trains exactly as the original did, so the repair is not verified and no copy is
    model, data = _double_softmax(tmp_path)
    out = tmp_path / "o.keras"
    args = ["fix", model, "--data", data, "--steps", "100", "--output", str(out), "--json"]
    result = CliRunner().invoke(cli.main, args)
    assert result.exit_code == 1, result.output
    doc = json.loads(result.stdout)
    assert [r["verdict"] for r in doc["repairs"]] == ["not verified"]
    assert doc["output"] is None and not out.exists()
    assert "no copy written: no repair was verified" in result.stderr
    # without data a copy is written; fix replaces its own copy without --force ...
    for again in ("", " (replaced it)"):  # the line says when it replaced its own copy
        result = CliRunner().invoke(cli.main, ["fix", model, "--output", str(out)])
        assert result.exit_code == 1, result.output
        assert f"wrote the repaired copy to {out}{again}\n" in result.stderr
    # ... and still refuses a model file it did not write
    other = tmp_path / "other.keras"
    shutil.copyfile(model, other)
    result = CliRunner().invoke(cli.main, ["fix", model, "--output", str(other)])
    assert result.exit_code == 2 and "--force" in result.stderr


@pytest.mark.slow
def test_a_double_softmax_says_one_set_of_numbers(tmp_path):
    model, data = _double_softmax(tmp_path)
    report = fix_model(model, data, FixOptions(output=str(tmp_path / "o.keras"), steps=100))
    (repair,) = report.repairs
    original, copy = report.original, report.together
    assert original is not None and copy is not None and copy.baseline is not None
    text = table(report, width=400)
    headline = "\n".join(
        line for line in text.splitlines() if line.startswith(("original:", "repaired:"))
    )
    # every loss the verdict quotes is one the headline shows
    quoted = re.findall(r"\d+\.\d+(?= \(| by|,)", repair.why)
    assert quoted, repair.why
    for number in quoted:
        assert number in headline, (number, headline, repair.why)
    # and they are the copy's loss and the original's predictions scored by it
    assert f"{copy.final:.4g}" in quoted and f"{copy.baseline:.4g}" in quoted
    # the training loss fit shows (the mean of the last tenth of the steps) is the headline's
    tail = [v for v in original.losses[-10:] if v is not None]
    assert original.trained_loss == pytest.approx(sum(tail) / len(tail))
    if abs(original.trained_loss - original.final) > 0.1 * original.final:
        assert f"as fit shows it: {original.trained_loss:.4g}" in headline
