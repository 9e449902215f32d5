"""Typed seams: `Any` only names the untyped third-party objects, and the probe options are
declared once (the fields of the probe options' dataclasses, from which the click options and
the API's keywords are made)."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import json
from pathlib import Path

import click
import numpy as np
import pytest
from click.testing import CliRunner
from helpers import sample

import layergrad
from layergrad.cli.app import scan
from layergrad.cli.gate import check
from layergrad.cli.options import data_options, probe_options
from layergrad.commands import api
from layergrad.commands.check.check_files import CheckOptions
from layergrad.core.cluster import Cluster
from layergrad.core.errors import UsageError
from layergrad.core.probe_options import (
    SEED_HELP,
    DataSet,
    MeasureFields,
    OneBatch,
    ProbeOptions,
    cli_fields,
    probe_from,
    with_cluster,
)
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


PROBE_FIELDS = [name for name, _ in cli_fields()]  # the keywords, as the API spells them
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
    for name in PROBE_FIELDS:  # every field: scan spells it, `--snake-case` of its name
        assert flags[name] == "--" + name.replace("_", "-").replace("-file", "")
        if name == "peer_timeout":  # only with --distribute multi-worker (a cluster)
            continue
        text, value = NOT_DEFAULT[name]
        args = [flags[name]] + ([text] if text is not None else [])
        if name in ("limit", "distribute", "cpu_replicas", "first_sample"):
            args += ["--data", "d.npy"]  # they only apply with --data
        from_cli = _probe_of(args)
        data = {"data": "d.npy"} if "--data" in args else {}
        from_api = probe_from(None, {name: value, **data})
        assert _word(from_cli, name) == value == _word(from_api, name)
        assert from_cli == from_api
    for function in (api.inspect_model, api.scan_model, api.scan_weights_model):
        kinds = {p.kind for p in inspect.signature(function).parameters.values()}
        assert inspect.Parameter.VAR_KEYWORD in kinds, function.__name__


def _word(options: ProbeOptions, name: str) -> object:
    """The value of the option `name` (a keyword) wherever the union keeps it."""
    for holder in (options, options.source):
        if name in {f.name for f in dataclasses.fields(holder)}:
            return getattr(holder, name)
    assert name == "data" and options.data_set is not None
    return options.data_set.path  # the data set's path, spelt `data`


def test_an_unknown_api_keyword_is_a_type_error():
    with pytest.raises(TypeError, match="batchsize"):
        probe_from(None, {"batchsize": 3})


def test_the_cluster_is_read_where_the_command_starts_not_by_the_options():
    options = ProbeOptions(data="d.npy", distribute="multi-worker")  # TF_CONFIG unset: no error
    assert options.data_set is not None
    assert options.data_set.cluster is None
    assert options.data_set.distribute is Distribute.MULTI_WORKER
    with pytest.raises(UsageError, match="TF_CONFIG"):
        with_cluster(options, environ={})
    config = '{"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": 1}}'
    cluster = _word(with_cluster(options, environ={"TF_CONFIG": config}), "cluster")
    assert isinstance(cluster, Cluster) and (cluster.index, cluster.workers) == (1, 2)
    assert not with_cluster(options, environ={"TF_CONFIG": config}).reports_here
    assert (
        ProbeOptions().reports_here and with_cluster(ProbeOptions(), environ={}) == ProbeOptions()
    )


def test_reduce_and_distribute_are_words_written_as_before():
    options = ProbeOptions(reduce="mean", data="d.npy", distribute="mirrored")
    distribute = _word(options, "distribute")
    assert options.reduce is Reduce.MEAN and distribute is Distribute.MIRRORED
    assert json.dumps({"reduce": options.reduce, "distribute": distribute}) == (
        '{"reduce": "mean", "distribute": "mirrored"}'
    )
    assert f"{options.reduce}({distribute})" == "mean(mirrored)"
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
    assert helps["seed"] == SEED_HELP
    probe = [f for f in dataclasses.fields(CheckOptions) if f.name == "probe"]
    assert probe and probe[0].type in (ProbeOptions, "ProbeOptions")


def test_flat_words_make_one_batch_or_a_data_set():
    assert ProbeOptions(input_file="b.npy").source == OneBatch("b.npy")
    assert ProbeOptions(input_file="b.npy").data_set is None
    data = ProbeOptions(data="d.npz", limit=10, first_sample=4)
    assert data.source == DataSet("d.npz", limit=10, first_sample=4) == data.data_set
    assert (data.rows, ProbeOptions().rows, data.input_file) == (32, 8, None)
    assert ProbeOptions(source=DataSet("d.npz", limit=10, first_sample=4)) == data
    assert dataclasses.replace(data, seed=3).source == data.source  # the data set is kept
    with pytest.raises(TypeError, match="limit"):  # a source given: its words are its own
        ProbeOptions(source=OneBatch(), limit=3)
    with pytest.raises(UsageError, match="--limit must be 1 to"):  # a data set made directly
        DataSet("d.npz", limit=0)


def test_a_data_set_check_with_first_sample_runs_its_first_batch_as_one_batch(tmp_path):
    # the rules that need one batch run on the data's first batch: the options of one batch
    # then, which once kept --first-sample and refused it ("only apply with --data")
    np.save(tmp_path / "x.npy", np.random.default_rng(0).random((40, 5), dtype=np.float32))
    args = [sample("seed.keras"), "--data", str(tmp_path / "x.npy"), "--first-sample", "4"]
    result = CliRunner().invoke(check, args)
    assert result.exit_code == 0, result.output
    assert "1 passed, 0 failed" in result.output
