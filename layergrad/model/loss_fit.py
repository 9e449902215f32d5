"""Does the compiled loss fit the output it is applied to? Read from the file, no TensorFlow.

The most common single fault in Keras programs is the wrong activation for the loss: binary
cross-entropy on a softmax head, categorical cross-entropy on one unit, `from_logits=True` on
a head that already applies softmax. Each pairing below names what Keras users mean instead.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from layergrad.model.config import serialized_name, structure_refs
from layergrad.model.graph import LayerEntry, ModelGraph

CROSSENTROPY = ("binary", "categorical")  # losses that read probabilities (or logits)


@dataclass(frozen=True)
class Head:
    """One model output: its name, the layer that makes it, its activation and width."""

    name: str
    layer: str
    activation: str  # softmax, sigmoid, linear, relu, ... ("linear" when none)
    units: int | None
    dropout: str | None = None  # a Dropout between the last layer with weights and the output
    before: str | None = None  # the activation of the layer feeding a separate softmax layer
    before_layer: str | None = None


@dataclass(frozen=True)
class Mismatch:
    """A compiled loss that does not fit its output, with what users mean instead."""

    output: str
    loss: str
    message: str
    hint: str
    layer: str | None = None  # the layer to change (the head's when None)


def mismatches(
    config: Mapping[str, object], graph: ModelGraph, compiled: Mapping[str, object]
) -> list[Mismatch]:
    """Every output whose compiled loss does not fit its activation (empty without a loss),
    and a network with no non-linearity at all."""
    loss = compiled.get("loss")
    if not loss or not graph.known:
        return []
    heads = output_heads(config, graph)
    found = []
    for head, spec in zip(heads, per_output(loss, [h.name for h in heads]), strict=True):
        if spec is not None:
            problem = _judge(head, *spec) or _structure(head, spec[0])
            if problem is not None:
                found.append(problem)
    linear = _all_linear(graph, heads, per_output(loss, [h.name for h in heads]))
    if linear is not None and not found:
        found.append(linear)
    return found


def output_heads(config: Mapping[str, object], graph: ModelGraph) -> list[Head]:
    """The layers that make the model's outputs, in output order."""
    inner = config.get("config")
    inner = inner if isinstance(inner, Mapping) else {}
    names = [ref[0] for ref in structure_refs(inner.get("output_layers"))]
    if not names:  # a Sequential: its last layer
        last = [e for e in graph.layers if e.parent is None and e.class_name != "InputLayer"]
        names = [last[-1].name] if last else []
    return [_head(graph, name) for name in names]


PASS_THROUGH = ("Dropout", "AlphaDropout", "GaussianDropout", "GaussianNoise", "Identity",
                "ActivityRegularization")  # fmt: skip


def _head(graph: ModelGraph, name: str) -> Head:
    entry = _leaf(graph, graph.get(name))
    if entry is None:
        return Head(name, name, "unknown", None)
    dropout = None
    seen = 0
    while entry is not None and entry.class_name in PASS_THROUGH and seen < 8:
        dropout = dropout or (entry.path if "Dropout" in entry.class_name else None)
        entry = _leaf(graph, _single_inbound(graph, entry))
        seen += 1
    if entry is None:
        return Head(name, name, "unknown", None)
    activation = _activation_of(entry)
    units = _units_of(graph, entry)
    before = before_layer = None
    if activation == "softmax" and entry.class_name in ("Softmax", "Activation"):
        feeding = _leaf(graph, _single_inbound(graph, entry))
        if feeding is not None:
            before, before_layer = _activation_of(feeding), feeding.path
            if "Dropout" in feeding.class_name:  # Dense -> Dropout -> Softmax: dropped logits
                dropout = dropout or feeding.path
    return Head(name, entry.path, activation, units, dropout, before, before_layer)


def _leaf(graph: ModelGraph, entry: LayerEntry | None) -> LayerEntry | None:
    """A nested model's last layer (which makes its output), else the entry itself."""
    while entry is not None and entry.is_model:
        inner = [e for e in graph.layers if e.parent == entry.path]
        entry = inner[-1] if inner else None
    return entry


def _single_inbound(graph: ModelGraph, entry: LayerEntry) -> LayerEntry | None:
    return graph.get(entry.inbound[0]) if len(entry.inbound) == 1 else None


def _activation_of(entry: LayerEntry) -> str:
    if entry.class_name in ("Softmax", "ReLU"):
        return entry.class_name.lower()
    return _activation_name(entry.config.get("activation"))


def _units_of(graph: ModelGraph, entry: LayerEntry) -> int | None:
    """The units of the layer, or of the layer an activation layer is applied to."""
    for _ in range(4):
        units = entry.config.get("units", entry.config.get("filters"))
        if isinstance(units, int):
            return units
        if entry.class_name not in ("Softmax", "Activation", "ReLU", *PASS_THROUGH):
            return None
        feeding = _leaf(graph, _single_inbound(graph, entry))
        if feeding is None:
            return None
        entry = feeding
    return None


def _activation_name(value: object) -> str:
    if value is None:
        return "linear"
    return (serialized_name(value) or "unknown").lower()


def per_output(loss: object, names: Sequence[str]) -> list[tuple[str, bool] | None]:
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


def _identify(loss: object) -> tuple[str, bool] | None:
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
    if any(w in loss for w in CROSSENTROPY) and not from_logits and act in ("linear", "relu"):
        return say(
            "with from_logits=False Keras reads the outputs as probabilities and clips them to "
            f"[1e-7, 1 - 1e-7]: a {act} head's outputs outside that range get no gradient",
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
    if act == "softmax" and loss in ("poisson", "hinge", "squared_hinge"):
        return say(
            f"{loss} is meant for "
            + ("counts from an exponential or softplus head" if loss == "poisson"
               else "-1 / +1 targets scored on raw margins")
            + ", not for class probabilities that sum to 1",
            "categorical_crossentropy (one-hot labels) or sparse_categorical_crossentropy "
            "(class ids) for a softmax classifier",
        )  # fmt: skip
    return None


def _structure(head: Head, loss: str) -> Mismatch | None:
    """A head built so that the loss cannot train it: ReLU before softmax, dropped logits."""
    if head.before == "relu" and head.before_layer is not None:
        return Mismatch(
            head.name,
            loss,
            f"output '{head.name}': layer '{head.before_layer}' applies ReLU to the logits "
            f"before the softmax at '{head.layer}', so every negative logit becomes 0 and "
            "its class can never win",
            f"no activation on '{head.before_layer}' (the softmax turns raw logits into "
            "probabilities)",
            head.before_layer,
        )
    if head.dropout is not None:
        return Mismatch(
            head.name,
            loss,
            f"output '{head.name}': Dropout '{head.dropout}' comes after the last layer with "
            "weights, so in training it zeroes whole outputs (the logits) at random",
            f"move '{head.dropout}' before the last Dense layer",
            head.dropout,
        )
    return None


# Layers that compute a linear (affine) map, whatever their weights.
LINEAR_CLASSES = frozenset(
    {
        "InputLayer", "Dense", "EinsumDense", "Conv1D", "Conv2D", "Conv3D", "Conv1DTranspose",
        "Conv2DTranspose", "Conv3DTranspose", "DepthwiseConv2D", "SeparableConv2D", "Flatten",
        "Reshape", "Permute", "RepeatVector", "Add", "Subtract", "Average", "Concatenate",
        "AveragePooling1D", "AveragePooling2D", "AveragePooling3D", "GlobalAveragePooling1D",
        "GlobalAveragePooling2D", "GlobalAveragePooling3D", "ZeroPadding1D", "ZeroPadding2D",
        "Cropping1D", "Cropping2D", "Rescaling", "Normalization", "Embedding",
        "BatchNormalization", "Activation", *PASS_THROUGH,
    }
)  # fmt: skip
WEIGHTED = ("Dense", "EinsumDense", "Conv")


def _all_linear(
    graph: ModelGraph, heads: Sequence[Head], specs: Sequence[tuple[str, bool] | None]
) -> Mismatch | None:
    """A classifier of two or more weight layers with no non-linearity before its head: a
    linear map followed by one softmax / sigmoid, however deep (a deep linear regression is
    left alone: it fits what a single Dense layer fits, and trains)."""
    if len(heads) != 1:
        return None
    head, spec = heads[0], specs[0]
    classifier = head.activation in ("sigmoid", "softmax") or (
        spec is not None and ("crossentropy" in spec[0] or "hinge" in spec[0])
    )
    if not classifier:
        return None
    weighted = 0
    for entry in graph.layers:
        if entry.is_model:
            continue
        own = _activation_name(entry.config.get("activation"))
        if entry.path == head.layer:
            weighted += 1
            continue
        if entry.class_name not in LINEAR_CLASSES or own != "linear":
            return None
        weighted += entry.class_name.startswith(WEIGHTED)
    if weighted < 2:
        return None
    loss = spec[0] if spec is not None else "the loss"
    return Mismatch(
        head.name,
        loss,
        f"output '{head.name}': the {weighted} layers with weights have no activation between "
        f"them, so the network is one linear map before the {head.activation} at "
        f"'{head.layer}', however deep: it can only draw straight class boundaries",
        "an activation on the hidden layers (e.g. activation='relu')",
        head.layer,
    )


def _describe(head: Head) -> str:
    units = f"{head.units} unit{'s' if head.units != 1 else ''}, " if head.units else ""
    return f"output '{head.name}' ({units}{head.activation})"


def _class_name(loss: str) -> str:
    return "".join(part.capitalize() for part in loss.split("_"))
