"""The package a user installs is the source tree: every module ships, and the console script runs
from anywhere."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from helpers import ROOT, sample

SHIPPED_SUFFIXES = {".py", ".typed"}


def _source_files() -> set[str]:
    """Every file under ./layergrad that the package needs, as wheel paths."""
    return {
        path.relative_to(ROOT).as_posix()
        for path in (ROOT / "layergrad").rglob("*")
        if path.is_file() and path.suffix in SHIPPED_SUFFIXES and "__pycache__" not in path.parts
    }


def _is_source_tree(dist: importlib.metadata.Distribution) -> bool:
    """An editable install, or the `layergrad.egg-info` a build leaves beside the source."""
    direct = json.loads(dist.read_text("direct_url.json") or "{}")
    beside = Path(str(dist.locate_file(""))).resolve() == ROOT
    return beside or bool(direct.get("dir_info", {}).get("editable"))


def _wheel_files(tmp_path: Path) -> set[str]:
    """Build a wheel from the source tree, as `pip install .` does, and list what it holds."""
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(tmp_path),
         str(ROOT)],
        check=True, capture_output=True, timeout=600,
    )  # fmt: skip
    (wheel,) = tmp_path.glob("layergrad-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        return set(archive.namelist())


def test_the_installed_package_holds_every_module_of_the_source_tree(tmp_path):
    """The installed distribution (or, for an editable install, a freshly built wheel) lists
    every module under ./layergrad: a subpackage left out of the wheel fails here."""
    try:
        dist = importlib.metadata.distribution("layergrad")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("layergrad is not installed (tests run from PYTHONPATH)")
    if _is_source_tree(dist):
        shipped = _wheel_files(tmp_path)
    else:
        shipped = {Path(str(f)).as_posix() for f in dist.files or []}
    missing = sorted(_source_files() - shipped)
    assert not missing, f"modules missing from the installed package: {missing}"
    assert "layergrad/py.typed" in shipped


def test_the_version_is_written_once():
    import layergrad

    try:
        installed = importlib.metadata.version("layergrad")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("layergrad is not installed")
    assert installed == layergrad.__version__
    project = (ROOT / "pyproject.toml").read_text().split("[project]")[1].split("\n[", 1)[0]
    assert re.search(r"^version\s*=", project, flags=re.M) is None  # read from __init__.py


def test_the_console_script_runs_from_outside_the_repository(tmp_path):
    """The README's first command, from another directory with the model's path."""
    script = shutil.which("layergrad")
    if script is None:
        pytest.skip("no layergrad console script on PATH (not installed)")
    model = tmp_path / "seed.keras"
    shutil.copy(sample("seed.keras"), model)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run(
        [script, "inspect", str(model), "--from", "dense", "--to", "dense_1", "--json"],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["results"][0]["status"] == "ok"
    # the table (not JSON) renders too: the render subpackage is importable from the install
    table = subprocess.run(
        [script, "inspect", str(model), "--from", "dense", "--to", "dense_1"],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300,
    )  # fmt: skip
    assert table.returncode == 0, table.stderr
    assert "dense_1" in table.stdout and "ok" in table.stdout


def test_the_tests_import_the_installed_package_when_one_is_installed():
    import layergrad

    try:
        dist = importlib.metadata.distribution("layergrad")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("layergrad is not installed")
    if not _is_source_tree(dist):
        assert Path(layergrad.__file__).resolve().parent != ROOT / "layergrad"
