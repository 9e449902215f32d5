"""`.npz` keys: `x` (and `y` for labels) for a model with one input, as `model.fit(x, y)`
takes them; input names for several inputs. References are manual tapes on the same arrays."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from helpers import keras, load_sample, manual_gradient, normal, sample, tf

from layergrad.cli.app import main
from layergrad.commands.api import inspect_model, scan_weights_model


def run(*args: str):
    return CliRunner().invoke(main, list(args))


@pytest.fixture
def seed_reference():
    """A batch for seed.keras (one input, named `input`) and d sum(dense_1) / d dense by hand."""
    x = normal(21, 5, seed=11)
    m = load_sample("seed.keras")
    return x, manual_gradient(m.get_layer("dense"), m.get_layer("dense_1"), x)


def test_data_npz_with_x_and_y_feeds_the_single_input(tmp_path, seed_reference):
    x, expected = seed_reference
    np.savez(tmp_path / "fit.npz", x=x, y=np.ones((21, 1), "float32"))
    report = inspect_model(sample("seed.keras"), "dense", ["dense_1"], data=tmp_path / "fit.npz")
    assert report.probe.samples == 21
    g = report.results[0].gradient
    assert g.l2 == pytest.approx(float(np.linalg.norm(expected)), rel=1e-5)
    assert g.mean_abs == pytest.approx(float(np.abs(expected).mean()), rel=1e-5)


def test_input_npz_with_x_is_the_probe_batch(tmp_path, seed_reference):
    x, expected = seed_reference
    np.savez(tmp_path / "fit.npz", x=x)
    out = run("inspect", sample("seed.keras"), "--from", "dense", "--to", "dense_1", "--input",
              str(tmp_path / "fit.npz"), "--json")  # fmt: skip
    assert out.exit_code == 0, out.output
    g = json.loads(out.stdout)["results"][0]["gradient"]
    assert g["l2"] == pytest.approx(float(np.linalg.norm(expected)), rel=1e-5)


def test_y_beside_x_is_the_labels_of_the_loss(tmp_path):
    x, y = normal(8, 5, seed=4), normal(8, 1, seed=5)
    np.savez(tmp_path / "fit.npz", x=x, y=y)
    report = scan_weights_model(sample("seed.keras"), loss="mse", input_file=tmp_path / "fit.npz")
    model = load_sample("seed.keras")
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(keras.losses.mean_squared_error(y, model(x, training=False)))
    grads = tape.gradient(loss, model.trainable_variables)
    assert report.loss.labels == "data"
    rows = {r.variable: r for r in report.variables}
    for v, g in zip(model.trainable_variables, grads, strict=True):
        assert rows[v.path].gradient.l2 == pytest.approx(float(np.linalg.norm(g)), rel=1e-5)


def test_several_inputs_keep_their_names(tmp_path):
    np.savez(tmp_path / "fit.npz", x=normal(4, 4), y=np.zeros(4))
    for option in ("--input", "--data"):
        out = run("scan", sample("two_input.keras"), option, str(tmp_path / "fit.npz"))
        assert out.exit_code == 2
        assert out.stderr.strip() == (
            f"error: {option} {tmp_path / 'fit.npz'} has arrays ['x', 'y'] but the model's "
            "inputs are ['a', 'b']; missing: a, b. Save one array per input name with "
            "np.savez(FILE, **{name: array})."
        )


def test_the_input_name_wins_over_x(tmp_path, seed_reference):
    x, expected = seed_reference
    np.savez(tmp_path / "both.npz", input=x, x=np.zeros_like(x))
    report = inspect_model(
        sample("seed.keras"), "dense", ["dense_1"], input_file=tmp_path / "both.npz"
    )
    assert report.results[0].gradient.l2 == pytest.approx(float(np.linalg.norm(expected)), rel=1e-5)
