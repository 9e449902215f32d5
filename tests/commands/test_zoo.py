"""A healthy model gets no finding at all, warnings included (the calibration set of the
verdict rules; see docs/verdicts.md). The keras.applications models are slow."""

from __future__ import annotations

import numpy as np
import pytest
import zoo

from layergrad.commands.check.check_files import check_file

# the models more than one test of the module checks: built and saved once, and kept
REUSED = {*zoo.SMALL, "MobileNetV3Small"}


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """(name, build) -> (model, its .keras file): a model of `REUSED` is built and saved once
    for every test that checks it; any other is built afresh (and not kept in memory)."""
    folder = tmp_path_factory.mktemp("zoo")
    made: dict[str, tuple] = {}

    def get(name, build):
        if name in made:
            return made[name]
        model, path = build(), folder / f"{name}.keras"
        model.save(path)
        if name in REUSED:
            made[name] = (model, path)
        return model, path

    return get


def _check(path):
    verdict = check_file(path)
    found = {c.name: c.message for c in verdict.checks if c.findings or not c.passed}
    assert verdict.verdict == "PASS" and not found, found


@pytest.mark.parametrize("name", sorted(zoo.SMALL))
def test_small_healthy_models_get_no_finding(saved, name):
    _check(saved(name, zoo.SMALL[name])[1])


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(zoo.APPLICATIONS))
def test_untrained_applications_get_no_finding(saved, name):
    _check(saved(name, zoo.APPLICATIONS[name])[1])


@pytest.mark.slow
def test_inspect_probes_an_untrained_mobilenet_as_training_runs_it(saved):
    """From `conv` to `logits` of a never-trained MobileNetV3Small: in inference (moving
    statistics 0 and 1) the gradient is an ok status flagged vanishing (about 1e-11); the
    rule probes again in training mode, where it is not, and says why."""
    from layergrad.commands.api import inspect_model
    from layergrad.diagnose.diagnoser import magnitude_flags

    model, path = saved("MobileNetV3Small", zoo.APPLICATIONS["MobileNetV3Small"])
    norms = sum("BatchNormalization" in type(layer).__name__ for layer in model.layers)
    report = inspect_model(path, "conv", ["logits"])
    (res,) = report.results
    assert res.status == "ok" and not res.causes and report.probe.training
    assert not magnitude_flags(res.warnings)
    assert any(f"probed in training mode (batch statistics): {norms} BatchNormalization" in w
               for w in res.warnings)  # fmt: skip


def _fitting_labels(model, rows, rng):
    """Labels a healthy model of the zoo is trained on, from its head and loss."""
    loss = model.loss if isinstance(model.loss, str) else type(model.loss).__name__
    shape = (rows, *model.outputs[0].shape[1:])
    if "sparse" in loss:
        return rng.integers(0, shape[-1], rows)
    if "binary" in loss:
        return (rng.random(shape) > 0.5).astype("float32")
    if "categorical" in loss:
        return np.eye(shape[-1], dtype="float32")[rng.integers(0, shape[-1], rows)]
    return rng.standard_normal(shape).astype("float32")


@pytest.mark.parametrize("name", sorted(zoo.SMALL))
def test_small_healthy_models_with_their_labels_get_no_finding(saved, tmp_path, name):
    from layergrad.commands.check.check_files import CheckOptions
    from layergrad.core.probe_options import ProbeOptions

    model, path = saved(name, zoo.SMALL[name])
    rng = np.random.default_rng(0)
    arrays = {}
    for t in model.inputs:
        shape = (16, *t.shape[1:])
        if "int" in str(t.dtype):
            arrays[t.name] = rng.integers(1, 100, shape).astype(str(t.dtype))
        elif name == "rescaling_cnn":
            arrays[t.name] = rng.integers(0, 256, shape).astype("float32")
        else:
            arrays[t.name] = rng.standard_normal(shape).astype("float32")
    if name == "conv_autoencoder":  # it reconstructs its input, pixels in [0, 1]
        arrays["image"] = rng.random((16, 28, 28, 1)).astype("float32")
        arrays["y"] = arrays["image"]
    else:
        arrays["y"] = _fitting_labels(model, 16, rng)
    np.savez(tmp_path / "data.npz", **arrays)
    verdict = check_file(
        path,
        CheckOptions(probe=ProbeOptions(input_file=str(tmp_path / "data.npz"))),
    )
    found = {c.name: c.message for c in verdict.checks if c.findings or not c.passed}
    assert verdict.verdict == "PASS" and not found, found
    assert "fit every output" in next(c.message for c in verdict.checks if c.name == "targets")
