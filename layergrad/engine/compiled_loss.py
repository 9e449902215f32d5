"""The training loss of a model: from its compile config in the file, or `--loss NAME`.

Also the labels it is computed against: `y` from the probe data, or random labels drawn to
fit each output and loss (class ids, one-hot rows, 0/1, standard normal), seeded.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from layergrad.core.errors import InputError, LoadError, describe
from layergrad.core.tf_runtime import keras, tf
from layergrad.core.tf_types import KerasModel, Tensor
from layergrad.data.label_stream import LabelRequest
from layergrad.engine.projection import normals, uniforms
from layergrad.model.loss_forms import LossSpec, loss_name, read_loss

# How random labels are drawn, by a word in the loss's name without "_" (first match wins).
_LABEL_KINDS = (
    ("sparsecategorical", "ids"),
    ("categorical", "one_hot"),
    ("kldivergence", "one_hot"),
    ("binary", "bits"),
    ("hinge", "bits"),
    ("poisson", "positive"),
)


def compile_loss(model: KerasModel, spec: LossSpec, optimizer: object = "sgd") -> None:
    """Compile `model` with the loss (and loss weights) of `spec` and `optimizer` (only
    `layergrad fit` steps it; the other commands only differentiate).

    Raises:
        InputError: the loss is not a Keras loss (a custom loss needs `--import`).
    """
    args = dict(spec.compile_args)
    try:
        args["loss"] = _deserialize(args["loss"])
        model.compile(optimizer=optimizer, **args)
    except (ValueError, TypeError, KeyError) as exc:
        flag = "--loss" if spec.source == "option" else "the compiled loss"
        raise InputError(
            f"{flag} {spec.name!r} is not a loss Keras knows ({exc}); use a keras.losses name "
            "such as sparse_categorical_crossentropy or mean_squared_error, or --import the "
            "module that registers a custom one"
        ) from exc


def loss_error(loss: object) -> str | None:
    """Why Keras cannot build the serialized loss (a custom loss whose module was not
    imported), or None when it can."""
    try:
        built = _deserialize(loss)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        return describe(exc)
    # one level, as Keras reads a list or dict of losses (a nested one is no loss)
    leaves: list[object] = (
        list(built.values()) if isinstance(built, Mapping)
        else list(built) if isinstance(built, (list, tuple))
        else [built]
    )  # fmt: skip
    bad = [leaf for leaf in leaves if leaf is not None and not callable(leaf)]
    return f"cannot interpret loss {loss_name(bad[0])!r}" if bad else None


def _deserialize(loss: object) -> object:
    if isinstance(loss, str):
        return keras.losses.get(loss)
    if isinstance(loss, Mapping) and "class_name" in loss:
        try:
            return keras.saving.deserialize_keras_object(loss, safe_mode=True)
        except (ValueError, TypeError):
            if "module" in loss:
                raise
            # legacy .h5 writes a loss instance without its module: look among the losses
            return keras.losses.deserialize(dict(loss))
    if isinstance(loss, Mapping):
        return {k: _deserialize(v) for k, v in loss.items()}
    if isinstance(loss, Sequence):
        return [_deserialize(v) for v in loss]
    return loss


def label_kind(name: str) -> str:
    """How to draw random labels for a loss: ids, one_hot, bits, positive or normal."""
    read = read_loss(name)
    named = read.name if read is not None and read.known else name
    key = named.lower().replace(" ", "").replace("_", "")
    return next((kind for word, kind in _LABEL_KINDS if word in key), "normal")


def random_labels(
    outputs: Sequence[Tensor], kinds: Sequence[str], seed: int, samples: Tensor
) -> list[Tensor]:
    """Labels that fit each output (its shape, and the kind its loss expects: ids, one_hot,
    bits, positive or normal), drawn for each of `samples` (the batch's sample indices) from
    `seed` alone, by the formula in `projection.py`: the same labels for a sample in any batch,
    on any replica."""
    labels = []
    for k, (out, kind) in enumerate(zip(outputs, kinds, strict=True)):
        shape = tf.shape(out)
        classes = out.shape[-1] if out.shape.rank and out.shape[-1] is not None else 1
        per_class = kind in ("ids", "one_hot")
        size = shape[:-1] if per_class else shape  # a class id stands for the last axis
        width = tf.reduce_prod(size[1:])
        if kind == "normal":
            labels.append(tf.reshape(normals(seed + 1, k, samples, width), size))
            continue
        u = tf.reshape(uniforms(seed + 1, k, samples, width)[1], size)
        if kind == "positive":
            labels.append(u)
            continue
        n = max(int(classes), 1) if per_class else 2
        ids = tf.minimum(tf.cast(u * n, tf.int32), n - 1)
        if kind == "one_hot":
            ids = tf.one_hot(ids, n)
        labels.append(ids if per_class else tf.cast(ids, tf.float32))
    return labels


def label_request(model: KerasModel, spec: LossSpec | None) -> LabelRequest:
    """The labels `model` takes under the loss `spec` (None: no loss), output by output: the
    kind its loss reads, the loss's name and the output's units (`--data` reads them so)."""
    names = list(getattr(model, "output_names", None) or [])
    try:
        shapes = [tuple(t.shape) for t in model.outputs]
    except (AttributeError, ValueError, TypeError):
        shapes = []
    units = tuple(
        int(s[-1]) if len(s) > 1 and s[-1] is not None else 1 if len(s) == 1 else None
        for s in shapes
    )
    count = max(len(names), len(units), 1)
    layers = getattr(model, "layers", None) or []
    if not names and count == 1 and layers:  # a Sequential model: its last layer makes it
        names = [str(layers[-1].name)]
    keys = output_keys(model, count)
    losses = output_losses(spec, names or [""] * count, keys) if spec is not None else [""] * count
    kinds = tuple(label_kind(loss) if loss else "" for loss in losses)
    return LabelRequest(tuple(names), kinds, tuple(losses), units, tuple(keys or ()))


def output_keys(model: KerasModel, count: int) -> list[str] | None:
    """The dict keys of a model whose outputs are a dict (`Model(x, {"price": a})`), in the
    order Keras flattens them (sorted), the order of `output_names`; None otherwise."""
    struct = getattr(model, "_outputs_struct", None)
    if not isinstance(struct, Mapping) or len(struct) != count:
        return None
    return [str(k) for k in sorted(struct, key=str)]


def output_losses(
    spec: LossSpec, output_names: Sequence[str], keys: Sequence[str] | None = None
) -> list[str]:
    """The name of the loss applied to each output, in output order.

    A dict of losses is keyed by output name, or by the keys of a model whose outputs are a
    dict (`Model(x, {"price": a, "kind": b})`, its layers named otherwise; `keys`, in output
    order, when known): Keras flattens such outputs in sorted key order, the order of
    `output_names`. Each output takes the loss keyed by its name, else by its key."""
    loss = spec.compile_args["loss"]
    if isinstance(loss, Mapping) and "class_name" not in loss:
        if keys is not None and len(keys) == len(output_names):
            return [
                loss_name(loss[n] if n in loss else loss.get(k, ""))
                for n, k in zip(output_names, keys, strict=True)
            ]
        if not set(output_names) & set(loss) and len(loss) == len(output_names):
            return [loss_name(loss[k]) for k in sorted(loss, key=str)]
        return [loss_name(loss.get(n, "")) for n in output_names]
    if isinstance(loss, Sequence) and not isinstance(loss, str):
        if len(loss) > len(output_names):  # Keras refuses it when it trains
            raise LoadError(
                f"the compiled loss is a list of {len(loss)} losses ({loss_name(loss)}), but "
                f"the model has {len(output_names)} output{'s' if len(output_names) > 1 else ''}"
                "; compile it with one loss per output"
            )
        return [loss_name(v) for v in loss] + [""] * (len(output_names) - len(loss))
    return [loss_name(loss)] * len(output_names)
