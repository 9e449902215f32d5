"""Estimate the probe's memory from the shapes in a model's config, before Keras builds it.

Keras allocates every variable while it loads a file, and the probe keeps every layer's
output for the batch, so a config that declares `Dense(units=10**12)` or an input of shape
`(None, 2e8)` exhausts memory before anything can be reported. This module walks the config
once (no TensorFlow), propagates shapes through the layers it knows (dense, convolution,
embedding, recurrent, attention, reshaping, merging, pooling, normalization) and estimates:

* weights: the variables the config implies, or what the weight file declares if larger;
* activations: every layer's output for the probe batch, inputs included, times the number
  of calls; the probe holds about ACTIVATION_COPIES of them (values, copies, gradients, and
  TensorFlow's own buffers: a ResNet50 scan at batch 8 peaks near this estimate);
* the largest single output once more LARGEST_COPIES times: its gradient is summarised in
  numpy (float64 temporaries, absolute values, masks) and the random batch is drawn in
  float64, which dominates a small model probed with a huge `--batch-size`.

The shapes and weight counts of each layer come from `layer_shapes`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from layergrad.core import json_types as js
from layergrad.core.errors import LoadError
from layergrad.core.json_types import Config
from layergrad.core.limits import human
from layergrad.model.config import (
    is_container,
    is_functional,
    layer_name,
    structure_refs,
    tensor_refs,
)
from layergrad.model.layer_shapes import UNKNOWN_DIM, Shape, input_shape, layer_shapes

if TYPE_CHECKING:
    from layergrad.files.file_info import FileInfo

ACTIVATION_COPIES = 4
LARGEST_COPIES = 10


@dataclass(frozen=True)
class Footprint:
    """Estimated bytes: ``weights``, ``activations`` for the batch, and the biggest part.

    ``largest_output`` is the largest single layer output (one call) for the batch."""

    weights: int
    activations: int
    largest: str
    largest_output: int = 0

    @property
    def total(self) -> int:
        """Bytes the probe is expected to hold at its peak."""
        return (
            self.weights
            + ACTIVATION_COPIES * self.activations
            + LARGEST_COPIES * self.largest_output
        )


@dataclass
class _Tally:
    weights: int = 0
    activations: int = 0
    largest_output: int = 0
    parts: dict[str, int] = field(default_factory=dict)

    def add(self, path: str, what: str, elements: int, itemsize: int, copies: int = 1) -> None:
        size = elements * itemsize * copies
        if what == "weights":
            self.weights += size
        else:
            self.activations += size
        key = f"layer {path!r} {what}"
        self.parts[key] = self.parts.get(key, 0) + size


def estimate(info: FileInfo, batch_size: int) -> Footprint:
    """The probe's estimated memory for ``batch_size`` rows (see the module docstring)."""
    return _footprint(info.config if info.graph.known else None, batch_size,
                      info.stored.declared_bytes)  # fmt: skip


def estimate_config(config: Mapping[str, object], batch_size: int) -> Footprint:
    """The estimate for a model config that is no file yet (as `.keras` files hold it: `fix`'s
    repaired copy before Keras builds it), its weights those the config implies."""
    return _footprint(config if is_container(config) else None, batch_size, None)


def _footprint(
    config: Mapping[str, object] | None, batch_size: int, stored: int | None
) -> Footprint:
    tally = _Tally()
    if config is not None:
        _Walker(tally, max(1, batch_size)).model(config, "", None, 1)
    candidates = dict(tally.parts)
    if stored is not None:
        candidates["the weight file"] = stored
    largest = max(candidates, key=lambda k: candidates[k]) if candidates else "nothing"
    return Footprint(max(tally.weights, stored or 0), tally.activations, largest,
                     tally.largest_output)  # fmt: skip


class _Walker:
    """One pass over a model config, nested models visited once (their calls multiply)."""

    def __init__(self, tally: _Tally, batch: int) -> None:
        self.tally, self.batch = tally, batch

    def model(
        self, cfg: Mapping[str, object], prefix: str, feeds: list[Shape] | None, scale: int
    ) -> list[Shape]:
        members = js.members(js.member(cfg, "config")["layers"], "layers")
        if is_functional(cfg):
            return self.functional(cfg, members, prefix, feeds, scale)
        prev = list(feeds or [])
        for member in members:
            prev = self.member(member, prefix, prev, scale, 1)
        return prev

    def functional(
        self, cfg: Config, members: list[Config], prefix: str, feeds: list[Shape] | None, scale: int
    ) -> list[Shape]:
        outs: dict[str, list[Shape]] = {}
        inner = js.member(cfg, "config")
        inputs = [ref[0] for ref in structure_refs(inner.get("input_layers"))]
        for member in members:
            name = layer_name(member)
            nodes = js.listed(member.get("inbound_nodes") or [], "inbound_nodes")
            if not nodes:  # an input layer, fed by what feeds this model
                fed = [feeds[inputs.index(name)]] if feeds and name in inputs[: len(feeds)] else []
                outs[name] = self.member(member, prefix, fed, scale, 1)
                continue
            node = nodes[0]
            refs = tensor_refs(node, isinstance(node, list))
            ins = [_pick(outs.get(r[0]), r[2]) for r in refs]
            outs[name] = self.member(member, prefix, ins, scale, len(nodes))
        out_refs = structure_refs(inner.get("output_layers"))
        return [_pick(outs.get(r[0]), r[2]) for r in out_refs]

    def member(
        self, cfg: Mapping[str, object], prefix: str, ins: list[Shape], scale: int, calls: int
    ) -> list[Shape]:
        path = prefix + layer_name(cfg)
        if is_container(cfg):
            return self.model(cfg, path + "/", ins, scale * calls)
        inner = cfg.get("config")
        conf = inner if isinstance(inner, Mapping) else {}
        if "batch_shape" in conf or "batch_input_shape" in conf:  # a first layer's input shape
            ins = input_shape(conf, ins)[0]
        outs, weights = layer_shapes(str(cfg.get("class_name", "")), conf, ins)
        size = _itemsize(conf.get("dtype"))
        self.tally.add(path, "weights", weights, size)
        rows = sum(math.prod(s) for s in outs) * self.batch
        self.tally.add(path, "outputs", rows, size, scale * calls)
        self.tally.largest_output = max(self.tally.largest_output, rows * size)
        return outs


def _pick(shapes: list[Shape] | None, index: int) -> Shape:
    if not shapes:
        return (UNKNOWN_DIM,)
    return shapes[index] if 0 <= index < len(shapes) else shapes[0]


def _itemsize(dtype: object) -> int:
    text = str(dtype.get("config", dtype) if isinstance(dtype, Mapping) else dtype)
    return 8 if "64" in text else 4


def require_within(info: FileInfo, batch_size: int, max_memory: int) -> Footprint:
    """The estimate, or a LoadError naming the biggest part when it exceeds ``max_memory``."""
    who = f"refusing to run {info.path}: the probe"
    return _within(estimate(info, batch_size), who, batch_size, max_memory)


def require_config_within(
    config: Mapping[str, object], what: str, batch_size: int, max_memory: int
) -> Footprint:
    """`estimate_config`, or a LoadError (`what` would need ...) over ``max_memory``."""
    who = f"refusing to build {what}: it"
    return _within(estimate_config(config, batch_size), who, batch_size, max_memory)


def _within(found: Footprint, who: str, batch_size: int, max_memory: int) -> Footprint:
    """`found`, or the LoadError of an estimate over the budget: the parts, the option to
    raise."""
    if found.total <= max_memory:
        return found
    smaller = ", or a smaller --batch-size" if found.activations > found.weights else ""
    raise LoadError(
        f"{who} would need about {human(found.total)} "
        f"(weights {human(found.weights)}, activations for {batch_size} rows "
        f"{human(found.activations)} x{ACTIVATION_COPIES}, the largest output "
        f"{human(found.largest_output)} x{LARGEST_COPIES} more; the largest part is "
        f"{found.largest}), "
        f"more than the {human(max_memory)} budget; if the model really is this large, pass "
        f"--max-memory {_round_up(found.total)}{smaller}"
    )


def _round_up(size: int) -> str:
    """A --max-memory value just above ``size``: ``12GB``, ``3TB``."""
    for unit, scale in (("TB", 1 << 40), ("GB", 1 << 30), ("MB", 1 << 20)):
        if size >= scale:
            return f"{-(-size // scale)}{unit}"
    return "1MB"
