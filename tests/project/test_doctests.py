"""Every `>>>` example in the package's docstrings runs and prints what it shows."""

from __future__ import annotations

import doctest
import importlib
import inspect
import pkgutil

import pytest
from helpers import ROOT

import layergrad

MODULES = sorted(
    m.name
    for m in pkgutil.walk_packages(layergrad.__path__, "layergrad.")
    if not m.name.endswith("__main__")
)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name, monkeypatch):
    monkeypatch.chdir(ROOT)  # examples use the sample models by relative path
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS, verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed in {name}"
    if ">>>" in inspect.getsource(module):
        assert result.attempted > 0, f"{name} shows examples that doctest does not find"
