"""Decide from the model's traced graph whether a float input carries ids, when the layer that
takes it is a custom layer whose config does not say (`input_kinds.id_inputs`).

The model is traced once (no data runs) on float placeholders. An input carries ids when
every op that reads its values casts them to integers, directly or through ops that only move
values (reshape, slice, identity, a cast to another float type); reading only its shape
(`tf.shape(x)` for positions) or comparing it (`x != 0` for a padding mask) does not count.
Any other use (arithmetic, a matmul, a call the trace does not show) keeps it a float input.
The integers must index something (a gather, a one-hot, a lookup table): integers used as
numbers are not ids. The valid ids are those of the smallest table they index (`GatherV2`
params: the first axis of the Embedding's weights; a one-hot's depth).
"""

from __future__ import annotations

import weakref
from collections import deque

from layergrad.core.tf_runtime import keras, tf
from layergrad.core.tf_types import KerasModel, Tensor
from layergrad.data.value_checks import tf_dtype

MOVES = {
    "Identity", "IdentityN", "Reshape", "ExpandDims", "Squeeze", "StridedSlice", "Slice",
    "Transpose", "EnsureShape", "CheckNumerics", "ConcatV2", "Pack", "Tile", "BroadcastTo",
}  # fmt: skip
VALUE_FREE = {"Shape", "ShapeN", "Size", "Rank"}
COMPARES = {"Equal", "NotEqual", "Less", "LessEqual", "Greater", "GreaterEqual", "IsNan"}
INDEXING = {"GatherV2", "Gather", "ResourceGather"}  # the ids are input 1
SEARCH_DEPTH = 12  # ops between the cast to integers and the table it indexes

_FOUND: weakref.WeakKeyDictionary[KerasModel, dict[str, int | None]] = weakref.WeakKeyDictionary()


def hidden_ids(model: KerasModel) -> dict[str, int | None]:
    """Float inputs whose values the traced graph only uses as ids, and integer inputs that
    index a table -> the exclusive bound of valid ids (None: no table found). Empty when the
    model cannot be traced."""
    if model not in _FOUND:
        try:
            _FOUND[model] = _trace(model)
        except Exception:  # whatever the trace cannot do, the inputs stay float inputs
            _FOUND[model] = {}
    return _FOUND[model]


def _trace(model: KerasModel) -> dict[str, int | None]:
    tensors = list(model.inputs)
    specs = [tf.TensorSpec(t.shape, tf_dtype(str(t.dtype))) for t in tensors]
    structure = getattr(model, "_inputs_struct", None)

    def call(*xs: Tensor) -> object:
        args: object = xs[0] if len(xs) == 1 else list(xs)
        if structure is not None and len(keras.tree.flatten(structure)) == len(xs):
            args = keras.tree.pack_sequence_as(structure, list(xs))
        return model(args, training=False)

    graph = tf.function(call).get_concrete_function(*specs).graph
    placeholders = graph.inputs[: len(tensors)]
    out: dict[str, int | None] = {}
    for tensor, placeholder in zip(tensors, placeholders, strict=True):
        if placeholder.dtype.is_integer:  # ids already: which tables do they index?
            ids = [placeholder]
        elif placeholder.dtype.is_floating:
            ids = _integer_casts(placeholder) or []
        else:
            continue
        tables = [t for t in map(_tables, ids) if t is not None]
        if tables:
            sizes = [size for t in tables for size in t]
            out[tensor.name] = min(sizes) if sizes else None
    return out


def _integer_casts(placeholder: Tensor) -> list[Tensor] | None:
    """The integer tensors the input's values are cast to; None when they are used otherwise."""
    casts: list[Tensor] = []
    todo, seen = deque([placeholder]), set()
    while todo:
        tensor = todo.popleft()
        for op in tensor.consumers():
            if op.name in seen:
                continue
            seen.add(op.name)
            if op.type in VALUE_FREE or op.type in COMPARES:
                continue
            if op.type == "Cast" and op.get_attr("DstT").is_integer:
                casts.append(op.outputs[0])
            elif (op.type == "Cast" and op.get_attr("DstT").is_floating) or op.type in MOVES:
                todo.extend(o for o in op.outputs if o.dtype.is_floating)
            else:
                return None
    return casts or None


def _tables(ids: Tensor) -> list[int] | None:
    """The rows of the tables `ids` index (a gather's params; a one-hot's depth), following
    integer ops; None when they index nothing (integers used as numbers are not ids)."""
    sizes: list[int] = []
    indexed = False
    todo, seen = deque([(ids, 0)]), set()
    while todo:
        tensor, depth = todo.popleft()
        for op in tensor.consumers():
            if op.type in INDEXING and len(op.inputs) > 1 and op.inputs[1] is tensor:
                indexed = True
                rows = op.inputs[0].shape[0] if op.inputs[0].shape.rank else None
                if rows:
                    sizes.append(int(rows))
                continue
            if op.type in ("OneHot", "LookupTableFindV2", "DenseBincount", "Bincount"):
                indexed = True
                if op.type == "OneHot":
                    sizes += _constant(op.inputs[1])
                continue
            if depth < SEARCH_DEPTH and op.name not in seen and op.type not in VALUE_FREE:
                seen.add(op.name)  # (the shape of the ids is no id: positions come from it)
                todo.extend((o, depth + 1) for o in op.outputs if o.dtype.is_integer)
    return sizes if indexed else None


def _constant(tensor: Tensor) -> list[int]:
    """The value of a scalar integer constant, as a list of one; else empty."""
    if tensor.op.type != "Const":
        return []
    try:
        value = tensor.op.get_attr("value")
        return [int(value.int_val[0])] if value.int_val and int(value.int_val[0]) > 0 else []
    except (ValueError, IndexError, AttributeError):
        return []
