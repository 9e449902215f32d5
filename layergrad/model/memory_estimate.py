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

The shapes and weight counts come from one rule per family of layers (`layer_shapes`): given
a layer's config and its input shapes (batch axis excluded, open dimensions as UNKNOWN_DIM),
the shapes of its outputs and the number of scalars in the variables it creates. A layer no
rule knows passes its first input's shape through; if its config declares a size (``units``,
``filters``, ``num_tokens``...) that size is assumed to multiply its input.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING

from layergrad.core import json_types as js
from layergrad.core.errors import LoadError
from layergrad.core.json_types import Config
from layergrad.core.limits import human
from layergrad.model.config import (
    batch_shape,
    inbound_nodes,
    is_container,
    is_functional,
    layer_name,
    members,
    options,
    serialized_name,
    structure_refs,
    tensor_refs,
)

if TYPE_CHECKING:
    from layergrad.files.file_info import FileInfo

ACTIVATION_COPIES = 4
LARGEST_COPIES = 10
UNKNOWN_DIM = 16  # what the random probe batch uses for an open dimension
Shape = tuple[int, ...]  # without the batch axis
SIZE_KEYS = ("units", "filters", "output_dim", "num_tokens", "max_tokens", "num_bins",
             "key_dim", "value_dim", "head_dim", "num_heads", "num_query_heads",
             "intermediate_dim", "hidden_dim", "depth", "n")  # fmt: skip


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


def estimate(info: FileInfo, batch_size: int) -> Footprint:
    """The probe's estimated memory for ``batch_size`` rows (see the module docstring)."""
    return _footprint(info.config if info.graph.known else None, batch_size,
                      info.stored.declared_bytes)  # fmt: skip


def _footprint(
    config: Mapping[str, object] | None, batch_size: int, stored: int | None
) -> Footprint:
    tally = _Walker(max(1, batch_size))
    if config is not None:
        tally.model(config, "", None, 1)
    candidates = dict(tally.parts)
    if stored is not None:
        candidates["the weight file"] = stored
    largest = max(candidates, key=lambda k: candidates[k]) if candidates else "nothing"
    return Footprint(max(tally.weights, stored or 0), tally.activations, largest,
                     tally.largest_output)  # fmt: skip


@dataclass
class _Walker:
    """One pass over a model config, nested models visited once (their calls multiply), and
    the bytes it adds up: in all and by part (`layer 'dense' weights`)."""

    batch: int
    weights: int = 0
    activations: int = 0
    largest_output: int = 0
    parts: dict[str, int] = field(default_factory=dict)

    def add(self, path: str, weights: int, outputs: int) -> None:
        self.weights += weights
        self.activations += outputs
        for what, size in (("weights", weights), ("outputs", outputs)):
            key = f"layer {path!r} {what}"
            self.parts[key] = self.parts.get(key, 0) + size

    def model(
        self, cfg: Mapping[str, object], prefix: str, feeds: list[Shape] | None, scale: int
    ) -> list[Shape]:
        entries = members(cfg)
        if is_functional(cfg):
            return self.functional(cfg, entries, prefix, feeds, scale)
        prev = list(feeds or [])
        for member in entries:
            prev = self.member(member, prefix, prev, scale, 1)
        return prev

    def functional(
        self, cfg: Config, entries: list[Config], prefix: str, feeds: list[Shape] | None, scale: int
    ) -> list[Shape]:
        outs: dict[str, list[Shape]] = {}
        inner = js.member(cfg, "config")
        inputs = [ref[0] for ref in structure_refs(inner.get("input_layers"))]
        for member in entries:
            name = layer_name(member)
            nodes = inbound_nodes(member)
            if nodes:
                refs = tensor_refs(nodes[0], isinstance(nodes[0], list))
                ins = [_pick(outs.get(r[0]), r[2]) for r in refs]
            else:  # an input layer, fed by what feeds this model
                ins = [feeds[inputs.index(name)]] if feeds and name in inputs[: len(feeds)] else []
            outs[name] = self.member(member, prefix, ins, scale, max(len(nodes), 1))
        out_refs = structure_refs(inner.get("output_layers"))
        return [_pick(outs.get(r[0]), r[2]) for r in out_refs]

    def member(
        self, cfg: Mapping[str, object], prefix: str, ins: list[Shape], scale: int, calls: int
    ) -> list[Shape]:
        path = prefix + layer_name(cfg)
        if is_container(cfg):
            return self.model(cfg, path + "/", ins, scale * calls)
        conf = options(cfg)
        if batch_shape(conf) is not None:  # a first layer's input shape
            ins = input_shape(conf, ins)[0]
        outs, weights = layer_shapes(str(cfg.get("class_name", "")), conf, ins)
        size = 8 if "64" in str(serialized_name(conf.get("dtype"))) else 4  # a dtype or policy
        rows = sum(math.prod(s) for s in outs) * self.batch
        self.add(path, weights * size, rows * size * scale * calls)
        self.largest_output = max(self.largest_output, rows * size)
        return outs


def _pick(shapes: list[Shape] | None, index: int) -> Shape:
    if not shapes:
        return (UNKNOWN_DIM,)
    return shapes[index] if 0 <= index < len(shapes) else shapes[0]


def preflight(info: FileInfo, batch_rows: int, max_memory: int) -> None:
    """Refuse, before Keras builds anything, what would exhaust time or memory while loading.

    Raises:
        LoadError: the layers run more than MAX_GRAPH_CALLS times in one pass; a stored
            weight declares far more than it stores (Keras would allocate the declared size);
            or the probe's estimated memory exceeds ``max_memory``.
    """
    info.graph.require_expandable()
    if info.stored.hollow:
        raise LoadError(
            f"refusing to load {info.path}: weight {info.stored.hollow[0]} (an HDF5 shape "
            "bomb), and Keras would allocate the declared size; expected weights saved by "
            "Keras; re-save the model"
        )
    require_within(info, batch_rows, max_memory)


def require_within(info: FileInfo, batch_size: int, max_memory: int) -> Footprint:
    """The estimate, or a LoadError naming the biggest part when it exceeds ``max_memory``."""
    who = f"refusing to run {info.path}: the probe"
    return _within(estimate(info, batch_size), who, batch_size, max_memory)


def require_config_within(
    config: Mapping[str, object], what: str, batch_size: int, max_memory: int
) -> Footprint:
    """The estimate for a model config that is no file yet (`fix`'s repaired copy before Keras
    builds it; its weights those the config implies), or a LoadError over ``max_memory``."""
    found = _footprint(config if is_container(config) else None, batch_size, None)
    return _within(found, f"refusing to build {what}: it", batch_size, max_memory)


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


def _int(value: object, default: int = UNKNOWN_DIM) -> int:
    """A size from the config: ints and whole floats; None and anything else -> default."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return default
    if isinstance(value, float) and not math.isfinite(value):
        return default
    return max(0, int(value))


def _ints(value: object, n: int, default: int = 1) -> tuple[int, ...]:
    """A per-axis size (``kernel_size=3`` or ``[3, 3]``) as ``n`` ints."""
    if isinstance(value, (list, tuple)):
        got = tuple(_int(v, default) for v in value[:n])
        return got + (default,) * (n - len(got))
    return (_int(value, default),) * n


def _shape(value: object) -> Shape | None:
    return tuple(_int(d) for d in value) if isinstance(value, (list, tuple)) else None


Rule = Callable[[Mapping[str, object], Sequence[Shape]], tuple[list[Shape], int]]


def layer_shapes(
    class_name: str, cfg: Mapping[str, object], ins: Sequence[Shape]
) -> tuple[list[Shape], int]:
    """Output shapes (batch axis excluded) and weight elements of one layer call."""
    rule = _RULES.get(class_name) or next(
        (r for key, r in _FAMILIES if key in class_name), _generic
    )
    first = ins[0] if ins else (UNKNOWN_DIM,)
    return rule(cfg, [first, *ins[1:]])


def input_shape(cfg: Mapping[str, object], ins: Sequence[Shape]) -> tuple[list[Shape], int]:
    """An input layer's shape from ``batch_shape`` / ``batch_input_shape`` / ``shape``."""
    shape = _shape(batch_shape(cfg))
    if shape is not None:
        return [shape[1:]], 0
    shape = _shape(cfg.get("shape"))
    return [shape if shape is not None else ins[0]], 0


def _dense(cfg: Mapping[str, object], ins: Sequence[Shape]) -> tuple[list[Shape], int]:
    x, units = ins[0], _int(cfg.get("units"))
    last = x[-1] if x else 1
    return [(*x[:-1], units)], last * units + units


def _einsum(cfg: Mapping[str, object], ins: Sequence[Shape]) -> tuple[list[Shape], int]:
    out = _shape(cfg.get("output_shape")) or (_int(cfg.get("output_shape")),)
    last = ins[0][-1] if ins[0] else 1
    bias = out[-1] if cfg.get("bias_axes") and out else 0
    return [out], last * math.prod(out) + bias


def _embedding(cfg: Mapping[str, object], ins: Sequence[Shape]) -> tuple[list[Shape], int]:
    dim = _int(cfg.get("output_dim"))
    return [(*ins[0], dim)], _int(cfg.get("input_dim")) * dim


def _spatial(x: Shape, cfg: Mapping[str, object]) -> tuple[Shape, int, bool]:
    """(spatial dims, channels, channels_first) of a convolution or pooling input."""
    first = cfg.get("data_format") == "channels_first"
    if not x:
        return (), 1, first
    return (x[1:], x[0], True) if first else (x[:-1], x[-1], False)


def _conv(
    cfg: Mapping[str, object], ins: Sequence[Shape], transpose: bool = False
) -> tuple[list[Shape], int]:
    dims, channels, first = _spatial(ins[0], cfg)
    n = len(dims)
    kernel = math.prod(_ints(cfg.get("kernel_size"), n))
    strides = _ints(cfg.get("strides"), n)
    out_dims = tuple(
        d * s if transpose else -(-d // max(s, 1)) for d, s in zip(dims, strides, strict=False)
    )
    multiplier = _int(cfg.get("depth_multiplier"), 1)
    filters = _int(cfg.get("filters"), channels * multiplier)
    weights = kernel * channels * filters + filters
    if "depth_multiplier" in cfg:  # depthwise (with its bias), or separable: then pointwise
        weights = kernel * channels * multiplier
        if "filters" in cfg:
            weights += channels * multiplier * filters + filters
        else:
            weights += channels * multiplier
    out = (filters, *out_dims) if first else (*out_dims, filters)
    return [out], weights


def _pool(cfg: Mapping[str, object], ins: Sequence[Shape]) -> tuple[list[Shape], int]:
    dims, channels, first = _spatial(ins[0], cfg)
    strides = _ints(cfg.get("strides") or cfg.get("pool_size"), len(dims), 2)
    out_dims = tuple(-(-d // max(s, 1)) for d, s in zip(dims, strides, strict=False))
    return [(channels, *out_dims) if first else (*out_dims, channels)], 0


def _global_pool(cfg: Mapping[str, object], ins: Sequence[Shape]) -> tuple[list[Shape], int]:
    _, channels, _ = _spatial(ins[0], cfg)
    return [(channels,)], 0


def _rnn(gates: int) -> Rule:
    """LSTM (4 gates), GRU (3), SimpleRNN (1): ``gates * units * (features + units + 1)``."""

    def rule(cfg: Mapping[str, object], ins: Sequence[Shape]) -> tuple[list[Shape], int]:
        x, units = ins[0], _int(cfg.get("units"))
        cell = cfg.get("cell")
        if isinstance(cell, Mapping) and isinstance(cell.get("config"), Mapping):
            units = _int(cell["config"].get("units"))
        features = x[-1] if x else 1
        steps = x[0] if len(x) > 1 else 1
        out = (steps, units) if cfg.get("return_sequences") else (units,)
        extra = [(units,)] * (2 if cfg.get("return_state") else 0)
        bias = gates * units * (2 if cfg.get("reset_after") else 1)  # GRU: two bias rows
        return [out, *extra], gates * units * (features + units) + bias

    return rule


def _wrapped(cfg: Mapping[str, object], ins: Sequence[Shape]) -> tuple[list[Shape], int] | None:
    """What the layer a wrapper holds (its ``layer``) gives on ``ins``; None without one."""
    inner = cfg.get("layer")
    if not (isinstance(inner, Mapping) and isinstance(inner.get("config"), Mapping)):
        return None
    return layer_shapes(str(inner.get("class_name", "")), inner["config"], ins)


def _bidirectional(cfg: Mapping[str, object], ins: Sequence[Shape]) -> tuple[list[Shape], int]:
    if (found := _wrapped(cfg, ins)) is None:
        return [ins[0]], 0
    return [(*s[:-1], 2 * s[-1]) if s else s for s in found[0][:1]], 2 * found[1]


def _time_distributed(cfg: Mapping[str, object], ins: Sequence[Shape]) -> tuple[list[Shape], int]:
    x = ins[0]
    if (found := _wrapped(cfg, [x[1:]])) is None:
        return [x], 0
    return [(x[0] if x else 1, *s) for s in found[0]], found[1]


def _attention(cfg: Mapping[str, object], ins: Sequence[Shape]) -> tuple[list[Shape], int]:
    query, key = ins[0], ins[1] if len(ins) > 1 else ins[0]
    heads = _int(cfg.get("num_heads") or cfg.get("num_query_heads"), 1)
    key_dim = _int(cfg.get("key_dim") or cfg.get("head_dim"), query[-1] if query else 1)
    value_dim = _int(cfg.get("value_dim"), key_dim)
    width = query[-1] if query else 1
    projections = heads * (2 * key_dim + value_dim)
    weights = (width + 1) * projections + heads * value_dim * width + width  # and biases
    steps_q = query[0] if len(query) > 1 else 1
    steps_k = key[0] if len(key) > 1 else 1
    return [query, (heads, steps_q, steps_k)], weights  # the scores are held too


def _per_feature(count: int) -> Rule:
    """A normalization: `count` values per feature (layer / group normalization: a scale and an
    offset; batch normalization: those and the moving mean and variance)."""
    return lambda cfg, ins: ([ins[0]], count * (ins[0][-1] if ins[0] else 1))


def _reshape(cfg: Mapping[str, object], ins: Sequence[Shape]) -> tuple[list[Shape], int]:
    target = cfg.get("target_shape")
    if not isinstance(target, (list, tuple)):
        return [ins[0]], 0
    known = [_int(d, 1) for d in target if d != -1]
    rest = math.prod(ins[0]) // max(1, math.prod(known))
    return [tuple(rest if d == -1 else _int(d, 1) for d in target)], 0


def _concat(cfg: Mapping[str, object], ins: Sequence[Shape]) -> tuple[list[Shape], int]:
    widest: Shape = max(ins, key=len) if ins else ()  # the first of the most axes
    out = list(widest)
    if out:
        axis = cfg.get("axis", -1)
        axis = axis if isinstance(axis, int) and not isinstance(axis, bool) else -1
        pos = min(max(len(out) + axis if axis < 0 else axis - 1, 0), len(out) - 1)
        out[pos] = sum(s[pos] if len(s) > pos else 1 for s in ins)
    return [tuple(out)], 0


def _resample(cfg: Mapping[str, object], ins: Sequence[Shape]) -> tuple[list[Shape], int]:
    """UpSampling (``size``), ZeroPadding (``padding``), Cropping, Resizing."""
    dims, channels, first = _spatial(ins[0], cfg)
    n = len(dims)
    if "height" in cfg:
        sized = (_int(cfg.get("height")), _int(cfg.get("width")))[:n]
        out_dims = (*sized, *dims[len(sized) :])
    elif "size" in cfg:
        out_dims = tuple(d * s for d, s in zip(dims, _ints(cfg.get("size"), n, 2), strict=False))
    else:
        pad = _ints(_flat(cfg.get("padding", cfg.get("cropping"))), n, 1)
        sign = -1 if "cropping" in cfg else 1
        out_dims = tuple(max(0, d + sign * 2 * p) for d, p in zip(dims, pad, strict=False))
    return [(channels, *out_dims) if first else (*out_dims, channels)], 0


def _flat(value: object) -> object:
    """``[[1, 1], [2, 2]]`` (before/after per axis) -> ``[1, 2]`` (the larger side)."""
    if isinstance(value, (list, tuple)) and value and isinstance(value[0], (list, tuple)):
        return [max(_int(v, 0) for v in pair) if pair else 0 for pair in value]
    return value


def _encoding(cfg: Mapping[str, object], ins: Sequence[Shape]) -> tuple[list[Shape], int]:
    """CategoryEncoding, lookups and hashing: one column per token when not in "int" mode."""
    mode = cfg.get("output_mode", "int")
    tokens = _int(cfg.get("num_tokens") or cfg.get("max_tokens") or cfg.get("num_bins"), 0)
    if mode == "int" or not tokens:
        return [ins[0]], 0
    x = ins[0]
    return [(*x[:-1], tokens) if len(x) > 1 else (tokens,)], 0


def _generic(cfg: Mapping[str, object], ins: Sequence[Shape]) -> tuple[list[Shape], int]:
    sizes = [_int(cfg.get(k), 0) for k in SIZE_KEYS if k in cfg]
    if not sizes or not max(sizes):
        return [ins[0]], 0
    last = ins[0][-1] if ins[0] else 1
    return [(*ins[0][:-1], max(sizes))], last * max(sizes)


# fmt: off
_ENCODING = ("CategoryEncoding", "StringLookup", "IntegerLookup", "Hashing", "HashedCrossing",
             "TextVectorization", "Discretization")
_RULES: dict[str, Rule] = {
    "InputLayer": input_shape, "Dense": _dense, "EinsumDense": _einsum, "Embedding": _embedding,
    "ReversibleEmbedding": _embedding, "Bidirectional": _bidirectional,
    "TimeDistributed": _time_distributed, "Reshape": _reshape, "Concatenate": _concat,
    "Flatten": lambda cfg, ins: ([(math.prod(ins[0]),)], 0), "Resizing": _resample,
    "RepeatVector": lambda cfg, ins: ([(_int(cfg.get("n"), 1), *ins[0])], 0),
    "BatchNormalization": _per_feature(4), **dict.fromkeys(_ENCODING, _encoding),
}
_FAMILIES: tuple[tuple[str, Rule], ...] = (
    ("GlobalAveragePooling", _global_pool), ("GlobalMaxPooling", _global_pool),
    ("Pooling", _pool), ("Transpose", partial(_conv, transpose=True)), ("Conv", _conv),
    ("LSTM", _rnn(4)), ("GRU", _rnn(3)), ("RNN", _rnn(1)), ("Attention", _attention),
    ("Normalization", _per_feature(2)),
    *((name, _resample) for name in ("UpSampling", "ZeroPadding", "Cropping")),
    *((name, lambda cfg, ins: ([max(ins, key=math.prod)], 0))
      for name in ("Add", "Subtract", "Multiply", "Average", "Maximum", "Minimum")),
)
# fmt: on
