"""Make the repaired copy: the model's config edited, rebuilt with Keras, weights carried over.

The loaded model is serialized (`keras.saving.serialize_keras_object`, the same config a
`.keras` file holds), each plan's edits are applied to a copy of that config and of the
compile config, the edited config is held to the memory estimate of any file (`--max-memory`;
a head widened to what the labels say could ask for gigabytes), and Keras rebuilds the model
from it in safe mode (unless `--unsafe`). Every weight whose layer (by path) and name still
exist with the same shape is copied from the original; the rest keep what Keras's
initialisers drew (seeded). The copy is compiled from
the edited compile config, so it saves with its loss and optimizer.
"""

from __future__ import annotations

import contextlib
import copy
import json
from collections.abc import Mapping, Sequence

import numpy as np

from layergrad.commands.fix.plan import BIAS_LIMIT, FAR_BIAS, Plan
from layergrad.core.errors import LayergradError, LoadError, describe
from layergrad.core.limits import DEFAULT_MAX_MEMORY
from layergrad.core.probe_options import DATA_BATCH_SIZE
from layergrad.core.tf_runtime import keras
from layergrad.core.tf_types import KerasLayer, KerasModel, KerasVariable
from layergrad.model.config import is_container
from layergrad.model.config_edit import Config, EditError
from layergrad.model.layer_refs import iter_layers
from layergrad.model.memory_estimate import require_config_within


class BuildError(LayergradError):
    """The repair cannot be applied to this model (a subclassed model, a shared layer)."""


def model_config(model: KerasModel) -> Config:
    """The model's full serialized config (class, module, config, build config).

    Raises:
        BuildError: a model Keras cannot rebuild from its config (a subclassed model).
    """
    try:
        config = keras.saving.serialize_keras_object(model)
    except Exception as exc:
        raise BuildError(f"its config cannot be read ({describe(exc)})") from exc
    if not isinstance(config, dict) or not is_container(config):
        raise BuildError(
            f"a subclassed model ({type(model).__name__}) has no layer graph in its config: "
            "change the code as shown; no copy can be made"
        )
    try:  # as a .keras file holds it: lists, not tuples
        return dict(json.loads(json.dumps(config)))
    except (TypeError, ValueError) as exc:
        raise BuildError(f"its config is not plain data ({describe(exc)})") from exc


def weights_by_layer(model: KerasModel) -> dict[str, dict[str, np.ndarray]]:
    """Every layer's weights by path and weight name (`kernel`, `bias`, ...), as NumPy."""
    out: dict[str, dict[str, np.ndarray]] = {}
    for path, layer in iter_layers(model):
        arrays = {_short(v): np.asarray(v.numpy()) for v in layer.weights}
        if arrays and not hasattr(layer, "layers"):
            out[path] = arrays
    return out


def build(
    model: KerasModel,
    config: Mapping[str, object],
    compile_config: Mapping[str, object],
    plans: Sequence[Plan],
    *,
    unsafe: bool = False,
    seed: int = 0,
    budget: tuple[int, int] = (DATA_BATCH_SIZE, DEFAULT_MAX_MEMORY),
) -> KerasModel:
    """The model rebuilt with every plan's edits, its weights carried over, compiled; its
    edited config held to the memory estimate of any file before Keras builds it (`budget`:
    the rows of a batch and `--max-memory`).

    Raises:
        BuildError: an edit cannot be made, the copy would need more memory than the budget,
            or Keras cannot rebuild or compile the result.
    """
    edited = copy.deepcopy(dict(config))
    compiled = copy.deepcopy(dict(compile_config))
    _normalise_optimizer(compiled)
    try:
        for plan in plans:
            for edit in plan.model_edits:
                edit(edited)
            for edit in plan.compile_edits:
                edit(compiled)
        # a head widened to what the labels say must fit in memory before it is built
        require_config_within(edited, "the repaired copy", *budget)
    except (EditError, LoadError) as exc:
        raise BuildError(str(exc)) from exc
    keras.utils.set_random_seed(seed)
    try:
        new = keras.saving.deserialize_keras_object(edited, safe_mode=not unsafe)
    except Exception as exc:
        raise BuildError(f"Keras cannot rebuild the edited model ({describe(exc)})") from exc
    fresh = {(path, name) for plan in plans for path, name in plan.fresh}
    _carry_weights(model, new, fresh)
    if compiled:
        try:
            new.compile_from_config(compiled)
        except Exception as exc:
            raise BuildError(f"the copy cannot be compiled ({describe(exc)})") from exc
    return new


def _normalise_optimizer(compiled: Config) -> None:
    """The optimizer as a full Keras 3 config, so its learning rate can be edited and the copy
    compiled: a name (`"adam"`) or a legacy `.h5` `optimizer_config` (no module) is turned
    into one."""
    if "optimizer" not in compiled and "optimizer_config" in compiled:
        compiled["optimizer"] = compiled.pop("optimizer_config")
    compiled.pop("optimizer_config", None)
    compiled["loss"] = _modern_loss(compiled.get("loss"))
    optimizer = compiled.get("optimizer")
    legacy = isinstance(optimizer, dict) and "module" not in optimizer
    if isinstance(optimizer, str) or legacy:
        with contextlib.suppress(ValueError, TypeError):  # unknown: compile refuses it later
            compiled["optimizer"] = keras.optimizers.serialize(keras.optimizers.get(optimizer))


def _modern_loss(loss: object) -> object:
    """A loss object a legacy `.h5` wrote without its module, as Keras 3 serializes it (per
    output too); anything else as it is."""
    if isinstance(loss, dict) and "class_name" in loss:
        if "module" in loss:
            return loss
        try:
            return keras.losses.serialize(keras.losses.deserialize(loss))
        except (ValueError, TypeError):
            return loss
    if isinstance(loss, dict):
        return {k: _modern_loss(v) for k, v in loss.items()}
    if isinstance(loss, list):
        return [_modern_loss(v) for v in loss]
    return loss


def _carry_weights(old: KerasModel, new: KerasModel, fresh: set[tuple[str, str]]) -> None:
    """Copy each weight that exists in both models with the same shape (by layer path, then
    by the layer's own order of weights), except those left `fresh`."""
    before = dict(iter_layers(old))
    for path, layer in iter_layers(new):
        source = before.get(path)
        if hasattr(layer, "layers") or source is None or (path, "*") in fresh:
            continue
        for found, variable in _pairs(source, layer):
            same = tuple(found.shape) == tuple(variable.shape)
            if same and (path, _short(variable)) not in fresh:
                value = found.numpy()
                if _short(variable) == "bias" and (path, FAR_BIAS) in fresh:
                    value = np.where(np.abs(value) > BIAS_LIMIT, 0, value).astype(value.dtype)
                variable.assign(value)


def _pairs(source: KerasLayer, layer: KerasLayer) -> list[tuple[KerasVariable, KerasVariable]]:
    """The weights of `source` and of its rebuilt `layer` that are one another: in the layer's
    own order (as `set_weights` reads them) when the class and the count are the same, which
    holds the weights of sub-layers apart (a `Bidirectional`'s two `kernel`s, the four of
    `MultiHeadAttention`); else by name, where the name is the layer's only one."""
    olds, news = list(source.weights), list(layer.weights)
    if type(source).__name__ == type(layer).__name__ and len(olds) == len(news):
        return list(zip(olds, news, strict=True))
    named: dict[str, list[KerasVariable]] = {}
    for variable in olds:
        named.setdefault(_short(variable), []).append(variable)
    return [(named[_short(v)][0], v) for v in news if len(named.get(_short(v), ())) == 1]


def _short(variable: KerasVariable) -> str:
    """A variable's own name (`kernel`) without its layer's path."""
    return str(getattr(variable, "name", "")).split("/")[-1].split(":")[0]
