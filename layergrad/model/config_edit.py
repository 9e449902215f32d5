"""Edits of a Keras 3 model config (what `keras.saving.serialize_keras_object(model)` gives):
set a layer's option, remove a layer, insert a new layer before another or after an input.

The repairs of `layergrad fix` are written as these edits and the model is rebuilt from the
edited config. Each edit works on a Sequential (its `layers` list) and on a Functional model
(its layers' `inbound_nodes` and `output_layers`), also inside a nested model (a layer path
`encoder/dense`). A layer called more than once (shared) is not moved or removed: the edit
raises `EditError`, and the repair says it cannot be applied. No TensorFlow.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator

from layergrad.model.config import Ref, as_ref, is_container, is_functional, layer_name

Config = dict[str, object]  # a JSON object of the config being edited (values narrowed on use)


def as_object(value: object, what: str = "an entry") -> Config:
    """`value` as a JSON object of the config; EditError when it is something else."""
    if not isinstance(value, dict):
        raise EditError(f"{what} is not an object in the model's config")
    return value


class EditError(ValueError):
    """An edit that cannot be made on this config (a shared layer, a layer not found)."""


def container_of(model: Config, path: str) -> tuple[Config, Config]:
    """(the config of the model holding the layer at `path`, the layer's entry)."""
    parts = path.split("/")
    holder = model
    for depth, part in enumerate(parts):
        found = next((e for e in _layers(holder) if layer_name(e) == part), None)
        if found is None:
            raise EditError(f"no layer {path!r} in the model's config")
        if depth == len(parts) - 1:
            return holder, found
        if not is_container(found):
            raise EditError(f"{'/'.join(parts[: depth + 1])!r} is not a nested model")
        holder = found
    raise EditError(f"no layer {path!r} in the model's config")  # pragma: no cover


def layer_entry(model: Config, path: str) -> Config:
    """The entry of the layer at `path` (its `config` holds the options)."""
    return container_of(model, path)[1]


def set_option(model: Config, path: str, key: str, value: object) -> None:
    """Set one option of a layer's config (`activation`, `units`, `kernel_initializer`)."""
    entry = layer_entry(model, path)
    as_object(entry.setdefault("config", {}), "a layer's config")[key] = value


def all_names(model: Config) -> set[str]:
    """Every layer name at every depth (a new layer's name must differ from all of them)."""
    names: set[str] = set()
    for entry in _layers(model):
        names.add(layer_name(entry))
        if is_container(entry):
            names |= all_names(entry)
    return names


def fresh_name(model: Config, base: str) -> str:
    """`base`, or `base_1`, `base_2`, ...: a layer name the model does not use yet."""
    taken = all_names(model)
    if base not in taken:
        return base
    n = 1
    while f"{base}_{n}" in taken:
        n += 1
    return f"{base}_{n}"


def new_layer(class_name: str, name: str, options: Config) -> Config:
    """A config entry for a built-in Keras layer (`keras.layers`)."""
    return {
        "module": "keras.layers",
        "class_name": class_name,
        "config": {"name": name, "trainable": True, **options},
        "registered_name": None,
        "name": name,
    }


def remove_layer(model: Config, path: str) -> None:
    """Take a one-input layer out: what read its output reads its input instead."""
    holder, entry = container_of(model, path)
    name = layer_name(entry)
    entries = _layers(holder)
    if not is_functional(holder):
        entries.remove(entry)
        return
    _, source = _single_source(entry, path, "it cannot be removed")
    entries.remove(entry)
    _rewire(holder, name, source)


def insert_before(model: Config, path: str, new: Config) -> None:
    """Put `new` (a layer that keeps the shape) right before the layer at `path`."""
    holder, entry = container_of(model, path)
    entries = _layers(holder)
    index = entries.index(entry)
    if not is_functional(holder):
        entries.insert(index, new)
        return
    node, _ = _single_source(entry, path, "nothing can go before it")
    new["inbound_nodes"] = [copy.deepcopy(node)]
    name = layer_name(new)
    for tensor in _tensors(node):
        as_object(tensor["config"])["keras_history"] = [name, 0, 0]
    entries.insert(index, new)


def insert_after_input(model: Config, input_name: str, new: Config) -> None:
    """Put `new` (a layer that keeps the shape) between a model input and all its readers."""
    entries = _layers(model)
    if not is_functional(model):
        first = 1 if entries and entries[0].get("class_name") == "InputLayer" else 0
        entries.insert(first, new)
        return
    source = next((e for e in entries if layer_name(e) == input_name), None)
    if source is None:
        raise EditError(f"no input {input_name!r} in the model's config")
    name = layer_name(new)
    options = as_object(source.get("config") or {}, "an input's config")
    shape, dtype = options.get("batch_shape"), options.get("dtype")
    dtype = dtype if isinstance(dtype, str) else "float32"
    tensor = {"shape": shape, "dtype": dtype, "keras_history": [input_name, 0, 0]}
    new["inbound_nodes"] = [
        {"args": [{"class_name": "__keras_tensor__", "config": tensor}], "kwargs": {}}
    ]
    _rewire(model, input_name, (name, 0, 0), skip=new)
    entries.insert(entries.index(source) + 1, new)


def _single_source(entry: Config, path: str, what: str) -> tuple[object, Ref]:
    """The one inbound node of a layer called once, and the one tensor it reads; EditError
    (saying `what` cannot be done) for any other layer."""
    nodes = entry.get("inbound_nodes") or []
    nodes = nodes if isinstance(nodes, list) else []
    if len(nodes) != 1:
        raise EditError(f"layer {path!r} is called {len(nodes)} times; {what}")
    refs = {_history(t) for t in _tensors(nodes[0])}
    if len(refs) != 1:
        raise EditError(f"layer {path!r} reads {len(refs)} tensors; expected exactly one")
    ref = as_ref(list(next(iter(refs))))
    if ref is None:
        raise EditError(f"layer {path!r} has an inbound node this edit cannot read")
    return nodes[0], ref


def _rewire(holder: Config, old: str, source: tuple[str, int, int], skip: object = None) -> None:
    """Every reference to layer `old` (in inbound nodes and outputs) points at `source`."""
    for entry in _layers(holder):
        if entry is skip:
            continue
        for tensor in _tensors(entry.get("inbound_nodes")):
            history = _history(tensor)
            if history and history[0] == old:
                as_object(tensor["config"])["keras_history"] = list(source)
    inner = as_object(holder["config"], "a model's config")
    inner["output_layers"] = _replace_refs(inner.get("output_layers"), old, source)


def _replace_refs(obj: object, old: str, source: tuple[str, int, int]) -> object:
    ref = as_ref(obj)
    if ref is not None:
        return list(source) if ref[0] == old else obj
    if isinstance(obj, dict):
        return {k: _replace_refs(v, old, source) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_replace_refs(v, old, source) for v in obj]
    return obj


def _tensors(obj: object) -> Iterator[Config]:
    """The `__keras_tensor__` objects inside inbound nodes (args and kwargs)."""
    if isinstance(obj, dict):
        inner = obj.get("config")
        if obj.get("class_name") == "__keras_tensor__" and isinstance(inner, dict):
            if isinstance(inner.get("keras_history"), list):
                yield obj
            return
        for value in obj.values():
            yield from _tensors(value)
    elif isinstance(obj, list):
        for value in obj:
            yield from _tensors(value)


def _layers(holder: Config) -> list[Config]:
    inner = holder.get("config")
    layers = inner.get("layers") if isinstance(inner, dict) else None
    if not isinstance(layers, list):
        raise EditError("the model's config lists no layers (a subclassed model?)")
    if not all(isinstance(e, dict) for e in layers):
        raise EditError("a layer entry is not an object in the model's config")
    return layers  # the config's own list: edits change it in place


def _history(tensor: Config) -> tuple[object, ...]:
    history = as_object(tensor["config"]).get("keras_history")
    return tuple(history) if isinstance(history, list) else ()
