"""A healthy model gets no finding at all, warnings included (the calibration set of the
verdict rules; see docs/verdicts.md). The keras.applications models are slow."""

from __future__ import annotations

import pytest
import zoo

from layergrad.check import check_file


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
