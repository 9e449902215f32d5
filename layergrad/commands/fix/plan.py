"""What `fix` plans: a `Plan` for each finding with a mechanical repair, in the model's own code.

A `Plan` holds the edits of the model's config (`model/config_edit.py`) and of its compile
config that make one repair, the weights left to Keras's initialisers, and the code line
`before -> after` in the model's own terms (`Dense(1, activation="softmax")` ->
`Dense(1, activation="sigmoid")`). No TensorFlow: the rules read the file's config, the
weights as NumPy arrays, the data's input statistics and the original's training run.

- the words: every name read from the model (a layer, an output, an input, a loss) goes into
  a code line through `render/escape`: as a Python string literal (`python_string`), or bare
  only where it is a plain identifier (`python_name`); a class that is no identifier cannot be
  written, and its repair is not offered (`Unwritable`). A reviewer who commits a suggestion
  runs nothing but the Keras calls the repair names;
- the repairs of an output head and its loss (`HeadRules`: `loss_mismatch`,
  `target_mismatch`, `linear_stack`): the `ConfigChange` of the first head or label rule that
  applies (`head_rules`, `target_fit`), so `check` and `fix` never disagree;
- the repairs of weights, inputs and the learning rate: kernels scaled far off their
  initialiser's scale, biases far off zero, raw inputs, a learning rate that diverges or does
  not learn;
- which repair each finding gets (docs/fix.md): `plan_repairs` walks the original's findings
  (check's, and training's with data) and asks the repairs of each (`REPAIRS`, by name in
  `PLANNERS`) for a `Plan`; a finding no rule can repair is left as its `Reason`, with check's
  own message and hint, and so is one whose code line would have to name a class that is no
  Python name. One plan that fixes two findings (a softmax over one unit makes both
  `loss_mismatch` and `constant_output`) is planned once.
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property, partial
from typing import TypeGuard

import numpy as np

from layergrad.core.fit_results import Checkpoint, FitReport
from layergrad.core.results import FileVerdict, Reason
from layergrad.core.vocab import Finding, Severity
from layergrad.diagnose.causes import fallback_hint
from layergrad.files.file_info import FileInfo
from layergrad.model import config_edit as ed
from layergrad.model import head_rules
from layergrad.model.config import serialized_name
from layergrad.model.config_edit import Config, as_object
from layergrad.model.head_forms import Head, keyed_by_head, output_heads, output_keys, units_layer
from layergrad.model.head_rules import Change, HeadFacts, repairs
from layergrad.model.label_summary import LabelSummary
from layergrad.model.linear_stacks import redundant_pairs, whole_network
from layergrad.model.loss_forms import loss_class
from layergrad.model.loss_forms import per_output as loss_specs
from layergrad.model.target_fit import IDS_HINT, head_activation, ids_beyond_count, label_repair
from layergrad.render.escape import python_name, python_string, python_value
from layergrad.training.rules import BY_CODE
from layergrad.training.rules import RULES as TRAINING_RULES

F = Finding

Edit = Callable[[Config], None]  # an edit of the model's config or of its compile config


@dataclass(frozen=True)
class Plan:
    """One repair: its finding and layer, the change and why, the code lines, the edits.

    `model_edits` change the model's config, `compile_edits` its compile config; `fresh`
    lists (layer path, weight name or "*") left to Keras's initialisers in the copy, or
    (layer path, FAR_BIAS): its bias carried over with the entries beyond BIAS_LIMIT at 0; `covers`
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
    for key in ("kernel_initializer", "bias_initializer"):
        if (init := serialized_name(changes.get(key))) is not None:
            if "_" not in init:  # `GlorotUniform` -> `glorot_uniform`, the string Keras takes
                init = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", init).lower()
            args.append(f"{key}={python_string(init)}")
    return f"{cls}({', '.join(args)})"


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


def set_loss(compiled: Config, output: str, index: int, new: object) -> None:
    """An edit of the compile config: output `output`'s loss becomes `new`."""
    loss = compiled.get("loss")
    if isinstance(loss, dict) and "class_name" not in loss:
        loss[output] = copy.deepcopy(new)
    elif isinstance(loss, list) and index < len(loss):
        loss[index] = copy.deepcopy(new)
    else:
        compiled["loss"] = copy.deepcopy(new)


def set_learning_rate(compiled: Config, rate: float) -> None:
    """An edit of the compile config: the optimizer's learning rate."""
    optimizer = compiled.get("optimizer")
    if isinstance(optimizer, dict):
        as_object(optimizer.setdefault("config", {}))["learning_rate"] = rate


def listing(names: Sequence[str], shown: int = 4) -> str:
    """`a, b, c, d and 3 more`."""
    head = ", ".join(names[:shown])
    return head + (f" and {len(names) - shown} more" if len(names) > shown else "")


def option_edit(path: str, key: str, value: object) -> Edit:
    """An edit: one option of a layer's config."""
    return lambda c: ed.set_option(c, path, key, value)


def replace_layer(c: Config, path: str, new: Config) -> None:
    """An edit: the layer at `path` becomes `new`, reading what it read."""
    entry = ed.layer_entry(c, path)
    nodes = entry.get("inbound_nodes")
    entry.clear()
    entry.update(new)
    if isinstance(nodes, list):  # the tensors it read; not the old call's keywords (mask)
        entry["inbound_nodes"] = [
            {**node, "kwargs": {}} if isinstance(node, dict) else node for node in nodes
        ]


def move_before(c: Config, moved: str, before: str) -> None:
    """An edit: the layer `moved` taken out and put right before `before`."""
    entry = copy.deepcopy(ed.layer_entry(c, moved))
    entry.pop("inbound_nodes", None)
    entry.pop("build_config", None)
    ed.remove_layer(c, moved)
    ed.insert_before(c, before, entry)


# -- the repairs of a head and its loss ----------------------------------------------------


class HeadRules:
    """The repairs of each head of one model (see the module doc)."""

    def __init__(self, info: FileInfo, labels: Mapping[str, LabelSummary]) -> None:
        self.info = info
        self.compiled = info.compile_config
        self.heads = output_heads(info.config, info.graph) if info.graph.known else []
        names = [h.name for h in self.heads]
        loss = keyed_by_head(self.compiled.get("loss"), info.config)
        self.specs = loss_specs(loss, names) if loss else [None] * len(names)
        if len(self.heads) == 1 and len(labels) == 1:
            labels = {names[0]: next(iter(labels.values()))}
        self.labels = labels

    # -- the pieces of one plan -------------------------------------------------------------

    def _entry(self, path: str) -> dict[str, object]:
        entry = self.info.graph.get(path)
        return {"class_name": entry.class_name, "config": entry.config} if entry else {}

    def _units_layer(self, path: str) -> str:
        """The layer holding the head's units (the Dense before a Softmax / Activation)."""
        entry = self.info.graph.get(path)
        return units_layer(self.info.graph, entry, lambda e: True).path if entry else path

    def _activation(self, head: Head, change: Change, finding: str) -> Plan:
        """The head's activation (and units, when the change gives them) changes; the loss
        stays, or becomes the change's loss (with its `from_logits`)."""
        act, units, loss = change.activation or head_activation(head), change.units, change.loss
        layer = head.layer
        entry = self._entry(layer)
        config = entry.get("config")
        # the layer holding the units: the head itself, or the Dense before an activation layer
        units_at = self._units_layer(layer) if units is not None else layer
        own = units_at == layer  # one layer holds the activation and the units
        edits: list[Edit] = []
        code = []
        if not (isinstance(config, dict) and "activation" in config):
            # an activation layer without options (Softmax, ReLU): replaced
            new = ed.new_layer("Activation", layer.split("/")[-1], {"activation": act})
            edits.append(partial(replace_layer, path=layer, new=new))
            code.append(f"{layer_code(entry)} -> Activation({python_string(act)}){at(layer)}")
            own = False
        elif own or head_activation(head) != act or entry.get("class_name") != "Activation":
            edits.append(option_edit(layer, "activation", act))
            more: dict[str, object] = {"units": units} if own and units is not None else {}
            after = layer_code(entry, activation=act, **more)
            if after != layer_code(entry):  # a head that already is what the loss needs
                code.append(f"{layer_code(entry)} -> {after}{at(layer)}")
        fresh: tuple[tuple[str, str], ...] = ()
        if units is not None:  # a convolution head holds its units as `filters`
            held = self._entry(units_at).get("config")
            key = "filters" if isinstance(held, dict) and "filters" in held else "units"
            edits.append(option_edit(units_at, key, units))
            fresh = ((units_at, "*"),)
        if units is not None and not own:  # the units on the Dense before an activation layer
            dense = self._entry(units_at)
            code.append(f"{layer_code(dense)} -> {layer_code(dense, units=units)}{at(units_at)}")
        compile_edits: list[Edit] = []
        if loss is not None and self.specs[self.heads.index(head)] != (loss, change.from_logits):
            compile_edits.append(self._loss_edit(head, loss, change.from_logits, code))
        return Plan(finding, layer, change.why, tuple(code), tuple(edits), tuple(compile_edits),
                    fresh)  # fmt: skip

    def _loss(self, head: Head, change: Change, finding: str) -> Plan | None:
        """The head's loss changes; the model stays."""
        if change.loss is None:
            return None
        code: list[str] = []
        edit = self._loss_edit(head, change.loss, change.from_logits, code)
        return Plan(finding, head.layer, change.why, tuple(code), (), (edit,))

    def _flatten(self, head: Head, change: Change, finding: str) -> Plan:
        """A `Flatten` right before the head (a Dense on a feature map); the head's kernel
        is drawn afresh, as its input width changes."""
        layer = head.layer

        def edit(c: ed.Config) -> None:
            ed.insert_before(c, layer, ed.new_layer("Flatten", ed.fresh_name(c, "flatten"), {}))
            ed.layer_entry(c, layer).pop("build_config", None)  # built for the old input

        code = f"{layer_code(self._entry(layer))} -> Flatten(), {layer_code(self._entry(layer))}"
        return Plan(finding, layer, change.why, (code + at(layer),), (edit,), (), ((layer, "*"),))

    def _loss_edit(self, head: Head, name: str, from_logits: bool, code: list[str]) -> Edit:
        i = self.heads.index(head)
        key = self._loss_key(head)
        old = loss_of(self.compiled, key, i)
        new = loss_with(name, from_logits)
        output = key if len(self.heads) > 1 else None
        code.append(f"{loss_code(old, output)} -> {loss_code(new, output)}")
        return partial(set_loss, output=key, index=i, new=new)

    def _loss_key(self, head: Head) -> str:
        """The key of the head's loss in a dict of losses: its output's dict key when the
        model's outputs are a dict keyed that way (`Model(x, {"price": ...})`), else the
        name of the layer that makes it."""
        loss = self.compiled.get("loss")
        if not isinstance(loss, Mapping) or head.name in loss:
            return head.name
        keys = (key for key, layer in output_keys(self.info.config) if layer == head.name)
        return next((key for key in keys if key in loss), head.name)

    # -- the rules --------------------------------------------------------------------------

    def plans(self, finding: str) -> list[Plan]:
        """Repairs for every head with a problem these rules know."""
        found: list[Plan] = []
        for head, spec in zip(self.heads, self.specs, strict=True):
            rule = self._targets if finding == Finding.TARGET_MISMATCH else self._head
            plan = rule(head, spec, self.labels.get(head.name))
            if plan is not None and head_activation(head) == "softmax" and head.units == 1:
                # always 1.0 before: the same output and predictions for every input
                plan = replace(plan, covers=(Finding.CONSTANT_OUTPUT, Finding.CONSTANT_PREDICTIONS))
            found += [plan] if plan is not None else []
        return found

    def stray_ids(self) -> list[Reason]:
        """`target_mismatch` of each head whose class ids run far beyond their count: a data
        problem, said as such (`targets.ids_beyond_count`), with no head widened to it."""
        found = []
        for head in self.heads:
            y = self.labels.get(head.name)
            ids = y is not None and y.count and y.integers and y.width == 1 and y.low >= 0
            why = ids_beyond_count(y) if y is not None and ids else None
            if why is not None:
                found.append(Reason(Finding.TARGET_MISMATCH, why, IDS_HINT, head.layer))
        return found

    def _head(
        self, head: Head, spec: tuple[str, bool] | None, y: LabelSummary | None
    ) -> Plan | None:
        """The repair of the first rule of `head_rules.RULES` that applies to the head and has
        one: the rules `check` judges the head by, so the two never disagree."""
        changes = self._changes(replace(head, activation=head_activation(head)), spec, y)
        made = (self._make(head, change, Finding.LOSS_MISMATCH) for change in changes)
        return next((plan for plan in made if plan is not None), None)

    def _changes(
        self, seen: Head, spec: tuple[str, bool] | None, y: LabelSummary | None
    ) -> list[Change]:
        """The `loss_mismatch` repairs of the rules that apply to the head as `seen` (its
        activation and units) under the loss `spec`, in table order."""
        stack = whole_network(self.info.graph, seen.layer) if len(self.heads) == 1 else None
        facts = HeadFacts(
            seen, *head_rules.loss_of(spec), y, stack.layers if stack is not None else ()
        )
        return [c for rule, c in repairs(facts) if rule.code == Finding.LOSS_MISMATCH]

    def _make(self, head: Head, change: Change, finding: str) -> Plan | None:
        """The plan that makes `change` to the model and its loss (None: no plan of its kind)."""
        make = {
            "flatten": self._flatten,
            "loss": self._loss,
            "activation": self._activation,
            "remove_before": self._relu_removed,
            "move_dropout": self._dropout_moved,
            "relu_hidden": self._all_linear,
        }.get(change.kind)
        return make(head, change, finding) if make is not None else None

    def _relu_removed(self, head: Head, change: Change, finding: str) -> Plan | None:
        spot = head.before_layer
        if spot is None:
            return None
        if self._entry(spot).get("class_name") in ("ReLU", "Activation"):
            return self._removed(spot, f"'{spot}' is removed: the softmax at '{head.layer}' must "
                                 "see raw logits, negative ones included")  # fmt: skip
        return Plan(Finding.LOSS_MISMATCH, spot, change.why, *self._activations([spot], "linear"))

    def _removed(self, path: str, why: str) -> Plan:
        """The layer at `path` taken out of the model."""
        code = f"{layer_code(self._entry(path))}{at(path)} -> (removed)"
        remove = partial(ed.remove_layer, path=path)
        return Plan(Finding.LOSS_MISMATCH, path, why, (code,), (remove,))

    def _activations(self, paths: list[str], act: str) -> tuple[tuple[str, ...], tuple[Edit, ...]]:
        """The code lines and edits that set the activation of each layer of `paths`."""
        code = tuple(
            f"{layer_code(self._entry(p))} -> {layer_code(self._entry(p), activation=act)}{at(p)}"
            for p in paths
        )
        return code, tuple(option_edit(p, "activation", act) for p in paths)

    def _dropout_moved(self, head: Head, change: Change, finding: str) -> Plan | None:
        moved = head.dropout
        drop = self.info.graph.get(moved) if moved else None
        if moved is None or drop is None or len(drop.inbound) != 1:
            return None
        weighted = drop.inbound[0]
        found = self.info.graph.get(weighted)
        if found is not None and found.class_name in ("Softmax", "Activation", "ReLU"):
            weighted = self._units_layer(weighted)
        dense, dropout = layer_code(self._entry(weighted)), layer_code(self._entry(moved))
        feeding = self.info.graph.get(weighted)
        before = feeding.inbound[0] if feeding is not None and feeding.inbound else None
        earlier = self.info.graph.get(before) if before else None
        if earlier is not None and "Dropout" in earlier.class_name:  # as head_forms reads one
            return self._removed(moved, f"Dropout '{moved}' is removed: '{before}' already "
                                 f"drops the features '{weighted}' reads; dropout regularises "
                                 "the features, never the logits")  # fmt: skip
        return Plan(Finding.LOSS_MISMATCH, moved, f"Dropout '{moved}' moves before "
                    f"'{weighted}': dropout regularises the features, never the logits", (
                        f"{dense}, {dropout} -> {dropout}, {dense}{at(weighted, moved)}",),
                    (partial(move_before, moved=moved, before=weighted),))  # fmt: skip

    def _hidden(self, head: Head) -> list[str]:
        """The weight layers of a network that is one linear map up to its one head, but the
        head and its Dense (empty for a model of several outputs)."""
        if len(self.heads) != 1:
            return []
        stack = whole_network(self.info.graph, head.layer)
        own = (head.layer, self._units_layer(head.layer))
        return [p for p in (stack.layers if stack else ()) if p not in own]

    def _all_linear(self, head: Head, change: Change, finding: str) -> Plan | None:
        """Every weight layer but the head linear: an activation on the hidden ones."""
        plan = self._relu_on(self._hidden(head), Finding.LOSS_MISMATCH)
        return replace(plan, layer=head.layer) if plan is not None else None

    def linear_stacks(self) -> Plan | None:
        """`linear_stack`: activation='relu' on each weight layer that is linear with the next
        one (the hidden layers of a linear network, the first layer of a redundant pair)."""
        paths = self._hidden(self.heads[0]) if self.heads else []
        paths += [pair.layers[0] for pair in redundant_pairs(self.info.graph)]
        plan = self._relu_on(paths, "linear_stack")
        if plan is None:
            return None
        return replace(plan, change=plan.change + " (or one Dense layer, if a linear map is meant)")

    def _relu_on(self, paths: list[str], finding: str) -> Plan | None:
        """activation='relu' on each layer of `paths` the graph holds (None: none)."""
        hidden = [p for p in dict.fromkeys(paths) if self.info.graph.get(p) is not None]
        if not hidden:
            return None
        return Plan(finding, hidden[0], f"activation='relu' on {listing(hidden)}: a "
                    "non-linearity between the weight layers lets the network fit more than "
                    "one linear map", *self._activations(hidden, "relu"))  # fmt: skip

    def _targets(
        self, head: Head, spec: tuple[str, bool] | None, y: LabelSummary | None
    ) -> Plan | None:
        """The label repair, and with it what the head rules still ask of the head as that
        repair leaves it (class ids under a ReLU head: the sparse loss *and* a softmax), so
        one plan clears both the labels' finding and the head's."""
        made = label_repair(head, spec, y)
        plan = self._make(head, made, Finding.TARGET_MISMATCH) if made is not None else None
        if made is None or plan is None or made.kind == "flatten":
            return plan
        seen = replace(head, activation=made.activation or head_activation(head),
                       units=made.units or head.units)  # fmt: skip
        after = (made.loss, made.from_logits) if made.loss is not None else spec
        joined = (self._joined(head, plan, made, c) for c in self._changes(seen, after, y))
        return next((j for j in joined if j is not None), plan)

    def _joined(self, head: Head, plan: Plan, made: Change, change: Change) -> Plan | None:
        """The label repair `plan` (which made `made`) joined with the head rule's `change` of
        the head it leaves."""
        why = f"{plan.change}; and {change.why}"
        if change.kind == "activation":
            logits = False if change.loss else made.from_logits
            both = Change("activation", why, change.activation, change.loss or made.loss, logits,
                          made.units)  # fmt: skip
        elif change.kind == "loss" and made.kind != "loss":
            both = Change("activation", why, made.activation, change.loss, change.from_logits,
                          made.units)  # fmt: skip
        elif change.kind == "loss":
            both = replace(change, why=why)
        else:
            other = self._make(head, change, plan.finding)
            if other is None:
                return None
            return Plan(plan.finding, plan.layer, why, plan.code + other.code,
                        plan.model_edits + other.model_edits, plan.compile_edits
                        + other.compile_edits, plan.fresh + other.fresh)  # fmt: skip
        return self._make(head, both, plan.finding)


# -- the repairs of weights, inputs and the learning rate ----------------------------------

KERNEL_FACTOR = 4.0  # a kernel whose std is this many times off its initialiser's: far off
BIAS_LIMIT = 10.0  # a bias entry beyond this (in |value|): far off (Keras starts at 0)
FAR_BIAS = "bias>limit"  # `Plan.fresh`: the bias carried over, its entries beyond the limit 0
TARGET_RATIO = 1e-3  # the update ratio a healthy step has (lr x |grad| / |W|)
RELU_LIKE = ("relu", "relu6", "elu", "selu", "gelu", "leaky_relu", "silu", "swish")


@dataclass(frozen=True)
class InputStats:
    """One float input over the data: min, max, mean |x|, per-feature mean and variance."""

    name: str
    low: float
    high: float
    mean_abs: float
    mean: tuple[float, ...]
    variance: tuple[float, ...]


def expected_std(kernel_shape: Sequence[int], activation: str) -> float | None:
    """The std Keras's default for this layer draws (Glorot), or He's for ReLU layers."""
    if len(kernel_shape) < 2:
        return None
    receptive = math.prod(kernel_shape[:-2]) if len(kernel_shape) > 2 else 1
    fan_in, fan_out = kernel_shape[-2] * receptive, kernel_shape[-1] * receptive
    if activation in RELU_LIKE:
        return math.sqrt(2.0 / fan_in)
    return math.sqrt(2.0 / (fan_in + fan_out))


def kernels(
    info: FileInfo, weights: Mapping[str, Mapping[str, np.ndarray]], finding: str
) -> Plan | None:
    """Kernels whose spread is far off the Glorot (He, for ReLU) scale: re-initialised."""
    names, factors, code, edits = [], [], [], []
    for path, arrays in weights.items():
        kernel = arrays.get("kernel")
        entry = info.graph.get(path)
        if kernel is None or entry is None or kernel.size < 4:
            continue
        act = str(entry.config.get("activation") or "linear")
        want = expected_std(kernel.shape, act)
        factor = float(np.std(kernel)) / want if want else 0.0
        # all zero: every unit the same, no signal; else a spread far off either way
        zero = want is not None and not np.any(kernel)
        if not zero and not (factor > 0 and max(factor, 1 / factor) >= KERNEL_FACTOR):
            continue
        init = "he_normal" if act in RELU_LIKE else "glorot_uniform"
        old = {"class_name": entry.class_name, "config": entry.config}
        names.append(path)
        factors.append(factor)
        code.append(f"{layer_code(old)} -> {layer_code(old, kernel_initializer=init)}{at(path)}")
        edits.append(option_edit(path, "kernel_initializer", init))
    if not names:
        return None
    factors.sort()
    span = f"{factors[0]:.2g}x" if len(factors) == 1 else f"{factors[0]:.2g}x to {factors[-1]:.2g}x"
    span = "0x (all zero)" if factors[-1] == 0 else span
    why = (
        f"the kernels of {listing(names)} are re-initialised: their spread is {span} the scale "
        "of Keras's initialiser for their activation (Glorot; He for ReLU), so the signal "
        + ("grows" if factors[-1] > 1 else "shrinks")
        + " layer after layer"
    )
    fresh = tuple((p, "kernel") for p in names)
    return Plan(finding, names[0], why, tuple(code), tuple(edits), (), fresh)


def biases(
    info: FileInfo, weights: Mapping[str, Mapping[str, np.ndarray]], finding: str
) -> Plan | None:
    """Biases far off zero (a layer pinned dead or saturated): re-initialised as Keras would."""
    far = []
    for path, arrays in weights.items():
        bias = arrays.get("bias")
        if bias is not None and bias.size and float(np.max(np.abs(bias))) > BIAS_LIMIT:
            far.append((path, float(bias[np.argmax(np.abs(bias))]), bias.shape))
    if not far:
        return None
    names = [p for p, _, _ in far]
    code = tuple(
        f"bias of {python_string(p)} (up to {v:+g}) -> {_get_layer(p)}.bias.assign(keras.ops."
        f"where(keras.ops.abs({_get_layer(p)}.bias) > {BIAS_LIMIT:g}, 0.0, {_get_layer(p)}.bias))"
        for p, v, _ in far
    )
    why = (
        f"the bias entries of {listing(names)} beyond {BIAS_LIMIT:g} are reset to zero (Keras's "
        f"default; the others are kept): a bias of {far[0][1]:+g} pins its unit (dead or "
        "saturated) for every input"
    )
    # drawn afresh from the layer's config: its bias_initializer too (it may be what set them)
    configs = [(p, info.graph.get(p)) for p in names]
    edits, drawn = [], []
    for path, entry in configs:
        if entry is None or "bias_initializer" not in entry.config:
            continue
        edits.append(option_edit(path, "bias_initializer", "zeros"))
        # its initializer as a config holds it (`"zeros"`, or `{"class_name": "Zeros"}`)
        init = entry.config["bias_initializer"]
        init = init.get("class_name", "") if isinstance(init, Mapping) else init
        if str(init).lower() != "zeros":  # say it: it set them
            old = {"class_name": entry.class_name, "config": entry.config}
            drawn.append(
                f"{layer_code(old)} -> {layer_code(old, bias_initializer='zeros')}{at(path)}"
            )
    fresh = tuple((p, FAR_BIAS) for p in names)
    return Plan(finding, names[0], why, (*code, *drawn), tuple(edits), (), fresh)


def _get_layer(path: str) -> str:
    """`model.get_layer("enc").get_layer("dense")` for the layer at `enc/dense`."""
    return "model" + "".join(f".get_layer({python_string(name)})" for name in path.split("/"))


def scale_inputs(info: FileInfo, stats: Sequence[InputStats], finding: str) -> Plan | None:
    """Raw inputs: Rescaling(1/255) for 8-bit values, else an adapted Normalization."""
    from layergrad.diagnose.forward_findings import UNSCALED  # the bound `scan` flags on

    raw = [s for s in stats if s.mean_abs > UNSCALED]
    if not raw:
        return None
    code = []
    edits = []
    for s in raw:
        pixels = s.low >= 0 and s.high <= 255
        tensor = python_name(s.name) or "inputs"  # the input's variable in the user's code
        if pixels:
            cls = "Rescaling"
            options: ed.Config = {"scale": 1 / 255, "offset": 0.0}
            code.append(f"x = {tensor} -> x = Rescaling(1/255)({tensor}){at(s.name)}")
        else:
            cls = "Normalization"
            options = {"axis": -1, "mean": list(s.mean), "variance": list(s.variance)}
            code.append(f"x = {tensor} -> x = norm({tensor}){at(s.name)} (norm = "
                        "Normalization(); norm.adapt(x_train))")  # fmt: skip
        edits.append(partial(_insert_input, source=s.name, cls=cls, options=options))
    names = [s.name for s in raw]
    # the first layer that reads the first raw input, where its scale did harm (the layer
    # `check` names); the input itself when the graph does not say
    graph = info.graph
    readers = (node[0] for node in graph.order if (names[0], 0) in graph.preds.get(node, ()))
    reader = next(readers, names[0])
    why = (
        f"the inputs {listing(names)} are scaled in the model: values of mean |x| "
        f"{raw[0].mean_abs:.3g} (from {raw[0].low:g} to {raw[0].high:g}) reach the first "
        "layer with weights unscaled, its outputs and the first steps as many times too large "
        "(units pinned, or a ReLU network's logits and loss far above the trivial loss); a "
        "scaling layer first brings them to [0, 1] (8-bit pixels) or to unit variance with "
        "the data's own statistics, the saved model scales its own inputs, and the learning "
        "rate is left as it is"
    )
    return Plan(finding, reader, why, tuple(code), tuple(edits))


LOWER = ("diverging", "oscillating")  # the findings of a rate too high
RAISE = ("not_learning", "slow_convergence")  # ... and too low
# too high when the first steps say so: one step moving a layer's weights by a tenth of their
# size or more (100x a healthy step) explodes them or pushes ReLU units dead; else the cause
# is elsewhere (the kernels' scale, the inputs) and the rate is left alone
FIRST_STEPS = ("exploding", "dying_units")
STEP_TOO_LARGE = 0.1
FIRST_TARGET = 1e-2  # the first steps of a healthy run move the weights 10x more than later ones
# optimizers whose first steps move each weight by about the learning rate, whatever its
# gradient (the step is normalised by the gradient's own running size)
ADAPTIVE = ("Adam", "AdamW", "Adamax", "Nadam", "RMSprop", "Adagrad", "Lion")


def learning_rate(
    fit: FitReport,
    finding: str,
    weights: Mapping[str, Mapping[str, np.ndarray]],
    compiled: Mapping[str, object] | None = None,
) -> Plan | None:
    """`diverging` / `oscillating` (too high), `not_learning` / `slow_convergence` (too low):
    the learning rate times the factor that brings the median update ratio of the first half
    of the run to about TARGET_RATIO, and at least 3x down (or up) as the finding says (up
    when the steps are 10x below healthy ones, whatever the finding).
    `exploding` / `dying_units` in training, or a `diverging` of the first steps: down, to
    FIRST_TARGET, from the first steps' ratios when one of them is STEP_TOO_LARGE or more
    (None otherwise)."""
    # a `diverging` of the run's first steps (the first tenth, at least 10): the rate did its
    # harm there, and the later steps of dead units say nothing of it
    at_step = next((f.step for f in fit.findings if str(f.code) == finding), None)
    early = finding == "diverging" and at_step is not None and at_step <= max(10, fit.steps // 10)
    lr, first = fit.learning_rate, finding in FIRST_STEPS or early
    if lr is None or not lr > 0:
        return None
    if first:
        ratios, how = _first_steps(fit, lr, weights)
        if not ratios or max(ratios) < STEP_TOO_LARGE:
            return None
    else:
        ratios = _ratios(fit.checkpoints[: max(1, len(fit.checkpoints) // 2)])
        how = "(lr x |grad| / |W|) in the first half of the run"
    if not ratios:
        return None
    median = float(np.median(ratios))
    target = FIRST_TARGET if first else TARGET_RATIO
    toward = target / median
    # the finding says which way the rate must go, at least 3x that way; but steps 10x below
    # healthy ones are never too large: a loss that swings with them is noise from batch to
    # batch on a model that does not learn, and the rate goes up
    down = first or (finding in LOWER and median >= TARGET_RATIO / 10)
    factor = min(toward, 1 / 3) if down else max(toward, 3.0)
    step = (
        f"x{factor:.2g} brings it toward {target:g}"
        if factor == toward
        else f"x{factor:.2g}: at least 3x {'down' if down else 'up'}, as {finding} says"
    )
    measured = f"the median update ratio {how} is {median:.2g}; {step}"
    plan = _rate_plan(fit, finding, compiled, factor, measured)
    # ratios read from a run that blew up (or barely moved) misjudge the rate by decades: the
    # rates a decade at a time toward the original are tried too, and the data chooses
    others = []
    for k in range(1, ALTERNATIVES + 1):
        moved = factor * (10.0**k if down else 10.0**-k)
        if (down and moved > 1 / 3) or (not down and moved < 3.0):
            break
        tried = f"{measured}; x{moved:.2g} is {k} decade{'s' if k > 1 else ''} toward the original"
        others.append(_rate_plan(fit, finding, compiled, moved, tried))
    return replace(plan, alternatives=tuple(others))


ALTERNATIVES = 3  # other learning rates tried with data, a decade apart


def _rate_plan(
    fit: FitReport,
    finding: str,
    compiled: Mapping[str, object] | None,
    factor: float,
    measured: str,
) -> Plan:
    """The learning rate times `factor`; a schedule's rates each times `factor` (its other
    options kept: never replaced by the constant it was at)."""
    schedule = _schedule(compiled or {})
    if schedule is None:
        old = fit.learning_rate or 0.0
        new = _rounded(old * factor)
        why = f"the learning rate changes from {old:g} to {new:g}: {measured}"
        shown, edit = "{:g}", partial(set_learning_rate, rate=new)
    else:
        cls, key, old = schedule
        new = _rounded(old * factor)
        why = (
            f"the learning rate schedule {cls} is scaled x{factor:.2g} (its {key} from {old:g} "
            f"to {new:g}; its other options kept), not replaced by a constant: {measured}"
        )
        rate = "values=[{:g}, ...]" if key == "values" else f"{key}={{:g}}"
        shown, edit = f"{code_name(cls)}({rate}, ...)", partial(_scale_schedule, factor=factor)
    optimizer = code_name(fit.optimizer)
    code = (f"optimizer={optimizer}(learning_rate={shown.format(old)}) -> "
            f"optimizer={optimizer}(learning_rate={shown.format(new)})",)  # fmt: skip
    return Plan(finding, None, why, code, (), (edit,))


# the rates of Keras's schedules (a PiecewiseConstantDecay's are its `values`); the other
# options (steps, decay rates, fractions) keep the schedule's shape
SCHEDULE_RATES = ("initial_learning_rate", "end_learning_rate", "warmup_target", "values")


def _schedule(compiled: Mapping[str, object]) -> tuple[str, str, float] | None:
    """(the schedule's class, its first rate option, that rate) when the compiled optimizer's
    learning rate is a schedule with a rate to scale; None for a constant rate."""
    optimizer = compiled.get("optimizer") or compiled.get("optimizer_config")
    inner = optimizer.get("config") if isinstance(optimizer, Mapping) else None
    rate = inner.get("learning_rate") if isinstance(inner, Mapping) else None
    if not isinstance(rate, Mapping):
        return None
    cls, options = str(rate.get("class_name", "")), rate.get("config")
    if not cls.isidentifier() or not isinstance(options, Mapping):
        return None
    for key in SCHEDULE_RATES:
        value = options.get(key)
        first = value[0] if isinstance(value, list) and value else value
        if _number(first):
            return cls, key, float(first)
    return None


def _rounded(value: float) -> float:
    return float(f"{value:.2g}")


def _scale_schedule(compiled: ed.Config, factor: float) -> None:
    """An edit of the compile config: each rate of the optimizer's schedule times `factor`."""
    optimizer = ed.as_object(compiled.get("optimizer"), "the optimizer")
    inner = ed.as_object(optimizer.get("config"), "the optimizer's config")
    rate = ed.as_object(inner.get("learning_rate"), "the learning rate schedule")
    options = ed.as_object(rate.get("config"), "the schedule's config")
    for key in SCHEDULE_RATES:
        value = options.get(key)
        if isinstance(value, list):
            options[key] = [_rounded(v * factor) if _number(v) else v for v in value]
        elif _number(value):
            options[key] = _rounded(value * factor)


def _number(value: object) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _ratios(checkpoints: Sequence[Checkpoint]) -> list[float]:
    return [
        row.update_ratio
        for checkpoint in checkpoints
        for row in checkpoint.layers
        if row.update_ratio is not None and math.isfinite(row.update_ratio)
        and row.update_ratio > 0
    ]  # fmt: skip


def _first_steps(
    fit: FitReport, lr: float, weights: Mapping[str, Mapping[str, np.ndarray]]
) -> tuple[list[float], str]:
    """How far the first steps move each layer's weights, relative to their size, and how
    that was read: for an adaptive optimizer about lr per weight (lr / mean |kernel|), for
    the others the first checkpoint's update ratios."""
    sizes = [float(np.mean(np.abs(a["kernel"]))) for a in weights.values() if "kernel" in a]
    if fit.optimizer in ADAPTIVE and any(sizes):
        ratios = [lr / size for size in sizes if size > 0]
        return ratios, f"of {fit.optimizer}'s first steps (about lr per weight / mean |kernel|)"
    return _ratios(fit.checkpoints[:1]), "(lr x |grad| / |W|) at the first checkpoint"


def _insert_input(c: ed.Config, source: str, cls: str, options: ed.Config) -> None:
    """An edit: a layer of class `cls` right after the input `source`."""
    ed.insert_after_input(c, source, ed.new_layer(cls, ed.fresh_name(c, cls.lower()), options))


# -- which repair each finding gets --------------------------------------------------------


@dataclass(frozen=True)
class Planning:
    """What a repair reads: the model, the labels of each output (empty without data), the
    data's input statistics, the stored weights, and the training run (None without data)."""

    info: FileInfo
    labels: Mapping[str, LabelSummary]
    stats: Sequence[InputStats]
    weights: Mapping[str, Mapping[str, np.ndarray]]
    fit: FitReport | None

    @cached_property
    def heads(self) -> HeadRules:
        """The repairs of the model's heads."""
        return HeadRules(self.info, self.labels)


def plan_repairs(
    planning: Planning, findings: Sequence[str], verdict: FileVerdict
) -> tuple[list[Plan], list[Reason], list[str]]:
    """A plan for each finding with a mechanical repair; the others, unrepaired; and a note
    for each planned repair another one stands for (said, never dropped silently)."""
    plans: list[Plan] = []
    unrepaired: list[Reason] = []
    done: set[str] = set()
    # raw inputs first: the training findings they cause are theirs, not the learning rate's
    order = sorted(dict.fromkeys(findings), key=lambda f: f != F.INPUT_RANGE)
    for finding in order:
        if finding in done:
            continue
        try:
            # the plans of the first of the finding's repairs that makes one
            made = (PLANNERS[name](finding, planning) for name in REPAIRS.get(finding, ()))
            found = next((m for m in made if m is not None), [])
        except Unwritable:  # a class its code would name is no Python name: not offered
            found = []
        stray = planning.heads.stray_ids() if finding == F.TARGET_MISMATCH else []
        unrepaired += stray
        if not found and not stray:
            unrepaired.append(_unrepaired(finding, verdict, planning.fit))
        for plan in found:
            if plan.change not in {p.change for p in plans}:
                plans.append(plan)
                done.update(plan.covers)
    plans, notes = _labels_win(plans)
    covered = {c for p in plans for c in p.covers}
    return plans, [u for u in unrepaired if u.code not in covered], notes


def _one(plan: Plan | None) -> list[Plan] | None:
    return [plan] if plan is not None else None


def _unless_the_head(finding: str, p: Planning) -> list[Plan] | None:
    """Nothing when the head's repair (planned for `loss_mismatch`) makes the output vary."""
    heads = p.heads.plans(F.LOSS_MISMATCH)
    return [] if any(F.CONSTANT_OUTPUT in plan.covers for plan in heads) else None


def _covering(plan: Plan | None, caused: Sequence[str], fit: FitReport | None) -> list[Plan] | None:
    """`plan`, covering what of `caused` training found."""
    if plan is None:
        return None
    seen = {str(f.code) for f in fit.findings} if fit is not None else set()
    return [replace(plan, covers=tuple(str(c) for c in caused if str(c) in seen))]


# what inputs in raw units do to training (logits hundreds of times too large, steps as
# large): the scaling layer stands for all of them, and the learning rate is left alone
SCALE_CAUSES = (F.NONFINITE, F.DIVERGING, F.OSCILLATING, F.EXPLODING, F.DYING_UNITS,
                F.STALLED_LAYER, F.CONSTANT_PREDICTIONS, F.PLATEAU_AT_CHANCE)  # fmt: skip

# Each repair by name: its plans (None: it has none here, the next repair is tried).
PLANNERS: dict[str, Callable[[str, Planning], list[Plan] | None]] = {
    "head": lambda f, p: p.heads.plans(f),
    "unless_the_head": _unless_the_head,
    "biases": lambda f, p: _one(biases(p.info, p.weights, f)),
    "kernels": lambda f, p: _one(kernels(p.info, p.weights, f)),
    "linear_stacks": lambda f, p: _one(p.heads.linear_stacks()),
    "learning_rate": lambda f, p: _learning_rate(f, p),
    "scale_inputs": lambda f, p: _covering(scale_inputs(p.info, p.stats, f), SCALE_CAUSES, p.fit),
}
# The repairs of each finding, in order: a training finding's from its entry in
# `training/rules.RULES`, a head rule's from the head rules' table (`head`: the entry's
# `ConfigChange`), and those of the findings `check` alone makes.
REPAIRS: dict[str, tuple[str, ...]] = {
    **{str(rule.code): rule.fixes for rule in TRAINING_RULES},
    F.LOSS_MISMATCH: ("head",),
    F.CONSTANT_OUTPUT: ("unless_the_head", "biases", "kernels"),
    F.LINEAR_STACK: ("linear_stacks",),
    F.DEAD: ("biases",),
}


def _learning_rate(finding: str, p: Planning) -> list[Plan] | None:
    """The learning-rate repair, covering what the rate also causes in training: the NaN a
    divergence ends in, the layers whose steps are too large (and the units they push dead,
    the layers and outputs that then stop moving) or too small (not learning)."""
    if p.fit is None:
        return None
    if finding in RAISE:
        caused: tuple[str, ...] = (F.VANISHING, *RAISE)
    else:
        caused = (F.NONFINITE, F.EXPLODING, F.DYING_UNITS, *LOWER)
        if finding == F.DYING_UNITS:
            caused += (F.VANISHING, F.CONSTANT_PREDICTIONS)
    plan = learning_rate(p.fit, finding, p.weights, p.info.compile_config)
    return _covering(plan, caused, p.fit)


def _labels_win(plans: list[Plan]) -> tuple[list[Plan], list[str]]:
    """A head with both a loss repair (from the file) and a label repair (from the data): the
    labels say what the head must produce, so their repair stands for both (it holds what the
    head rules still ask of the head it leaves: `HeadRules._targets`); a note says which
    repair it stands for."""
    by_labels = {p.layer: p for p in plans if p.finding == F.TARGET_MISMATCH}
    dropped = [p for p in plans if p.finding == F.LOSS_MISMATCH and p.layer in by_labels]
    if not dropped:
        return plans, []
    notes = [
        f"{F.LOSS_MISMATCH} at {p.layer}: its own repair ({'; '.join(p.code) or p.change}) "
        f"is not made alone: the labels decide the head, and the {F.TARGET_MISMATCH} repair "
        f"({'; '.join(by_labels[p.layer].code)}) stands for it"
        for p in dropped
    ]
    return [
        replace(p, covers=(*p.covers, str(F.LOSS_MISMATCH)))
        if p.finding == F.TARGET_MISMATCH and p.layer in by_labels
        else p
        for p in plans
        if p not in dropped
    ], notes


def _unrepaired(finding: str, verdict: FileVerdict, fit: FitReport | None) -> Reason:
    """A finding without a mechanical repair: check's (or training's) message and hint, as the
    check keeps them apart (`CheckItem.reasons`), or, found at several layers or kept with no
    reason of its own, the check's whole message and the hint below."""
    for item in verdict.checks:
        if finding in item.findings:
            severity = Severity.WARN if finding in item.warnings else Severity.FAIL
            reasons = [r for r in item.reasons if r.code == finding]
            ruled = [r for r in reasons if r.rule] or (reasons if len(reasons) == 1 else [])
            if ruled:  # a rule's own words (the first), or the check's at its one layer
                reason = ruled[0]
                hint = reason.hint or _hint(finding, reason.layer)
                return replace(reason, hint=hint, severity=severity)
            return Reason(Finding(finding), item.message, _hint(finding), severity=severity)
    if fit is not None:
        for f in fit.findings:
            if str(f.code) == finding:
                hint = _hint(finding, f.layer)
                return Reason(f.code, f.message, hint, f.layer, severity=f.severity)
    return Reason(Finding(finding), "", _hint(finding))


# What to do by hand about a finding of `check` whose record carries no hint (a training
# finding's message holds its own): vanishing and exploding as their training rules say, a
# status as the cause that explains it (`diagnose/causes.EXPLAINS`).
HINTS = {str(c): BY_CODE[c].hint for c in (F.VANISHING, F.EXPLODING)}


def _hint(finding: str, layer: str | None = None) -> str:
    return HINTS.get(finding) or fallback_hint(finding, layer)
