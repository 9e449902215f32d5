"""Typed seams: `Any` only names the untyped third-party objects, and the probe options are
declared once (one dataclass, one TypedDict of its keywords, one set of click options)."""

from __future__ import annotations

import ast
import dataclasses
import inspect
from pathlib import Path

import layergrad
from layergrad.cli.gate import check
from layergrad.commands import api
from layergrad.commands.check import CheckOptions
from layergrad.core.probe_options import MeasureFields, ProbeFields, ProbeOptions

PACKAGE = Path(layergrad.__file__).parent
ALIASES = PACKAGE / "core" / "tf_types.py"  # where TensorFlow, Keras and h5py get their names


def _uses_of_any(path: Path) -> list[int]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        node.lineno
        for node in ast.walk(tree)
        if (isinstance(node, ast.Name) and node.id == "Any")
        or (isinstance(node, ast.Attribute) and node.attr == "Any")
    ]


def test_any_only_names_the_objects_that_have_no_type_stubs():
    found = {
        str(p.relative_to(PACKAGE)): lines
        for p in sorted(PACKAGE.rglob("*.py"))
        if p != ALIASES and (lines := _uses_of_any(p))
    }
    assert found == {}


def test_probe_fields_are_the_probe_options():
    fields = {f.name for f in dataclasses.fields(ProbeOptions)}
    assert set(ProbeFields.__annotations__) == fields
    assert ProbeFields.__total__ is False  # each keyword optional, as the dataclass defaults


def test_measure_fields_are_the_api_keywords():
    for function in (api.inspect_model, api.scan_model):
        params = inspect.signature(function).parameters
        assert set(MeasureFields.__annotations__) <= set(params), function.__name__


def test_check_takes_the_shared_probe_options_without_the_run_mode():
    names = {p.name for p in check.params}
    assert {"input_file", "batch_size", "seed", "max_memory", "data", "limit"} <= names
    assert not {"reduce", "training"} & names
    helps = {p.name: getattr(p, "help", "") for p in check.params}
    assert "an output constant over fewer than 4 rows is not reported" in helps["batch_size"]
    assert helps["seed"] == "Seed of the random probe batch."
    probe = [f for f in dataclasses.fields(CheckOptions) if f.name == "probe"]
    assert probe and probe[0].type in (ProbeOptions, "ProbeOptions")
