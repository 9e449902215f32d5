"""What each model input carries: values, ids or text, read from the layers that consume it.

A float input whose every consumer is an `Embedding` or a lookup layer holds ids however it
was declared (`Input(shape=(maxlen,))` before an `Embedding`): it is fed as int32, as those
layers cast it anyway, and probed over its valid ids. A nested model is looked into; a custom
layer is decided from the traced graph (`id_trace.py`); anything undecided stays a float
input. A string input is probed with text from the vocabulary of the layer that reads it
(`TextVectorization`, `StringLookup`). A float input the model preprocesses itself is drawn
in the range its preprocessing expects (`preprocessing_draws`).
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from layergrad.core.tf_types import KerasLayer, KerasModel, Tensor

# Layers whose input is ids (cast to integers inside the layer); their bound, when they have one.
ID_LAYERS = ("Embedding", "IntegerLookup", "CategoryEncoding", "Hashing")
TEXT_LAYERS = ("TextVectorization", "StringLookup")
MAX_TOKENS_DRAWN = 20_000  # of a vocabulary: a random probe needs variety, not every word
DEFAULT_WORDS = 8  # words per sample for a TextVectorization without a sequence length
FLOATS = ("float16", "float32", "float64", "bfloat16")
SIMPLE_TOKENS = tuple(f"token{i}" for i in range(10))


@dataclass(frozen=True)
class TextDraw:
    """How the random probe draws a string input: `words` tokens per sample (1 for a lookup)
    from `tokens`; `why` says where the tokens came from."""

    tokens: tuple[str, ...]
    words: int
    why: str


SIMPLE = TextDraw(SIMPLE_TOKENS, 1, "simple tokens: no layer that reads it is known")


def class_names(layer: KerasLayer) -> tuple[str, ...]:
    """The class names of a layer and its bases (a subclass of Embedding takes ids too)."""
    return tuple(c.__name__ for c in type(layer).__mro__)


def is_id_layer(layer: KerasLayer) -> bool:
    return any(name in ID_LAYERS for name in class_names(layer))


def model_inputs(model: KerasModel) -> list[Tensor]:
    """The model's input tensors (none when it does not declare them)."""
    try:
        return list(model.inputs)
    except (AttributeError, ValueError):
        return []


def input_consumers(model: KerasModel) -> Iterator[tuple[str, KerasLayer]]:
    """Yield `(input name, layer)` for each layer whose call takes a model input directly;
    a nested model's consumers stand for it."""
    inputs = {id(t): t.name for t in model_inputs(model)}
    found = False
    for layer in getattr(model, "_operations", None) or model.layers:  # `ops.cast(x)` too
        if type(layer).__name__ == "InputLayer":
            continue
        for node in getattr(layer, "_inbound_nodes", []):
            for tensor in getattr(node, "input_tensors", ()):
                if id(tensor) in inputs:
                    found = True
                    for leaf in _leaves(layer):
                        yield inputs[id(tensor)], leaf
    real = [la for la in model.layers if type(la).__name__ != "InputLayer"]
    if not found and len(inputs) == 1 and real:
        # A Sequential reloaded from a file has stale call records: its first layer is the consumer.
        for leaf in _leaves(real[0]):
            yield next(iter(inputs.values())), leaf


def _leaves(layer: KerasLayer) -> Iterator[KerasLayer]:
    """The layers that take a nested model's inputs (its own consumers), else the layer."""
    if hasattr(layer, "layers") and layer.layers:
        inner = [leaf for _, leaf in input_consumers(layer)]
        if inner:
            yield from inner
            return
        yield from _leaves(next(la for la in layer.layers if type(la).__name__ != "InputLayer"))
        return
    yield layer


def id_bound(layer: KerasLayer) -> int | None:
    """The exclusive bound of valid ids of an id layer (Embedding `input_dim`, ...)."""
    size = getattr(layer, "input_dim", None) or getattr(layer, "num_tokens", None)
    if not isinstance(size, int) and "Hashing" in class_names(layer):
        size = getattr(layer, "num_bins", None)
    return size if isinstance(size, int) and size > 0 else None


def table_inputs(model: KerasModel) -> dict[str, str]:
    """Inputs an Embedding takes directly -> that layer (`Embedding 'embedding'`): it reads a
    negative id from the end of its table (Keras's `take`), so their ids must not be negative."""
    tables: dict[str, str] = {}
    for name, layer in input_consumers(model):
        if "Embedding" in class_names(layer):
            tables.setdefault(name, f"{type(layer).__name__} {layer.name!r}")
    return tables


_DECIDED: weakref.WeakKeyDictionary[KerasModel, dict[str, str]] = weakref.WeakKeyDictionary()


def id_inputs(model: KerasModel) -> dict[str, str]:
    """Float inputs that carry ids -> the layer that takes them (`Embedding 'embedding'`).

    Decided once per model: from the consumers' classes, or, for a custom layer (or one holding
    an id layer), from the model's traced graph (`id_trace.hidden_ids`).
    """
    if model in _DECIDED:
        return _DECIDED[model]
    floats = {t.name for t in model_inputs(model) if str(t.dtype) in FLOATS}
    verdict: dict[str, str | None] = {}
    hidden: set[str] = set()
    for name, layer in input_consumers(model):
        if name not in floats or verdict.get(name, "") is None:
            continue
        if is_id_layer(layer):
            verdict.setdefault(name, f"{type(layer).__name__} {layer.name!r}")
        elif _custom(layer) or any(is_id_layer(inner) for inner in inner_layers(layer)):
            hidden.add(name)
            verdict.setdefault(name, f"{type(layer).__name__} {layer.name!r}")
        else:
            verdict[name] = None
    if hidden & {n for n, v in verdict.items() if v is not None}:
        from layergrad.data.id_trace import hidden_ids

        decided = hidden_ids(model) if _may_take_ids(model) else {}
        for name in hidden:
            if verdict.get(name) is not None and name not in decided:
                verdict[name] = None
    found = {n: v for n, v in verdict.items() if v is not None}
    _DECIDED[model] = found
    return found


def _may_take_ids(model: KerasModel) -> bool:
    """Whether the model holds an id layer or a custom layer: else nothing in it takes ids,
    and it is not traced (`x / 255` before a ResNet is an operation on a float input)."""
    inner = inner_layers(model)
    return any(is_id_layer(la) or not str(type(la).__module__).startswith("keras.") for la in inner)


def _custom(layer: KerasLayer) -> bool:
    """A layer class from outside Keras, or an operation on tensors (`keras.ops.cast(x)` in a
    functional model): what it does with its input only the graph shows."""
    keras_class = str(type(layer).__module__).startswith(("keras.", "tf_keras."))
    return not keras_class or "Layer" not in class_names(layer)


def inner_layers(layer: KerasLayer) -> list[KerasLayer]:
    flatten = getattr(layer, "_flatten_layers", None)  # None: not a Keras layer
    try:
        return list(flatten(include_self=False, recursive=True)) if flatten else []
    except TypeError:
        return []


def integer_ranges(model: KerasModel) -> dict[str, int]:
    """For each id input (integer, or float carrying ids), the exclusive upper bound of valid
    ids: the smallest bound of the id layers that take it directly, else of the ids the traced
    graph gathers with (`id_trace`), so every id is valid everywhere."""
    bounds: dict[str, int] = {}
    inside: set[str] = set()  # integer inputs that a custom layer holding an id layer takes
    for input_name, layer in input_consumers(model):
        size = id_bound(layer) if is_id_layer(layer) else None
        if size is not None:
            bounds[input_name] = min(size, bounds.get(input_name, size))
        elif not is_id_layer(layer) and any(is_id_layer(i) for i in inner_layers(layer)):
            inside.add(input_name)
    hidden = [n for n in {*id_inputs(model), *inside} if n not in bounds]
    if hidden:
        from layergrad.data.id_trace import hidden_ids

        for name, size in hidden_ids(model).items():
            if name in hidden and size is not None:
                bounds[name] = size
    return bounds


def text_draws(model: KerasModel) -> dict[str, TextDraw]:
    """For each string input, the tokens a random probe draws (see the module)."""
    strings = {t.name for t in model_inputs(model) if str(getattr(t, "dtype", "")) == "string"}
    out: dict[str, TextDraw] = {}
    for name, layer in input_consumers(model):
        if name not in strings or name in out:
            continue
        kind = next((k for k in class_names(layer) if k in TEXT_LAYERS), None)
        tokens = _held(layer, _token, MAX_TOKENS_DRAWN) if kind else ()
        ref = f"{type(layer).__name__} {layer.name!r}"
        words = _words(layer) if kind == "TextVectorization" else 1
        why = (
            f"text drawn from the {len(tokens):,}-token vocabulary of {ref}" if tokens
            else f"simple tokens: {ref} holds no vocabulary that could be read"
        )  # fmt: skip
        out[name] = TextDraw(tokens or SIMPLE_TOKENS, words, why)
    return out | {name: SIMPLE for name in strings - set(out)}


def _token(entry: object) -> str | None:
    """A vocabulary entry as a token to draw (None: empty, or the out-of-vocabulary one)."""
    word = entry.decode("utf-8", "replace") if isinstance(entry, bytes) else str(entry)
    return None if word in ("", "[UNK]") or word.isspace() else word


def _words(layer: KerasLayer) -> int:
    length = getattr(layer, "output_sequence_length", None)
    if not isinstance(length, int) or length < 1:
        config: object = getattr(layer, "get_config", dict)()
        length = config.get("output_sequence_length") if isinstance(config, dict) else None
    return int(length) if isinstance(length, int) and length > 0 else DEFAULT_WORDS


def draw_text(rng: np.random.Generator, shape: tuple[int, ...], draw: TextDraw) -> np.ndarray:
    """A unicode array of `shape`: each element `1..words` tokens from `draw.tokens`."""
    count = int(np.prod(shape))
    tokens = np.asarray(draw.tokens)
    if draw.words == 1:
        return tokens[rng.integers(0, len(tokens), count)].reshape(shape)
    lengths = rng.integers(1, draw.words + 1, count)
    picks = tokens[rng.integers(0, len(tokens), int(lengths.sum()))]
    ends = np.cumsum(lengths)
    texts = [" ".join(picks[e - n : e]) for e, n in zip(ends, lengths, strict=True)]
    return np.asarray(texts, dtype=str).reshape(shape)


def text_bytes(shape: tuple[int, ...], draw: TextDraw) -> int:
    """An upper bound of the bytes `draw_text` takes (4 bytes a character, plus the tensor)."""
    longest = max((len(t) for t in draw.tokens), default=1) + 1
    return int(np.prod(shape)) * (longest * draw.words * 8 + 32)


@dataclass(frozen=True)
class InputDraw:
    """How a random float input is drawn when the model preprocesses its own inputs.

    `kind` "uniform" draws from [a, b); "normal" from mean a, standard deviation b (per
    channel: the last axis); "choice" one of the ids in a (an `IntegerLookup`'s vocabulary).
    `why` says which layer asked for it.
    """

    kind: str
    a: tuple[float, ...]
    b: tuple[float, ...]
    why: str

    def describe(self, name: str) -> str:
        """`image uniform 0-255 (Rescaling 'rescaling' expects raw pixels)`."""
        if self.kind == "uniform":
            return f"{name} uniform {self.a[0]:g}-{self.b[0]:g} ({self.why})"
        if self.kind == "choice":
            return f"{name}: ids drawn from {self.why}"
        return f"{name} normal around the adapted mean ({self.why})"


def drawn(rng: np.random.Generator, shape: tuple[int, ...], draw: InputDraw) -> np.ndarray:
    a, b = np.asarray(draw.a), np.asarray(draw.b)
    if draw.kind == "choice":
        return a[rng.integers(0, a.size, shape)]
    if draw.kind == "uniform":
        return a + (b - a) * rng.random(shape)
    return a + b * rng.standard_normal(shape)


PIXELS = 255.0  # a Rescaling that maps [0, 255] onto [0, 1] or [-1, 1] expects raw pixels
MAX_IDS_DRAWN = 20_000  # of an IntegerLookup's vocabulary: a probe needs variety, not every id


def preprocessing_draws(model: KerasModel) -> dict[str, InputDraw]:
    """For each input whose first layer preprocesses it, the values the model expects.

    `Rescaling(scale, offset)` with 0 < scale < 1 maps raw x to x * scale + offset; the raw
    range is the one mapped onto [offset, 1] (0-255 for `1/255` and for `1/127.5, -1`). An
    adapted `Normalization` expects its own mean and variance. keras.applications models
    that preprocess inside the model start with one of these. An `IntegerLookup` (not
    inverted) expects the ids of its vocabulary.
    """
    out: dict[str, InputDraw] = {}
    for input_name, layer in input_consumers(model):
        kind = type(layer).__name__
        ref = f"{kind} '{layer.name}'"
        if "IntegerLookup" in class_names(layer) and not getattr(layer, "invert", False):
            ids = _held(layer, _id, MAX_IDS_DRAWN)
            if ids and input_name not in out:
                out[input_name] = InputDraw(
                    "choice", ids, (), f"the {len(ids):,}-id vocabulary of {ref}"
                )
        elif kind == "Rescaling":
            scale, offset = _scalar(layer.scale), _scalar(layer.offset)
            if scale is None or offset is None or not 0 < scale < 1 or offset >= 1:
                continue
            high = (1 - offset) / scale
            high = PIXELS if abs(high - PIXELS) < 1 else high
            why = f"{ref} expects raw values"
            out[input_name] = InputDraw("uniform", (0.0,), (float(high),), why)
        elif kind == "Normalization" and not getattr(layer, "invert", False):
            mean, variance = getattr(layer, "mean", None), getattr(layer, "variance", None)
            if mean is None or variance is None:
                continue
            m = np.asarray(mean, dtype=np.float64).reshape(-1)
            v = np.asarray(variance, dtype=np.float64).reshape(-1)
            if not m.size or (np.all(m == 0) and np.all(v == 1)) or np.any(v < 0):
                continue
            std = np.sqrt(v)
            why = f"{ref} is adapted to mean {_short(m)}, std {_short(std)}"
            out[input_name] = InputDraw("normal", tuple(m.tolist()), tuple(std.tolist()), why)
    return out


def _id(entry: object) -> int | None:
    """An `IntegerLookup`'s vocabulary entry as an id to draw (None: not a number)."""
    try:
        return int(entry)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return None


T = TypeVar("T")


def _held(layer: KerasLayer, read: Callable[[object], T | None], limit: int) -> tuple[T, ...]:
    """The first `limit` entries of a layer's vocabulary that `read` takes, but its mask and
    out-of-vocabulary tokens (none when the vocabulary cannot be read)."""
    get = getattr(layer, "get_vocabulary", None)
    try:
        vocabulary = list(get()) if get is not None else []
    except Exception:  # never adapted, or its vocabulary file was not kept
        return ()
    skip = {getattr(layer, "mask_token", None), getattr(layer, "oov_token", None)}
    found = (read(token) for token in vocabulary[: limit + len(skip) + 2])
    return tuple(itertools.islice((v for v in found if v is not None and v not in skip), limit))


def _scalar(value: object) -> float | None:
    array = np.asarray(value, dtype=np.float64).reshape(-1)
    return float(array[0]) if array.size and np.all(array == array[0]) else None


def _short(values: np.ndarray) -> str:
    shown = ", ".join(f"{x:.3g}" for x in values[:3])
    return f"[{shown}{', ...' if values.size > 3 else ''}]" if values.size > 1 else shown
