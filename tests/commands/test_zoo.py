"""A healthy model gets no finding at all, warnings included (the calibration set of the
verdict rules; see docs/verdicts.md). The keras.applications models are slow."""

from __future__ import annotations

import pytest
import zoo

from layergrad.commands.check import check_file


def _check(tmp_path, build):
    path = tmp_path / "model.keras"
    build().save(path)
    verdict = check_file(path)
    found = {c.name: c.message for c in verdict.checks if c.findings or not c.passed}
    assert verdict.verdict == "PASS" and not found, found


@pytest.mark.parametrize("name", sorted(zoo.SMALL))
def test_small_healthy_models_get_no_finding(tmp_path, name):
    _check(tmp_path, zoo.SMALL[name])


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(zoo.APPLICATIONS))
def test_untrained_applications_get_no_finding(tmp_path, name):
    _check(tmp_path, zoo.APPLICATIONS[name])


@pytest.mark.slow
def test_inspect_probes_an_untrained_mobilenet_as_training_runs_it(tmp_path):
    from layergrad.commands.api import inspect_model

    path = tmp_path / "mobilenet.keras"
    zoo.APPLICATIONS["MobileNetV2"]().save(path)
    report = inspect_model(path, "block_3_expand", ["predictions"])
    (res,) = report.results
    assert res.status == "ok" and not res.causes and report.probe.training
    assert any("probed in training mode (batch statistics): 52 BatchNormalization" in w
               for w in res.warnings)  # fmt: skip
