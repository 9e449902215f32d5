"""A planned repair and the words it is written in: the change as the user writes it.

A `Plan` holds the edits of the model's config (`model/config_edit.py`) and of its compile
config that make one repair, the weights left to Keras's initialisers, and the code line
`before -> after` in the model's own terms (`Dense(1, activation="softmax")` ->
`Dense(1, activation="sigmoid")`). No TensorFlow.

Every name read from the model (a layer, an output, an input, a loss) goes into a code line
through `render/escape`: as a Python string literal (`python_string`), or bare only where it
is a plain identifier (`python_name`); a class that is no identifier cannot be written, and
its repair is not offered (`Unwritable`). A reviewer who commits a suggestion runs nothing
but the Keras calls the repair names.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from layergrad.model import config_edit as ed
from layergrad.model.config import serialized_name
from layergrad.model.config_edit import Config, as_object
from layergrad.model.loss_forms import loss_class
from layergrad.render.escape import python_name, python_string, python_value

Edit = Callable[[Config], None]  # an edit of the model's config or of its compile config


@dataclass(frozen=True)
class Plan:
    """One repair: its finding and layer, the change and why, the code lines, the edits.

    `model_edits` change the model's config, `compile_edits` its compile config; `fresh`
    lists (layer path, weight name or "*") left to Keras's initialisers in the copy; `covers`
    are the other findings this repair should make go away (one wrong head can make two).
    """

    finding: str
    layer: str | None
    change: str
    code: tuple[str, ...]
    model_edits: tuple[Edit, ...] = ()
    compile_edits: tuple[Edit, ...] = ()
    fresh: tuple[tuple[str, str], ...] = ()
    covers: tuple[str, ...] = field(default=())
    alternatives: tuple[Plan, ...] = ()  # other forms of this repair; with data the best wins


class Unwritable(ValueError):
    """A class or function name that cannot stand bare in Python code: no code line for it."""


def code_name(name: str) -> str:
    """`name` to write bare in code (a class, a function); Unwritable when it is no
    identifier."""
    bare = python_name(name)
    if bare is None:
        raise Unwritable(f"{python_string(name)} is not a Python name")
    return bare


def at(*paths: str) -> str:
    """Where a change is made: ` at "dense"`, ` at "dense", "dropout"`."""
    return " at " + ", ".join(python_string(p) for p in paths)


def layer_code(entry: Mapping[str, object], **changes: object) -> str:
    """A layer as written in code: `Dense(3, activation="softmax")`, with `changes` applied."""
    found = entry.get("config")
    options = dict(found) if isinstance(found, Mapping) else {}
    options.update(changes)
    cls = code_name(str(entry.get("class_name", "Layer")))
    args: list[str] = []
    for key in ("units", "filters", "rate"):
        if options.get(key) is not None:
            args.append(python_value(options[key]))
            break
    act = serialized_name(options.get("activation"))
    if cls == "Activation" and act is not None:
        return f"Activation({python_string(act)})"
    if cls == "Rescaling" and "scale" in options:
        args.append(python_value(options["scale"]))
    if act is not None and (act != "linear" or "activation" in changes):
        args.append(f"activation={python_string(act)}")
    if (init := serialized_name(changes.get("kernel_initializer"))) is not None:
        args.append(f"kernel_initializer={python_string(_snake(init))}")
    return f"{cls}({', '.join(args)})"


def _snake(name: str) -> str:
    """`GlorotUniform` -> `glorot_uniform` (the string Keras takes)."""
    return name if "_" in name else re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


def loss_code(loss: object, output: str | None = None) -> str:
    """A loss as written in `model.compile`: `loss="mse"` or
    `loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True)`; `output` names the
    output of a loss given per output."""
    text = _one_loss(loss)
    return f"loss={{{python_string(output)}: {text}}}" if output else f"loss={text}"


def _one_loss(loss: object) -> str:
    """One loss as written: a name (`"mse"`), a function (`keras.losses.mse`), or a class
    with the options that differ from Keras's defaults (`from_logits`, `label_smoothing`)."""
    if isinstance(loss, str):
        return python_string(loss)
    if isinstance(loss, Mapping) and isinstance(loss.get("class_name"), str):
        inner = loss.get("config")
        if loss["class_name"] == "function" and isinstance(inner, str):
            bare = python_name(inner)  # else the function's name, which compile takes too
            return f"keras.losses.{bare}" if bare else python_string(inner)
        if python_name(loss["class_name"]) is None:  # no class to write: its name as a string
            return python_string(str(loss["class_name"]))
        options = inner if isinstance(inner, Mapping) else {}
        args = []
        if options.get("from_logits"):
            args.append("from_logits=True")
        if options.get("label_smoothing"):
            args.append(f"label_smoothing={python_value(options['label_smoothing'])}")
        return f"keras.losses.{loss['class_name']}({', '.join(args)})"
    return python_value(loss)


def loss_with(name: str, from_logits: bool) -> object:
    """A loss to compile with: its name, or its class with `from_logits=True`."""
    if not from_logits:
        return name
    return {
        "module": "keras.losses",
        "class_name": loss_class(name),
        "config": {"name": name, "reduction": "sum_over_batch_size", "from_logits": True},
        "registered_name": None,
    }


def loss_of(compiled: Mapping[str, object], output: str, index: int) -> object:
    """The compiled loss of one output (as stored)."""
    loss = compiled.get("loss")
    if isinstance(loss, Mapping) and "class_name" not in loss:
        return loss.get(output)
    if isinstance(loss, list):
        return loss[index] if index < len(loss) else None
    return loss


def set_loss(output: str, index: int, new: object) -> Edit:
    """An edit of the compile config: output `output`'s loss becomes `new`."""

    def edit(compiled: Config) -> None:
        loss = compiled.get("loss")
        if isinstance(loss, dict) and "class_name" not in loss:
            loss[output] = copy.deepcopy(new)
        elif isinstance(loss, list) and index < len(loss):
            loss[index] = copy.deepcopy(new)
        else:
            compiled["loss"] = copy.deepcopy(new)

    return edit


def set_learning_rate(rate: float) -> Edit:
    """An edit of the compile config: the optimizer's learning rate."""

    def edit(compiled: Config) -> None:
        optimizer = compiled.get("optimizer")
        if isinstance(optimizer, dict):
            as_object(optimizer.setdefault("config", {}))["learning_rate"] = rate

    return edit


def listing(names: Sequence[str], shown: int = 4) -> str:
    """`a, b, c, d and 3 more`."""
    head = ", ".join(names[:shown])
    return head + (f" and {len(names) - shown} more" if len(names) > shown else "")


def option_edit(path: str, key: str, value: object) -> Edit:
    """An edit: one option of a layer's config."""
    return lambda c: ed.set_option(c, path, key, value)


def replace_edit(path: str, new: Config) -> Edit:
    """An edit: the layer at `path` becomes `new`, reading what it read."""

    def edit(c: Config) -> None:
        entry = ed.layer_entry(c, path)
        nodes = entry.get("inbound_nodes")
        entry.clear()
        entry.update(new)
        if isinstance(nodes, list):  # the tensors it read; not the old call's keywords (mask)
            entry["inbound_nodes"] = [
                {**node, "kwargs": {}} if isinstance(node, dict) else node for node in nodes
            ]

    return edit


def move_before_edit(moved: str, before: str) -> Edit:
    """An edit: the layer `moved` taken out and put right before `before`."""

    def edit(c: Config) -> None:
        entry = copy.deepcopy(ed.layer_entry(c, moved))
        entry.pop("inbound_nodes", None)
        entry.pop("build_config", None)
        ed.remove_layer(c, moved)
        ed.insert_before(c, before, entry)

    return edit
