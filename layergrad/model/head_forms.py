"""What each output of a saved model applies last, read from every form Keras saves. No TF.

Facts about the formats (Keras 3.15, and Keras 2 ``.h5`` files): a layer's ``activation`` is
saved as the function's name (``"sigmoid"`` for ``"sigmoid"``, ``keras.activations.sigmoid``
and ``tf.math.sigmoid``), as a function object ``{"class_name": "function", "config":
"softmax_v2"}`` (``tf.nn.softmax``; the TensorFlow names end ``_v2``), or as a layer instance
``{"module": "keras.layers", "class_name": "ReLU", "config": {...}}``. Activation layers
(``Softmax``, ``ReLU`` with ``max_value`` / ``negative_slope``, ``LeakyReLU``, ``ELU``,
``PReLU``, ``Activation``) and operations (``keras.ops.sigmoid(x)``: an entry of class
``Sigmoid``) say what they apply by their class. A custom layer, a ``Lambda`` or an unknown
function does not say: its activation is ``"unknown"``, never taken for linear.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from layergrad.model.config import options, structure_refs
from layergrad.model.graph import LayerEntry, ModelGraph

UNKNOWN = "unknown"
# Keras' activation functions, their TensorFlow and operation spellings, by a key: the name
# lower-cased without underscores (the `_v2` of tf.nn names dropped).
_NAMES = {
    key.replace("_", ""): key
    for key in (
        "linear", "relu", "relu6", "sigmoid", "softmax", "tanh", "elu", "selu", "gelu",
        "silu", "swish", "softplus", "softsign", "exponential", "hard_sigmoid", "hard_silu",
        "hard_swish", "hard_tanh", "leaky_relu", "log_softmax", "log_sigmoid", "mish", "celu",
        "glu", "sparsemax", "sparse_plus", "sparse_sigmoid", "squareplus", "tanh_shrink",
        "threshold", "soft_shrink", "hard_shrink", "prelu",
    )
} | {"identity": "linear", "exp": "exponential", "logistic": "sigmoid"}  # fmt: skip
# Activation layers: what they apply.
_LAYERS = {"Softmax": "softmax", "LeakyReLU": "leaky_relu", "ELU": "elu", "PReLU": "prelu",
           "ThresholdedReLU": "relu", "ReLU": "relu"}  # fmt: skip
# The weight layers: they apply their `activation` option last (none: linear).
WEIGHTED = ("Dense", "EinsumDense", "Conv1D", "Conv2D", "Conv3D", "Conv1DTranspose",
            "Conv2DTranspose", "Conv3DTranspose", "SeparableConv1D", "SeparableConv2D",
            "DepthwiseConv1D", "DepthwiseConv2D")  # fmt: skip
# Layers that hand on their input as it is (in inference).
PASS_THROUGH = ("Dropout", "AlphaDropout", "GaussianDropout", "GaussianNoise", "Identity",
                "ActivityRegularization")  # fmt: skip
# Single-input layers that map their input linearly (in inference), keeping a chain linear.
THROUGH = frozenset(
    {
        *PASS_THROUGH, "Flatten", "Reshape", "Permute", "RepeatVector", "BatchNormalization",
        "Rescaling", "Normalization",
        *(f"{family}{d}D" for d in (1, 2, 3) for family in (
            "SpatialDropout", "AveragePooling", "GlobalAveragePooling", "ZeroPadding",
            "Cropping", "UpSampling")),
    }
)  # fmt: skip
JOINS = frozenset({"Add", "Subtract", "Average", "Concatenate"})
# Built-in layers with no activation of their own: what comes out is what came in, mixed
# linearly (or normalised, pooled, reshaped): unbounded reals.
NO_ACTIVATION = THROUGH | JOINS | {*WEIGHTED,
    "InputLayer", "Multiply", "Dot", "Maximum", "Minimum", "Embedding", "LayerNormalization",
    "GroupNormalization", "UnitNormalization", "RMSNormalization", "MultiHeadAttention",
    "GroupedQueryAttention", "Attention", "AdditiveAttention", "Masking",
    *(f"{family}{d}D" for d in (1, 2, 3) for family in ("MaxPooling", "GlobalMaxPooling")),
}  # fmt: skip
_WRAPPERS = ("TimeDistributed", "Bidirectional")  # their config's `layer` makes the output


def activation_from(value: object) -> str:
    """The activation a serialized ``activation`` value names ("linear" for None, "unknown"
    for a function or object no rule knows)."""
    if value is None:
        return "linear"
    if isinstance(value, str):
        return _by_name(value)
    if isinstance(value, Mapping):
        class_name, config = value.get("class_name"), value.get("config")
        if class_name == "function" and isinstance(config, str):
            return _by_name(config)
        if isinstance(class_name, str):
            inner = config if isinstance(config, Mapping) else {}
            return _layer_activation(class_name, inner, value.get("module"))
    return UNKNOWN


def activation_named(name: str) -> str:
    """The canonical activation a function's name (``softmax_v2``, ``leaky_relu``) or an
    activation layer's class (``ReLU``, ``Softmax``) stands for; "unknown" for others."""
    return _LAYERS.get(name) or _by_name(name)


def _by_name(name: str) -> str:
    key = name.strip().lower().replace("_", "").removesuffix("v2")
    if ">" in name:  # a registered custom function
        return UNKNOWN
    return _NAMES.get(key, UNKNOWN)


def _layer_activation(class_name: str, config: Mapping[str, object], module: object) -> str:
    """What a layer (or operation) of this class and config applies to its output."""
    if class_name == "ReLU":
        slope, top = config.get("negative_slope"), config.get("max_value")
        if isinstance(slope, (int, float)) and slope:
            return "leaky_relu"
        return "relu6" if top == 6 else "relu"
    if class_name in _LAYERS:
        return _LAYERS[class_name]
    if class_name == "Activation":
        return activation_from(config.get("activation"))
    if class_name == "TFOpLambda":  # Keras 2: tf.nn.softmax(x) in a functional model
        function = config.get("function")
        return _by_name(function.rsplit(".", 1)[-1]) if isinstance(function, str) else UNKNOWN
    if isinstance(module, str) and module.startswith(("keras.src.ops", "keras.ops")):
        return _by_name(class_name)  # keras.ops.sigmoid(x) is an entry of class Sigmoid
    if class_name in _WRAPPERS:  # the wrapped layer's config, as an `activation` value holds one
        inner = config.get("layer")
        wrapped = isinstance(inner, Mapping) and isinstance(inner.get("class_name"), str)
        return activation_from(inner) if wrapped else UNKNOWN
    if class_name in NO_ACTIVATION or _builtin_with_activation(class_name, config, module):
        return activation_from(config.get("activation"))
    return UNKNOWN


def _builtin_with_activation(class_name: str, config: Mapping[str, object], module: object) -> bool:
    """A Keras layer (convolutions, recurrent layers...) whose config names its activation."""
    keras_module = module is None or (isinstance(module, str) and _is_keras(module))
    return keras_module and "activation" in config and ">" not in class_name


def activation_of(entry: LayerEntry) -> str:
    """What `entry` applies last: an activation name, "linear", or "unknown" (a custom layer,
    a Lambda, a nested model, an operation no rule knows)."""
    if entry.is_model or ">" in (entry.registered_name or "") or ">" in entry.class_name:
        return UNKNOWN
    if entry.module is not None and not _is_keras(entry.module):  # a class of another package
        return UNKNOWN
    module = entry.module
    if module is None and _is_op(entry):  # a legacy .h5 operation has no module
        module = "keras.src.ops"
    return _layer_activation(entry.class_name, entry.config, module)


def _is_keras(module: str) -> bool:
    """Keras' own module (``keras.layers``, ``keras.src.ops.nn``), not ``keras_hub``."""
    return module == "keras" or module.startswith("keras.")


def _is_op(entry: LayerEntry) -> bool:
    return not entry.listed and entry.class_name != "InputLayer"


@dataclass(frozen=True)
class Head:
    """One model output: its name, the layer that makes it, its activation and width."""

    name: str
    layer: str
    activation: str  # softmax, sigmoid, linear, relu, ... ("unknown" when the file does not say)
    units: int | None
    dropout: str | None = None  # a Dropout between the last layer with weights and the output
    before: str | None = None  # the activation of the layer feeding a separate softmax layer
    before_layer: str | None = None
    layer_class: str = ""  # the class of the layer that makes the output
    observed: str | None = None  # what its values did on the probe, when the file did not say

    @property
    def known(self) -> bool:
        """Whether the file says what the output applies last."""
        return self.activation != UNKNOWN


def output_heads(config: Mapping[str, object], graph: ModelGraph) -> list[Head]:
    """The layers that make the model's outputs, in output order."""
    names = [ref[0] for ref in structure_refs(options(config).get("output_layers"))]
    if not names:  # a Sequential: its last layer
        last = [e for e in graph.layers if e.parent is None and e.class_name != "InputLayer"]
        names = [last[-1].name] if last else []
    return [_head(graph, name) for name in names]


def output_keys(config: Mapping[str, object]) -> list[tuple[str, str]]:
    """(dict key, the layer that makes it) of each output of a model whose outputs are a dict
    (`Model(x, {"price": a})`) and made by one layer."""
    outputs = options(config).get("output_layers")
    if not isinstance(outputs, Mapping):
        return []
    refs = {str(key): structure_refs(ref) for key, ref in outputs.items()}
    return [(key, found[0][0]) for key, found in refs.items() if len(found) == 1]


def keyed_by_head(loss: object, config: Mapping[str, object]) -> object:
    """`loss` with a dict of losses keyed by the outputs' dict keys (`Model(x, {"price": a})`,
    compiled with `loss={"price": ...}`) also keyed by the layer that makes each output, the
    name `output_heads` gives it; any other loss as it is."""
    if not isinstance(loss, Mapping) or "class_name" in loss:
        return loss
    keys = [(key, layer) for key, layer in output_keys(config) if key in loss and layer not in loss]
    return {**loss, **{layer: loss[key] for key, layer in keys}}


def _head(graph: ModelGraph, name: str) -> Head:
    entry = leaf(graph, graph.get(name))
    dropout = None
    seen = 0
    while entry is not None and entry.class_name in PASS_THROUGH and seen < 8:
        dropout = dropout or (entry.path if "Dropout" in entry.class_name else None)
        entry = single_inbound(graph, entry)
        seen += 1
    if entry is None:
        return Head(name, name, UNKNOWN, None)
    activation = activation_of(entry)
    # its units, or those of the layer an activation layer (or operation) is applied to
    applied = units_layer(graph, entry, lambda e: e.class_name in _APPLIERS or _is_op(e))
    units = declared_units(applied)
    before = before_layer = None
    weights = ("units", "filters", "kernel_initializer")  # a layer with weights of its own
    if activation == "softmax" and not any(k in entry.config for k in weights):
        feeding = single_inbound(graph, entry)
        if feeding is not None:
            before, before_layer = activation_of(feeding), feeding.path
            if "Dropout" in feeding.class_name:  # Dense -> Dropout -> Softmax: dropped logits
                dropout = dropout or feeding.path
    return Head(name, entry.path, activation, units, dropout, before, before_layer,
                entry.class_name.split(">")[-1])  # fmt: skip


def leaf(graph: ModelGraph, entry: LayerEntry | None) -> LayerEntry | None:
    """The layer that makes a nested model's output (its output layer), else the entry."""
    seen = 0
    while entry is not None and entry.is_model and seen < 32:
        outputs = [ref[0] for ref in structure_refs(entry.config.get("output_layers"))]
        if len(outputs) > 1:
            return None  # a nested model with several outputs: which one is not known here
        inner = [e for e in graph.layers if e.parent == entry.path]
        named = graph.get(f"{entry.path}/{outputs[0]}") if outputs else None
        entry = named or (inner[-1] if inner else None)
        seen += 1
    return entry


def single_inbound(graph: ModelGraph, entry: LayerEntry) -> LayerEntry | None:
    """The one layer feeding `entry` (of a nested model, the layer that makes its output); None
    when it has none or several."""
    return leaf(graph, graph.get(entry.inbound[0])) if len(entry.inbound) == 1 else None


_APPLIERS = ("Activation", *_LAYERS, *PASS_THROUGH)  # layers that keep the width


def declared_units(entry: LayerEntry) -> int | None:
    """The output features (units, filters) a layer's config declares."""
    value = entry.config.get("units", entry.config.get("filters"))
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def units_layer(
    graph: ModelGraph, entry: LayerEntry, through: Callable[[LayerEntry], bool]
) -> LayerEntry:
    """The layer holding `entry`'s units: `entry`, or the nearest layer before it that declares
    them, walking back through the single-input layers `through` lets pass (at most 4); where
    the walk stopped when none does."""
    for _ in range(4):
        feeding = single_inbound(graph, entry)
        if declared_units(entry) is not None or not through(entry) or feeding is None:
            break
        entry = feeding
    return entry
