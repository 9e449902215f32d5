"""Fixtures of the hostile-file tests: a folder per test module and the base models in it."""

from __future__ import annotations

from pathlib import Path

import hostile as H
import pytest
from helpers import keras


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Path:
    return tmp_path_factory.mktemp(request.module.__name__)


@pytest.fixture(scope="module")
def base(root: Path) -> dict[str, Path]:
    return H.base_models(root, keras)


@pytest.fixture(scope="module")
def good(base: dict[str, Path]) -> str:
    """The healthy .keras file among the base models, as a command's argument."""
    return str(base["good.keras"])
