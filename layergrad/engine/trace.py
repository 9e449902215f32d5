"""One forward pass that watches every leaf-layer call, and the gradient of one target with
respect to all of them in one backward pass: the engine of `scan` and of the diagnosis.

The target is a layer's output, a function of the model's outputs (a loss), or the default
projection of the outputs (`projection.py`); the same pass gives gradients of variables.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypedDict

import numpy as np

from layergrad.core.tf_runtime import tf
from layergrad.core.tf_types import (
    GradientTape,
    KerasLayer,
    KerasModel,
    KerasVariable,
    Tensor,
    TensorSpec,
    TensorTree,
)
from layergrad.data.probe_input import ProbeBatch
from layergrad.engine.layer_calls import (
    Activation,
    activation,
    capturing,
    check_all_called,
    forward,
    fresh,
    gradients_of,
    guarded,
    is_float,
    site_groups,
    unique_leaves,
)
from layergrad.engine.projection import project
from layergrad.model.layer_refs import Site, input_names, iter_layers

if TYPE_CHECKING:
    from typing_extensions import Unpack


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
        for i, act in enumerate(self.activations):
            if act.site.path == path and act.site.call == call:
                return i
        return None


Objective = Callable[[TensorTree], Tensor]  # the model's outputs -> the scalar to differentiate


class TraceKeywords(TypedDict, total=False):
    """The keywords `run_trace` passes on to `live_trace`."""

    training: bool
    reduce: str
    seed: int
    objective: Objective | None


def run_trace(
    model: KerasModel,
    batch: ProbeBatch,
    target: Site | None = None,
    *,
    variables: Sequence[KerasVariable] = (),
    **how: Unpack[TraceKeywords],
) -> Trace:
    """Capture and watch every leaf-layer call; one backward pass from `target` to all of them.

    `how` runs the model in training mode (`training`), reduces the target by `reduce` ("sum"
    or "mean"), seeds the projection (`seed`) or replaces it by `objective` (see `live_trace`).

    With `target=None` the target is `objective(outputs)` when given (a loss), else a random
    projection of the model's outputs: the sum (or mean) over every floating-point output o of
    `o * R`, R standard normal seeded by `seed`. Unlike the plain sum it is not constant for
    normalised outputs (a softmax sums to 1 per sample, so the gradient of its sum is zero
    everywhere). The same backward pass gives the gradients of `variables`. This is the
    engine of `scan` and of the diagnosis of a failed `inspect`.
    """
    live = live_trace(model, batch, target, persistent=False, **how)
    return trace_gradients(live, variables)


@dataclass(frozen=True)
class LiveTrace:
    """The forward pass of `run_trace` still on its tape, nothing differentiated yet.

    `records` holds (site, the call's flattened outputs as passed on, its positional
    arguments), model inputs first; `outputs` is what the model returned; `scalar` is the
    target `run_trace` differentiates; `ends` are the unreduced tensors the target is made
    of (every floating-point model output, or the target site's tensor), for measures that
    need more than one gradient (`jacobian_scan.py`).
    """

    tape: GradientTape
    records: tuple[tuple[Site, tuple[Tensor, ...], TensorTree], ...]
    outputs: TensorTree
    ends: tuple[Tensor, ...]
    scalar: Tensor
    target: Activation | None


def live_trace(
    model: KerasModel,
    batch: ProbeBatch,
    target: Site | None = None,
    *,
    training: bool = False,
    reduce: str = "sum",
    seed: int = 0,
    objective: Objective | None = None,
    persistent: bool = True,
) -> LiveTrace:
    """The forward pass of `run_trace` (args as there), every leaf-layer call watched."""
    reducer = {"sum": tf.reduce_sum, "mean": tf.reduce_mean}[reduce]
    tensors = [tf.convert_to_tensor(a) for a in batch.arrays]
    records: list[tuple[Site, tuple[Tensor, ...], TensorTree]] = []
    tape = tf.GradientTape(persistent=persistent)
    with tape:

        def on_call(key: tuple[str, int], flat: list[Tensor], args: TensorTree) -> list[Tensor]:
            copies = [fresh(t) if is_float(t) else t for t in flat]
            for t in copies:
                if is_float(t):
                    tape.watch(t)
            records.append((Site.of_call(key), tuple(copies), args))
            return copies

        for i, (name, tensor) in enumerate(zip(input_names(model), tensors, strict=False)):
            if is_float(tensor):
                tape.watch(tensor)
            records.append((Site(ref=name, path=name, call=0, input_index=i), (tensor,), None))
        groups: list[tuple[KerasLayer, str, set[int] | None]] = [*unique_leaves(iter_layers(model))]
        if target is not None and target.logits:  # its value before the activation: a call
            groups += site_groups([target])
        with capturing(groups, on_call) as calls:
            outputs = guarded(lambda: forward(model, tensors, training), "the probe batch")
        target_act = None
        ends = tuple(o for o in tf.nest.flatten(outputs) if is_float(o))
        if target is not None:
            found = [f for s, f, _ in records if s.key == target.key]
            if not found:
                check_all_called([target], {}, calls)
            ends = (found[0][0],) if is_float(found[0][0]) else ()
            scalar = reducer(found[0][0]) if ends else None
            target_act = activation(target, found[0][0])
        elif objective is not None:
            scalar = objective(outputs)
        else:
            rows = int(ends[0].shape[0]) if ends and ends[0].shape.rank else 1
            scalar = project(outputs, tf.range(rows), seed, reducer)
    return LiveTrace(tape, tuple(records), outputs, ends, scalar, target_act)


def trace_gradients(live: LiveTrace, variables: Sequence[KerasVariable] = ()) -> Trace:
    """The backward pass of `run_trace`: d target / d every watched call (and `variables`)."""
    records = live.records
    watched = [t for _, flat, _ in records for t in flat]
    all_grads = gradients_of(live.tape, live.scalar, [*watched, *variables])
    flat_grads = iter(all_grads[: len(watched)])
    activations, gradients = [], []
    for site, flat, _ in records:
        grads = [next(flat_grads) for _ in flat]
        tensors_at = [i for i, t in enumerate(flat) if hasattr(t, "dtype")]
        # the first output the target depends on (outputs other than 0: LSTM states...)
        k = next((i for i in tensors_at if grads[i] is not None), tensors_at[0])
        activations.append(activation(site, flat[k], output=k))
        gradients.append(grads[k])
    produced = {id(t): i for i, (_, flat, _) in enumerate(records) for t in flat}
    return Trace(
        activations=tuple(activations),
        gradients=tuple(gradients),
        target=live.target,
        args=tuple(_specs(args) for _, _, args in records),
        arg_sources=tuple(_sources(args, produced) for _, _, args in records),
        variable_gradients=all_grads[len(watched) :],
        outputs=tuple(produced.get(id(t)) for t in tf.nest.flatten(live.outputs)),
    )


def _specs(args: TensorTree) -> TensorTree:
    """The call's arguments with each tensor replaced by a TensorSpec whose batch axis is open."""
    if args is None:
        return None

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
