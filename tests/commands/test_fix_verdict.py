"""The verdict of one repair, on runs whose numbers are written here by hand."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from layergrad.commands.fix.evidence import judge, reached_outputs
from layergrad.commands.fix.repair import FixOptions, fix_model
from layergrad.core.fix_results import OutputLoss, Run, Verdict


def test_a_cross_entropy_below_zero_is_no_loss_to_beat():
    # binary cross-entropy on targets 0-4 runs below 0 (-y log p grows without bound): the
    # copy (a regression with MSE) is judged against its own trivial loss, 0.2 < 0.9 x 1.0
    original = Run("binary_crossentropy", (0.1, -0.4), trivial=0.69, final=-0.4)
    repaired = Run("mean_squared_error", (1.0, 0.2), trivial=1.0, final=0.2)
    assert judge("target_mismatch", original, repaired) == (Verdict.VERIFIED, "")
    stays = Run("mean_squared_error", (1.0, 0.95), trivial=1.0, final=0.95)
    verdict, why = judge("target_mismatch", original, stays)
    assert verdict == Verdict.NOT_VERIFIED and "below 0" in why


def test_a_loss_negative_by_design_is_still_compared():
    # cosine similarity runs from -1 to 1: -0.2 is not clearly below -0.3
    original = Run("cosine_similarity", (0.0, -0.3), final=-0.3)
    repaired = Run("cosine_similarity", (0.0, -0.2), final=-0.2)
    verdict, why = judge("exploding", original, repaired)
    assert verdict == Verdict.NOT_VERIFIED and "not clearly below" in why


def _curve(start: float, end: float, steps: int = 100) -> tuple[float, ...]:
    """A loss falling linearly from `start` to `end` (worked out by hand, not by the code)."""
    return tuple(start + (end - start) * i / (steps - 1) for i in range(steps))


def test_a_copy_still_falling_says_more_steps_may_show_it():
    # unscaled inputs: the copy starts at 20x the trivial loss 0.5 and is still falling at a
    # rate of 0.5 every 10 steps when it stops at 0.6 (1.2 x trivial): not verified, and the
    # reason is the run's length, not a copy that stays at the trivial loss
    original = Run("-", error="labels do not fit the loss")
    falling = _curve(10.0, 0.6)
    final = sum(falling[-10:]) / 10
    repaired = Run("binary_crossentropy", falling, trivial=0.5, final=final)
    verdict, why = judge("target_mismatch", original, repaired)
    assert verdict == Verdict.NOT_VERIFIED
    assert "still falling" in why and "--steps" in why and "stays" not in why
    flat = (10.0, *([0.52] * 99))  # came down at once, then flat at 1.04 x trivial
    verdict, why = judge("target_mismatch", original, Run("binary_crossentropy", flat, 0.5, 0.52))
    assert verdict == Verdict.NOT_VERIFIED and "stays at the trivial loss" in why
    assert "still falling" not in why


def test_compared_runs_say_when_the_copy_was_still_falling():
    original = Run("mse", _curve(2.0, 1.0), trivial=None, final=1.0)
    repaired = Run("mse", _curve(2.0, 0.95), trivial=None, final=0.95)  # -0.05 per 10 steps
    verdict, why = judge("linear_stack", original, repaired)
    assert verdict == Verdict.NOT_VERIFIED and "not clearly below" in why
    assert "still falling" in why
    plateau = Run("mse", (2.0, *([0.95] * 99)), trivial=None, final=0.95)
    verdict, why = judge("linear_stack", original, plateau)
    assert verdict == Verdict.NOT_VERIFIED and "still falling" not in why


@pytest.mark.slow
def test_a_nested_model_on_unscaled_inputs_is_verified_at_the_default_steps(tmp_path):
    # class ids under categorical cross-entropy (target_mismatch) on a model that nests a
    # Sequential encoder, fed 0-100 features: the copy starts far above its trivial loss and
    # comes down to it in the first ~100 steps. Short runs say they were still falling; the
    # default run learns the labels (a linear rule of the inputs, drawn here)
    import keras

    keras.utils.set_random_seed(0)
    encoder = keras.Sequential(
        [keras.Input((8,)), keras.layers.Dense(16, activation="relu", name="h1"),
         keras.layers.Dense(16, activation="relu", name="h2")], name="encoder",
    )  # fmt: skip
    inputs = keras.Input((8,), name="features")
    logits = keras.layers.Dense(4, name="head")(encoder(inputs))
    model = keras.Model(inputs, keras.layers.Softmax(name="head_act")(logits))
    model.compile(optimizer="adam", loss=keras.losses.CategoricalCrossentropy())
    path = tmp_path / "nested.keras"
    model.save(path)
    rng = np.random.default_rng(1)
    x = rng.uniform(0, 100, (256, 8)).astype("float32")
    y = np.argmax((x - 50) @ rng.normal(size=(8, 4)), axis=1).astype("int64")
    data = tmp_path / "ids.npz"
    np.savez(data, features=x, y=y)
    short = fix_model(path, data, FixOptions(output=str(tmp_path / "a.keras"), steps=40))
    (repair,) = short.repairs
    assert repair.finding == "target_mismatch"
    losses = repair.repaired.losses
    assert sum(losses[-4:]) < 0.97 * sum(losses[-8:-4])  # by hand: still falling at step 40
    assert repair.verdict == "not verified" and "still falling" in repair.why
    full = fix_model(path, data, FixOptions(output=str(tmp_path / "b.keras")))
    (repair,) = full.repairs
    assert repair.verdict == "verified", repair.why


def test_an_original_loss_without_a_trivial_loss_judges_the_copy_by_its_own():
    # categorical cross-entropy on one sigmoid unit: -y log p falls to 0 as p -> 1 for every
    # sample, so the original's 0.05 says nothing and has no trivial loss (log 1 = 0); the
    # copy with binary cross-entropy ends at 0.3 / 0.69 = 0.43 of its own: verified
    original = Run("categorical_crossentropy", (0.4, 0.05), trivial=None, final=0.05)
    repaired = Run("binary_crossentropy", (0.69, 0.3), trivial=0.69, final=0.3)
    assert judge("loss_mismatch", original, repaired) == (Verdict.VERIFIED, "")
    stays = Run("binary_crossentropy", (0.69, 0.68), trivial=0.69, final=0.68)
    verdict, why = judge("loss_mismatch", original, stays)
    assert verdict == Verdict.NOT_VERIFIED and "0.986 of the trivial loss" in why
    # two losses without a trivial loss (regressions) still cannot be compared
    verdict, why = judge(
        "loss_mismatch", Run("mse", (2.0, 1.0), final=1.0), Run("mae", (2.0, 0.1), final=0.1)
    )
    assert verdict == Verdict.NOT_VERIFIED and "losses differ" in why


def _two_outputs(head: float, value: float, total: float) -> Run:
    """A run of a model with a classification output `head` (trivial loss 1.1) and a
    regression output `value` (trivial loss 2e4, its targets' variance); the numbers are
    written by hand."""
    return Run(
        "head: sparse_categorical_crossentropy, value: mse",
        (total,),
        final=total,
        outputs=(
            OutputLoss("head", "sparse_categorical_crossentropy", head, 1.1),
            OutputLoss("value", "mse", value, 2.0e4),
        ),
    )


def test_several_outputs_are_judged_each_by_its_own_loss():
    # the total loss is the regression's: 1.05e4 + 0.4 is not clearly below 1.04e4 + 1.1,
    # though the classification head fell from its trivial loss (1.1) to 0.4 / 1.1 = 0.36
    original = _two_outputs(head=1.1, value=1.04e4, total=1.04e4 + 1.1)
    repaired = _two_outputs(head=0.4, value=1.05e4, total=1.05e4 + 0.4)
    assert judge("loss_mismatch", original, repaired) == (Verdict.VERIFIED, "")
    assert judge("loss_mismatch", original, repaired, reached=("head",)) == (Verdict.VERIFIED, "")
    # a repair that reaches the value output alone is judged there: 0.525 vs 0.52, not below
    verdict, why = judge("loss_mismatch", original, repaired, reached=("value",))
    assert verdict == Verdict.NOT_VERIFIED and why.startswith("output value:")
    # a gain on one output bought by a clearly worse other one is no repair
    worse = _two_outputs(head=0.4, value=1.5e4, total=1.5e4 + 0.4)
    verdict, why = judge("loss_mismatch", original, worse)
    assert verdict == Verdict.NOT_VERIFIED and "output value" in why and "clearly higher" in why


def test_the_outputs_a_repair_reaches_follow_the_graph(tmp_path):
    import json
    import zipfile

    import keras

    from layergrad.model.graph import ModelGraph

    x = keras.Input((4,), name="x")
    trunk = keras.layers.Dense(3, name="trunk")(x)
    side = keras.layers.Dense(3, name="side")(x)
    head = keras.layers.Dense(2, name="head")(trunk)
    value = keras.layers.Dense(1, name="value")(keras.layers.Concatenate(name="cat")([trunk, side]))
    model = keras.Model(x, {"head": head, "value": value})
    model.save(tmp_path / "two.keras")  # the graph as the file has it
    with zipfile.ZipFile(tmp_path / "two.keras") as archive:
        graph = ModelGraph.from_config(json.loads(archive.read("config.json")))
    run = _two_outputs(1.0, 1.0, 2.0)
    assert reached_outputs(graph, "head", run) == ("head",)
    assert reached_outputs(graph, "side", run) == ("value",)
    assert reached_outputs(graph, "trunk", run) == ("head", "value")
    assert reached_outputs(graph, None, run) is None


def test_each_outputs_served_loss_and_trivial_loss_match_numpy():
    # two outputs of set weights; their losses and trivial losses worked out in numpy
    import keras
    import tensorflow as tf

    from layergrad.commands.fix.evidence import _served_losses
    from layergrad.engine.compiled_loss import label_request
    from layergrad.model.loss_forms import find_loss

    x_in = keras.Input((3,), name="x")
    head = keras.layers.Dense(2, activation="softmax", name="head")(x_in)
    value = keras.layers.Dense(1, name="value")(x_in)
    model = keras.Model(x_in, {"head": head, "value": value})
    rng = np.random.default_rng(3)
    w_head, w_value = rng.normal(size=(3, 2)), rng.normal(size=(3, 1))
    model.get_layer("head").set_weights([w_head, np.zeros(2)])
    model.get_layer("value").set_weights([w_value, np.zeros(1)])
    loss = {"head": "sparse_categorical_crossentropy", "value": "mse"}
    model.compile(optimizer="sgd", loss=loss)
    x = rng.normal(size=(64, 3)).astype("float32")
    ids = rng.integers(0, 2, 64)
    targets = rng.normal(5.0, 3.0, (64, 1)).astype("float32")
    dataset = tf.data.Dataset.from_tensor_slices((x, {"head": ids, "value": targets})).batch(16)
    request = label_request(model, find_loss({"loss": loss}, None))
    predicted = [(bx, by, model(bx, training=False), None) for bx, by in dataset]
    (total, outputs), _ = _served_losses(model, predicted, request)
    logits = x @ w_head
    p = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    ce = -np.log(p[np.arange(64), ids]).reshape(4, 16).mean(1).mean()
    mse = ((x @ w_value - targets) ** 2).reshape(4, 16).mean(1).mean()
    by_name = {o.name: o for o in outputs}
    assert by_name["head"].final == pytest.approx(ce, rel=1e-4)
    assert by_name["value"].final == pytest.approx(mse, rel=1e-4)
    assert total == pytest.approx(ce + mse, rel=1e-4)
    freq = np.bincount(ids, minlength=2) / 64
    assert by_name["head"].trivial == pytest.approx(-(freq * np.log(freq)).sum(), rel=1e-3)
    assert by_name["value"].trivial == pytest.approx(targets.var(), rel=1e-3)


def test_a_copy_is_judged_by_its_loss_on_the_originals_predictions_where_it_can_be():
    # the original trained with squared error on one-hot rows; the copy with categorical
    # cross-entropy. Each against its own trivial loss they do not compare (0.17 against
    # 0.31); the original's predictions scored by the copy's loss (its baseline) do
    original = Run("mean_squared_error", (0.1, 0.03), trivial=0.16, final=0.03)
    better = Run("categorical_crossentropy", (1.6, 0.5), trivial=1.6, final=0.5, baseline=0.8)
    assert judge("loss_mismatch", original, better) == (Verdict.VERIFIED, "")
    level = replace(better, baseline=0.52)  # 0.5 > 0.9 x 0.52
    verdict, why = judge("loss_mismatch", original, level)
    assert verdict == Verdict.NOT_VERIFIED
    assert "0.5 (0.312 of the trivial loss, 1.6), the original's predictions at 0.52 (0.325)" in why
    assert "scored by the same loss" in why
    # a loss below 0 by design (cosine similarity): clearly below is 10% of its size lower
    cosine = Run("cosine_similarity", (0.0, -0.5), final=-0.5, baseline=-0.4)
    assert judge("exploding", Run("cosine_similarity", (0.0,), final=-0.4), cosine)[0] == (
        Verdict.VERIFIED
    )
    # several outputs: each output's own baseline; a reached output clearly worse than the
    # original's predictions on it is no repair
    two = _two_outputs(head=1.1, value=1.04e4, total=1.04e4 + 1.1)
    outputs = (
        OutputLoss("head", "sparse_categorical_crossentropy", 0.4, 1.1, baseline=1.0),
        OutputLoss("value", "mse", 1.3e4, 2.0e4, baseline=1.0e4),
    )
    copy = Run("-", (1.0,), final=1.3e4, outputs=outputs)
    verdict, why = judge("loss_mismatch", two, copy)
    assert verdict == Verdict.NOT_VERIFIED and "output value's loss ends at 1.3 times" in why
    assert judge("loss_mismatch", two, copy, reached=("head",)) == (Verdict.VERIFIED, "")


def test_the_originals_predictions_are_scored_by_the_copys_loss_or_not_at_all():
    # the copy's loss (binary cross-entropy) on the original's predictions, worked out in
    # numpy; an original whose outputs have another shape gets no baseline
    import keras
    import tensorflow as tf

    from layergrad.commands.fix.evidence import _served_losses
    from layergrad.engine.compiled_loss import label_request
    from layergrad.model.loss_forms import find_loss

    def dense(units: int, seed: int) -> keras.Model:
        x_in = keras.Input((3,), name="x")
        model = keras.Model(x_in, keras.layers.Dense(units, activation="sigmoid")(x_in))
        weights = np.random.default_rng(seed).normal(size=(3, units))
        model.layers[-1].set_weights([weights, np.zeros(units)])
        return model

    copy, original, wider = dense(1, 1), dense(1, 2), dense(2, 3)
    copy.compile(optimizer="sgd", loss="binary_crossentropy")
    rng = np.random.default_rng(4)
    x = rng.normal(size=(32, 3)).astype("float32")
    y = rng.integers(0, 2, (32, 1)).astype("float32")
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(16)
    request = label_request(copy, find_loss({"loss": "binary_crossentropy"}, None))
    p = 1 / (1 + np.exp(-(x @ original.layers[-1].get_weights()[0])))
    bce = -(y * np.log(p) + (1 - y) * np.log(1 - p)).reshape(2, 16).mean(1).mean()

    def predicted(rival: keras.Model) -> list:  # as `fit_steps` predicts the held batches
        return [(bx, by, copy(bx, training=False), rival(bx, training=False)) for bx, by in dataset]

    _, (theirs, _) = _served_losses(copy, predicted(original), request, rival=True)
    assert theirs == pytest.approx(bce, rel=1e-4)
    assert _served_losses(copy, predicted(wider), request, rival=True)[1] == (None, ())


def test_a_copy_that_learned_no_more_than_the_prior_is_not_verified():
    # the original's broken head scores 3.0 by the copy's loss; the copy ends at 0.95 of its
    # trivial loss: below the original, but no evidence that it trains
    original = Run("binary_crossentropy", (2.0,), trivial=0.69, final=2.0)
    copy = Run("binary_crossentropy", (0.7, 0.66), trivial=0.69, final=0.6555, baseline=3.0)
    verdict, why = judge("loss_mismatch", original, copy)
    assert verdict == Verdict.NOT_VERIFIED and "0.95 of the trivial loss" in why
    assert "no more than the labels' prior" in why
    learned = replace(copy, final=0.5)  # 0.72 of the trivial loss, 1/6 of the original's
    assert judge("loss_mismatch", original, learned) == (Verdict.VERIFIED, "")
