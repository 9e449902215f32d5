"""Resolve a layer reference (`dense`, `encoder/dense_1`, `shared@1`, `-2`, and any of them
with `:logits`, the output of a layer with a fused activation before that activation) to a
layer call."""

from __future__ import annotations

import difflib
import fnmatch
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

from layergrad.core.errors import LayerNotFound
from layergrad.core.tf_types import KerasLayer, KerasModel, KerasVariable
from layergrad.core.vocab import with_article
from layergrad.model.graph import ModelGraph
from layergrad.model.head_forms import WEIGHTED

_CALL_SUFFIX = re.compile(r"^(?P<base>.+)@(?P<call>\d+)$")
_INDEX = re.compile(r"^-?\d+$")
LOGITS = ":logits"  # a reference's suffix: the layer's output before its fused activation
# how a call key marks that value: not `:logits`, which a layer's own name may end in
LOGITS_KEY = "\x1flogits"
# the Keras layers that apply their `activation` last, to the whole output (so the value
# before it is the output with a linear activation): the weight layers and Activation; a
# recurrent layer applies its own inside the recurrence, and a custom layer anywhere
_FUSED = (*WEIGHTED, "Activation")


@dataclass(frozen=True)
class Site:
    """A resolved reference: one call of one layer, or one model input.

    `ref` is the canonical spelling used in reports (`encoder/dense_1`, `shared@1`,
    `head:logits`). `layer` is the Keras layer object (None for a model input);
    `input_index` is the position among the model's inputs when the reference names an
    input; `logits` names the call's output before the layer's fused activation.
    """

    ref: str
    path: str
    call: int
    layer: KerasLayer = None
    input_index: int | None = None
    logits: bool = False

    @property
    def key(self) -> CallKey:
        """`(path, call)`: how graphs and traces identify a call (`(path:logits, call)` for
        the value before the activation, which the capture hands on as its own call)."""
        return (f"{self.path}{LOGITS_KEY}" if self.logits else self.path, self.call)

    @classmethod
    def of_call(cls, key: CallKey) -> Site:
        """The site of a call seen while the model runs, by its `(path, call)` key."""
        path, logits = split_key(key[0])
        return cls(ref=ref_of(key), path=path, call=key[1], logits=logits)


CallKey = tuple[str, int]


def ref_of(key: CallKey) -> str:
    """The reference that names a call: `path`, or `path@K` for K > 0 (then `:logits`)."""
    path, logits = split_key(key[0])
    call = key[1]
    return (f"{path}@{call}" if call else path) + (LOGITS if logits else "")


def split_logits(text: str) -> tuple[str, bool]:
    """`head:logits` -> ("head", True); any other text -> (text, False)."""
    if text.endswith(LOGITS) and len(text) > len(LOGITS):
        return text[: -len(LOGITS)], True
    return text, False


def split_key(path: str) -> tuple[str, bool]:
    """The path of a call key and whether it names the value before the activation:
    `head` + LOGITS_KEY -> ("head", True); a layer named `x:logits` -> ("x:logits", False)."""
    if path.endswith(LOGITS_KEY):
        return path[: -len(LOGITS_KEY)], True
    return path, False


def has_fused_activation(layer: KerasLayer) -> bool:
    """Whether `layer` is a Keras layer that applies its `activation` last, to its whole
    output (Dense, convolutions, Activation): its `:logits` are its output before it."""
    module = type(layer).__module__
    return (
        type(layer).__name__ in _FUSED
        and module.split(".", 1)[0] == "keras"
        and callable(getattr(layer, "activation", None))
    )


def iter_layers(model: KerasModel, prefix: str = "") -> Iterator[tuple[str, KerasLayer]]:
    """Yield `(path, layer)` for every layer of `model`, nested models expanded depth-first."""
    for layer in model.layers:
        path = f"{prefix}{layer.name}"
        yield path, layer
        if hasattr(layer, "layers") and layer is not model:
            yield from iter_layers(layer, prefix=f"{path}/")


def variable_names(owned: Sequence[tuple[KerasVariable, str]]) -> list[str]:
    """Each `(variable, path of the layer that holds it)`'s name in that layer, as reports
    spell it after the layer's path: its own name (`kernel`), or where the layer holds more
    than one variable of that name (a MultiHeadAttention's query, key, value and output
    kernels, the two directions of a Bidirectional) its Keras path below the layer, each part
    without the `_N` Keras adds to a default name (`query/kernel`, `forward_gru/gru_cell/kernel`),
    so that no two rows share a name and a file loaded twice names them alike. Where those
    paths still coincide (a custom layer's unnamed sublayers), the variables are numbered in
    their order (`kernel#1`, `kernel#2`)."""
    groups: dict[tuple[str, str], list[int]] = {}
    for i, (variable, path) in enumerate(owned):
        groups.setdefault((path, str(variable.name)), []).append(i)
    names = [str(variable.name) for variable, _ in owned]
    for (path, name), members in groups.items():
        if len(members) == 1:
            continue
        below = [_below_layer(owned[i][0], path) for i in members]
        if len(set(below)) < len(below):
            below = [f"{name}#{k}" for k in range(1, len(members) + 1)]
        for i, text in zip(members, below, strict=True):
            names[i] = text
    return names


def _below_layer(variable: KerasVariable, layer_path: str) -> str:
    """A variable's Keras path below the layer at `layer_path` that holds it (a loaded file's
    paths may not start with the layer), each part without a default name's `_N` (which
    depends on the layers made before it)."""
    parts = str(getattr(variable, "path", variable.name)).split("/")
    if len(parts) > 1 and parts[0] == layer_path.rsplit("/", 1)[-1]:
        parts = parts[1:]
    return "/".join(re.sub(r"_\d+$", "", part) for part in parts)


def input_names(model: KerasModel) -> list[str]:
    """The names of the model's inputs, in the order the model takes them ([] if unknown)."""
    try:
        return [t.name for t in model.inputs]
    except (AttributeError, ValueError):
        return []


def resolve(model: KerasModel, ref: str) -> Site:
    """Resolve one layer reference against a loaded model.

    Rules (first match wins): a model input name; an exact top-level layer name (`d@1` and
    `x:logits` too, when a layer is named so); a path
    through nested models (`encoder/dense_1`); a name that is unique among nested layers;
    an integer index into `model.layers` (negative allowed). `@K` selects the K-th call;
    a `:logits` suffix (after `@K`) the call's output before the layer's fused activation.

    Raises:
        LayerNotFound: nothing matches; the message lists the closest names; `:logits` of a
            layer without a fused activation.
    """
    ref = ref.strip()
    text, logits = split_logits(ref)
    base = _split(ref)[0]
    if logits and (base in input_names(model) or base in dict(iter_layers(model))):
        text, logits = ref, False  # a layer named `x:logits` itself
    site = _resolve(model, text)
    if not logits:
        return site
    if site.layer is None or not has_fused_activation(site.layer):
        what = "a model input" if site.layer is None else with_article(type(site.layer).__name__)
        raise LayerNotFound(
            f"{ref!r}: {site.path!r} is {what}, which has no fused activation to take "
            "the value before; :logits names the output before the activation of a Dense, "
            "convolution or Activation layer"
        )
    return replace(site, ref=f"{site.ref}{LOGITS}", logits=True)


def _resolve(model: KerasModel, ref: str) -> Site:
    """`resolve` of a reference without `:logits`."""
    base, call, text = _split(ref)
    names = input_names(model)
    layers = dict(iter_layers(model))
    if base != text and (text in names or _by_name(text, list(layers)) is not None):
        base, call = text, 0  # a layer or input named `d@1` itself
    if base in names:
        return Site(ref=text, path=base, call=call, input_index=names.index(base))
    path = _by_name(base, list(layers))
    if path is not None:
        spelled = text if path == base else ref_of((path, call))
        return Site(ref=spelled, path=path, call=call, layer=layers[path])
    if _INDEX.match(base):
        return _by_index(model, int(base), call)
    raise LayerNotFound(_not_found_message(base, [*names, *layers]))


def check_in_graph(graph: ModelGraph, refs: Sequence[str], globs: Sequence[str] = ()) -> None:
    """Check layer references and `--layers` globs against the graph read from the file.

    The same rules as `resolve`, without TensorFlow, so a typo fails before the model loads.
    Only what surely matches nothing is refused (call counts are checked once loaded); a
    model whose config has no layer graph (subclassed) is not checked here.

    Raises:
        LayerNotFound: a reference or glob matches no layer of the file.
    """
    if not graph.known:
        return
    paths = [e.path for e in graph.layers]
    known = {*graph.input_names, *paths, *(e.path for e in graph.unlisted)}
    top = sum(1 for e in graph.layers if e.parent is None)
    for ref in refs:
        # `d@1` and `x:logits` as named, then as a call and as logits
        tried = (ref.strip(), _split(ref)[0], _split(split_logits(ref.strip())[0])[0])
        if any(base in known or _by_name(base, paths) is not None for base in tried):
            continue
        base = tried[-1]
        if _INDEX.match(base):
            _check_index(int(base), top)
        else:
            raise LayerNotFound(_not_found_message(base, [*graph.input_names, *paths]))
    if not globs:
        return
    calls = [ref_of((e.path, k)) for e in graph.layers for k in range(max(e.num_calls, 1))]
    calls += graph.input_names
    for pattern in globs:
        if not any(fnmatch.fnmatchcase(ref, pattern) for ref in calls):
            raise LayerNotFound(no_glob_match_message(globs))


def no_glob_match_message(globs: Sequence[str]) -> str:
    """The error for `--layers` patterns that match nothing."""
    return (
        f"--layers {' '.join(globs)} matches no layer the target depends on; "
        "run `layergrad layers MODEL` to list the layer names"
    )


def _split(ref: str) -> tuple[str, int, str]:
    """(base, call, stripped text) of a reference: `shared@1` -> ("shared", 1, "shared@1")."""
    text = ref.strip()
    match = _CALL_SUFFIX.match(text)
    if match:
        return match["base"], int(match["call"]), text
    return text, 0, text


def _by_name(base: str, paths: Sequence[str]) -> str | None:
    """The path `base` names: itself, or the one nested layer with that name (else None)."""
    if base in paths:
        return base
    nested = [p for p in paths if p.rsplit("/", 1)[-1] == base]
    if len(nested) > 1:
        raise LayerNotFound(
            f"layer name {base!r} is ambiguous: it is in {', '.join(nested)}; "
            "pass the full path, e.g. --from " + nested[0]
        )
    return nested[0] if nested else None


def _check_index(index: int, count: int) -> None:
    if not -count <= index < count:
        raise LayerNotFound(
            f"layer index {index} is out of range: the model has {count} top-level layers "
            f"(valid: {-count} to {count - 1}); run `layergrad layers MODEL` to list them"
        )


def _by_index(model: KerasModel, index: int, call: int) -> Site:
    top = list(model.layers)
    _check_index(index, len(top))
    layer = top[index]
    names = input_names(model)
    if layer.name in names:  # a Functional model lists its InputLayers: that is an input
        return Site(ref=layer.name, path=layer.name, call=0, input_index=names.index(layer.name))
    return Site(ref=ref_of((layer.name, call)), path=layer.name, call=call, layer=layer)


def _not_found_message(name: str, known: list[str]) -> str:
    known = list(dict.fromkeys(known))  # a Functional model's inputs are layers as well
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
    tail = known if len(known) <= 8 else close
    hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else "."
    listing = f" Layers: {', '.join(tail)}." if tail and not close else ""
    return (
        f"no layer named {name!r} in the model{hint}{listing} "
        "Run `layergrad layers MODEL` to list every layer name."
    )
