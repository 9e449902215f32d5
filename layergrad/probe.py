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

import contextlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from layergrad._tf import quiet_import
from layergrad.errors import InputError, LayerNotFound, describe
from layergrad.inputs import ProbeBatch
from layergrad.layer_refs import Site


@dataclass(frozen=True)
class Activation:
    """A captured activation: where it came from, its shape, dtype and value."""

    site: Site
    shape: tuple[int, ...]
    dtype: str
    value: np.ndarray = field(repr=False, compare=False)
    output: int = 0  # which output of a multi-output layer (flattened order)

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
    """
    live = live_probe(
        model,
        batch,
        sources,
        targets,
        training=training,
        reduce=reduce,
        persistent=len(targets) > 1,
    )
    return probe_gradients(live)


@dataclass(frozen=True)
class LiveProbe:
    """One forward pass still on its tape: the watched sources and the captured targets.

    `sources[i]` is the watched tensor of `source_sites[i]` (a fresh copy of the layer's
    output), `targets[j]` the captured tensor of `target_sites[j]` and `scalars[j]` its
    reduction (None for an integer target). With a persistent tape any number of gradients,
    vector-Jacobian products and Jacobians can be taken from it (`jacobian.py`).
    """

    tape: Any
    source_sites: tuple[Site, ...]
    target_sites: tuple[Site, ...]
    sources: tuple[Any, ...]
    targets: tuple[Any, ...]
    scalars: tuple[Any, ...]


def live_probe(
    model: Any,
    batch: ProbeBatch,
    sources: Sequence[Site],
    targets: Sequence[Site],
    *,
    training: bool = False,
    reduce: str = "sum",
    persistent: bool = True,
) -> LiveProbe:
    """The forward pass of `run_probe`, with nothing differentiated yet (args as there)."""
    tf, _ = quiet_import()
    reducer = {"sum": tf.reduce_sum, "mean": tf.reduce_mean}[reduce]
    inputs = [tf.convert_to_tensor(a) for a in batch.arrays]
    sites = [*sources, *targets]
    captured: dict[tuple[str, int], Any] = {}
    source_keys = {_key(s) for s in sources}
    tape = tf.GradientTape(persistent=persistent)
    with tape:

        def on_call(key: tuple[str, int], flat: list[Any], _args: Any = None) -> list[Any]:
            first = flat[0]
            if key in source_keys and _is_float(first):
                first = _fresh(first)  # so paths that bypass this layer do not count
                tape.watch(first)
            captured[key] = first
            return [first, *flat[1:]]

        for site in sites:
            if site.input_index is not None:  # every use of a model input starts from it
                _check_input_call(site)
                tensor = captured[_key(site)] = inputs[site.input_index]
                if _key(site) in source_keys and _is_float(tensor):
                    tape.watch(tensor)
        with _capturing(_site_groups(sites), on_call) as calls:
            _forward(model, inputs, training)
        _check_all_called(sites, captured, calls)
        scalars = tuple(
            reducer(captured[_key(t)]) if captured[_key(t)].dtype.is_floating else None
            for t in targets
        )
    return LiveProbe(
        tape=tape,
        source_sites=tuple(sources),
        target_sites=tuple(targets),
        sources=tuple(captured[_key(s)] for s in sources),
        targets=tuple(captured[_key(t)] for t in targets),
        scalars=scalars,
    )


def probe_gradients(live: LiveProbe) -> ProbeRun:
    """d reduce(target) / d source for every pair of a live probe."""
    watched = list(live.sources)
    gradients = tuple(_gradients(live.tape, scalar, watched) for scalar in live.scalars)
    return ProbeRun(
        sources=tuple(_activation(s, t) for s, t in zip(live.source_sites, watched, strict=True)),
        targets=tuple(
            _activation(s, t) for s, t in zip(live.target_sites, live.targets, strict=True)
        ),
        gradients=gradients,
    )


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
    args: tuple[Any, ...] = ()
    arg_sources: tuple[tuple[int | None, ...], ...] = ()
    variable_gradients: tuple[np.ndarray | None, ...] = ()
    outputs: tuple[int | None, ...] = ()

    def index(self, path: str, call: int = 0) -> int | None:
        """Position of the activation of `path` call `call`, or None if it never ran."""
        for i, act in enumerate(self.activations):
            if act.site.path == path and act.site.call == call:
                return i
        return None


Objective = Callable[[Any], Any]  # the model's outputs -> the scalar to differentiate


def run_trace(
    model: Any,
    batch: ProbeBatch,
    target: Site | None = None,
    *,
    training: bool = False,
    reduce: str = "sum",
    seed: int = 0,
    objective: Objective | None = None,
    variables: Sequence[Any] = (),
) -> Trace:
    """Capture and watch every leaf-layer call; one backward pass from `target` to all of them.

    With `target=None` the target is `objective(outputs)` when given (a loss), else a random
    projection of the model's outputs: the sum (or mean) over every floating-point output o of
    `o * R`, R standard normal seeded by `seed`. Unlike the plain sum it is not constant for
    normalised outputs (a softmax sums to 1 per sample, so the gradient of its sum is zero
    everywhere). The same backward pass gives the gradients of `variables`. This is the
    engine of `scan` and of the diagnosis of a failed `inspect`.
    """
    live = live_trace(
        model,
        batch,
        target,
        training=training,
        reduce=reduce,
        seed=seed,
        objective=objective,
        persistent=False,
    )
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

    tape: Any
    records: tuple[tuple[Site, tuple[Any, ...], Any], ...]
    outputs: Any
    ends: tuple[Any, ...]
    scalar: Any
    target: Activation | None


def live_trace(
    model: Any,
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
    from layergrad.layer_refs import input_names, iter_layers

    tf, _ = quiet_import()
    reducer = {"sum": tf.reduce_sum, "mean": tf.reduce_mean}[reduce]
    tensors = [tf.convert_to_tensor(a) for a in batch.arrays]
    records: list[tuple[Site, tuple[Any, ...], Any]] = []
    tape = tf.GradientTape(persistent=persistent)
    with tape:

        def on_call(key: tuple[str, int], flat: list[Any], args: Any) -> list[Any]:
            fresh = [_fresh(t) if _is_float(t) else t for t in flat]
            for t in fresh:
                if _is_float(t):
                    tape.watch(t)
            path, call = key
            site = Site(ref=f"{path}@{call}" if call else path, path=path, call=call)
            records.append((site, tuple(fresh), args))
            return fresh

        for i, (name, tensor) in enumerate(zip(input_names(model), tensors, strict=False)):
            if _is_float(tensor):
                tape.watch(tensor)
            records.append((Site(ref=name, path=name, call=0, input_index=i), (tensor,), None))
        with _capturing(_unique_leaves(iter_layers(model)), on_call) as calls:
            outputs = _forward(model, tensors, training)
        target_act = None
        ends = tuple(o for o in tf.nest.flatten(outputs) if _is_float(o))
        if target is not None:
            found = [f for s, f, _ in records if _key(s) == _key(target)]
            if not found:
                _check_all_called([target], {}, calls)
            ends = (found[0][0],) if _is_float(found[0][0]) else ()
            scalar = reducer(found[0][0]) if ends else None
            target_act = _activation(target, found[0][0])
        elif objective is not None:
            scalar = objective(outputs)
        else:
            from layergrad.projection import project

            rows = int(ends[0].shape[0]) if ends and ends[0].shape.rank else 1
            scalar = project(outputs, tf.range(rows), seed, reducer)
    return LiveTrace(tape, tuple(records), outputs, ends, scalar, target_act)


def trace_gradients(live: LiveTrace, variables: Sequence[Any] = ()) -> Trace:
    """The backward pass of `run_trace`: d target / d every watched call (and `variables`)."""
    tf, _ = quiet_import()
    records = live.records
    watched = [t for _, flat, _ in records for t in flat]
    all_grads = _gradients(live.tape, live.scalar, [*watched, *variables])
    flat_grads = iter(all_grads[: len(watched)])
    activations, gradients = [], []
    for site, flat, _ in records:
        grads = [next(flat_grads) for _ in flat]
        tensors_at = [i for i, t in enumerate(flat) if hasattr(t, "dtype")]
        # the first output the target depends on (outputs other than 0: LSTM states...)
        k = next((i for i in tensors_at if grads[i] is not None), tensors_at[0])
        activations.append(_activation(site, flat[k], output=k))
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


def _specs(args: Any) -> Any:
    """The call's arguments with each tensor replaced by a TensorSpec whose batch axis is open."""
    if args is None:
        return None
    tf, _ = quiet_import()

    def spec(t: Any) -> Any:
        if not _is_tensor(t):
            return t
        return tf.TensorSpec((None, *t.shape[1:]) if t.shape.rank else (), t.dtype)

    return tf.nest.map_structure(spec, args)


def _sources(args: Any, produced: dict[int, int]) -> tuple[int | None, ...]:
    """For each tensor among a call's flattened arguments, the activation it is (or None)."""
    tf, _ = quiet_import()
    return tuple(produced.get(id(t)) for t in tf.nest.flatten(args or ()) if _is_tensor(t))


def _is_tensor(value: Any) -> bool:
    return hasattr(value, "dtype") and hasattr(value, "shape") and hasattr(value.shape, "rank")


def _unique_leaves(layers: Iterable[tuple[str, Any]]) -> list[tuple[Any, str, None]]:
    """Every non-model layer once (a layer object reused inside a nested model counts once)."""
    seen: set[int] = set()
    out = []
    for path, layer in layers:
        if not _is_model(layer) and id(layer) not in seen:
            seen.add(id(layer))
            out.append((layer, path, None))
    return out


def _is_model(layer: Any) -> bool:
    return hasattr(layer, "layers") and isinstance(getattr(layer, "layers", None), list)


def _is_float(tensor: Any) -> bool:
    return getattr(getattr(tensor, "dtype", None), "is_floating", False)


def _key(site: Site) -> tuple[str, int]:
    return (site.path, site.call)


def _forward(model: Any, inputs: list[Any], training: bool) -> Any:
    """Call the model the way it was built to be called (one tensor, a list or a dict)."""
    tf, keras = quiet_import()
    structure = getattr(model, "_inputs_struct", None)
    if structure is not None and len(keras.tree.flatten(structure)) == len(inputs):
        # model.inputs is the flattened structure (dict keys sorted), so pack it back
        args: Any = keras.tree.pack_sequence_as(structure, inputs)
    else:
        args = inputs[0] if len(inputs) == 1 else inputs
    try:
        return model(args, training=training)
    except (ValueError, TypeError, RuntimeError, tf.errors.OpError) as exc:
        raise InputError(
            f"the model failed on the probe batch: {describe(exc)}; check the --input values "
            "and shapes (ids inside the vocabulary, the shape the model was built for)"
        ) from exc


def _gradients(tape: Any, scalar: Any, watched: list[Any]) -> tuple[np.ndarray | None, ...]:
    if scalar is None:
        return tuple(None for _ in watched)
    floats = [w if _is_float(w) else None for w in watched]
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


def _activation(site: Site, tensor: Any, output: int = 0) -> Activation:
    return Activation(
        site=site,
        shape=tuple(int(d) for d in tensor.shape),
        dtype=tensor.dtype.name,
        value=_numpy(tensor),
        output=output,
    )


def _fresh(tensor: Any) -> Any:
    """A new tensor equal to `tensor`, so that watching it leaves other uses of the original
    (a skip connection around a layer that returns its input, e.g. Dropout in inference)
    outside the gradient. The Keras mask travels with it."""
    tf, _ = quiet_import()
    out = tf.identity(tensor)
    mask = getattr(tensor, "_keras_mask", None)
    if mask is not None:
        out._keras_mask = mask
    return out


def _check_input_call(site: Site) -> None:
    if site.call:
        raise LayerNotFound(
            f"{site.ref!r}: {site.path!r} is a model input, which has one value; drop @{site.call}"
        )


def _check_all_called(
    sites: Sequence[Site], captured: dict[tuple[str, int], Any], calls: dict[str, int]
) -> None:
    for site in sites:
        if _key(site) not in captured:
            made = calls.get(site.path, 0)
            if not made:
                raise LayerNotFound(
                    f"layer {site.path!r} is not called when the model runs, so it has no "
                    "activation to differentiate; pick a layer on the model's forward path"
                )
            valid = f"{site.path}" if made == 1 else f"{site.path}@0 to {site.path}@{made - 1}"
            raise LayerNotFound(
                f"{site.ref!r} asks for call {site.call} of layer {site.path!r}, but the model "
                f"calls it {made} time{'s' if made > 1 else ''}; use {valid}"
            )


# (path, call), the call's flattened outputs, its positional arguments -> the outputs to pass on
Handler = Callable[[tuple[str, int], list[Any], Any], list[Any]]


@contextlib.contextmanager
def _capturing(
    groups: Sequence[tuple[Any, str, set[int] | None]], handle: Handler
) -> Iterator[dict[str, int]]:
    """Wrap `call` of each `(layer, path, wanted calls or None for all)` for the block.

    Yields the number of calls made to each wrapped layer so far.
    """
    wrapped: list[tuple[Any, Any]] = []
    calls: dict[str, int] = {}
    try:
        for layer, path, wanted in groups:
            previous = layer.__dict__.get("call")
            layer.call = _wrap_call(layer.call, path, wanted, handle, calls)
            wrapped.append((layer, previous))
        yield calls
    finally:
        for layer, previous in wrapped:
            del layer.call
            if previous is not None:
                layer.call = previous


def _site_groups(sites: Sequence[Site]) -> list[tuple[Any, str, set[int] | None]]:
    by_layer: dict[int, tuple[Any, str, set[int] | None]] = {}
    for site in sites:
        if site.layer is not None:
            entry = by_layer.setdefault(id(site.layer), (site.layer, site.path, set()))
            assert entry[2] is not None
            entry[2].add(site.call)
    return list(by_layer.values())


def _wrap_call(
    call: Callable[..., Any],
    path: str,
    wanted: set[int] | None,
    handle: Handler,
    calls: dict[str, int],
) -> Callable[..., Any]:
    tf, _ = quiet_import()

    def probed_call(*args: Any, **kwargs: Any) -> Any:
        index = calls.get(path, 0)
        calls[path] = index + 1
        outputs = call(*args, **kwargs)
        if wanted is None or index in wanted:
            flat = tf.nest.flatten(outputs)
            passed = handle((path, index), flat, args)
            if any(a is not b for a, b in zip(passed, flat, strict=True)):
                outputs = tf.nest.pack_sequence_as(outputs, passed)
        return outputs

    return probed_call
