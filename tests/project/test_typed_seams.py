"""Typed seams: `Any` only names the untyped third-party objects, and the probe options are
declared once (the fields of one dataclass, from which the click options and the API's
keywords are made)."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import json
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

import layergrad
from layergrad.cli.app import scan
from layergrad.cli.gate import check
from layergrad.cli.options import data_options, probe_options
from layergrad.commands import api
from layergrad.commands.check.gate import CheckOptions
from layergrad.core.errors import UsageError
from layergrad.core.probe_options import MeasureFields, ProbeOptions, probe_from, with_cluster
from layergrad.core.vocab import Distribute, Reduce

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


PROBE_FIELDS = [f for f in dataclasses.fields(ProbeOptions) if f.name != "cluster"]
NOT_DEFAULT = {  # a value other than the default, for each field, as the CLI writes it
    "input_file": ("x.npz", "x.npz"), "batch_size": ("3", 3), "seed": ("7", 7),
    "reduce": ("mean", Reduce.MEAN), "training": (None, True), "max_memory": ("1GB", 2**30),
    "data": ("d.npy", "d.npy"), "limit": ("5", 5), "distribute": ("mirrored", "mirrored"),
    "cpu_replicas": ("2", 2), "first_sample": ("4", 4),
}  # fmt: skip


def _probe_of(args: list[str]) -> ProbeOptions:
    """The `probe` a command made with `probe_options` and `data_options` receives."""
    got: list[ProbeOptions] = []

    @click.command()
    @probe_options()
    @data_options
    def command(probe: ProbeOptions, quiet: bool) -> None:
        got.append(probe)

    result = CliRunner().invoke(command, args)
    assert result.exit_code == 0, result.output
    return got[0]


def test_every_probe_field_is_an_option_and_a_keyword_with_the_same_default():
    cli_default, api_default = _probe_of([]), probe_from(None, {})
    assert cli_default == api_default == ProbeOptions()
    flags = {p.name: p.opts[0] for p in scan.params}
    for spec in PROBE_FIELDS:  # every field: scan spells it, `--snake-case` of its name
        assert flags[spec.name] == "--" + spec.name.replace("_", "-").replace("-file", "")
        if spec.name == "peer_timeout":  # only with --distribute multi-worker (a cluster)
            continue
        text, value = NOT_DEFAULT[spec.name]
        args = [flags[spec.name]] + ([text] if text is not None else [])
        if spec.name in ("limit", "distribute", "cpu_replicas", "first_sample"):
            args += ["--data", "d.npy"]  # they only apply with --data
        from_cli = _probe_of(args)
        data = {"data": "d.npy"} if "--data" in args else {}
        from_api = probe_from(None, {spec.name: value, **data})
        assert getattr(from_cli, spec.name) == value == getattr(from_api, spec.name)
        assert from_cli == from_api
    for function in (api.inspect_model, api.scan_model, api.scan_weights_model):
        kinds = {p.kind for p in inspect.signature(function).parameters.values()}
        assert inspect.Parameter.VAR_KEYWORD in kinds, function.__name__


def test_an_unknown_api_keyword_is_a_type_error():
    with pytest.raises(TypeError, match="batchsize"):
        probe_from(None, {"batchsize": 3})


def test_the_cluster_is_read_where_the_command_starts_not_by_the_options():
    options = ProbeOptions(data="d.npy", distribute="multi-worker")  # TF_CONFIG unset: no error
    assert options.cluster is None and options.distribute is Distribute.MULTI_WORKER
    with pytest.raises(UsageError, match="TF_CONFIG"):
        with_cluster(options, environ={})
    config = '{"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": 1}}'
    cluster = with_cluster(options, environ={"TF_CONFIG": config}).cluster
    assert cluster is not None and (cluster.index, cluster.workers) == (1, 2)
    assert not with_cluster(options, environ={"TF_CONFIG": config}).reports_here
    assert ProbeOptions().reports_here and with_cluster(ProbeOptions(), environ={}).cluster is None


def test_reduce_and_distribute_are_words_written_as_before():
    options = ProbeOptions(reduce="mean", data="d.npy", distribute="mirrored")
    assert options.reduce is Reduce.MEAN and options.distribute is Distribute.MIRRORED
    assert json.dumps({"reduce": options.reduce, "distribute": options.distribute}) == (
        '{"reduce": "mean", "distribute": "mirrored"}'
    )
    assert f"{options.reduce}({options.distribute})" == "mean(mirrored)"
    with pytest.raises(UsageError, match="reduce must be one of sum, mean: reduce='max'"):
        ProbeOptions(reduce="max")
    with pytest.raises(UsageError, match="--distribute must be one of mirrored, multi-worker"):
        ProbeOptions(data="d.npy", distribute="tpu")


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
