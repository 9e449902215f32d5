"""Read the TensorFlow ops inside one layer's call, to name the op that stops a gradient."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from layergrad.core.tf_runtime import tf
from layergrad.core.tf_types import KerasLayer, TensorTree, TFGraph, TFOperation

# Ops whose gradient is None (or is registered but returns None): a list is needed as well as
# the registry, because Round, Floor and ArgMax *have* registered gradient functions.
NO_GRADIENT = {
    **{op: f"{op.lower()} returns integer indices" for op in ("ArgMax", "ArgMin")},
    **{
        op: f"{op.lower()} has a registered gradient that returns None"
        for op in ("Round", "Floor", "Ceil", "Rint")
    },
    **dict.fromkeys(
        ("Equal", "NotEqual", "Greater", "GreaterEqual", "Less", "LessEqual"),
        "a comparison returns booleans",
    ),
    "PyFunc": "tf.numpy_function runs Python outside the tape",
    "PyFuncStateless": "tf.numpy_function runs Python outside the tape",
    "EagerPyFunc": "tf.py_function without a gradient runs Python outside the tape",
    "StopGradient": "tf.stop_gradient blocks the gradient on purpose",
    "Bucketize": "discretization returns integer buckets",
    "UniqueV2": "unique returns integer indices",
}
# Ops whose backward pass turns a finite gradient into Inf/NaN at or near zero inputs.
UNSAFE_BACKWARD = {
    "Sqrt": "d sqrt(x)/dx = 1 / (2 sqrt(x)) is Inf at x = 0",
    "Rsqrt": "d rsqrt(x)/dx is Inf at x = 0",
    "Log": "d log(x)/dx = 1/x is Inf at x = 0",
    "Log1p": "d log1p(x)/dx is Inf at x = -1",
    "Pow": "d x^p/dx is Inf at x = 0 for p < 1",
    "RealDiv": "a division's gradient is Inf where the divisor is 0",
    "Div": "a division's gradient is Inf where the divisor is 0",
    "Reciprocal": "d (1/x)/dx is Inf at x = 0",
    "Acos": "d acos(x)/dx is Inf at |x| = 1",
    "Asin": "d asin(x)/dx is Inf at |x| = 1",
    "Atanh": "d atanh(x)/dx is Inf at |x| = 1",
    "EuclideanNorm": "a norm's gradient is NaN at the zero vector",
}


@dataclass(frozen=True)
class OpFinding:
    """An op inside a layer that explains a lost or non-finite gradient."""

    op: str
    reason: str


@dataclass(frozen=True)
class TracedCall:
    """The ops of one layer call, and which of its (flattened) tensor arguments nothing uses."""

    ops: list[tuple[str, TFOperation]]
    unused: tuple[int, ...]


def trace_call(layer: KerasLayer, args: TensorTree, training: bool) -> TracedCall | None:
    """Trace `layer` on arguments shaped like `args` (TensorSpecs); None if it cannot be traced."""
    if not isinstance(args, (tuple, list)) or not args:
        return None
    graph = _graph(lambda *a: layer(*a, training=training), args)
    if graph is None:  # unusual signatures (keyword-only tensors...): no op evidence
        return None
    specs = [a for a in tf.nest.flatten(args) if isinstance(a, tf.TensorSpec)]
    placeholders = graph.inputs[: len(specs)]
    unused = tuple(i for i, t in enumerate(placeholders) if not t.consumers())
    return TracedCall([(op.type, op) for op in graph.get_operations()], unused)


def _graph(function: Callable[..., object], specs: Sequence[object]) -> TFGraph | None:
    """The graph of `function` traced on `specs`; None if it cannot be traced."""
    try:
        return tf.function(function).get_concrete_function(*specs).graph
    except Exception:  # the model's own code, or arguments it was not built for
        return None


def trace_operation(operation: object, call: int = 0) -> TracedCall | None:
    """Trace a functional model's operation (a `keras.ops` call between layers, which no
    layer's `call` holds) on its `call`-th node's arguments, as `trace_call` a layer; None if
    it cannot be traced."""
    import keras

    nodes = getattr(operation, "_inbound_nodes", None) or []
    # (inside a nested model called twice, its operations have the one node of its graph)
    arguments = getattr(nodes[min(call, len(nodes) - 1)], "arguments", None) if nodes else None
    if arguments is None or not callable(operation):
        return None
    structure = (arguments.args, arguments.kwargs)
    symbolic = [t for t in tf.nest.flatten(structure) if isinstance(t, keras.KerasTensor)]

    def run(*tensors: object) -> object:
        given = iter(tensors)
        args, kwargs = tf.nest.map_structure(
            lambda t: next(given) if isinstance(t, keras.KerasTensor) else t, structure
        )
        return operation(*args, **kwargs)

    graph = _graph(run, [tf.TensorSpec(t.shape, t.dtype) for t in symbolic])
    if graph is None:
        return None
    return TracedCall([(op.type, op) for op in graph.get_operations()], ())


def blocking_ops(ops: Sequence[tuple[str, TFOperation]]) -> list[OpFinding]:
    """Ops that give no gradient: the known list, casts to integers, unregistered float ops;
    comparisons last (argmax compares for NaN on a side path of its own: the ArgMax is the
    blocker to name)."""
    from tensorflow.python.framework import ops as tf_ops

    found = []
    for op_type, op in ops:
        if op_type in NO_GRADIENT:
            found.append(OpFinding(op_type, NO_GRADIENT[op_type]))
        elif op_type == "Cast" and not op.get_attr("DstT").is_floating:
            found.append(
                OpFinding(f"Cast to {op.get_attr('DstT').name}", "a cast to an integer type")
            )
        elif op.inputs and all(t.dtype.is_floating for t in (*op.inputs, *op.outputs)):
            try:
                registered = tf_ops._gradient_registry.lookup(op_type)
            except LookupError:
                registered = None
            if registered is None:
                found.append(OpFinding(op_type, "the op has no registered gradient"))
    return sorted(found, key=lambda f: f.reason == "a comparison returns booleans")


def unsafe_backward_ops(ops: Sequence[tuple[str, TFOperation]]) -> list[OpFinding]:
    """Ops whose gradient is Inf/NaN at some inputs (sqrt, log, division at 0)."""
    return [OpFinding(t, UNSAFE_BACKWARD[t]) for t, _ in ops if t in UNSAFE_BACKWARD]
