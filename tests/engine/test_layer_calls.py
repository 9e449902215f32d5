"""One way to wrap layer calls (`layer_calls.wrapped`), keyed one way (`(path, call)`, named by
`Site.of_call`): every command that looks inside a forward pass goes through it, on a model
whose shared layer is called twice, and no other module replaces a layer's `call`."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
from click.testing import CliRunner
from helpers import normal, sample

import layergrad
from layergrad.cli.app import main
from layergrad.engine import layer_calls
from layergrad.model.layer_refs import Site

ROWS = 12


def test_every_command_wraps_layer_calls_through_the_one_wrapper(tmp_path, monkeypatch):
    path = sample("shared.keras")  # x -> pre -> shared -> shared -> head
    data = tmp_path / "d.npz"
    np.savez(data, x=normal(ROWS, 6, seed=0), y=normal(ROWS, 2))
    keys: list[tuple[str, int]] = []
    wrap = layer_calls._wrap_call

    def counted(layer, path, wanted, logits, route):
        def handled():
            routed = route()
            if routed is None:
                return None
            handle, calls = routed

            def seen(key, flat, args):
                keys.append(key)
                return handle(key, flat, args)

            return seen, calls

        return wrap(layer, path, wanted, logits, handled)

    monkeypatch.setattr(layer_calls, "_wrap_call", counted)
    over_data = ["--data", str(data), "--batch-size", "4"]
    commands = {
        "inspect": ["inspect", path, "--from", "shared", "--to", "shared@1"],
        "inspect --data": ["inspect", path, "--from", "pre", "--to", "head", *over_data],
        "scan": ["scan", path],
        "scan --data": ["scan", path, *over_data],
        "check": ["check", path],
        "check --data": ["check", path, *over_data],
        "fit": ["fit", path, *over_data, "--loss", "mse", "--optimizer", "sgd", "--steps", "3"],
    }
    for name, args in commands.items():
        keys.clear()
        out = CliRunner().invoke(main, args)
        assert out.exit_code in (0, 1), (name, out.output)
        assert keys, f"{name} looked inside no layer call through the one wrapper"
        # the shared layer's two calls reach the handler as (path, 0) and (path, 1)
        shared = {call for key_path, call in keys if key_path == "shared"}
        if name != "inspect --data":  # pre -> head watches pre and head only
            assert shared == {0, 1}, (name, sorted(set(keys)))
        assert {Site.of_call(k).ref for k in keys if k[0] == "shared"} <= {"shared", "shared@1"}


def test_no_module_but_layer_calls_replaces_a_layers_call():
    root = Path(layergrad.__file__).parent
    offenders = []
    for module in root.rglob("*.py"):
        if module.name == "layer_calls.py" and module.parent.name == "engine":
            continue
        for node in ast.walk(ast.parse(module.read_text(encoding="utf-8"))):
            targets = node.targets if isinstance(node, ast.Assign) else []
            if any(isinstance(t, ast.Attribute) and t.attr == "call" for t in targets):
                offenders.append(f"{module.relative_to(root)}:{node.lineno}")
            is_setattr = (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "setattr"
                and len(node.args) > 1
                and isinstance(node.args[1], ast.Constant)
                and node.args[1].value == "call"
            )
            if is_setattr:
                offenders.append(f"{module.relative_to(root)}:{node.lineno}")
    assert not offenders, offenders


def test_a_compiled_loss_is_read_one_level_deep_in_its_own_order():
    """A dict or list of losses is read as Keras reads it, one entry per output in the order
    given: the first that is no loss is named, and a nested dict is no loss."""
    from layergrad.engine.compiled_loss import loss_error

    assert loss_error("mse") is None and loss_error(["mse", None]) is None
    assert loss_error({"out_b": 3, "out_a": 5}) == "cannot interpret loss '3'"
    assert loss_error({"o": {"p": "mse"}}) is not None
