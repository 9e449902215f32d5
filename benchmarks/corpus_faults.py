"""The fault operators of the verdict corpus, after DeepCrime's mutation operators and the fault
classes of the Stack Overflow / GitHub studies of buggy Keras programs.

Each operator takes an architecture and a spec and returns the mutants it makes there (none
where the fault makes no sense), each with the finding `check` must report and the layers it
may name (`expect`; None for a fault only training can show, which must not fail the file).
A data operator also says how the data differs (`labels`: the labels of another head,
`pixels`: the same raw pixels, now without the model's Rescaling, or `scale`: the same
features in larger units).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import keras
from corpus_archs import Arch
from corpus_forms import CROSS_ENTROPY, Head, Spec

HEAD = ("head", "head_act")


@dataclass(frozen=True)
class Mutant:
    op: str
    spec: Spec
    expect: tuple[str, tuple[str, ...]] | None  # (finding, layers it may be named at)
    data: bool = False  # the fault shows only with data
    labels: Head | None = None  # the data's labels are drawn for this head instead
    scale: float = 1.0  # the data's float inputs are multiplied by this


Operator = Callable[[Arch, Spec], list[Mutant]]
SOFTMAX_WRONG = (
    "binary_crossentropy",
    "mean_squared_error",
    "mean_absolute_error",
    "poisson",
    "hinge",
    "squared_hinge",
)
SHORT = {
    "binary_crossentropy": "bce",
    "categorical_crossentropy": "cce",
    "sparse_categorical_crossentropy": "scce",
    "mean_squared_error": "mse",
    "mean_absolute_error": "mae",
    "poisson": "poisson",
    "hinge": "hinge",
    "squared_hinge": "squared_hinge",
    "huber": "huber",
}


def _mut(op: str, spec: Spec, finding: str | None, where: tuple[str, ...] = HEAD) -> Mutant:
    return Mutant(op, spec, None if finding is None else (finding, where))


def hidden_linear(arch: Arch, spec: Spec) -> list[Mutant]:
    """Every hidden activation removed: the stack collapses into one linear map (a failure
    before a classifier's head, a `linear_stack` warning before a regression's)."""
    if "mlp" not in arch.tags:
        return []
    head = spec.head
    classifier = head.activation in ("sigmoid", "softmax") or head.loss in CROSS_ENTROPY
    finding = "loss_mismatch" if classifier else "linear_stack"
    return [_mut("hidden_linear", replace(spec, hidden=None), finding)]


def output_activation(arch: Arch, spec: Spec) -> list[Mutant]:
    """The head's activation removed, or changed to ReLU or to the other probability."""
    head = spec.head
    if head.activation not in ("sigmoid", "softmax") or head.from_logits:
        return []
    out = [
        _mut("output_linear", spec.with_head(activation=None), "loss_mismatch"),
        _mut("output_relu", spec.with_head(activation="relu"), "loss_mismatch"),
    ]
    if head.activation == "softmax":
        out.append(_mut("output_sigmoid", spec.with_head(activation="sigmoid"), "loss_mismatch"))
    elif head.units == 1:  # a softmax over one unit is always 1.0
        out.append(_mut("output_softmax", spec.with_head(activation="softmax"), "constant_output"))
    return out


def wrong_loss(arch: Arch, spec: Spec) -> list[Mutant]:
    """Every pairing of loss and head that the file alone shows is wrong."""
    head = spec.head
    if head.from_logits:
        return []
    if head.activation == "softmax":
        wrong: tuple[str, ...] = SOFTMAX_WRONG
    elif head.activation == "sigmoid" and head.kind != "reconstruction":
        wrong = ("categorical_crossentropy",)
        wrong += ("sparse_categorical_crossentropy",) if head.units == 1 else ()
    elif head.activation is None:  # a regression head
        wrong = CROSS_ENTROPY
    else:
        wrong = ()
    return [_mut(f"loss_{SHORT[w]}", spec.with_head(loss=w), "loss_mismatch") for w in wrong]


def from_logits_flipped(arch: Arch, spec: Spec) -> list[Mutant]:
    head = spec.head
    if spec.form != "obj" or head.loss not in CROSS_ENTROPY:
        return []
    return [
        _mut(
            "from_logits_flipped", spec.with_head(from_logits=not head.from_logits), "loss_mismatch"
        )
    ]


def wrong_units(arch: Arch, spec: Spec) -> list[Mutant]:
    """A softmax over one unit (static); fewer or more units than the labels (with data)."""
    head = spec.head
    out = []
    if head.activation == "softmax":
        out.append(_mut("units_one", spec.with_head(units=1), "constant_output"))
    if head.kind in ("sparse", "categorical"):
        units = head.units - 2 if head.kind == "sparse" else head.units - 1
    elif head.kind in ("binary", "regression"):
        units = head.units + 1
    else:
        return out
    wrong = _mut("units_wrong_data", spec.with_head(units=units), "target_mismatch")
    return [*out, replace(wrong, data=True, labels=head)]


def dropout_after_head(arch: Arch, spec: Spec) -> list[Mutant]:
    if "no_h5" in arch.tags:  # the subclassed model writes its own call
        return []
    return [
        _mut(
            "dropout_after_head",
            replace(spec, dropout_after_head=True),
            "loss_mismatch",
            ("head_dropout",),
        )
    ]


def relu_before_softmax(arch: Arch, spec: Spec) -> list[Mutant]:
    if spec.head.activation != "softmax" or "custom" in arch.tags:
        return []
    return [
        _mut(
            "relu_before_softmax",
            replace(spec, relu_before_softmax=True),
            "loss_mismatch",
            ("head",),
        )
    ]


def initialisation(arch: Arch, spec: Spec) -> list[Mutant]:
    """Hidden kernels (and biases, at their default) zero, or drawn far too large."""
    if "mlp" not in arch.tags:
        return []
    # The layer where the output stops varying is a first hidden layer: `branches` has two.
    first = ("h1", "h1_act", "h2", "h2_act") if arch.name == "branches" else ("h1", "h1_act")
    out = [_mut("init_zero", replace(spec, kernel_init="zeros"), "constant_output", first)]
    if "deep" in arch.tags:
        large = keras.initializers.RandomNormal(stddev=4.0, seed=0)
        out.append(
            _mut("init_large", replace(spec, kernel_init=large), "exploding", ("h1", "h1_act"))
        )
    return out


def training_only(arch: Arch, spec: Spec) -> list[Mutant]:
    """What only training shows (the optimizer, its learning rate): never fails the file."""
    if arch.name not in ("mlp_sparse", "transformer", "lstm", "mlp_mse"):
        return []  # never a BatchNormalization model: its one step would train with it
    return [
        _mut("learning_rate_huge", replace(spec, optimizer=keras.optimizers.Adam(10.0)), None),
        _mut("sgd_learning_rate_tiny", replace(spec, optimizer=keras.optimizers.SGD(1e-9)), None),
    ]


def raw_pixels(arch: Arch, spec: Spec) -> list[Mutant]:
    if "image" not in arch.tags or "bn" in arch.tags:  # BatchNormalization rescales them
        return []
    m = _mut("raw_pixels_data", replace(spec, rescale=False), "input_range", ("conv1",))
    return [replace(m, data=True)]


def raw_units(arch: Arch, spec: Spec) -> list[Mutant]:
    """The same tabular features in units 30 times larger (prices, salaries, areas: values up
    to ~3,000) reaching the first Dense layer of a tabular MLP unscaled."""
    if "mlp" not in arch.tags or "deep" in arch.tags or spec.head.kind == "reconstruction":
        return []
    first = ("h1", "h2") if arch.name == "branches" else ("h1",)
    m = _mut("raw_units_data", spec, "input_range", first)
    return [replace(m, data=True, scale=30.0)]


def labels_wrong_form(arch: Arch, spec: Spec) -> list[Mutant]:
    """The model is right; its labels are not of the form its loss reads."""
    head = spec.head
    if head.kind == "sparse" and not head.from_logits:
        wrong = replace(head, kind="categorical")  # one-hot rows
    elif head.kind == "categorical":
        wrong = replace(head, kind="sparse")  # class ids
    elif head.kind == "binary" and not head.from_logits:
        wrong = replace(head, kind="sparse", units=5)  # five classes into one unit
    else:
        return []
    return [Mutant("labels_wrong_data", spec, ("target_mismatch", HEAD), True, wrong)]


def sigmoid_regression(arch: Arch, spec: Spec) -> list[Mutant]:
    if spec.head.kind != "regression":
        return []
    m = _mut("output_sigmoid_data", spec.with_head(activation="sigmoid"), "target_mismatch")
    return [replace(m, data=True, labels=spec.head)]


OPERATORS: dict[str, Operator] = {
    "hidden_linear": hidden_linear,
    "output_activation": output_activation,
    "wrong_loss": wrong_loss,
    "from_logits_flipped": from_logits_flipped,
    "wrong_units": wrong_units,
    "dropout_after_head": dropout_after_head,
    "relu_before_softmax": relu_before_softmax,
    "initialisation": initialisation,
    "training_only": training_only,
    "raw_pixels": raw_pixels,
    "labels_wrong_form": labels_wrong_form,
    "sigmoid_regression": sigmoid_regression,
    "raw_units": raw_units,  # last: the floor test's sample of the others stays as it was
}


def mutants(arch: Arch, spec: Spec, operators: list[str] | None = None) -> list[Mutant]:
    """The healthy original first (`op` "healthy"), then every mutant of the operators."""
    out = [Mutant("healthy", spec, None)]
    for name in list(OPERATORS) if operators is None else operators:
        out.extend(OPERATORS[name](arch, spec))
    return out
