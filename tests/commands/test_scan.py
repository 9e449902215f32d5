"""`scan`: every layer's gradient in one pass equals the seeds' recipe for that layer."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from helpers import (
    CUSTOM_LAYERS,
    keras,
    load_sample,
    manual_gradient,
    normal,
    projection_r,
    sample,
    tf,
)

from layergrad.cli.app import main
from layergrad.commands.api import scan_model

RTOL, ATOL = 1e-5, 1e-6


def rows_by_layer(report):
    return {r.layer: r for r in report.rows}


def projections(*shapes, seed=0):
    """The documented default target's R, one per output in order (see conftest)."""
    return [projection_r(seed, k, shape) for k, shape in enumerate(shapes)]


def test_sequential_rows_match_manual_tapes(write_input):
    x = normal(8, 5)
    m = load_sample("seed.keras")
    dense, dense_1, dense_2 = (m.get_layer(n) for n in ("dense", "dense_1", "dense_2"))
    report = scan_model(sample("seed.keras"), input_file=write_input(x), target="dense_2")
    assert [r.layer for r in report.rows] == ["input", "dense", "dense_1", "dense_2"]
    rows = rows_by_layer(report)
    expected = manual_gradient(dense, lambda h: dense_2(dense_1(h)), x)
    assert rows["dense"].gradient.l2 == pytest.approx(float(np.linalg.norm(expected)), rel=RTOL)
    expected = manual_gradient(lambda t: t, lambda t: dense_2(dense_1(dense(t))), x)
    assert rows["input"].gradient.mean_abs == pytest.approx(
        float(np.abs(expected).mean()), rel=RTOL
    )
    assert rows["dense_2"].gradient.l2 == pytest.approx(np.sqrt(8))  # d sum(y) / d y = ones


def test_default_target_projects_the_output(write_input):
    x = normal(8, 5)
    m = load_sample("seed.keras")
    dense, dense_1, dense_2 = (m.get_layer(n) for n in ("dense", "dense_1", "dense_2"))
    rows = rows_by_layer(scan_model(sample("seed.keras"), input_file=write_input(x), seed=3))
    (r,) = projections((8, 1), seed=3)
    expected = manual_gradient(dense, lambda h: dense_2(dense_1(h)) * r, x)
    assert rows["dense"].gradient.l2 == pytest.approx(float(np.linalg.norm(expected)), rel=RTOL)
    assert rows["dense_2"].gradient.l2 == pytest.approx(float(np.linalg.norm(r)), rel=RTOL)


def test_default_target_projects_every_output(write_input):
    # residual has two outputs, head(add(stem, block(stem))) and side(stem); both count.
    x = normal(8, 8)
    m = load_sample("residual.keras")
    stem, block, head, side = (m.get_layer(n) for n in ("stem", "block", "head", "side"))
    rows = rows_by_layer(scan_model(sample("residual.keras"), input_file=write_input(x)))
    outputs = [t._keras_history.operation.name for t in m.outputs]
    shapes = {"head": (8, head.units), "side": (8, side.units)}
    r = dict(zip(outputs, projections(*(shapes[o] for o in outputs)), strict=True))

    def both(h):
        return tf.reduce_sum(head(h + block(h)) * r["head"]) + tf.reduce_sum(side(h) * r["side"])

    expected = manual_gradient(stem, both, x)
    assert rows["stem"].gradient.l2 == pytest.approx(float(np.linalg.norm(expected)), rel=RTOL)


def test_to_limits_rows_to_layers_it_depends_on(write_input):
    report = scan_model(
        sample("residual.keras"), target="head", input_file=write_input(normal(8, 8))
    )
    assert [r.layer for r in report.rows] == ["x", "stem", "block", "add", "head"]
    assert report.target == "head"


def test_nested_and_shared_calls_each_get_a_row():
    assert [r.layer for r in scan_model(sample("nested.keras")).rows] == [
        "x", "encoder/dense", "encoder/dense_1", "head",
    ]  # fmt: skip
    shared = rows_by_layer(scan_model(sample("shared.keras")))
    assert {"shared", "shared@1"} <= set(shared)


def test_to_a_nested_model_differentiates_its_output(write_input):
    # a nested model is a call of the model too: --to takes it, as inspect does
    x = normal(8, 6)
    m = load_sample("nested.keras")
    encoder = m.get_layer("encoder")
    report = scan_model(sample("nested.keras"), input_file=write_input(x), target="encoder")
    rows = rows_by_layer(report)
    assert [r.layer for r in report.rows] == ["x", "encoder/dense", "encoder/dense_1", "encoder"]
    expected = manual_gradient(lambda t: t, encoder, x)
    assert rows["x"].gradient.l2 == pytest.approx(float(np.linalg.norm(expected)), rel=RTOL)


def test_an_operation_at_the_models_output_that_stops_the_gradient_is_named(tmp_path):
    # the model's output is keras.ops.round(head): no layer feeds an output that has a
    # gradient, yet every layer feeds the output; the round is why (not "feeds no output")
    x = keras.Input((4,), name="x")
    head = keras.layers.Dense(3, name="head")(keras.layers.Dense(6, name="dense")(x))
    model = keras.Model(x, keras.ops.round(head))
    model.save(tmp_path / "rounded.keras")
    batch = normal(8, 4)
    with tf.GradientTape() as tape:
        inputs = tf.constant(batch)
        tape.watch(inputs)
        out = model(inputs)
    assert tape.gradient(tf.reduce_sum(out), inputs) is None
    np.save(tmp_path / "x.npy", batch)
    report = scan_model(tmp_path / "rounded.keras", input_file=tmp_path / "x.npy")
    assert [r.status for r in report.rows] == ["none"] * 3
    for row in report.rows:
        top = row.causes[0]
        assert (top.code, top.op) == ("non_differentiable_op", "Round")
        assert "the model's output is the functional operation 'round" in top.message


def test_integer_inputs_are_not_differentiable_not_failures():
    rows = rows_by_layer(scan_model(sample("embedding.keras")))
    assert rows["ids"].status == "integer" and rows["ids"].flags == ()
    assert all(r.status == "ok" for name, r in rows.items() if name != "ids")


def test_blocked_layers_carry_the_cause():
    rows = rows_by_layer(scan_model(sample("cause_round.keras"), imports=[CUSTOM_LAYERS]))
    assert rows["dense"].status == "none" and "blocked" in rows["dense"].flags
    assert (rows["dense"].causes[0].code, rows["dense"].causes[0].layer) == (
        "non_differentiable_op",
        "round",
    )
    assert rows["round"].status == "ok" and rows["round"].flags == ()


def test_layers_glob_filters_rows():
    report = scan_model(sample("seed.keras"), layers=["dense_*"])
    assert [r.layer for r in report.rows] == ["dense_1", "dense_2"]


def test_cli_table_json_markdown_and_fail_on():
    runner = CliRunner()
    table = runner.invoke(main, ["scan", sample("seed.keras")], catch_exceptions=False)
    assert table.exit_code == 0 and "log10 mean |g|" in table.output and "dense_1" in table.output
    doc = json.loads(runner.invoke(main, ["scan", sample("seed.keras"), "--json"]).output)
    assert doc["schema"] == "layergrad.scan/1" and doc["target"] is None
    assert [r["layer"] for r in doc["layers"]] == ["input", "dense", "dense_1", "dense_2"]
    assert set(doc["layers"][0]) == {
        "layer",
        "class",
        "shape",
        "dtype",
        "status",
        "gradient",
        "flags",
        "causes",
    }
    md = runner.invoke(main, ["scan", sample("seed.keras"), "--format", "markdown"]).output
    assert md.startswith("**layergrad scan**") and "| `dense_1` |" in md
    args = ["scan", sample("cause_stop_gradient.keras"), "--import", CUSTOM_LAYERS]
    assert runner.invoke(main, args).exit_code == 0
    failed = runner.invoke(main, [*args, "--fail-on", "blocked"])
    assert failed.exit_code == 1 and "stop_gradient" in failed.output


@pytest.mark.slow
def test_resnet50_scan_is_healthy_and_matches_a_manual_tape(tmp_path):
    model = keras.applications.ResNet50(
        weights=None, input_shape=(64, 64, 3), classes=10, classifier_activation=None
    )
    path = tmp_path / "resnet50.keras"
    model.save(path)
    x = np.random.default_rng(0).standard_normal((2, 64, 64, 3)).astype("float32")
    np.save(tmp_path / "x.npy", x)
    report = scan_model(path, input_file=tmp_path / "x.npy", target="predictions")
    assert len(report.rows) == len(model.layers)  # every layer, inputs included
    assert all(r.status == "ok" for r in report.rows)
    assert not any({"blocked", "nonfinite", "exploding"} & set(r.flags) for r in report.rows)
    assert report.notes == ()
    # One row checked against the seed recipe: the last block's output to the classifier.
    reloaded = keras.saving.load_model(path)
    pool, head = reloaded.get_layer("avg_pool"), reloaded.get_layer("predictions")
    features = keras.Model(reloaded.inputs, reloaded.get_layer("conv5_block3_out").output)
    expected = manual_gradient(features, lambda h: head(pool(h)), x)
    row = rows_by_layer(report)["conv5_block3_out"]
    assert row.gradient.l2 == pytest.approx(float(np.linalg.norm(expected)), rel=1e-4)


def test_softmax_output_is_not_degenerate_by_default_and_a_note_when_targeted(tmp_path):
    x = keras.Input((4,), name="x")
    out = keras.layers.Dense(3, activation="softmax", name="probs")(x)
    path = tmp_path / "softmax.keras"
    keras.Model(x, out).save(path)
    report = scan_model(path)
    assert not report.notes and not any(r.flags for r in report.rows)
    assert report.rows[0].gradient.max_abs > 1e-3  # the projection of a softmax varies
    targeted = scan_model(path, target="probs")
    assert targeted.notes and "probs ends in softmax" in targeted.notes[0]
    assert "scan with --to probs:logits (its output before the softmax)" in targeted.notes[0]
    # sum(softmax) is 1 per row, so the true gradient is 0; only rounding noise may remain.
    assert all(r.gradient is None or r.gradient.max_abs < 1e-6 for r in targeted.rows[:-1])


def test_inspect_to_a_softmax_warns_that_its_sum_is_constant(softmax_head):
    from layergrad.commands.api import inspect_model

    (res,) = inspect_model(softmax_head, "h", ["probs"]).results
    (note,) = [w for w in res.warnings if "ends in softmax" in w]
    assert "take --to probs:logits (its output before the softmax), or --measure jacobian" in note
    assert "scan" not in note


def test_untrained_batchnorm_is_recognised(tmp_path):
    from layergrad.commands.untrained_batchnorm import untrained_batchnorm

    x = keras.Input((4,), name="x")
    out = keras.layers.Dense(2, name="head")(keras.layers.BatchNormalization(name="bn")(x))
    model = keras.Model(x, out)
    assert untrained_batchnorm(model) == ["bn"]
    model.compile(loss="mse", optimizer="sgd")
    model.fit(normal(16, 4), normal(16, 2), epochs=1, verbose=0)  # moves the moving statistics
    assert untrained_batchnorm(model) == []


def _identity_chain(path, scales):
    """x (4 features) -> Dense d0 -> d1 -> d2, no bias, kernel `scales[i]` x identity: the
    gradient of sum(d2) at d2's input is scales[2] per element, at d1's input
    scales[1] * scales[2], at x the product of the three (worked out by hand)."""
    x = keras.Input((4,), name="x")
    h = x
    for i, scale in enumerate(scales):
        layer = keras.layers.Dense(4, use_bias=False, name=f"d{i}")
        h = layer(h)
        layer.kernel.assign(np.eye(4, dtype="float32") * scale)
    keras.Model(x, h).save(path)
    return path


def test_a_gradient_that_recovers_upstream_did_not_vanish(tmp_path, write_input):
    x = write_input(normal(8, 4))
    end = float(np.sqrt(32))  # d sum(d2) / d d2 = ones over 8 x 4
    # d2 scales by 1e-4: d0 and d1 get 1e-4 of the end's gradient, 4 decades below it, but x
    # gets all of it back (d0 scales by 1e4): the gradient reaches the input undiminished
    rows = rows_by_layer(
        scan_model(
            _identity_chain(tmp_path / "a.keras", (1e4, 1.0, 1e-4)), input_file=x, target="d2"
        )
    )
    assert rows["d1"].gradient.l2 == pytest.approx(end * 1e-4, rel=1e-5)
    assert rows["x"].gradient.l2 == pytest.approx(end, rel=1e-3)
    assert not any(r.flags for r in rows.values())
    # the same dip with nothing recovering before it vanishes from d1 down to the input
    rows = rows_by_layer(
        scan_model(
            _identity_chain(tmp_path / "b.keras", (1.0, 1.0, 1e-4)), input_file=x, target="d2"
        )
    )
    assert rows["x"].gradient.l2 == pytest.approx(end * 1e-4, rel=1e-5)
    assert {k for k, r in rows.items() if "vanishing" in r.flags} == {"x", "d0", "d1"}


@pytest.mark.slow
def test_a_stock_untrained_resnet50_has_no_vanishing_rows_and_check_agrees(tmp_path):
    # conv5_block3_out gets ~1/3,500 of the output's gradient (the average pool divides it by
    # 49), the input ~1/14: what reaches the last block recovers upstream of it. The scan
    # probes 2 rows, not the default 8 (half the cost): the input's gradient is then ~230
    # times conv5_block3_out's (~250 with 8), and the smallest row's l2 the same 3e-4 of the
    # largest; `check` below probes with its defaults.
    path = tmp_path / "resnet50.keras"
    keras.applications.ResNet50(weights=None).save(path)
    report = scan_model(path, batch_size=2)
    rows = rows_by_layer(report)
    assert rows["conv5_block3_out"].gradient.l2 < report.rows[0].gradient.l2 / 30
    assert not [r.layer for r in report.rows if "vanishing" in r.flags]
    from layergrad.commands.check.check_files import check_file

    assert check_file(str(path)).passed
