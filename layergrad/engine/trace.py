"""The replay of one batch: one eager forward pass under one tape that keeps whole arrays, for
a diagnosis (`inspect`'s and `scan`'s), the Jacobian measures and `check`'s layer rules.

The pass is the engine's one forward pass (`capture.forward_pass`, as the measured step's),
with `Plan.whole`: the watched calls are captured *as they are produced* (each chosen layer's
`call` wrapped for the pass, restored in `finally`), and a fresh copy of a watched output is
`tape.watch`-ed and handed on in its place. Everything downstream reads the very
tensor we watch, so the gradient is right for any graph: branches that bypass the layer act as
constants (even around a layer that returns its input), residual paths count, nested models
and shared layers work because capture happens at the call. Building
`keras.Model(model.inputs, layer.output)` instead returns None on a Sequential reloaded from
a file (stale call records), with no error.

`replay` watches every leaf-layer call (a trace: `scan`, the diagnosis) or only the chosen
sources (`inspect`'s probe, the Jacobians between two layers); each target is a layer's
output, a function of the model's outputs (a loss), or the default projection of the outputs
(`projection.py`). `run_trace` and `run_probe` differentiate it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypedDict

import numpy as np

from layergrad.core.tf_runtime import keras, tf
from layergrad.core.tf_types import (
    GradientTape,
    KerasLayer,
    KerasModel,
    KerasVariable,
    Tensor,
    TensorSpec,
    TensorTree,
)
from layergrad.data.input_kinds import inner_layers
from layergrad.data.probe_input import ProbeBatch
from layergrad.engine.capture import Plan, Record, forward_pass, installed
from layergrad.engine.layer_calls import (
    Activation,
    LayerCall,
    Recorded,
    activation,
    call_groups,
    gradients_of,
    is_float,
    unique_leaves,
)
from layergrad.model.layer_refs import Site, iter_layers

if TYPE_CHECKING:
    from typing_extensions import Unpack

Objective = Callable[[TensorTree], Tensor]  # the model's outputs -> the scalar to differentiate


@dataclass(frozen=True)
class Trace:
    """Every leaf-layer call of one forward pass, and d target / d each of them.

    `activations` holds the model inputs first, then each call in execution order;
    `gradients[i]` is the gradient with respect to `activations[i]` (None when the tape
    found no path, including for calls after the target). `args[i]` is the call's positional
    arguments with every tensor replaced by a `tf.TensorSpec` (batch axis open), None for a
    model input; `arg_sources[i]` is the index of the activation each flattened argument is
    (None when it is not a captured activation, e.g. the output of an operation `x + y`).
    `variable_gradients` are the gradients of the target with respect to the variables
    `run_trace` was given; `outputs` the indices of the activations that are the model's
    outputs (None for an output no captured call produced).
    """

    activations: tuple[Activation, ...]
    gradients: tuple[np.ndarray | None, ...]
    target: Activation | None
    args: tuple[TensorSpec, ...] = ()
    arg_sources: tuple[tuple[int | None, ...], ...] = ()
    variable_gradients: tuple[np.ndarray | None, ...] = ()
    outputs: tuple[int | None, ...] = ()

    def index(self, path: str, call: int = 0) -> int | None:
        """Position of the activation of `path` call `call`, or None if it never ran."""
        found = (
            i for i, a in enumerate(self.activations) if (a.site.path, a.site.call) == (path, call)
        )
        return next(found, None)


@dataclass(frozen=True)
class Replay:
    """One forward pass still on its tape, nothing differentiated yet.

    `records` holds each captured call (`capture.Record`: its site, its flattened outputs as
    passed on, its positional arguments), model inputs first; `outputs` is what the model
    returned.
    `sources[i]` is the watched tensor of source `i` (none when every leaf is watched);
    `targets[j]` the tensor of target `j` (None for the projection or objective of the outputs)
    and `scalars[j]` the scalar differentiated for it (None for an integer target). `ends` are
    the unreduced tensors the first target is made of (every floating-point model output, or
    the target's tensor), for measures that need more than one gradient (`scan_frobenius`).
    With a persistent tape any number of gradients, vector-Jacobian products and Jacobians can
    be taken from it (`jacobian.py`).
    """

    tape: GradientTape
    records: tuple[Record, ...]
    outputs: TensorTree
    target_sites: tuple[Site | None, ...]
    sources: tuple[Tensor, ...]
    targets: tuple[Tensor | None, ...]
    scalars: tuple[Tensor | None, ...]
    ends: tuple[Tensor, ...]


class ReplayKeywords(TypedDict, total=False):
    """The keywords `run_trace` and `run_probe` pass on to `replay`."""

    training: bool
    reduce: str
    seed: int
    objective: Objective | None


def replay(
    model: KerasModel,
    batch: ProbeBatch,
    targets: Sequence[Site | None] = (None,),
    *,
    sources: Sequence[Site] | None = None,
    persistent: bool = True,
    wrap: Sequence[tuple[KerasLayer, str, None]] | None = None,
    **how: Unpack[ReplayKeywords],
) -> Replay:
    """One forward pass of `model` on `batch` under a tape, the chosen calls watched whole
    (`capture.forward_pass` with `Plan.whole`).

    `sources=None` watches every leaf-layer call (each floating-point output) and every model
    input; otherwise the first output of each source. `how` is the `Plan`'s: each target is
    reduced to a scalar by `reduce` ("sum" or "mean", default "sum"); a None target is
    `objective(outputs)` when given (a loss), else a random projection of the model's outputs:
    the sum (or mean) over every floating-point output o of `o * R`, R standard normal seeded
    by `seed` (default 0). Unlike the plain sum it is not constant for normalised outputs (a
    softmax sums to 1 per sample, so the gradient of its sum is zero everywhere). `training`
    runs the model in training mode. `wrap` names the layers whose calls are recorded when
    they are not those the sources and targets imply.
    """
    every = sources is None
    plan = Plan(tuple(sources or ()), tuple(targets), every, whole=True, **how)
    tensors = [tf.convert_to_tensor(a) for a in batch.arrays]
    # with no target nothing is differentiated: the tape then keeps nothing of the pass
    tape = tf.GradientTape(persistent=persistent, watch_accessed_variables=bool(targets))
    with installed(call_groups(model, plan.sites, every) if wrap is None else wrap):
        rec, outputs, scalars, _ = forward_pass(model, plan, tape, tensors, guard="the probe batch")
    found = tuple(None if t is None else rec.captured[t.key] for t in targets)
    ends: tuple[Tensor, ...] = ()  # what the first target is made of
    if found:
        floats = tuple(o for o in tf.nest.flatten(outputs) if is_float(o))
        ends = floats if found[0] is None else tuple(t for t in found[:1] if is_float(t))
    return Replay(
        tape=tape,
        records=tuple(rec.records),
        outputs=outputs,
        target_sites=tuple(targets),
        sources=tuple(rec.captured[s.key] for s in sources or ()),
        targets=found,
        scalars=tuple(scalars),
        ends=ends,
    )


def run_trace(
    model: KerasModel,
    batch: ProbeBatch,
    target: Site | None = None,
    *,
    variables: Sequence[KerasVariable] = (),
    **how: Unpack[ReplayKeywords],
) -> Trace:
    """Watch every leaf-layer call of one replay; one backward pass from `target` (see
    `replay`) to all of them, and to `variables`: the engine of the diagnosis of `inspect`
    and `scan`, and of `scan --wrt weights`' causes."""
    live = replay(model, batch, (target,), persistent=False, **how)
    records = live.records
    watched = [t for r in records for t in r.tensors]
    all_grads = gradients_of(live.tape, live.scalars[0], [*watched, *variables])
    flat_grads = iter(all_grads[: len(watched)])
    activations, gradients = [], []
    for record in records:
        site, flat = record.site, record.tensors
        grads = [next(flat_grads) for _ in flat]
        tensors_at = [i for i, t in enumerate(flat) if hasattr(t, "dtype")]
        # the first output the target depends on (outputs other than 0: LSTM states...)
        k = next((i for i in tensors_at if grads[i] is not None), tensors_at[0])
        activations.append(activation(site, flat[k], output=k))
        gradients.append(grads[k])
    produced = {id(t): i for i, r in enumerate(records) for t in r.tensors}
    aim, tensor = live.target_sites[0], live.targets[0]
    return Trace(
        activations=tuple(activations),
        gradients=tuple(gradients),
        target=None if aim is None else activation(aim, tensor),
        args=tuple(_specs(r.args) for r in records),
        arg_sources=tuple(_sources(r.args, produced) for r in records),
        variable_gradients=all_grads[len(watched) :],
        outputs=tuple(produced.get(id(t)) for t in tf.nest.flatten(live.outputs)),
    )


def record_calls(model: KerasModel, arrays: Sequence[np.ndarray]) -> Recorded | None:
    """One replay in inference over `arrays` recording every layer's call, the layers inside
    custom layers too, nothing watched; None when the model fails on the batch. What `check`
    reads of the layers' outputs on its probe (the heads' activations, saturated units) comes
    from it."""
    leaves = [(path, layer) for layer, path, _ in unique_leaves(iter_layers(model))]
    inner = [(f"{path}/{sub.name}", sub) for path, layer in leaves for sub in inner_layers(layer)]
    groups = unique_leaves([*leaves, *inner])
    by_path = {path: layer for layer, path, _ in groups}
    batch = ProbeBatch(tuple(arrays), (), "random", None)
    try:
        live = replay(model, batch, (), sources=(), persistent=False, wrap=groups)
    except Exception:  # the forward check says why
        return None
    calls = [
        LayerCall(r.site.path, by_path[r.site.path], r.tensors, tf.nest.flatten(r.args))
        for r in live.records
        if r.site.input_index is None
    ]
    return Recorded(calls, keras.tree.flatten(live.outputs))


def recorder(model: KerasModel, arrays: Sequence[np.ndarray]) -> Callable[[], Recorded | None]:
    """`record_calls` made on first use, then shared: one replay for every reader."""
    return functools.cache(functools.partial(record_calls, model, arrays))


@dataclass(frozen=True)
class ProbeRun:
    """`gradients[t][s]` is d reduce(target t) / d source s, or None."""

    sources: tuple[Activation, ...]
    targets: tuple[Activation, ...]
    gradients: tuple[tuple[np.ndarray | None, ...], ...]


def run_probe(
    model: KerasModel,
    batch: ProbeBatch,
    sources: Sequence[Site],
    targets: Sequence[Site],
    **how: Unpack[ReplayKeywords],
) -> ProbeRun:
    """One replay watching `sources`, and per target one backward pass to them (`replay`);
    a gradient is None where the tape found no differentiable path."""
    live = replay(model, batch, targets, sources=sources, persistent=len(targets) > 1, **how)
    watched = list(live.sources)
    return ProbeRun(
        sources=tuple(activation(s, t) for s, t in zip(sources, watched, strict=True)),
        targets=tuple(activation(s, t) for s, t in zip(targets, live.targets, strict=True)),
        gradients=tuple(gradients_of(live.tape, scalar, watched) for scalar in live.scalars),
    )


def _specs(args: TensorTree) -> TensorTree:
    """The call's arguments with each tensor replaced by a TensorSpec whose batch axis is open."""

    def spec(t: Tensor) -> object:
        if not _is_tensor(t):
            return t
        return tf.TensorSpec((None, *t.shape[1:]) if t.shape.rank else (), t.dtype)

    return tf.nest.map_structure(spec, args)


def _sources(args: TensorTree, produced: dict[int, int]) -> tuple[int | None, ...]:
    """For each tensor among a call's flattened arguments, the activation it is (or None)."""
    return tuple(produced.get(id(t)) for t in tf.nest.flatten(args or ()) if _is_tensor(t))


def _is_tensor(value: object) -> bool:
    return hasattr(value, "dtype") and hasattr(value, "shape") and hasattr(value.shape, "rank")
