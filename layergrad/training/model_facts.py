"""What the monitor reads off the model it watches: its layers and trainable variables, its
loss's name and outputs' units, each layer's activation and units (the premises of the
training rules' hints), and whether Keras has built it yet."""

from __future__ import annotations

from collections.abc import Sequence

from layergrad.core.tf_types import KerasModel, KerasVariable
from layergrad.training.layer_rules import LayerFacts
from layergrad.training.step_hook import LayerVariables


def is_built(model: KerasModel) -> bool:
    """Whether the model and every layer in it have their variables (a subclassed model or a
    Sequential without an `Input` is built by its first training step)."""
    from layergrad.model.layer_refs import iter_layers

    if not getattr(model, "built", False):
        return False
    return all(getattr(layer, "built", True) for _, layer in iter_layers(model))


def layers_and_variables(model: KerasModel) -> tuple[list[LayerVariables], list[KerasVariable]]:
    """Every leaf layer once (nested models expanded), with its trainable variables' indices."""
    from layergrad.engine.layer_calls import unique_leaves
    from layergrad.model.layer_refs import iter_layers

    layers: list[LayerVariables] = []
    variables: list[KerasVariable] = []
    seen: set[int] = set()
    for layer, path, _ in unique_leaves(iter_layers(model)):
        mine = []
        for v in layer.trainable_variables:
            if id(v) not in seen:
                seen.add(id(v))
                mine.append(len(variables))
                variables.append(v)
        layers.append(LayerVariables(path, layer, tuple(mine)))
    return layers, variables


def loss_name(loss: object) -> str:
    """The name of a compiled loss (`model.loss`: one, a list or a dict of them; "": none)."""
    if loss is None:
        return ""
    if isinstance(loss, (list, tuple)):
        return ", ".join(_one_loss(v) for v in loss)
    if isinstance(loss, dict):
        return ", ".join(f"{k}: {_one_loss(v)}" for k, v in loss.items())
    return _one_loss(loss)


def _one_loss(loss: object) -> str:
    """One entry's name: its own, else its type's (`NoneType` for an output without one)."""
    if isinstance(loss, str):
        return loss
    return str(getattr(loss, "name", None) or getattr(loss, "__name__", type(loss).__name__))


def output_units(model: KerasModel) -> list[int]:
    try:
        return [int(t.shape[-1]) if len(t.shape) else 1 for t in model.outputs]
    except (AttributeError, ValueError, TypeError):
        return []


def heads(model: KerasModel, layers: list[LayerVariables]) -> list[str]:
    """The paths of the layers that make the model's outputs (empty: not known)."""
    paths = {id(e.layer): e.path for e in layers}
    try:
        made = [getattr(t, "_keras_history", None) for t in model.outputs]
    except (AttributeError, ValueError, TypeError):
        return []
    found = [paths.get(id(h[0])) for h in made if h is not None]
    return [p for p in found if p is not None] if all(found) and found else []


def layer_facts(layers: Sequence[LayerVariables]) -> dict[str, LayerFacts]:
    """Each reported layer's `LayerFacts`, by path."""
    from layergrad.diagnose.activations import activation_name

    units = [getattr(e.layer, "units", None) for e in layers]
    return {
        e.path: LayerFacts(activation_name(e.layer), n if isinstance(n, int) else None)
        for e, n in zip(layers, units, strict=True)
    }
