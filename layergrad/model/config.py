"""Reading a Keras model config: which entries are models, operations and tensor references.

Facts about the formats (Keras 3.15): a Functional config lists ``input_layers`` and
``output_layers``; its operations (``a + b``, ``keras.ops.add``) are entries with module
``keras.src.ops.*`` (legacy ``.h5``: no module and no ``trainable`` in the config). Keras 3
inbound nodes are ``{"args", "kwargs"}`` with ``__keras_tensor__`` objects whose
``keras_history`` is ``[name, node, tensor]``; Keras 2 nodes are lists of
``[name, node, tensor, kwargs]`` (kwargs may hold more refs).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from layergrad.core import json_types as js

Ref = tuple[str, int, int]

_OP_MODULES = ("keras.src.ops", "keras.ops")


def options(cfg: Mapping[str, object]) -> Mapping[str, object]:
    """An entry's ``config`` (its options), or {} when it has none."""
    inner = cfg.get("config")
    return inner if isinstance(inner, Mapping) else {}


def is_container(cfg: Mapping[str, object]) -> bool:
    """Whether a config is a Sequential or Functional model with a list of layers."""
    inner = options(cfg)
    if not isinstance(inner.get("layers"), list):
        return False
    return cfg.get("class_name") == "Sequential" or "input_layers" in inner


def is_functional(cfg: Mapping[str, object]) -> bool:
    """Whether a config is a Functional model (it lists its input layers)."""
    return is_container(cfg) and "input_layers" in js.member(cfg, "config")


def members(cfg: Mapping[str, object]) -> list[js.Config]:
    """The entries of a model config's ``layers``."""
    return js.members(js.member(cfg, "config")["layers"], "layers")


def inbound_nodes(entry: Mapping[str, object]) -> list[object]:
    """An entry's inbound nodes, one per call ([] for an input layer)."""
    return js.listed(entry.get("inbound_nodes") or [], "inbound_nodes")


def batch_shape(config: Mapping[str, object]) -> list[object] | None:
    """The input shape (batch axis first) a layer's config declares, else None."""
    for key in ("batch_shape", "batch_input_shape"):
        if isinstance(shape := config.get(key), list):
            return shape
    return None


def is_operation(cfg: Mapping[str, object]) -> bool:
    """Whether an entry is an operation (``keras.ops.*``, ``a + b``) rather than a layer."""
    module = cfg.get("module")
    if isinstance(module, str):
        return module.startswith(_OP_MODULES)
    inner = cfg.get("config")
    plain = isinstance(inner, Mapping) and "trainable" not in inner and not is_container(cfg)
    return plain and cfg.get("class_name") != "InputLayer"


def layer_name(cfg: Mapping[str, object]) -> str:
    """The name of an entry (its own ``name``, its config's, or its class)."""
    name = cfg.get("name") or options(cfg).get("name")
    return str(name or cfg.get("class_name", "layer"))


def as_ref(obj: object) -> Ref | None:
    """The (name, node, tensor) of a ``[name, node, tensor(, kwargs)]`` reference, else None."""
    if not isinstance(obj, list) or len(obj) not in (3, 4):
        return None
    name, node, tensor = obj[0], obj[1], obj[2]
    if isinstance(name, str) and isinstance(node, int) and isinstance(tensor, int):
        return (name, node, tensor)
    return None


def tensor_refs(obj: object, legacy: bool) -> Iterator[Ref]:
    """Tensor references inside a node's args/kwargs, in order."""
    if isinstance(obj, Mapping) and obj.get("class_name") == "__keras_tensor__":
        hist = as_ref(options(obj).get("keras_history"))
        yield from [hist] if hist is not None else []
    elif legacy and isinstance(obj, list) and (ref := as_ref(obj)) is not None:
        yield ref
        yield from tensor_refs(obj[3] if len(obj) == 4 else None, legacy)
    else:
        values = obj.values() if isinstance(obj, Mapping) else obj if isinstance(obj, list) else ()
        for value in values:
            yield from tensor_refs(value, legacy)


def structure_refs(obj: object) -> list[Ref]:
    """Flatten ``input_layers``/``output_layers`` (a ref, list or dict of refs)."""
    ref = as_ref(obj)
    if ref is not None:
        return [ref]
    values = obj.values() if isinstance(obj, Mapping) else obj if isinstance(obj, list) else []
    return [ref for value in values for ref in structure_refs(value)]


def serialized_name(value: object) -> str | None:
    """The name in a serialized Keras object: a plain string, its config's `name`, else its
    class name (a dtype policy, an activation); None when there is none."""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        if isinstance(name := options(value).get("name"), str):
            return name
        return str(value["class_name"]) if value.get("class_name") else None
    return None
