"""Features in raw units (values around 1,000) into a ReLU network with no normalising layer:
a ReLU is never pinned by large inputs (it passes them on), so a rule over saturation cannot
see them, yet the logits and the loss start hundreds of times too large. `check` warns
`input_range` at the first layer with weights, with `--input` and with `--data`, from the
data's own statistics; the same model behind a normalising layer, the same data scaled, and
legitimate 0-100 features (ages, counts) get no warning. The truth is the data as built here
and the untrained model's own loss, computed with Keras."""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers import keras

from layergrad.commands.check.check_files import CheckOptions, check_file
from layergrad.core.probe_options import ProbeOptions
from layergrad.diagnose.forward_findings import RAW_SCALE, feature_scale

layers = keras.layers


def _data(scale=1000.0, n=64, seed=0):
    """4 classes from the signs of two standardised features, shown in raw units: each
    feature a level of `scale` plus a spread of scale / 4 (prices, areas, salaries)."""
    rng = np.random.default_rng(seed)
    z = rng.standard_normal((n, 6)).astype("float32")
    y = (z[:, 0] > 0).astype("int64") + 2 * (z[:, 1] > 0).astype("int64")
    return (scale + z * scale / 4).astype("float32"), y


def _mlp(first=None):
    keras.utils.set_random_seed(0)
    x = keras.Input((6,), name="features")
    h = first(x) if first is not None else x
    h = layers.Dense(16, activation="relu", name="dense_1")(h)
    h = layers.Dense(16, activation="relu", name="dense_2")(h)
    model = keras.Model(x, layers.Dense(4, activation="softmax", name="head")(h))
    model.compile("sgd", "sparse_categorical_crossentropy")
    return model


def _findings(tmp_path, model, x, y, name, data=True):
    path = tmp_path / f"{name}.keras"
    model.save(path)
    if data:
        np.savez(tmp_path / f"{name}.npz", x=x, y=y)
        probe = ProbeOptions(data=str(tmp_path / f"{name}.npz"))
    else:
        np.save(tmp_path / f"{name}.npy", x[:8])
        probe = ProbeOptions(input_file=str(tmp_path / f"{name}.npy"))
    verdict = check_file(path, CheckOptions(probe=probe))
    return {f for c in verdict.checks for f in c.findings}, verdict


def test_the_rule_reads_the_largest_root_mean_square_of_a_feature():
    x = np.array([[3.0, 400.0], [4.0, -300.0]], dtype="float32")
    assert feature_scale(x) == pytest.approx(math.sqrt((400**2 + 300**2) / 2))
    assert feature_scale(x[:, :1]) == pytest.approx(math.sqrt(12.5))


@pytest.mark.parametrize("data", [True, False], ids=["data", "input"])
def test_raw_units_into_a_relu_network_warn_at_its_first_layer(tmp_path, data):
    x, y = _data()
    model = _mlp()
    # what makes it a bug: the untrained model's loss is far above the trivial log 4, while
    # its first ReLU layer is not pinned (a saturation rule sees nothing)
    hidden = keras.Model(model.inputs, model.get_layer("dense_1").output)(x).numpy()
    assert np.mean(np.all(hidden == 0, axis=0)) < 0.5
    loss = float(keras.losses.sparse_categorical_crossentropy(y, model(x)).numpy().mean())
    assert loss > 5 * math.log(4)
    assert np.sqrt(np.mean(x.astype("float64") ** 2, axis=0)).max() > RAW_SCALE
    found, verdict = _findings(tmp_path, model, x, y, "raw", data)
    assert "input_range" in found, found
    forward = next(c for c in verdict.checks if c.name == "forward")
    assert "raw units" in forward.message and "'dense_1'" in forward.message
    assert "Normalization" in forward.message


@pytest.mark.parametrize(
    "first",
    [
        lambda: layers.BatchNormalization(name="bn"),
        lambda: layers.LayerNormalization(name="ln"),
        lambda: layers.Rescaling(1 / 1000, name="rescale"),
    ],
    ids=["batchnorm", "layernorm", "rescaling"],
)
def test_a_normalising_layer_before_the_first_weights_is_clean(tmp_path, first):
    x, y = _data()
    found, _ = _findings(tmp_path, _mlp(first()), x, y, "normalised")
    assert "input_range" not in found, found


def test_an_adapted_normalization_and_scaled_data_are_clean(tmp_path):
    x, y = _data()
    norm = layers.Normalization(name="norm")
    norm.adapt(x)
    assert "input_range" not in _findings(tmp_path, _mlp(lambda t: norm(t)), x, y, "adapted")[0]
    scaled = (x - x.mean(axis=0)) / x.std(axis=0)
    assert _findings(tmp_path, _mlp(), scaled, y, "scaled")[0] == set()


def test_legitimate_tabular_features_of_0_to_100_are_not_raw_units(tmp_path):
    rng = np.random.default_rng(0)
    ages_hours = rng.uniform([18, 0, 0, 1, 0, 10], [90, 60, 100, 5, 12, 40], (64, 6))
    x = ages_hours.astype("float32")
    assert feature_scale(x) < RAW_SCALE
    found, _ = _findings(tmp_path, _mlp(), x, rng.integers(0, 4, 64), "tabular")
    assert "input_range" not in found, found


def test_fit_says_input_range_before_its_first_step(tmp_path):
    from layergrad.commands.fit.checks import FitOptions
    from layergrad.commands.fit.train import fit_model

    x, y = _data(n=256)
    path = tmp_path / "raw.keras"
    _mlp().save(path)
    np.savez(tmp_path / "raw.npz", x=x, y=y)
    report = fit_model(path, tmp_path / "raw.npz", FitOptions(steps=20))
    first = report.findings[0]
    assert (str(first.code), first.layer, first.step) == ("input_range", "dense_1", 0)
    np.savez(tmp_path / "scaled.npz", x=(x - x.mean(axis=0)) / x.std(axis=0), y=y)
    scaled = fit_model(path, tmp_path / "scaled.npz", FitOptions(steps=20))
    assert "input_range" not in {str(f.code) for f in scaled.findings}


def test_fit_help_lists_input_range_and_fail_on_takes_it(tmp_path):
    from click.testing import CliRunner

    from layergrad.cli import main

    assert "input_range" in CliRunner().invoke(main, ["fit", "--help"]).output
    x, y = _data(n=128)
    _mlp().save(tmp_path / "raw.keras")
    np.savez(tmp_path / "raw.npz", x=x, y=y)
    base = ["fit", str(tmp_path / "raw.keras"), "--data", str(tmp_path / "raw.npz")]
    warned = CliRunner().invoke(main, [*base, "--steps", "10", "--fail-on", "input_range"])
    assert warned.exit_code == 1, warned.output
    assert "input_range" in warned.output
    other = CliRunner().invoke(main, [*base, "--steps", "10", "--fail-on", "nonfinite"])
    assert other.exit_code == 0, other.output
    bad = CliRunner().invoke(main, [*base, "--fail-on", "input_rnge"])
    assert bad.exit_code == 2


def test_fix_scales_raw_units_with_the_data_statistics_and_leaves_the_rate(tmp_path):
    """The training findings raw units cause (diverging, exploding, dying units) are the
    inputs' doing: `fix` inserts a Normalization adapted to the data before the first layer
    with weights, keeps the learning rate, and the copy it writes trains (verified)."""
    from layergrad.commands.fix.repair import FixOptions, fix_model

    x, y = _data(n=256)
    path = tmp_path / "raw.keras"
    _mlp().save(path)
    np.savez(tmp_path / "raw.npz", x=x, y=y)
    out = tmp_path / "raw.fixed.keras"
    report = fix_model(path, tmp_path / "raw.npz", FixOptions(output=str(out), steps=600))
    assert "input_range" in report.before and "diverging" in report.before, report.before
    [repair] = report.repairs
    assert (repair.finding, repair.layer, repair.verdict.value) == (
        "input_range", "dense_1", "verified"), repair  # fmt: skip
    assert not any("learning_rate" in line for line in repair.code)
    assert not {str(u.code) for u in report.unrepaired} & {"diverging", "exploding"}
    assert report.output == str(out)
    copy = keras.models.load_model(out)
    norm = copy.get_layer("normalization")
    assert copy.get_layer("dense_1").input is norm.output
    # the statistics are the data's own, per feature (population mean and variance)
    x64 = x.astype("float64")
    np.testing.assert_allclose(np.ravel(norm.mean), x64.mean(axis=0), rtol=1e-4)
    np.testing.assert_allclose(np.ravel(norm.variance), x64.var(axis=0), rtol=1e-3)
    scaled = np.asarray(norm(x))
    np.testing.assert_allclose(scaled.std(axis=0), 1.0, atol=1e-3)
    assert float(copy.optimizer.learning_rate.numpy()) == pytest.approx(0.01)
