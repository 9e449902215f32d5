"""Which loss a file was compiled with, from every form Keras saves it in. No TensorFlow.

Facts about the formats (Keras 3.15, and Keras 2 ``.h5`` files): ``compile_config["loss"]``
of a `.keras` file (``training_config["loss"]`` of an `.h5` file) is

- a string: the name or alias given (``"mse"``, ``"bce"``, ``"binary_crossentropy"``,
  ``"MSE"``; Keras 2 also ``"kullback_leibler_divergence"``, ``"logcosh"``);
- a function object: ``{"module": "builtins", "class_name": "function", "config":
  "binary_crossentropy", "registered_name": "function"}`` in `.keras` (a plain string in
  `.h5`); a registered custom function's config is ``"package>name"``;
- a class instance: ``{"module": "keras.losses", "class_name": "BinaryCrossentropy",
  "config": {"name": ..., "from_logits": true, "label_smoothing": 0.1, ...}}`` (no module in
  `.h5`; a registered custom class has ``"registered_name": "package>Class"``, or that as its
  class name in `.h5`);
- a lambda: ``{"class_name": "__lambda__", ...}`` (``"<lambda>"`` in `.h5`);
- one of those per output: a dict keyed by output name, or a list in output order.

`read_loss` turns one of them into a `LossRead`: the canonical Keras name when it is a loss
Keras ships, with `from_logits`, else `known` False and the name the file gives.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial

from layergrad.model.config import serialized_name

REGRESSION_LOSSES = frozenset(
    {
        "mean_squared_error", "mean_absolute_error", "mean_absolute_percentage_error",
        "mean_squared_logarithmic_error", "huber", "log_cosh", "cosine_similarity", "poisson",
    }
)  # fmt: skip
# The losses Keras ships, by canonical name; every rule judges only these.
KNOWN_LOSSES = REGRESSION_LOSSES | {
    "binary_crossentropy", "binary_focal_crossentropy", "categorical_crossentropy",
    "categorical_focal_crossentropy", "sparse_categorical_crossentropy", "categorical_hinge",
    "hinge", "squared_hinge", "kl_divergence", "ctc", "dice", "tversky", "circle",
}  # fmt: skip

# Every other spelling Keras (3, and 2 in `.h5` files) accepts or saves, lower case, without
# underscores: class names, short aliases, Keras 2 names, tf.nn functions used as losses.
_ALIASES = {
    "mse": "mean_squared_error",
    "mae": "mean_absolute_error",
    "mape": "mean_absolute_percentage_error",
    "msle": "mean_squared_logarithmic_error",
    "bce": "binary_crossentropy",
    "kld": "kl_divergence",
    "kldivergence": "kl_divergence",
    "kullbackleiblerdivergence": "kl_divergence",
    "logcosh": "log_cosh",
    "huberloss": "huber",
    "cosineproximity": "cosine_similarity",
    "sigmoidcrossentropywithlogits": "binary_crossentropy",
    "softmaxcrossentropywithlogits": "categorical_crossentropy",
    "softmaxcrossentropywithlogitsv2": "categorical_crossentropy",
    "sparsesoftmaxcrossentropywithlogits": "sparse_categorical_crossentropy",
    "sparsesoftmaxcrossentropywithlogitsv2": "sparse_categorical_crossentropy",
}
_BY_KEY = {name.replace("_", ""): name for name in KNOWN_LOSSES} | _ALIASES
_LOGITS_FUNCTIONS = ("withlogits",)  # tf.nn.*_with_logits read raw logits


@dataclass(frozen=True)
class LossRead:
    """One output's loss as the file gives it: `name` is the canonical Keras name when
    `known`, else the name the file gives (``my_package>focal``, ``<lambda>``)."""

    name: str
    from_logits: bool = False
    known: bool = True


def read_loss(loss: object) -> LossRead | None:
    """The loss in one serialized form (a string, a function object, a class instance);
    None when the file holds nothing there (no loss for this output)."""
    if loss is None or loss == "":
        return None
    if isinstance(loss, str):
        return _named(loss, False)
    if isinstance(loss, Mapping):
        class_name = loss.get("class_name")
        config = loss.get("config")
        if class_name == "function" and isinstance(config, str):  # a function object
            return _named(config, False)
        if class_name == "LossFunctionWrapper" and isinstance(config, Mapping):
            inner_fn = read_loss(config.get("fn"))
            logits = config.get("from_logits") is True
            return inner_fn if inner_fn is None or not logits else _named(inner_fn.name, True)
        if class_name == "__lambda__":
            return LossRead("<lambda>", known=False)
        if isinstance(class_name, str):
            inner = config if isinstance(config, Mapping) else {}
            registered = loss.get("registered_name")
            custom = isinstance(registered, str) and ">" in registered
            module = loss.get("module")
            if custom or (isinstance(module, str) and not module.startswith("keras")):
                return LossRead(str(registered if custom else class_name), known=False)
            return _named(class_name, inner.get("from_logits") is True)
    return LossRead(type(loss).__name__, known=False)


def loss_class(name: str) -> str:
    """The Keras class of a loss by its canonical name: `binary_crossentropy` ->
    `BinaryCrossentropy`."""
    return "".join(part.capitalize() for part in name.split("_"))


def _named(name: str, from_logits: bool) -> LossRead:
    key = name.strip().lower().replace("_", "")
    canonical = _BY_KEY.get(key)
    if canonical is None or ">" in name:
        return LossRead(name, known=False)
    return LossRead(canonical, from_logits or any(w in key for w in _LOGITS_FUNCTIONS))


def output_losses(loss: object, names: Sequence[str]) -> list[LossRead | None]:
    """The loss of each output, in output order (None where the file gives none)."""
    if isinstance(loss, Mapping) and "class_name" not in loss:
        return [read_loss(loss.get(n)) for n in names]
    if isinstance(loss, (list, tuple)):
        return [read_loss(v) for v in loss][: len(names)] + [None] * (len(names) - len(loss))
    return [read_loss(loss)] * len(names)


def per_output(loss: object, names: Sequence[str]) -> list[tuple[str, bool] | None]:
    """(canonical loss name, from_logits) for each output, None where it cannot be judged
    (no loss for it, or a loss that is not one Keras ships)."""
    reads = output_losses(loss, names)
    return [(r.name, r.from_logits) if r is not None and r.known else None for r in reads]


def unknown_outputs(loss: object, names: Sequence[str]) -> frozenset[str]:
    """The outputs (of `names`) whose loss is not one Keras ships: a custom class or function
    reads its labels in its own layout (an actor's `[action, advantage]`), so no label rule
    can judge them against the head."""
    reads = output_losses(loss, names)
    return frozenset(n for n, r in zip(names, reads, strict=True) if r is not None and not r.known)


def unknown_losses(loss: object, names: Sequence[str]) -> list[str]:
    """The names of the losses no rule can judge (custom, registered, lambdas), once each."""
    reads = output_losses(loss, names)
    return list(dict.fromkeys(r.name for r in reads if r is not None and not r.known))


@dataclass(frozen=True)
class LossSpec:
    """Which loss, from where: `source` is "compiled" (the file) or "option" (`--loss`)."""

    name: str
    source: str
    compile_args: Mapping[str, object]  # keyword arguments for `model.compile`


def find_loss(config: Mapping[str, object], option: str | None) -> LossSpec | None:
    """The loss to differentiate: `--loss` when given, else the one compiled in the file.

    `config` is how the file says the model was compiled (`FileInfo.compile_config`). None
    when there is no loss to use.
    """
    if option:
        return LossSpec(option, "option", {"loss": option})
    if not config.get("loss"):
        return None
    args = {k: config[k] for k in ("loss", "loss_weights") if config.get(k) is not None}
    return LossSpec(loss_name(config["loss"]), "compiled", args)


def loss_name(loss: object, canonical: bool = False) -> str:
    """A readable name of a serialized loss (a string, a config dict, or `output: name` per
    output): as the file spells it, or (`canonical`) the Keras name it stands for."""
    if isinstance(loss, Mapping) and "class_name" not in loss:
        return ", ".join(f"{k}: {loss_name(v, canonical)}" for k, v in loss.items())
    if isinstance(loss, Sequence) and not isinstance(loss, str):
        return ", ".join(loss_name(v, canonical) for v in loss)
    if canonical:
        read = read_loss(loss)
        return read.name if read is not None else "none"
    if isinstance(loss, Mapping) and loss.get("class_name") == "function":  # a function object
        return str(loss.get("config"))
    return serialized_name(loss) or str(loss)  # a class instance: its name, else its class


display_name = partial(loss_name, canonical=True)  # the names of the losses Keras ships
