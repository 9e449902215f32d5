"""`scan --measure jacobian`: every row's per-sample Frobenius norm against element-by-element
tapes."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from helpers import diagonal_blocks, keras, load_sample, normal, per_sample_jacobians, sample, tf

from layergrad.cli.app import main
from layergrad.commands.api import scan_model


def norms(jacobians):
    return [np.linalg.norm(J) for J in jacobians]


def rows_by_layer(report):
    return {r.layer: r for r in report.rows}


def test_default_target_is_every_output_exactly(write_input):
    # residual: outputs head(add(stem, block(stem))) (2) and side(stem) (4): 6 entries per sample
    x = normal(8, 8)
    m = load_sample("residual.keras")
    stem, block, head, side = (m.get_layer(n) for n in ("stem", "block", "head", "side"))
    outputs = lambda h: tf.concat([head(h + block(h)), side(h)], axis=1)  # noqa: E731
    report = scan_model(sample("residual.keras"), input_file=write_input(x), measure="jacobian")
    rows = rows_by_layer(report)
    np.testing.assert_allclose(
        rows["stem"].jacobian.frobenius.per_sample,
        norms(per_sample_jacobians(stem, outputs, x)),
        rtol=1e-5,
    )
    np.testing.assert_allclose(
        rows["x"].jacobian.frobenius.per_sample,
        norms(per_sample_jacobians(lambda t: t, lambda t: outputs(stem(t)), x)),
        rtol=1e-5,
    )
    assert rows["head"].jacobian.frobenius.per_sample == pytest.approx(
        [np.sqrt(2)] * 8
    )  # d head / d head
    assert all(r.jacobian.frobenius.rel_stderr is None for r in report.rows)
    assert any("exact" in n for n in report.notes)


def test_estimate_with_probes_is_within_its_standard_errors(write_input):
    x = normal(8, 8)
    m = load_sample("residual.keras")
    stem, block = m.get_layer("stem"), m.get_layer("block")
    report = scan_model(
        sample("residual.keras"),
        target="block",
        input_file=write_input(x),
        measure="jacobian",
        probes=64,
    )
    f = rows_by_layer(report)["stem"].jacobian.frobenius
    assert 0 < f.rel_stderr < 0.2
    for est, rel, truth in zip(
        f.per_sample, f.sample_rel_stderr, norms(per_sample_jacobians(stem, block, x)), strict=True
    ):
        assert abs(est - truth) <= 4 * rel * est


def test_softmax_output_is_not_degenerate(tmp_path, write_input):
    keras.utils.set_random_seed(0)
    inp = keras.Input((4,), name="x")
    logits = keras.layers.Dense(5, name="logits")(inp)
    probs = keras.layers.Softmax(name="probs")(logits)
    keras.Model(inp, probs).save(tmp_path / "softmax.keras")
    x = normal(6, 4)
    report = scan_model(
        str(tmp_path / "softmax.keras"),
        target="probs",
        input_file=write_input(x),
        measure="jacobian",
    )
    row = rows_by_layer(report)["logits"]
    # the gradient of sum(softmax) is zero up to rounding; the Jacobian diag(p) - p p^T is not
    assert row.gradient.mean_abs < 1e-6
    p = tf.nn.softmax(
        keras.saving.load_model(tmp_path / "softmax.keras").get_layer("logits")(x)
    ).numpy()
    expected = [np.linalg.norm(np.diag(q) - np.outer(q, q)) for q in p]
    np.testing.assert_allclose(row.jacobian.frobenius.per_sample, expected, rtol=1e-4)


def test_batch_mixing_rows_are_diagonal_blocks(write_input):
    x = normal(8, 6)
    m = load_sample("cause_training.keras")
    dense, bn = m.get_layer("dense"), m.get_layer("bn")
    blocks = diagonal_blocks(lambda h: bn(h, training=True), dense(tf.constant(x)))
    report = scan_model(
        sample("cause_training.keras"), input_file=write_input(x), training=True, measure="jacobian"
    )
    np.testing.assert_allclose(
        rows_by_layer(report)["dense"].jacobian.frobenius.per_sample, norms(blocks), rtol=1e-4
    )
    assert any("mixes samples" in n and "dense" in n for n in report.notes)


def test_exact_scan_has_a_budget(tmp_path):
    inp = keras.Input((2,), name="x")
    keras.Model(inp, keras.layers.Dense(5000, name="wide")(inp)).save(tmp_path / "wide.keras")
    result = CliRunner().invoke(
        main, ["scan", str(tmp_path / "wide.keras"), "--measure", "jacobian", "--exact"]
    )
    assert result.exit_code == 2 and "--exact" in result.output and "5000" in result.output
    report = scan_model(str(tmp_path / "wide.keras"), batch_size=2, measure="jacobian")
    assert all(r.jacobian.frobenius.rel_stderr is not None for r in report.rows)  # estimated


def test_scan_json_rows_gain_frobenius_only():
    result = CliRunner().invoke(
        main, ["scan", sample("seed.keras"), "--measure", "jacobian", "--json"]
    )
    assert result.exit_code == 0, result.output
    layers = json.loads(result.output)["layers"]
    assert all(set(row["jacobian"]) == {"frobenius"} for row in layers)
    assert set(layers[1]["jacobian"]["frobenius"]) == {"per_sample", "mean", "max", "rel_stderr"}
    plain = CliRunner().invoke(main, ["scan", sample("seed.keras"), "--json"])
    assert all("jacobian" not in row for row in json.loads(plain.output)["layers"])
