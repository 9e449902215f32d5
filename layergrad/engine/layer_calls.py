"""Capturing layer calls: wrap each chosen layer's `call` for one forward pass.

Each wrapped call hands its outputs to a handler, which may watch them (a fresh copy, so
that paths bypassing the layer do not count) and pass something else on. The wrapping is
undone in `finally`. Also: how a model is called (its inputs and labels packed as it was built,
for every command and `fit`), and checks that the requested calls ran.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import numpy as np

from layergrad.core.errors import InputError, LayerNotFound, op_message
from layergrad.core.tf_runtime import keras, tf
from layergrad.core.tf_types import GradientTape, KerasLayer, KerasModel, Tensor, TensorTree
from layergrad.engine import random_layers
from layergrad.model.layer_refs import LOGITS_KEY, Site, iter_layers, split_key

T = TypeVar("T")


@dataclass(frozen=True)
class Probed:
    """A captured activation: where it came from, its shape (batch axis = samples), dtype."""

    site: Site
    shape: tuple[int, ...]
    dtype: str
    output: int = 0  # which output of a multi-output layer (flattened order)

    @property
    def is_float(self) -> bool:
        """Whether the dtype is floating-point (bfloat16 too; "string" is not)."""
        return self.dtype == "bfloat16" or (
            self.dtype != "string" and np.dtype(self.dtype).kind == "f"
        )


@dataclass(frozen=True)
class Activation(Probed):
    """A captured activation of one forward pass, with its value."""

    value: np.ndarray = field(repr=False, compare=False, kw_only=True)


@dataclass(frozen=True)
class LayerCall:
    """One call of a layer in a recorded forward pass: its path (an inner layer of a custom
    layer as `path/name`), the layer, its flattened outputs and positional arguments."""

    path: str
    layer: KerasLayer
    outputs: list[Tensor]
    args: list[Tensor]


@dataclass(frozen=True)
class Recorded:
    """Every layer call of one forward pass in inference (in the order they ended: an inner
    layer's before its caller's) and the model's flattened outputs."""

    calls: list[LayerCall]
    outputs: list[Tensor]


def unique_leaves(layers: Iterable[tuple[str, KerasLayer]]) -> list[tuple[KerasLayer, str, None]]:
    """Every non-model layer once (a layer object reused inside a nested model counts once)."""
    first: dict[int, tuple[KerasLayer, str, None]] = {}
    for path, layer in layers:
        if not is_model(layer):
            first.setdefault(id(layer), (layer, path, None))
    return list(first.values())


def is_model(layer: KerasLayer) -> bool:
    return hasattr(layer, "layers") and isinstance(getattr(layer, "layers", None), list)


def is_float(tensor: Tensor) -> bool:
    """Whether a tensor is floating-point (differentiable)."""
    return getattr(getattr(tensor, "dtype", None), "is_floating", False)


def model_args(model: KerasModel, inputs: Sequence[TensorTree]) -> TensorTree:
    """The model's inputs (in input order) packed as the model was built to be called: one
    tensor, a list, or a dict by input name. (`tf.data` takes the lists as tuples,
    `keras.tree.lists_to_tuples`, as Keras's own data adapters give them: it would stack a
    list of same-shaped tensors into one.)"""
    structure = getattr(model, "_inputs_struct", None)
    if structure is not None and len(keras.tree.flatten(structure)) == len(inputs):
        # model.inputs is the flattened structure (dict keys sorted), so pack it back
        return keras.tree.pack_sequence_as(structure, list(inputs))
    return inputs[0] if len(inputs) == 1 else list(inputs)


def model_targets(model: KerasModel, labels: Sequence[TensorTree]) -> TensorTree:
    """The labels of each output (in output order, as `output_names`) packed as the model's
    outputs are (a dict by its own keys, lists as tuples), as `model.fit` takes `y`; one
    output's labels alone."""
    if len(labels) == 1:
        return labels[0]
    structure = getattr(model, "_outputs_struct", None)
    if structure is not None and len(keras.tree.flatten(structure)) == len(labels):
        return keras.tree.lists_to_tuples(keras.tree.pack_sequence_as(structure, list(labels)))
    names = list(getattr(model, "output_names", None) or range(len(labels)))
    return dict(zip(names, labels, strict=True))


def forward(model: KerasModel, inputs: list[Tensor], training: bool) -> TensorTree:
    """Call the model the way it was built to be called (one tensor, a list or a dict): the
    one call of the model in every pass (eager or compiled); in an eager pass in training mode
    its random layers draw the current batch's numbers (`random_layers`)."""
    if training and tf.executing_eagerly():
        random_layers.rewind(model)
    return model(model_args(model, inputs), training=training)


class BatchFailed(InputError):
    """The model's own code failed on a batch (a shape it was not built for, an id out of
    range): an input error, which `check` records as the file's `error` finding."""


# what the step's own checks of a batch say (`tf.debugging` asserts): said as they are
NONFINITE_LABELS = (
    "its labels hold NaN or Inf, which make the loss and every gradient NaN; drop or fill the "
    "samples whose labels are NaN/Inf"
)


def guarded(run: Callable[[], T], what: str, source: str | None = None) -> T:
    """Run a pass; a failure of the model's own ops names the batch (`what`)."""
    where = f"--data {source}: " if source else ""
    try:
        return run()
    except (tf.errors.OpError, ValueError, TypeError) as exc:
        detail = op_message(exc)
        if NONFINITE_LABELS in detail:
            raise BatchFailed(f"{where}{what}: {NONFINITE_LABELS}") from exc
        raise BatchFailed(
            f"{where}the model failed on {what}: {detail}; check the values and shapes "
            "of the data (ids inside the vocabulary, the shape the model was built for)"
        ) from exc
    except Exception as exc:
        if "Exception encountered when calling" not in str(exc) or _raised_here(exc):
            raise  # not raised by a layer's own code (Keras marks a call's), or by layergrad's
        text = exc.args[0] if isinstance(exc, KeyError) and exc.args else None  # (str: a repr)
        detail = op_message(Exception(text) if isinstance(text, str) else exc)
        fix = (
            "a Lambda loaded from a file sees none of the modules its code used, `keras` or "
            "`np`: make it a registered custom layer and pass --import"
            if isinstance(exc, NameError) and "Lambda" in str(exc)
            else "fix that code, or check the data it was given"
        )
        raise BatchFailed(
            f"{where}the model failed on {what}: {type(exc).__name__}: {detail}; "
            f"the layer's own code raised it: {fix}"
        ) from exc


_PACKAGE = Path(__file__).resolve().parents[1]  # layergrad/


def _raised_here(exc: BaseException) -> bool:
    """Whether the innermost frame of the exception's traceback is layergrad's own code (its
    wrappers run inside a layer's call, so Keras marks their errors too)."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and Path(tb.tb_frame.f_code.co_filename).is_relative_to(_PACKAGE)


def gradients_of(
    tape: GradientTape, scalar: Tensor, watched: list[Tensor]
) -> tuple[np.ndarray | None, ...]:
    if scalar is None:
        return tuple(None for _ in watched)
    floats = [w if is_float(w) else None for w in watched]
    grads = tape.gradient(scalar, [w for w in floats if w is not None])
    it = iter(grads)
    return tuple(
        None if w is None else (None if (g := next(it)) is None else to_numpy(g)) for w in floats
    )


def to_numpy(tensor: Tensor) -> np.ndarray:
    if hasattr(tensor, "values") and hasattr(tensor, "indices"):  # IndexedSlices
        tensor = tf.convert_to_tensor(tensor)
    return np.asarray(tensor.numpy())


def activation(site: Site, tensor: Tensor, output: int = 0) -> Activation:
    return Activation(
        site=site,
        shape=tuple(int(d) for d in tensor.shape),
        dtype=tensor.dtype.name,
        value=to_numpy(tensor),
        output=output,
    )


def masked_as(tensor: Tensor, out: Tensor) -> Tensor:
    """`out`, given the Keras mask of `tensor` if it has one."""
    mask = getattr(tensor, "_keras_mask", None)
    if mask is not None:
        out._keras_mask = mask
    return out


def check_input_calls(sites: Sequence[Site]) -> None:
    for site in sites:
        if site.input_index is not None and site.call:
            raise LayerNotFound(
                f"{site.ref!r}: {site.path!r} is a model input, which has one value; "
                f"drop @{site.call}"
            )


def check_all_called(
    sites: Sequence[Site], captured: dict[tuple[str, int], Tensor], calls: dict[str, int]
) -> None:
    for site in sites:
        if site.key not in captured:
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
Handler = Callable[[tuple[str, int], list[Tensor], TensorTree], list[Tensor]]
# what a wrapped call reports to, looked up at each call: the handler and the count of calls
# per layer path; None: run the call untouched (and uncounted)
Route = Callable[[], tuple[Handler, dict[str, int]] | None]


@contextlib.contextmanager
def wrapped(
    groups: Sequence[tuple[KerasLayer, str, set[int] | None]], route: Route
) -> Iterator[None]:
    """Wrap `call` of each `(layer, path, wanted calls or None for all)` for the block: each
    call is counted and its outputs (of a wanted call) handed to the handler `route` gives.
    A `path:logits` entry asks for the value before the layer's fused activation: the layer
    runs with a linear activation, that value is handed on as the call `(path:logits, K)`,
    and the activation is applied to what the handler passes on (so a gradient through the
    output goes through it). The one way layergrad wraps layer calls; undone in `finally`."""
    merged: dict[int, tuple[KerasLayer, str, set[int] | None, set[int] | None]] = {}
    for layer, path, wanted in groups:
        base, logits = split_key(path)
        _, _, out, pre = merged.get(id(layer), (layer, base, set(), set()))
        if logits:
            pre = None if pre is None or wanted is None else pre | wanted
        else:
            out = None if out is None or wanted is None else out | wanted
        merged[id(layer)] = (layer, base, out, pre)
    done: list[tuple[KerasLayer, Callable[..., TensorTree] | None]] = []
    try:
        for layer, path, out, pre in merged.values():
            previous = layer.__dict__.get("call")
            layer.call = _wrap_call(layer, path, out, pre, route)
            done.append((layer, previous))
        yield
    finally:
        for layer, previous in done:
            del layer.call
            if previous is not None:
                layer.call = previous


@contextlib.contextmanager
def capturing(
    groups: Sequence[tuple[KerasLayer, str, set[int] | None]], handle: Handler
) -> Iterator[dict[str, int]]:
    """`wrapped`, every call handed to `handle`. Yields the number of calls made to each
    wrapped layer so far."""
    calls: dict[str, int] = {}
    with wrapped(groups, lambda: (handle, calls)):
        yield calls


def call_groups(
    model: KerasModel, sites: Sequence[Site], every_leaf: bool
) -> list[tuple[KerasLayer, str, set[int] | None]]:
    """`(layer, path, calls)` for `wrapped`: those the sites name (`site_groups`), or with
    `every_leaf` every leaf layer's, and the nested models and the values before an activation
    the sites name."""
    if not every_leaf:
        return site_groups(sites)
    named = [s for s in sites if s.logits or (s.layer is not None and is_model(s.layer))]
    return [*unique_leaves(iter_layers(model)), *site_groups(named)]


def site_groups(sites: Sequence[Site]) -> list[tuple[KerasLayer, str, set[int] | None]]:
    """`(layer, path, calls)` for `wrapped`: per layer, the calls whose outputs the sites
    name, and (as `path:logits`) those whose values before the activation they name."""
    by_key: dict[tuple[int, bool], tuple[KerasLayer, str, set[int]]] = {}
    for site in sites:
        if site.layer is not None:
            path = f"{site.path}{LOGITS_KEY}" if site.logits else site.path
            entry = by_key.setdefault((id(site.layer), site.logits), (site.layer, path, set()))
            entry[2].add(site.call)
    return list(by_key.values())


def _wrap_call(
    layer: KerasLayer,
    path: str,
    wanted: set[int] | None,
    logits: set[int] | None,
    route: Route,
) -> Callable[..., TensorTree]:
    call = layer.call

    def probed_call(*args: object, **kwargs: object) -> TensorTree:
        routed = route()
        if routed is None:
            return call(*args, **kwargs)
        handle, calls = routed
        index = calls.get(path, 0)
        calls[path] = index + 1
        if logits is None or index in logits:
            outputs = _through_logits(layer, call, args, kwargs, (path, index), handle)
        else:
            outputs = call(*args, **kwargs)
        if wanted is None or index in wanted:
            flat = tf.nest.flatten(outputs)
            passed = handle((path, index), flat, args)
            if any(a is not b for a, b in zip(passed, flat, strict=True)):
                outputs = tf.nest.pack_sequence_as(outputs, passed)
        return outputs

    return probed_call


def _through_logits(
    layer: KerasLayer,
    call: Callable[..., TensorTree],
    args: tuple[object, ...],
    kwargs: dict[str, object],
    key: tuple[str, int],
    handle: Handler,
) -> TensorTree:
    """One call of a layer with a fused activation, its value before the activation handed
    to `handle` as the call `(path:logits, K)`: the layer runs with a linear activation
    (restored at once), and its activation is applied to what the handler passes on."""
    activation = layer.activation
    layer.activation = keras.activations.linear
    try:
        before = call(*args, **kwargs)
    finally:
        layer.activation = activation
    (passed,) = handle((f"{key[0]}{LOGITS_KEY}", key[1]), [before], args)
    return activation(passed)
