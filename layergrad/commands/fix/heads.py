"""Repairs of an output head and its loss (`loss_mismatch`, `target_mismatch`,
`linear_stack`): the `ConfigChange` of the first head or label rule that applies
(`head_rules`, `target_fit`) made into a `Plan` of the model's config and its loss, in the
model's own code. No TensorFlow.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from functools import partial

from layergrad.commands.fix.plan import (
    Edit,
    Plan,
    at,
    layer_code,
    listing,
    loss_code,
    loss_of,
    loss_with,
    move_before_edit,
    option_edit,
    replace_edit,
    set_loss,
)
from layergrad.core.results import Reason
from layergrad.core.vocab import Finding
from layergrad.files.file_info import FileInfo
from layergrad.model import config_edit as ed
from layergrad.model.head_forms import Head, keyed_by_head, output_heads, output_keys, units_layer
from layergrad.model.head_rules import Change, HeadFacts, repairs
from layergrad.model.label_summary import LabelSummary
from layergrad.model.linear_stacks import redundant_pairs, whole_network
from layergrad.model.loss_forms import per_output as loss_specs
from layergrad.model.target_fit import (
    IDS_HINT,
    head_activation,
    ids_beyond_count,
    label_repair,
)
from layergrad.render.escape import python_string


class HeadRules:
    """The repairs of each head of one model (see the module doc)."""

    def __init__(
        self, info: FileInfo, compiled: Mapping[str, object], labels: Mapping[str, LabelSummary]
    ) -> None:
        self.info = info
        self.compiled = compiled
        self.heads = output_heads(info.config, info.graph) if info.graph.known else []
        names = [h.name for h in self.heads]
        loss = keyed_by_head(compiled.get("loss"), info.config)
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
            edits.append(replace_edit(layer, new))
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
        return set_loss(key, i, new)

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
        for change in self._changes(replace(head, activation=head_activation(head)), spec, y):
            plan = self._make(head, change, Finding.LOSS_MISMATCH)
            if plan is not None:
                return plan
        return None

    def _changes(
        self, seen: Head, spec: tuple[str, bool] | None, y: LabelSummary | None
    ) -> list[Change]:
        """The `loss_mismatch` repairs of the rules that apply to the head as `seen` (its
        activation and units) under the loss `spec`, in table order."""
        loss, logits = spec if spec is not None else (None, False)
        stack = whole_network(self.info.graph, seen.layer) if len(self.heads) == 1 else None
        facts = HeadFacts(seen, loss, logits, y, stack.layers if stack is not None else ())
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
        drop = self.info.graph.get(head.dropout) if head.dropout else None
        weighted = None
        if drop is not None and len(drop.inbound) == 1:
            weighted = drop.inbound[0]
            found = self.info.graph.get(weighted)
            if found is not None and found.class_name in ("Softmax", "Activation", "ReLU"):
                weighted = self._units_layer(weighted)
        if weighted is None or head.dropout is None:
            return None
        moved = head.dropout
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
                    (move_before_edit(moved, weighted),))  # fmt: skip

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
        for change in self._changes(seen, after, y):
            joined = self._joined(head, plan, made, change)
            if joined is not None:
                return joined
        return plan

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
