"""Does the compiled loss fit the output it is applied to? Read from the file, no TensorFlow.

The most common single fault in Keras programs is the wrong activation for the loss: binary
cross-entropy on a softmax head, categorical cross-entropy on one unit, `from_logits=True` on
a head that already applies softmax. Each pairing below names what Keras users mean instead.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from layergrad.model.config import serialized_name, structure_refs
from layergrad.model.graph import ModelGraph

CROSSENTROPY = ("binary", "categorical")  # losses that read probabilities (or logits)


@dataclass(frozen=True)
class Head:
    """One model output: its name, the layer that makes it, its activation and width."""

    name: str
    layer: str
    activation: str  # softmax, sigmoid, linear, relu, ... ("linear" when none)
    units: int | None


@dataclass(frozen=True)
class Mismatch:
    """A compiled loss that does not fit its output, with what users mean instead."""

    output: str
    loss: str
    message: str
    hint: str


def mismatches(
    config: Mapping[str, Any], graph: ModelGraph, compiled: Mapping[str, Any]
) -> list[Mismatch]:
    """Every output whose compiled loss does not fit its activation (empty without a loss)."""
    loss = compiled.get("loss")
    if not loss or not graph.known:
        return []
    heads = output_heads(config, graph)
    found = []
    for head, spec in zip(heads, _per_output(loss, [h.name for h in heads]), strict=True):
        if spec is not None:
            problem = _judge(head, *spec)
            if problem is not None:
                found.append(problem)
    return found


def output_heads(config: Mapping[str, Any], graph: ModelGraph) -> list[Head]:
    """The layers that make the model's outputs, in output order."""
    inner = config.get("config")
    inner = inner if isinstance(inner, Mapping) else {}
    names = [ref[0] for ref in structure_refs(inner.get("output_layers"))]
    if not names:  # a Sequential: its last layer
        last = [e for e in graph.layers if e.parent is None and e.class_name != "InputLayer"]
        names = [last[-1].name] if last else []
    return [_head(graph, name) for name in names]


def _head(graph: ModelGraph, name: str) -> Head:
    entry = graph.get(name)
    while entry is not None and entry.is_model:  # a nested model's last layer makes its output
        inner = [e for e in graph.layers if e.parent == entry.path]
        entry = inner[-1] if inner else None
    if entry is None:
        return Head(name, name, "unknown", None)
    cfg = entry.config
    activation = _activation_name(cfg.get("activation"))
    if entry.class_name == "Softmax":
        activation = "softmax"
    units = cfg.get("units")
    return Head(name, entry.path, activation, units if isinstance(units, int) else None)


def _activation_name(value: Any) -> str:
    if value is None:
        return "linear"
    return (serialized_name(value) or "unknown").lower()


def _per_output(loss: Any, names: Sequence[str]) -> list[tuple[str, bool] | None]:
    """(canonical loss name, from_logits) for each output, None where it cannot be read."""
    if isinstance(loss, Mapping) and "class_name" not in loss:
        return [_identify(loss.get(n)) for n in names]
    if isinstance(loss, list):
        return [_identify(v) for v in loss] + [None] * (len(names) - len(loss))
    return [_identify(loss)] * len(names)


_ALIASES = {
    "mse": "mean_squared_error",
    "mae": "mean_absolute_error",
    "meansquarederror": "mean_squared_error",
    "meanabsoluteerror": "mean_absolute_error",
    "binarycrossentropy": "binary_crossentropy",
    "binaryfocalcrossentropy": "binary_focal_crossentropy",
    "categoricalcrossentropy": "categorical_crossentropy",
    "categoricalfocalcrossentropy": "categorical_focal_crossentropy",
    "sparsecategoricalcrossentropy": "sparse_categorical_crossentropy",
}


def _identify(loss: Any) -> tuple[str, bool] | None:
    if isinstance(loss, str):
        key = loss.lower()
        return _ALIASES.get(key.replace("_", ""), key), False
    if isinstance(loss, Mapping) and isinstance(loss.get("class_name"), str):
        config = loss.get("config")
        inner = config if isinstance(config, Mapping) else {}
        key = str(loss["class_name"]).lower().replace("_", "")
        return _ALIASES.get(key, key), bool(inner.get("from_logits", False))
    return None


def _judge(head: Head, loss: str, from_logits: bool) -> Mismatch | None:
    act, units, out = head.activation, head.units, head.name
    probabilities = act in ("softmax", "sigmoid")

    def say(message: str, hint: str) -> Mismatch:
        return Mismatch(out, loss, f"{loss} on {_describe(head)}: {message}", hint)

    if from_logits and probabilities:
        return say(
            f"from_logits=True applies {act} to an output that already went through {act}, "
            "so the loss sees probabilities squashed twice",
            f"from_logits=False with this head, or drop the {act} from '{head.layer}' and keep "
            "from_logits=True",
        )
    if "binary" in loss and act == "softmax":
        return say(
            "binary cross-entropy scores each softmax output as an independent yes/no, but a "
            "softmax ties them together (and over one unit it is always 1.0)",
            "a softmax head with categorical_crossentropy (one-hot labels) or "
            "sparse_categorical_crossentropy (class ids); for yes/no or multi-label outputs a "
            "sigmoid head with binary_crossentropy",
        )
    if "categorical" in loss and (units == 1 or act == "sigmoid"):
        return say(
            "categorical cross-entropy compares a distribution over classes, but "
            + ("one unit holds no distribution (the loss is constant)" if units == 1
               else "sigmoid outputs are independent yes/no probabilities, not a distribution"),
            "for one yes/no output: Dense(1, activation='sigmoid') with binary_crossentropy; "
            "for one class out of N: Dense(N, activation='softmax') with "
            "sparse_categorical_crossentropy",
        )  # fmt: skip
    if any(w in loss for w in CROSSENTROPY) and not from_logits and act == "linear":
        return say(
            "with from_logits=False Keras reads the outputs as probabilities and clips them to "
            "[1e-7, 1 - 1e-7]: a linear head's logits outside that range get no gradient",
            f"from_logits=True in the loss (e.g. keras.losses.{_class_name(loss)}"
            "(from_logits=True)), or a softmax / sigmoid on the head",
        )
    if (
        loss in ("mean_squared_error", "mean_absolute_error")
        and act == "softmax"
        and (units or 2) > 1
    ):
        return say(
            "a squared or absolute error on class probabilities gives small, flat gradients "
            "where the prediction is most wrong",
            "categorical_crossentropy (one-hot labels) or sparse_categorical_crossentropy "
            "(class ids) for a softmax classifier",
        )
    return None


def _describe(head: Head) -> str:
    units = f"{head.units} unit{'s' if head.units != 1 else ''}, " if head.units else ""
    return f"output '{head.name}' ({units}{head.activation})"


def _class_name(loss: str) -> str:
    return "".join(part.capitalize() for part in loss.split("_"))
