"""Run the model once under one GradientTape and return the gradients between chosen calls.

The chosen layers' activations are captured *as they are produced*: each layer's `call` is
wrapped for the duration of the probe (and restored in `finally`), and a fresh copy of a
source activation is `tape.watch`-ed and handed on in its place. Everything downstream of the
layer then reads the very tensor we watch, so the gradient is right for any graph: branches
that bypass the source act as constants (even around a layer that returns its input), residual
paths count, nested models and shared layers work because capture happens at the call.
Building `keras.Model(model.inputs, layer.output)` instead returns None on a Sequential
reloaded from a file (stale call records), with no error.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypedDict

import numpy as np

from layergrad.core.tf_runtime import tf
from layergrad.core.tf_types import GradientTape, KerasModel, Tensor, TensorTree
from layergrad.data.probe_input import ProbeBatch
from layergrad.engine.layer_calls import (
    Activation,
    activation,
    capturing,
    check_all_called,
    check_input_call,
    forward,
    fresh,
    gradients_of,
    guarded,
    is_float,
    site_groups,
)
from layergrad.model.layer_refs import Site

if TYPE_CHECKING:
    from typing_extensions import Unpack


@dataclass(frozen=True)
class ProbeRun:
    """Raw probe output: `gradients[t][s]` is d reduce(target t) / d source s, or None."""

    sources: tuple[Activation, ...]
    targets: tuple[Activation, ...]
    gradients: tuple[tuple[np.ndarray | None, ...], ...]


class ProbeKeywords(TypedDict, total=False):
    """The keywords `run_probe` passes on to `live_probe`."""

    training: bool
    reduce: str


def run_probe(
    model: KerasModel,
    batch: ProbeBatch,
    sources: Sequence[Site],
    targets: Sequence[Site],
    **how: Unpack[ProbeKeywords],
) -> ProbeRun:
    """One forward and (per target) one backward pass of `model` on `batch`.

    Args:
        model: a loaded Keras model.
        batch: the probe inputs, in the model's input order.
        sources: the activations to differentiate with respect to (watched).
        targets: the activations to differentiate; each is reduced to a scalar by `reduce`.
        how: `training` runs the model in training mode; `reduce` is "sum" (what
            `tape.gradient` does with a non-scalar target, the default) or "mean".

    Returns:
        A ProbeRun; a gradient is None where the tape found no differentiable path.
    """
    live = live_probe(model, batch, sources, targets, persistent=len(targets) > 1, **how)
    watched = list(live.sources)
    gradients = tuple(gradients_of(live.tape, scalar, watched) for scalar in live.scalars)
    return ProbeRun(
        sources=tuple(activation(s, t) for s, t in zip(sources, watched, strict=True)),
        targets=tuple(activation(s, t) for s, t in zip(targets, live.targets, strict=True)),
        gradients=gradients,
    )


@dataclass(frozen=True)
class LiveProbe:
    """One forward pass still on its tape: the watched sources and the captured targets.

    `sources[i]` is the watched tensor of `source_sites[i]` (a fresh copy of the layer's
    output), `targets[j]` the captured tensor of `target_sites[j]` and `scalars[j]` its
    reduction (None for an integer target). With a persistent tape any number of gradients,
    vector-Jacobian products and Jacobians can be taken from it (`jacobian.py`).
    """

    tape: GradientTape
    source_sites: tuple[Site, ...]
    target_sites: tuple[Site, ...]
    sources: tuple[Tensor, ...]
    targets: tuple[Tensor, ...]
    scalars: tuple[Tensor, ...]


def live_probe(
    model: KerasModel,
    batch: ProbeBatch,
    sources: Sequence[Site],
    targets: Sequence[Site],
    *,
    training: bool = False,
    reduce: str = "sum",
    persistent: bool = True,
) -> LiveProbe:
    """The forward pass of `run_probe`, with nothing differentiated yet (args as there)."""
    reducer = {"sum": tf.reduce_sum, "mean": tf.reduce_mean}[reduce]
    inputs = [tf.convert_to_tensor(a) for a in batch.arrays]
    sites = [*sources, *targets]
    captured: dict[tuple[str, int], Tensor] = {}
    source_keys = {s.key for s in sources}
    tape = tf.GradientTape(persistent=persistent)
    with tape:

        def on_call(
            key: tuple[str, int], flat: list[Tensor], _args: TensorTree = None
        ) -> list[Tensor]:
            first = flat[0]
            if key in source_keys and is_float(first):
                first = fresh(first)  # so paths that bypass this layer do not count
                tape.watch(first)
            captured[key] = first
            return [first, *flat[1:]]

        for site in sites:
            if site.input_index is not None:  # every use of a model input starts from it
                check_input_call(site)
                tensor = captured[site.key] = inputs[site.input_index]
                if site.key in source_keys and is_float(tensor):
                    tape.watch(tensor)
        with capturing(site_groups(sites), on_call) as calls:
            guarded(lambda: forward(model, inputs, training), "the probe batch")
        check_all_called(sites, captured, calls)
        scalars = tuple(
            reducer(captured[t.key]) if captured[t.key].dtype.is_floating else None for t in targets
        )
    return LiveProbe(
        tape=tape,
        source_sites=tuple(sources),
        target_sites=tuple(targets),
        sources=tuple(captured[s.key] for s in sources),
        targets=tuple(captured[t.key] for t in targets),
        scalars=scalars,
    )
