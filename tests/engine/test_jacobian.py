"""`inspect --measure jacobian`: per-sample Jacobian norms against independent references.

References never use layergrad: each sample's Jacobian is built row by row, one tape gradient
per output element, through the layers called by hand on that sample alone (or, where the
batch is mixed, on the whole batch); central finite differences check one case; the spectral
norm comes from `numpy.linalg.norm(J, 2)`; a Dense layer with a kernel of chosen singular
values gives norms known in advance.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from helpers import (
    diagonal_blocks,
    keras,
    load_sample,
    nested_layers,
    normal,
    per_sample_jacobians,
    sample,
    seed_inspect,
    tf,
)

from layergrad.cli.app import main
from layergrad.commands.api import inspect_model
from layergrad.core.errors import InputError
from layergrad.engine import jacobian, linear_map
from layergrad.engine.jacobian import EXACT_BUDGET, JacobianOptions, choose_method

RTOL = 1e-5


def unit_norms(jacobians, units):
    """Per unit of the source's last axis: column norm, root-mean-square over samples."""
    squared = [(J.reshape(J.shape[0], -1, units) ** 2).sum(axis=(0, 1)) for J in jacobians]
    return np.sqrt(np.mean(squared, axis=0))


def only(report):
    (result,) = report.results
    return result


def measured(path, source, target, **options):
    """The one result of `inspect --measure jacobian` from `source` to `target`."""
    return only(inspect_model(path, source, [target], measure="jacobian", **options))


def assert_exact(res, jacobians, units):
    j = res.jacobian
    assert j.method == "exact" and j.probes is None and j.batch_independent
    assert j.frobenius.rel_stderr is None and j.spectral.iterations is None
    np.testing.assert_allclose(
        j.frobenius.per_sample, [np.linalg.norm(J) for J in jacobians], rtol=RTOL
    )
    np.testing.assert_allclose(
        j.spectral.per_sample, [np.linalg.norm(J, 2) for J in jacobians], rtol=RTOL
    )
    np.testing.assert_allclose(j.unit_sensitivity, unit_norms(jacobians, units), rtol=RTOL)
    assert j.frobenius.max == pytest.approx(max(np.linalg.norm(J) for J in jacobians), rel=RTOL)
    assert j.spectral.mean == pytest.approx(
        np.mean([np.linalg.norm(J, 2) for J in jacobians]), rel=RTOL
    )


def test_dense_exact_norms_match_element_by_element_tapes(write_input):
    x = normal(8, 5)
    m = load_sample("seed.keras")
    dense, dense_1 = m.get_layer("dense"), m.get_layer("dense_1")
    res = measured(sample("seed.keras"), "dense", "dense_1", input_file=write_input(x))
    assert_exact(res, per_sample_jacobians(dense, dense_1, x), units=8)


def test_dense_exact_norms_match_finite_differences(write_input):
    x = normal(4, 5)
    m = load_sample("seed.keras")
    dense, dense_1, dense_2 = (m.get_layer(n) for n in ("dense", "dense_1", "dense_2"))
    res = measured(sample("seed.keras"), "dense", "dense_2", input_file=write_input(x))
    rest = lambda h: np.asarray(dense_2(dense_1(tf.constant(h, tf.float32))), np.float64)  # noqa: E731
    h_all, eps = np.asarray(dense(x), np.float64), 1e-2
    for i, reported in enumerate(res.jacobian.frobenius.per_sample):
        cols = []
        for k in range(8):
            step = np.zeros((1, 8))
            step[0, k] = eps
            cols.append(
                (rest(h_all[i : i + 1] + step) - rest(h_all[i : i + 1] - step))[0] / (2 * eps)
            )
        assert reported == pytest.approx(np.linalg.norm(np.stack(cols, axis=1)), rel=1e-3)


def test_residual_exact_norms_count_the_skip_path(write_input):
    x = normal(8, 8)
    m = load_sample("residual.keras")
    stem, block, head = (m.get_layer(n) for n in ("stem", "block", "head"))
    res = measured(sample("residual.keras"), "stem", "head", input_file=write_input(x))
    assert_exact(res, per_sample_jacobians(stem, lambda h: head(h + block(h)), x), units=8)


def test_nested_exact_norms(write_input):
    x = normal(8, 6)
    first, second, head = nested_layers()
    res = measured(sample("nested.keras"), "encoder/dense", "head", input_file=write_input(x))
    assert_exact(res, per_sample_jacobians(first, lambda h: head(second(h)), x), units=8)


@pytest.fixture(scope="module")
def conv_model(tmp_path_factory):
    """Input (6, 6, 2) -> Conv2D(3, tanh) `conv` -> Conv2D(2, relu) `conv_1` -> Flatten -> Dense(3)."""
    keras.utils.set_random_seed(3)
    x = keras.Input((6, 6, 2), name="x")
    h = keras.layers.Conv2D(3, 3, padding="same", activation="tanh", name="conv")(x)
    h = keras.layers.Conv2D(2, 3, activation="relu", name="conv_1")(h)
    out = keras.layers.Dense(3, name="head")(keras.layers.Flatten(name="flat")(h))
    path = tmp_path_factory.mktemp("conv") / "conv.keras"
    keras.Model(x, out, name="conv_net").save(path)
    return str(path)


def test_conv_exact_norms_per_channel(conv_model, write_input):
    x = normal(4, 6, 6, 2)
    m = keras.saving.load_model(conv_model)
    conv, conv_1, flat, head = (m.get_layer(n) for n in ("conv", "conv_1", "flat", "head"))
    res = only(
        inspect_model(conv_model, "conv", ["head"], input_file=write_input(x), measure="jacobian")
    )
    assert_exact(res, per_sample_jacobians(conv, lambda h: head(flat(conv_1(h))), x), units=3)
    # a multi-dimensional target: J_i is (4*4*2) x (6*6*3)
    res = only(
        inspect_model(conv_model, "conv", ["conv_1"], input_file=write_input(x), measure="jacobian")
    )
    assert_exact(res, per_sample_jacobians(conv, conv_1, x), units=3)


def test_estimate_is_within_its_standard_errors(conv_model, write_input):
    x = normal(8, 6, 6, 2)
    m = keras.saving.load_model(conv_model)
    conv, conv_1 = m.get_layer("conv"), m.get_layer("conv_1")
    exact = [np.linalg.norm(J) for J in per_sample_jacobians(conv, conv_1, x)]
    res = only(
        inspect_model(
            conv_model, "conv", ["conv_1"], input_file=write_input(x), measure="jacobian", probes=64
        )
    )
    f = res.jacobian.frobenius
    assert res.jacobian.method == "estimate" and res.jacobian.probes == 64
    assert 0 < f.rel_stderr < 0.2 and f.rel_stderr == max(f.sample_rel_stderr)
    for est, rel, truth in zip(f.per_sample, f.sample_rel_stderr, exact, strict=True):
        assert abs(est - truth) <= 4 * rel * est
    # the error bars shrink as 1/sqrt(K)
    few = only(
        inspect_model(
            conv_model, "conv", ["conv_1"], input_file=write_input(x), measure="jacobian", probes=8
        )
    )
    assert few.jacobian.frobenius.rel_stderr > f.rel_stderr


ROUNDING = 1e-5  # an estimated spectral norm exceeds the true one by at most this (float32)


def assert_lower_bound(estimated, true, within):
    """Every estimate at most the true value (up to float32 rounding), at least (1 - within)
    of it."""
    est, true = np.asarray(estimated, np.float64), np.broadcast_to(true, np.shape(estimated))
    assert np.all(est <= true * (1 + ROUNDING)), np.max(est / true)
    assert np.all(est >= true * (1 - within)), np.min(est / true)


def test_estimated_spectral_norm_matches_numpy(write_input):
    x = normal(8, 8)
    m = load_sample("residual.keras")
    stem, block = m.get_layer("stem"), m.get_layer("block")
    jacobians = per_sample_jacobians(stem, block, x)
    res = measured(sample("residual.keras"), "stem", "block", input_file=write_input(x), probes=16)
    s = res.jacobian.spectral
    # 8 columns: 8 Lanczos steps span the whole space, so the estimate is the norm itself
    assert s.converged and s.iterations == 8 and jacobians[0].shape[1] == 8
    assert_lower_bound(s.per_sample, [np.linalg.norm(J, 2) for J in jacobians], within=1e-4)


def known_spectrum_model(path, singular_values, seed=0):
    """y = x @ W with W = U diag(s) V^T: every J_i is W^T, singular values s."""
    rng = np.random.default_rng(seed)
    n = len(singular_values)
    u, _ = np.linalg.qr(rng.standard_normal((n, n)))
    v, _ = np.linalg.qr(rng.standard_normal((n, n)))
    kernel = (u * np.asarray(singular_values)) @ v.T
    x = keras.Input((n,), name="x")
    y = keras.layers.Dense(n, use_bias=False, name="lin")(x)
    model = keras.Model(x, y, name="known")
    model.get_layer("lin").set_weights([kernel.astype("float32")])
    model.save(path)
    return kernel


@pytest.mark.parametrize(("second", "within"), [(0.5, 1e-5), (0.95, 1e-4), (0.99, 1e-2)])
def test_estimated_spectral_norm_is_a_lower_bound_on_a_known_spectrum(tmp_path, second, within):
    # 64 singular values, more than the Lanczos steps: 4, 4 * second, the rest from 0.9 of that
    values = [4.0, 4.0 * second, *np.linspace(3.6 * second, 0.1, 62)]
    kernel = known_spectrum_model(tmp_path / "known.keras", values)
    for seed in (0, 1):
        report = inspect_model(
            str(tmp_path / "known.keras"), "x", ["lin"], measure="jacobian", probes=4, seed=seed
        )
        j = only(report).jacobian
        assert j.method == "estimate" and j.spectral.iterations == linear_map.STEPS
        assert_lower_bound(j.spectral.per_sample, 4.0, within)
        if second <= 0.95:  # the largest singular value stands apart: settled, no warning
            assert j.spectral.converged and not only(report).warnings
    exact = only(
        inspect_model(str(tmp_path / "known.keras"), "x", ["lin"], measure="jacobian")
    ).jacobian
    np.testing.assert_allclose(exact.spectral.per_sample, 4.0, rtol=1e-5)
    np.testing.assert_allclose(
        exact.frobenius.per_sample, np.sqrt(np.sum(np.square(values))), rtol=1e-5
    )
    # J_i = W^T: the columns for unit u are row u of W
    np.testing.assert_allclose(exact.unit_sensitivity, np.linalg.norm(kernel, axis=1), rtol=1e-5)


def test_an_unsettled_estimate_says_it_is_a_lower_bound(tmp_path):
    # 64 singular values from 4 down to 3.5: the largest is not apart from the next
    known_spectrum_model(tmp_path / "flat.keras", np.linspace(4.0, 3.5, 64))
    res = only(
        inspect_model(str(tmp_path / "flat.keras"), "x", ["lin"], measure="jacobian", probes=4)
    )
    s = res.jacobian.spectral
    assert not s.converged and s.iterations == linear_map.STEPS
    assert any("not settled" in w and "lower bound" in w for w in res.warnings)
    assert_lower_bound(s.per_sample, 4.0, within=1e-2)


def wide_tanh(tmp_path, x):
    """Save x(300) -> Dense(300, tanh) 'wide'; its path and, worked out on paper, each
    sample's Jacobian d tanh(x W + b) / d x."""
    keras.utils.set_random_seed(1)
    inp = keras.Input((300,), name="x")
    path = tmp_path / "w.keras"
    keras.Model(inp, keras.layers.Dense(300, activation="tanh", name="wide")(inp)).save(path)
    kernel, bias = keras.saving.load_model(path).get_layer("wide").get_weights()
    y = np.tanh(x.astype(np.float64) @ kernel + bias)
    return str(path), [(1 - yi**2)[:, None] * kernel.T for yi in y]


def test_estimate_on_a_wide_tanh_layer_is_a_lower_bound_within_two_percent(tmp_path, write_input):
    # 300 x 300 per sample, on paper: close largest singular values
    x = normal(6, 300)
    path, jacobians = wide_tanh(tmp_path, x)
    true = np.array([np.linalg.norm(J, 2) for J in jacobians])
    report = inspect_model(
        path, "x", ["wide"], input_file=write_input(x),
        measure="jacobian", probes=8,
    )  # fmt: skip
    res = only(report)
    assert res.jacobian.method == "estimate"
    assert_lower_bound(res.jacobian.spectral.per_sample, true, within=0.02)


def test_batch_mixing_is_detected_and_diagonal_blocks_reported(write_input):
    x = normal(8, 6)
    m = load_sample("cause_training.keras")
    dense, bn = m.get_layer("dense"), m.get_layer("bn")
    blocks = diagonal_blocks(lambda h: bn(h, training=True), dense(tf.constant(x)))
    for probes in (None, 8):
        res = measured(
            sample("cause_training.keras"),
            "dense",
            "bn",
            input_file=write_input(x),
            training=True,
            probes=probes,
        )
        j = res.jacobian
        assert not j.batch_independent
        assert any("mixes samples across the batch" in w for w in res.warnings)
        np.testing.assert_allclose(
            j.frobenius.per_sample, [np.linalg.norm(b) for b in blocks], rtol=1e-4
        )
        np.testing.assert_allclose(
            j.spectral.per_sample, [np.linalg.norm(b, 2) for b in blocks], rtol=1e-3
        )
    inference = measured(sample("cause_training.keras"), "dense", "bn", input_file=write_input(x))
    assert inference.jacobian.batch_independent
    assert not any("mixes" in w for w in inference.warnings)


def test_large_jacobians_are_estimated_and_exact_has_a_budget(tmp_path):
    keras.utils.set_random_seed(0)
    x = keras.Input((2048,), name="x")
    keras.Model(x, keras.layers.Dense(1024, activation="tanh", name="wide")(x)).save(
        tmp_path / "wide.keras"
    )
    res = only(
        inspect_model(str(tmp_path / "wide.keras"), "x", ["wide"], batch_size=2, measure="jacobian")
    )
    assert res.jacobian.method == "estimate" and res.jacobian.probes == 32  # 2^21 entries > 2^20

    class Sizes:
        def __init__(self, batch, m, n):
            self.batch, self.m, self.n = batch, m, n

    assert choose_method(Sizes(64, 1024, 1024), JacobianOptions()) == ("exact", None)
    method, note = choose_method(Sizes(512, 1024, 1024), JacobianOptions())
    assert method == "estimate" and "--batch-size" in note
    assert choose_method(Sizes(1, 4096, 4096), JacobianOptions(exact=True))[0] == "exact"
    with pytest.raises(InputError, match="--exact"):
        choose_method(Sizes(EXACT_BUDGET // 4096**2 + 1, 4096, 4096), JacobianOptions(exact=True))


def test_no_jacobian_without_a_gradient():
    report = inspect_model(sample("residual.keras"), "side", ["head"], measure="jacobian")
    assert only(report).status == "none" and only(report).jacobian is None
    report = inspect_model(sample("embedding.keras"), "ids", ["head"], measure="jacobian")
    assert only(report).jacobian is None


def test_embedding_units_are_the_embedding_dimensions(write_input):
    ids = np.random.default_rng(0).integers(0, 20, (4, 6)).astype("int32")
    m = load_sample("embedding.keras")
    emb, pool, head = (m.get_layer(n) for n in ("embedding", "pool", "head"))
    res = measured(sample("embedding.keras"), "embedding", "head", input_file=write_input(ids))
    assert_exact(res, per_sample_jacobians(emb, lambda h: head(pool(h)), ids), units=4)


def test_gradient_mode_has_no_jacobian_and_is_unchanged(write_input):
    x = normal(8, 5)
    plain = only(
        inspect_model(sample("seed.keras"), "dense", ["dense_1"], input_file=write_input(x))
    )
    both = measured(sample("seed.keras"), "dense", "dense_1", input_file=write_input(x))
    assert plain.jacobian is None
    np.testing.assert_array_equal(plain.array, both.array)  # the same forward pass serves both
    assert plain.gradient == both.gradient


def run_cli(*args):
    return CliRunner().invoke(main, list(args))


def test_cli_json_has_the_documented_members():
    result = run_cli(*seed_inspect("--measure", "jacobian", "--json"))
    assert result.exit_code == 0, result.output
    j = json.loads(result.output)["results"][0]["jacobian"]
    assert set(j) == {
        "method",
        "probes",
        "batch_independent",
        "frobenius",
        "spectral",
        "unit_sensitivity",
    }
    assert set(j["frobenius"]) == {"per_sample", "mean", "max", "rel_stderr"}
    assert set(j["spectral"]) == {"per_sample", "mean", "max", "iterations"}
    assert j["method"] == "exact" and j["probes"] is None and j["frobenius"]["rel_stderr"] is None
    assert len(j["frobenius"]["per_sample"]) == 8 and len(j["unit_sensitivity"]) == 8
    result = run_cli(*seed_inspect("--measure", "jacobian", "--probes", "4", "--json"))
    j = json.loads(result.output)["results"][0]["jacobian"]
    assert j["method"] == "estimate" and j["probes"] == 4 and j["frobenius"]["rel_stderr"] > 0
    assert isinstance(j["spectral"]["iterations"], int)
    plain = run_cli(*seed_inspect("--json"))
    assert "jacobian" not in json.loads(plain.output)["results"][0]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--measure", "jacobian", "--probes", "8", "--exact"], "give only one"),
        (["--probes", "8"], "--measure jacobian"),
        (["--exact"], "--measure jacobian"),
        (["--measure", "jacobian", "--probes", "1"], "at least 2"),
    ],
)
def test_cli_usage_errors_exit_2(extra, message):
    result = run_cli(*seed_inspect(*extra))
    assert result.exit_code == 2
    assert message in result.output and "Traceback" not in result.output


def test_large_exact_spectral_norm_by_lanczos_matches_numpy(tmp_path, write_input, monkeypatch):
    # 300 x 300 per sample: past the direct Gram decomposition, so Lanczos through the model.
    monkeypatch.setattr(
        jacobian, "direct_spectral", lambda jac: pytest.fail("Lanczos did not converge")
    )
    x = normal(3, 300)
    path, jacobians = wide_tanh(tmp_path, x)
    res = only(inspect_model(path, "x", ["wide"], input_file=write_input(x), measure="jacobian"))
    assert res.jacobian.method == "exact"
    np.testing.assert_allclose(
        res.jacobian.spectral.per_sample, [np.linalg.norm(J, 2) for J in jacobians], rtol=1e-5
    )
    np.testing.assert_allclose(
        res.jacobian.frobenius.per_sample, [np.linalg.norm(J) for J in jacobians], rtol=1e-5
    )


def no_rows(lin):
    pytest.fail("taken by rows, not by columns")


def test_tall_jacobians_are_taken_by_columns(tmp_path, write_input, monkeypatch):
    # 40 x 3 per sample: three JVPs instead of forty VJPs; d tanh(x W + b) / d x worked out
    monkeypatch.setattr(jacobian, "exact_rows", no_rows)
    keras.utils.set_random_seed(2)
    inp = keras.Input((3,), name="x")
    keras.Model(inp, keras.layers.Dense(40, activation="tanh", name="up")(inp)).save(
        tmp_path / "t.keras"
    )
    x = normal(5, 3)
    kernel, bias = keras.saving.load_model(tmp_path / "t.keras").get_layer("up").get_weights()
    y = np.tanh(x.astype(np.float64) @ kernel + bias)
    jacobians = [(1 - yi**2)[:, None] * kernel.T for yi in y]
    res = only(
        inspect_model(
            str(tmp_path / "t.keras"), "x", ["up"], input_file=write_input(x), measure="jacobian"
        )
    )
    assert_exact(res, jacobians, units=3)


def test_tall_jacobians_of_a_mixed_batch_by_columns(tmp_path, write_input, monkeypatch):
    monkeypatch.setattr(jacobian, "exact_rows", no_rows)
    keras.utils.set_random_seed(2)
    inp = keras.Input((2,), name="x")
    h = keras.layers.Dense(2, name="d")(inp)
    out = keras.layers.BatchNormalization(name="bn")(keras.layers.Dense(8, name="up")(h))
    keras.Model(inp, out).save(tmp_path / "bn.keras")
    x = normal(6, 2)
    m = keras.saving.load_model(tmp_path / "bn.keras")
    d, up, bn = (m.get_layer(n) for n in ("d", "up", "bn"))
    blocks = diagonal_blocks(lambda h: bn(up(h), training=True), d(tf.constant(x)))
    res = measured(str(tmp_path / "bn.keras"), "d", "bn", input_file=write_input(x), training=True)
    assert not res.jacobian.batch_independent
    np.testing.assert_allclose(
        res.jacobian.frobenius.per_sample, [np.linalg.norm(b) for b in blocks], rtol=1e-4
    )
    np.testing.assert_allclose(
        res.jacobian.spectral.per_sample, [np.linalg.norm(b, 2) for b in blocks], rtol=1e-4
    )


def test_a_frobenius_estimate_below_the_spectral_estimate_is_raised_to_it():
    # ||J||_F >= ||J||_2 >= the Lanczos estimate: two probes that both miss J's large
    # direction would say less than the spectral norm already found, which is impossible
    squared = np.array([[1.0, 16.0], [1.0, 16.0]])  # K=2 probes, B=2 samples: 1.0 and 4.0
    units = np.ones((2, 3))
    sigma, residual = np.array([3.0, 3.0]), np.zeros(2)
    stats, _ = jacobian.estimate_stats([squared, units, sigma, residual], 3, 2, True)
    assert stats.frobenius.per_sample == (3.0, 4.0)  # sample 0 raised to its spectral norm
    assert stats.spectral is not None and stats.spectral.per_sample == (3.0, 3.0)
    alone, _ = jacobian.estimate_stats(
        [squared, units], 3, 2, True
    )  # no spectral norm: as estimated
    assert alone.frobenius.per_sample == (1.0, 4.0)
