"""Weight layers with no non-linearity between them: one linear map, however deep. No TF.

Two rules, read from the config:

- **the whole network is linear**: every layer before the head is a weight layer without
  activation or a linear reshaping (flatten, pooling by average, dropout, batch normalisation,
  adds, concatenations), with two or more weight layers in all. Before a softmax / sigmoid
  head it can only draw straight class boundaries (a failure, for the loss to name); before
  a linear head it fits what one Dense layer fits (a warning);
- **a redundant pair**: a weight layer without activation whose only consumer, through
  single-input linear layers only, is another weight layer, when the pair adds nothing one
  layer could not do: its width is at least the smaller of the widths around it. A narrower
  middle is a bottleneck on purpose (an autoencoder's code, MobileNetV2's linear
  bottlenecks, a low-rank factorisation) and is left alone, and so are an Embedding (a table,
  not a map), a depthwise convolution (a spatial filter meant for the pointwise one after
  it), a transposed convolution (a learned upsampling), joins (a residual add mixes in
  another path) and layers several others read (attention's query / key / value projections
  of one input).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from layergrad.model.config import batch_shape
from layergrad.model.graph import LayerEntry, ModelGraph
from layergrad.model.head_forms import JOINS, THROUGH, WEIGHTED, activation_of, declared_units

_EXCLUDED_FIRST = ("DepthwiseConv1D", "DepthwiseConv2D")
# a transposed convolution without activation is a learned upsampling, as linear by design as
# the `UpSampling2D` it replaces
_UPSAMPLING = ("Conv1DTranspose", "Conv2DTranspose", "Conv3DTranspose")


@dataclass(frozen=True)
class LinearStack:
    """Weight layers computing one linear map, in order."""

    layers: tuple[str, ...]


def whole_network(graph: ModelGraph, head_layer: str) -> LinearStack | None:
    """The weight layers of a network that is one linear map up to its head (two or more),
    else None. The head's own activation is left out: it is what the stack feeds."""
    weighted: list[str] = []
    for entry in graph.layers:
        head = entry.path == head_layer
        if entry.is_model or (entry.class_name == "InputLayer" and not head):
            continue
        if entry.class_name in WEIGHTED and (head or activation_of(entry) == "linear"):
            weighted.append(entry.path)
        elif not (head or entry.class_name in THROUGH | JOINS or _linear_activation_layer(entry)):
            return None
    if any(e.class_name == "Embedding" for e in graph.layers) or len(weighted) < 2:
        return None
    return LinearStack(tuple(weighted))


def _linear_activation_layer(entry: LayerEntry) -> bool:
    return entry.class_name == "Activation" and activation_of(entry) == "linear"


def redundant_pairs(graph: ModelGraph) -> list[LinearStack]:
    """Each weight layer without activation that feeds only another weight layer, through
    single-input linear layers, where its width is no bottleneck."""
    consumers: dict[str, list[str]] = {}
    for entry in (*graph.layers, *graph.unlisted):
        for src in entry.inbound:
            consumers.setdefault(src, []).append(entry.path)
    found = []
    for entry in graph.layers:
        if entry.class_name not in WEIGHTED or activation_of(entry) != "linear":
            continue
        if entry.class_name in _EXCLUDED_FIRST + _UPSAMPLING:
            continue
        second = _next_weighted(graph, entry, consumers)
        if second is None or second.class_name in _EXCLUDED_FIRST:
            continue
        inside, middle = _input_width(graph, entry), declared_units(entry)
        outside = declared_units(second)
        if middle is None or outside is None:
            continue
        # one layer in -> out fits any map of rank min(in, out) <= out: a middle that wide
        # adds nothing (the input width may be unknown, after a Flatten)
        if middle >= min(outside, inside if inside is not None else outside):
            found.append(LinearStack((entry.path, second.path)))
    return found


def _next_weighted(
    graph: ModelGraph, entry: LayerEntry, consumers: Mapping[str, Sequence[str]]
) -> LayerEntry | None:
    """The weight layer that alone reads `entry`'s output through single-input linear layers."""
    current = entry
    for _ in range(16):
        readers = consumers.get(current.path, [])
        if len(readers) != 1 or current.num_calls != 1:
            return None
        following = graph.get(readers[0])
        if following is None or following.is_model or len(following.inbound) != 1:
            return None
        if following.class_name in WEIGHTED:
            return following
        if following.class_name not in THROUGH and not _linear_activation_layer(following):
            return None
        current = following
    return None


def _input_width(graph: ModelGraph, entry: LayerEntry) -> int | None:
    """The features reaching `entry`: the width of the nearest weight layer or input before
    it through single-input layers that keep the last axis; None when unknown."""
    current = entry
    for _ in range(16):
        feeding = graph.get(current.inbound[0]) if len(current.inbound) == 1 else None
        if feeding is None:  # a Keras 2 Sequential's first layer declares the input shape
            return None if current.inbound else _last_dim(current)
        if feeding.class_name == "InputLayer":
            return _last_dim(feeding)
        width = declared_units(feeding)
        if width is not None and not feeding.class_name.startswith("Depthwise"):
            return width
        if feeding.class_name in ("Flatten", "Reshape", "Permute") or feeding.is_model:
            return None
        current = feeding
    return None


def _last_dim(entry: LayerEntry) -> int | None:
    """The last axis of the input shape `entry`'s config declares, when it is a number."""
    last = (batch_shape(entry.config) or [None])[-1]
    return last if isinstance(last, int) else None
