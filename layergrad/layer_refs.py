"""Resolve a layer reference (`dense`, `encoder/dense_1`, `shared@1`, `-2`) to a layer call."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from layergrad.errors import LayerNotFound

_CALL_SUFFIX = re.compile(r"^(?P<base>.+)@(?P<call>\d+)$")
_INDEX = re.compile(r"^-?\d+$")


@dataclass(frozen=True)
class Site:
    """A resolved reference: one call of one layer, or one model input.

    `ref` is the canonical spelling used in reports (`encoder/dense_1`, `shared@1`).
    `layer` is the Keras layer object (None for a model input); `input_index` is the
    position among the model's inputs when the reference names an input.
    """

    ref: str
    path: str
    call: int
    layer: Any = None
    input_index: int | None = None


def iter_layers(model: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Yield `(path, layer)` for every layer of `model`, nested models expanded depth-first."""
    for layer in model.layers:
        path = f"{prefix}{layer.name}"
        yield path, layer
        if hasattr(layer, "layers") and layer is not model:
            yield from iter_layers(layer, prefix=f"{path}/")


def input_names(model: Any) -> list[str]:
    """The names of the model's inputs, in the order the model takes them ([] if unknown)."""
    try:
        return [t.name for t in model.inputs]
    except (AttributeError, ValueError):
        return []


def resolve(model: Any, ref: str) -> Site:
    """Resolve one layer reference against a loaded model.

    Rules (first match wins): a model input name; an exact top-level layer name; a path
    through nested models (`encoder/dense_1`); a name that is unique among nested layers;
    an integer index into `model.layers` (negative allowed). `@K` selects the K-th call.

    Raises:
        LayerNotFound: nothing matches; the message lists the closest names.

    Example:
        >>> resolve(model, "shared@1").call
        1
    """
    text = ref.strip()
    base, call = text, 0
    match = _CALL_SUFFIX.match(text)
    if match:
        base, call = match["base"], int(match["call"])
    names = input_names(model)
    if base in names:
        return Site(ref=text, path=base, call=call, input_index=names.index(base))
    layers = dict(iter_layers(model))
    if base in layers:
        return Site(ref=text, path=base, call=call, layer=layers[base])
    nested = [p for p in layers if p.rsplit("/", 1)[-1] == base]
    if len(nested) == 1:
        path = nested[0]
        return Site(ref=_with_call(path, call), path=path, call=call, layer=layers[path])
    if len(nested) > 1:
        raise LayerNotFound(
            f"layer name {base!r} is ambiguous: it is in {', '.join(nested)}; "
            "pass the full path, e.g. --from " + nested[0]
        )
    if _INDEX.match(base):
        return _by_index(model, int(base), call)
    raise LayerNotFound(_not_found_message(base, [*names, *layers]))


def _with_call(path: str, call: int) -> str:
    return f"{path}@{call}" if call else path


def _by_index(model: Any, index: int, call: int) -> Site:
    top = list(model.layers)
    if not -len(top) <= index < len(top):
        raise LayerNotFound(
            f"layer index {index} is out of range: the model has {len(top)} top-level layers "
            f"(valid: {-len(top)} to {len(top) - 1}); run `layergrad layers MODEL` to list them"
        )
    layer = top[index]
    names = input_names(model)
    if layer.name in names:  # a Functional model lists its InputLayers: that is an input
        return Site(ref=layer.name, path=layer.name, call=0, input_index=names.index(layer.name))
    return Site(ref=_with_call(layer.name, call), path=layer.name, call=call, layer=layer)


def _not_found_message(name: str, known: list[str]) -> str:
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
    tail = known if len(known) <= 8 else close
    hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    listing = f" Layers: {', '.join(tail)}." if tail and not close else ""
    return (
        f"no layer named {name!r} in the model{hint}{listing} "
        "Run `layergrad layers MODEL` to list every layer name."
    )
