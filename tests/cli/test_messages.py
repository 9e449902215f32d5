"""Messages read as sentences; the API takes one reference or a list of them."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner
from helpers import load_sample, manual_gradient, normal, sample

from layergrad.cli.app import main
from layergrad.commands.api import inspect_model, scan_model
from layergrad.commands.check.check_files import check_files
from layergrad.core.errors import LayerNotFound

STACK = sample("bug_sigmoid_stack.keras")  # ten layers: none of them is close to 'Logits'


def test_an_unknown_layer_message_has_its_full_stops():
    out = CliRunner().invoke(main, ["inspect", STACK, "--from", "x", "--to", "Logits"])
    assert out.exit_code == 2
    assert out.stderr == (
        "error: no layer named 'Logits' in the model. Run `layergrad layers MODEL` to list "
        "every layer name.\n"
    )


def test_an_unknown_layer_message_names_a_functional_models_input_once(tmp_path):
    # Keras lists a Functional model's InputLayer among its layers: it is still one name
    import keras

    x = keras.Input((3,), name="pixels")
    keras.Model(x, keras.layers.Dense(2, name="head")(x)).save(tmp_path / "f.keras")
    path = str(tmp_path / "f.keras")
    listed = CliRunner().invoke(main, ["inspect", path, "--from", "zzzzzz", "--to", "head"])
    assert listed.exit_code == 2 and "Layers: pixels, head." in listed.stderr, listed.stderr
    close = CliRunner().invoke(main, ["inspect", path, "--from", "pixel", "--to", "head"])
    assert close.exit_code == 2 and "did you mean 'pixels'? Run" in close.stderr, close.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["inspect", sample("seed.keras"), "--from", "dense", "--to", "Logits"],
        ["inspect", sample("seed.keras"), "--from", "dense", "--to", "dense_"],
        ["inspect", sample("seed.keras"), "--from", "dense", "--to", "7"],
        ["scan", "missing.keras"],
        ["scan", sample("seed.keras"), "--input", "missing.npy"],
        ["scan", sample("seed.keras"), "--data", "missing.npz"],
        ["scan", sample("seed.keras"), "--wrt", "weights"],  # no compiled loss
        ["check", sample("seed.keras"), "--baseline", "missing.json"],
    ],
    ids=lambda a: " ".join(a[2:]) or a[0],
)
def test_every_error_line_ends_with_a_full_stop(args):
    out = CliRunner().invoke(main, args)
    assert out.exit_code == 2, out.output
    (line,) = out.stderr.splitlines()
    assert line.startswith("error: ") and line.endswith(".")


def test_api_errors_read_as_sentences_too():
    with pytest.raises(LayerNotFound) as caught:
        inspect_model(STACK, "x", "Logits")
    assert str(caught.value).endswith("to list every layer name.")
    assert str(LayerNotFound("no stop")) == "no stop." and str(LayerNotFound("asked?")) == "asked?"


def test_one_target_as_a_string_is_one_reference_not_letters():
    one = inspect_model(sample("seed.keras"), "dense", "dense_1")
    listed = inspect_model(sample("seed.keras"), "dense", ["dense_1"])
    assert [r.target.layer for r in one.results] == ["dense_1"]
    assert one.results == listed.results  # a list gives the same, one result per reference
    both = inspect_model(sample("seed.keras"), "dense", ["dense_1", "dense_2"])
    assert [r.target.layer for r in both.results] == ["dense_1", "dense_2"]


def test_one_glob_and_one_file_as_strings():
    assert scan_model(STACK, layers="dense_1*").rows == scan_model(STACK, layers=["dense_1*"]).rows
    (verdict,) = check_files(sample("seed.keras"))
    assert verdict.path == sample("seed.keras") and verdict.passed


def test_the_string_target_gets_the_gradient_the_tape_gets(tmp_path):
    x = normal(8, 5, seed=3)
    np.save(tmp_path / "x.npy", x)
    m = load_sample("seed.keras")
    expected = manual_gradient(m.get_layer("dense"), m.get_layer("dense_1"), x)
    g = (
        inspect_model(sample("seed.keras"), "dense", "dense_1", input_file=tmp_path / "x.npy")
        .results[0]
        .gradient
    )
    assert g.l2 == pytest.approx(float(np.linalg.norm(expected)), rel=1e-5)
