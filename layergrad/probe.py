"""Run the model once under one GradientTape and return the gradients between chosen calls.

The chosen layers' activations are captured *as they are produced*: each layer's `call` is
wrapped for the duration of the probe (and restored in `finally`), and a source activation is
`tape.watch`-ed at that moment. Everything downstream of it is then recorded relative to the
very tensor we watch, so the gradient is right for any graph: branches that bypass the source
act as constants, residual paths count, nested models and shared layers work because capture
happens at the call. Building `keras.Model(model.inputs, layer.output)` instead returns None on
a Sequential reloaded from a file (stale call records), with no error.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from layergrad._tf import quiet_import
from layergrad.errors import InputError, LayerNotFound
from layergrad.inputs import ProbeBatch
from layergrad.select import Site


@dataclass(frozen=True)
class Activation:
    """A captured activation: where it came from, its shape, dtype and value."""

    site: Site
    shape: tuple[int, ...]
    dtype: str
    value: np.ndarray = field(repr=False, compare=False)

    @property
    def is_float(self) -> bool:
        return np.dtype(self.dtype).kind == "f" if self.dtype != "bfloat16" else True


@dataclass(frozen=True)
class ProbeRun:
    """Raw probe output: `gradients[t][s]` is d reduce(target t) / d source s, or None."""

    sources: tuple[Activation, ...]
    targets: tuple[Activation, ...]
    gradients: tuple[tuple[np.ndarray | None, ...], ...]


def run_probe(
    model: Any,
    batch: ProbeBatch,
    sources: Sequence[Site],
    targets: Sequence[Site],
    *,
    training: bool = False,
    reduce: str = "sum",
) -> ProbeRun:
    """One forward and (per target) one backward pass of `model` on `batch`.

    Args:
        model: a loaded Keras model.
        batch: the probe inputs, in the model's input order.
        sources: the activations to differentiate with respect to (watched).
        targets: the activations to differentiate; each is reduced to a scalar by `reduce`.
        training: run the model in training mode.
        reduce: "sum" (what `tape.gradient` does with a non-scalar target) or "mean".

    Returns:
        A ProbeRun; a gradient is None where the tape found no differentiable path.

    Example:
        >>> run = run_probe(model, batch, [resolve(model, "dense")], [resolve(model, "dense_1")])
        >>> run.gradients[0][0].shape
        (8, 8)
    """
    tf, _ = quiet_import()
    reducer = {"sum": tf.reduce_sum, "mean": tf.reduce_mean}[reduce]
    inputs = [tf.convert_to_tensor(a) for a in batch.arrays]
    sites = [*sources, *targets]
    captured: dict[tuple[str, int], Any] = {}
    source_keys = {_key(s) for s in sources}
    tape = tf.GradientTape(persistent=len(targets) > 1)
    with tape:

        def on_output(site_key: tuple[str, int], tensor: Any) -> None:
            if site_key in source_keys and tensor.dtype.is_floating:
                tape.watch(tensor)
            captured[site_key] = tensor

        for site in sites:
            if site.input_index is not None:
                on_output(_key(site), inputs[site.input_index])
        with _capturing(sites, on_output):
            _forward(model, inputs, training)
        _check_all_called(sites, captured)
        scalars = [
            reducer(captured[_key(t)]) if captured[_key(t)].dtype.is_floating else None
            for t in targets
        ]
    watched = [captured[_key(s)] for s in sources]
    gradients = tuple(_gradients(tape, scalar, watched) for scalar in scalars)
    return ProbeRun(
        sources=tuple(_activation(s, captured[_key(s)]) for s in sources),
        targets=tuple(_activation(t, captured[_key(t)]) for t in targets),
        gradients=gradients,
    )


def _key(site: Site) -> tuple[str, int]:
    return (site.path, site.call)


def _forward(model: Any, inputs: list[Any], training: bool) -> Any:
    """Call the model the way it was built to be called (one tensor, a list or a dict)."""
    structure = getattr(model, "_inputs_struct", None)
    if isinstance(structure, dict):
        args: Any = dict(zip(structure.keys(), inputs, strict=True))
    else:
        args = inputs[0] if len(inputs) == 1 else inputs
    try:
        return model(args, training=training)
    except (ValueError, TypeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(f"the model rejected the probe batch: {first}") from exc


def _gradients(tape: Any, scalar: Any, watched: list[Any]) -> tuple[np.ndarray | None, ...]:
    if scalar is None:
        return tuple(None for _ in watched)
    floats = [w if w.dtype.is_floating else None for w in watched]
    grads = tape.gradient(scalar, [w for w in floats if w is not None])
    it = iter(grads)
    return tuple(
        None if w is None else (None if (g := next(it)) is None else _numpy(g)) for w in floats
    )


def _numpy(tensor: Any) -> np.ndarray:
    if hasattr(tensor, "values") and hasattr(tensor, "indices"):  # IndexedSlices
        tf, _ = quiet_import()
        tensor = tf.convert_to_tensor(tensor)
    return np.asarray(tensor.numpy())


def _activation(site: Site, tensor: Any) -> Activation:
    return Activation(
        site=site,
        shape=tuple(int(d) for d in tensor.shape),
        dtype=tensor.dtype.name,
        value=_numpy(tensor),
    )


def _check_all_called(sites: Sequence[Site], captured: dict[tuple[str, int], Any]) -> None:
    for site in sites:
        if _key(site) not in captured:
            calls = sum(1 for (path, _) in captured if path == site.path)
            if site.call == 0 and not calls:
                raise LayerNotFound(
                    f"layer {site.path!r} is not called when the model runs, so it has no "
                    "activation to differentiate; pick a layer on the model's forward path"
                )
            raise LayerNotFound(
                f"{site.ref!r} asks for call {site.call} of layer {site.path!r}, which the "
                f"model does not make; use {site.path}@0 to {site.path}@{site.call - 1}"
            )


@contextlib.contextmanager
def _capturing(
    sites: Sequence[Site], on_output: Callable[[tuple[str, int], Any], None]
) -> Iterator[None]:
    """Wrap `call` of each chosen layer so its K-th output is handed to `on_output`."""
    by_layer: dict[int, list[Site]] = defaultdict(list)
    for site in sites:
        if site.layer is not None:
            by_layer[id(site.layer)].append(site)
    wrapped: list[tuple[Any, Any]] = []
    try:
        for group in by_layer.values():
            layer = group[0].layer
            wanted = {s.call for s in group}
            previous = layer.__dict__.get("call")
            layer.call = _wrap_call(layer.call, group[0].path, wanted, on_output)
            wrapped.append((layer, previous))
        yield
    finally:
        for layer, previous in wrapped:
            del layer.call
            if previous is not None:
                layer.call = previous


def _wrap_call(
    call: Callable[..., Any],
    path: str,
    wanted: set[int],
    on_output: Callable[[tuple[str, int], Any], None],
) -> Callable[..., Any]:
    count = 0

    def probed_call(*args: Any, **kwargs: Any) -> Any:
        nonlocal count
        index, count = count, count + 1
        outputs = call(*args, **kwargs)
        if index in wanted:
            outputs = _first_tensor_watched(outputs, lambda t: on_output((path, index), t))
        return outputs

    return probed_call


def _first_tensor_watched(outputs: Any, handle: Callable[[Any], None]) -> Any:
    """Hand the layer's (first) output tensor to `handle`; multi-output layers use output 0."""
    first = outputs
    while isinstance(first, (list, tuple)) and first:
        first = first[0]
    if isinstance(first, dict) and first:
        first = next(iter(first.values()))
    handle(first)
    return outputs
