"""The `loss` check: the compiled loss (or `--loss`) against each output's head, its words,
and its second look at heads the file does not describe.

A head whose activation the file cannot show (a custom layer, a `Lambda`, an operation no rule
knows) is never taken for linear: once the model loads, its outputs on the probe batch say
what it applies (they sum to one per sample, lie in [0, 1], are non-negative, or take either
sign), and the loss rules judge that. What neither the file nor the probe decides is said, and
never fails the file.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from layergrad.commands.check.verdicts import Add, CheckOptions
from layergrad.core.errors import LayergradError
from layergrad.files.file_info import FileInfo
from layergrad.model.config import as_ref, layer_name, structure_refs
from layergrad.model.loss_fit import LossVerdict, loss_verdict, read_file, read_observed
from layergrad.model.observed_heads import SUBCLASSED, Observed, observe

if TYPE_CHECKING:
    from layergrad.engine.layer_calls import LayerCall, Recorded

    Probe = Callable[[], Recorded | None]  # the probe's recorded forward pass, on first use


def loss_fits(
    info: FileInfo, loss: str | None, add: Add, probe_follows: bool = False
) -> LossVerdict:
    """`loss`: the compiled loss (or `--loss`) fits each output's activation, and no weight
    layers stack into one linear map. With `probe_follows`, a head whose activation the file
    does not show is left to `judge_on_probe`, which completes this check. Returns the verdict
    recorded, which the checks that run the model go on from."""
    compiled = {"loss": loss} if loss else info.compile_config
    reading = read_file(info.config, info.graph, compiled)
    verdict = loss_verdict(reading, bool(compiled.get("loss")), probe_follows)
    verdict.add(add)
    return verdict


def without_unbuildable_loss(
    info: FileInfo, options: CheckOptions, add: Add, verdict: LossVerdict
) -> tuple[FileInfo, bool]:
    """The file's info without its compiled loss when Keras cannot build that loss (a custom
    loss whose module was not named with --import), and whether a loss is left to
    differentiate (`verdict`: the `loss` check's, made by `loss_fits` with `options`): the
    gradient checks then differentiate the outputs' projection, as for a file saved without a
    loss, and the `loss` check says so. A loss the rules do not know never fails the file."""
    from layergrad.engine.compiled_loss import loss_error  # TensorFlow
    from layergrad.engine.loader import import_modules

    loss = info.compile_config.get("loss")
    if options.loss or not loss:
        return info, verdict.has_loss
    try:
        import_modules(options.imports)
    except LayergradError:  # the loads check says why
        return info, verdict.has_loss
    error = loss_error(loss)
    if error is None:
        return info, verdict.has_loss
    message = (
        f"{verdict.message}; Keras cannot build the compiled loss without the module that "
        "defines it (--import MODULE), so the gradient checks use a random projection of the "
        "outputs"
    )
    verdict.add(add, message, replace=True)
    return replace(info, compile_config={}), False


def judge_on_probe(probe: Probe | None, info: FileInfo, loss: str | None, add: Add) -> None:
    """Complete the `loss` check for the heads the file does not describe, from the model's
    outputs on the probe batch (`probe`: its recorded forward pass, made on first use; None
    when no batch could be made): `add` replaces the check's first verdict."""
    compiled = {"loss": loss} if loss else info.compile_config
    first = read_file(info.config, info.graph, compiled)
    if not first.described and compiled.get("loss") and probe is not None:
        judge_undescribed(probe(), compiled, add)
        return
    if not first.unread:
        return
    made = _outputs_by_layer(probe()) if probe is not None else None
    names = _flat_output_names(info.config)
    observed: dict[str, Observed] = {}
    if made is not None and len(made) == len(names):
        classes = {h.name: h.layer_class for h in first.unread}
        for name, (_, value, layer) in zip(names, made, strict=True):
            if name in classes:
                seen = _declared(observe(value, classes[name]), layer, name)
                if seen is not None:
                    observed[name] = seen
    reading = read_file(info.config, info.graph, compiled, observed)
    loss_verdict(reading, bool(compiled.get("loss")), False).add(add, replace=True)


def judge_undescribed(recorded: Recorded | None, compiled: Mapping[str, object], add: Add) -> None:
    """The `loss` check of a model whose file describes no layers (a subclassed model): each
    output is judged on what its values do on the probe, named by the layer whose call made it
    (when one did). What the probe cannot decide is said, never failed."""
    made = _outputs_by_layer(recorded)
    if made is None:
        return
    seen = []
    for i, (layer, value, obj) in enumerate(made):
        name = layer or (f"output_{i}" if len(made) > 1 else "output")
        units = int(value.shape[-1]) if value.ndim >= 2 else 1
        seen.append((name, layer, units, _declared(observe(value, SUBCLASSED), obj, "")))
    reading = read_observed(compiled, seen)
    verdict = loss_verdict(reading, True, False)
    undecided = [name for name, _, _, o in seen if o is None]
    message = verdict.message + "".join(
        f"; output '{n}': unknown (its values on the probe say too little)" for n in undecided
    )
    verdict.add(add, message, replace=True)


def _declared(seen: Observed | None, layer: object, outer: str) -> Observed | None:
    """What the values did, with the activation the layer that returned them applies when it
    says one (the inner `Dense(..., activation="relu")` of a custom head): a ReLU whose few
    probe outputs all came out positive is still a ReLU."""
    from layergrad.diagnose.activations import activation_name  # TensorFlow

    if seen is None or layer is None or getattr(layer, "name", outer) == outer:
        return seen
    kind = activation_name(layer)
    own = getattr(layer, "activation", None)
    if kind is None and own is not None and getattr(own, "__name__", "") == "linear":
        kind = "linear"
    if kind is None or kind == "tanh":
        return seen
    return replace(seen, kind=kind, inner=f"'{layer.name}'")  # type: ignore[attr-defined]


def _outputs_by_layer(recorded: Recorded | None) -> list[tuple[str, np.ndarray, object]] | None:
    """The model's outputs on the probe (flattened), each with the name of the innermost layer
    whose call returned it ("" when none did: an operation in the model's own call) and that
    layer; None when the model failed on it. The layers inside custom layers are watched too."""
    if recorded is None:
        return None
    made: dict[int, LayerCall] = {}
    for call in recorded.calls:  # an inner layer's call ends first: the innermost is kept
        for tensor in call.outputs:
            made.setdefault(id(tensor), call)
    found = [made.get(id(v)) for v in recorded.outputs]
    return [
        ("", np.asarray(v), None) if c is None else (c.path.split("/")[-1], np.asarray(v), c.layer)
        for c, v in zip(found, recorded.outputs, strict=True)
    ]


def _flat_output_names(config: Mapping[str, object]) -> list[str]:
    """The layer making each output, in the order Keras flattens the outputs (dict keys
    sorted); a Sequential's last layer."""
    inner = config.get("config")
    inner = inner if isinstance(inner, Mapping) else {}
    outputs = inner.get("output_layers")
    if outputs is None:
        layers = inner.get("layers")
        last = layers[-1] if isinstance(layers, list) and layers else None
        if isinstance(last, Mapping):
            return [layer_name(last)]
        return []
    return [ref[0] for ref in structure_refs(_sorted(outputs))]


def _sorted(obj: object) -> object:
    if isinstance(obj, Mapping):
        return {k: _sorted(obj[k]) for k in sorted(obj)}
    if isinstance(obj, list) and as_ref(obj) is None:
        return [_sorted(v) for v in obj]
    return obj
