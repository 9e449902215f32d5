"""Does the compiled loss fit the output it is applied to? Read from the file, no TensorFlow.

The most common single fault in Keras programs is the wrong activation for the loss: binary
cross-entropy on a softmax head, categorical cross-entropy on one unit, `from_logits=True` on
a head that already applies softmax. Each pairing below names what Keras users mean instead.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from layergrad.model.graph import ModelGraph
from layergrad.model.head_forms import Head, keyed_by_head, output_heads
from layergrad.model.linear_stacks import LinearStack, redundant_pairs, whole_network
from layergrad.model.loss_forms import REGRESSION_LOSSES, per_output, unknown_losses
from layergrad.model.observed_heads import Observed

CROSSENTROPY = ("binary", "categorical")  # losses that read probabilities (or logits)
# activations whose outputs can be negative
NEGATIVE = frozenset({"linear", "tanh", "leaky_relu", "elu", "selu", "softsign", "prelu",
                      "log_softmax", "log_sigmoid", "hard_tanh", "celu", "tanh_shrink",
                      "soft_shrink", "hard_shrink"})  # fmt: skip
PROBABILITIES = ("softmax", "sigmoid", "hard_sigmoid", "sparsemax", "sparse_sigmoid")
# activations whose outputs leave [0, 1]: never probabilities
NOT_PROBABILITIES = frozenset(
    {
        "linear", "relu", "relu6", "leaky_relu", "elu", "selu", "gelu", "silu", "swish",
        "softplus", "exponential", "tanh", "softsign", "prelu", "mish", "celu", "hard_silu",
        "hard_swish", "hard_tanh", "log_softmax", "log_sigmoid", "squareplus", "sparse_plus",
        "tanh_shrink", "soft_shrink", "hard_shrink", "threshold", "glu",
    }
)  # fmt: skip


@dataclass(frozen=True)
class Mismatch:
    """A compiled loss that does not fit its output, with what users mean instead."""

    output: str
    loss: str
    message: str
    hint: str
    layer: str | None = None  # the layer to change (the head's when None)


@dataclass(frozen=True)
class LossReading:
    """What the `loss` check reads in a file: the failures (`mismatches`), the linear stacks
    that only warn, the losses no rule knows and the heads whose activation the file does not
    show (judged on the probe's outputs when there is one)."""

    mismatches: tuple[Mismatch, ...] = ()
    stacks: tuple[Mismatch, ...] = ()
    unknown_losses: tuple[str, ...] = ()
    unread: tuple[Head, ...] = ()
    judged: int = 0  # outputs whose loss the rules know
    observed: tuple[Head, ...] = ()  # heads judged on their outputs on the probe
    described: bool = True  # False: the file describes no layers (a subclassed model)


def mismatches(
    config: Mapping[str, object], graph: ModelGraph, compiled: Mapping[str, object]
) -> list[Mismatch]:
    """Every output whose compiled loss does not fit its activation (empty without a loss),
    and a classifier with no non-linearity at all."""
    return list(read_file(config, graph, compiled).mismatches)


def read_file(
    config: Mapping[str, object],
    graph: ModelGraph,
    compiled: Mapping[str, object],
    observed: Mapping[str, Observed] | None = None,
) -> LossReading:
    """Judge each output's head against its compiled loss, and the network for linear stacks.

    `observed` maps an output name to what its values did on the probe batch: a head whose
    activation the file does not show is judged as that; without it, such a head is listed
    in `unread` and no rule judges it.
    """
    if not graph.known:
        return LossReading(described=False)
    loss = keyed_by_head(compiled.get("loss"), config)
    heads = output_heads(config, graph)
    names = [h.name for h in heads]
    specs = per_output(loss, names) if loss else [None] * len(heads)
    unknown = tuple(unknown_losses(loss, names)) if loss else ()
    seen = observed or {}
    judged = [_as_observed(h, seen.get(h.name)) for h in heads]
    found: list[Mismatch] = []
    for head, spec in zip(judged, specs, strict=True):
        problem = _judge(head, *spec) if spec is not None else None
        problem = problem or _structure(head, spec[0] if spec else "the loss")
        if problem is not None:
            found.append(problem)
    stacks: list[Mismatch] = []
    if not loss:  # a model saved for inference only: its stacks are not judged
        return LossReading(tuple(found), (), unknown, (), 0, (), True)
    linear = _linear_network(graph, judged, specs) if all(h.known for h in heads) else None
    if linear is not None and linear[1] and not found:
        found.append(linear[0])
    elif linear is not None and not linear[1]:
        stacks.append(linear[0])
    elif linear is None:
        stacks += [_pair(p) for p in redundant_pairs(graph)]
    unread = tuple(h for h in judged if not h.known)
    known = sum(spec is not None for spec in specs)
    looked = tuple(h for h in judged if h.observed is not None)
    return LossReading(tuple(found), tuple(stacks), unknown, unread, known, looked)


def read_observed(
    compiled: Mapping[str, object], seen: Sequence[tuple[str, str, int | None, Observed | None]]
) -> LossReading:
    """Judge the outputs of a model whose file describes no layers (a subclassed model) from
    what each did on the probe: `seen` holds, per output in output order, its name, the layer
    that made it (its name, or "" when none is known), its units and what its values did
    (None: they said too little, and it is not judged)."""
    loss = compiled.get("loss")
    names = [name for name, _, _, _ in seen]
    if not loss or not names:
        return LossReading(described=False)
    specs = per_output(loss, names)
    unknown = tuple(unknown_losses(loss, names))
    found: list[Mismatch] = []
    looked: list[Head] = []
    for (name, layer, units, observed), spec in zip(seen, specs, strict=True):
        if observed is None:
            continue
        head = Head(name, layer or name, observed.kind, units, layer_class=observed.layer_class,
                    observed=observed.describe())  # fmt: skip
        looked.append(head)
        problem = _judge(head, *spec) if spec is not None else None
        if problem is not None:
            found.append(problem)
    judged = sum(spec is not None for spec in specs)
    return LossReading(tuple(found), (), unknown, (), judged, tuple(looked), False)


def _as_observed(head: Head, seen: Observed | None) -> Head:
    if head.known or seen is None:
        return head
    units = head.units or seen.units
    return replace(head, activation=seen.kind, units=units, observed=seen.describe())


def _judge(head: Head, loss: str, from_logits: bool) -> Mismatch | None:
    act, units, out = head.activation, head.units, head.name
    probabilities = act in PROBABILITIES

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
    if (
        "categorical_" in loss
        and "crossentropy" in loss
        and not from_logits
        and act == "unit_range"
        and (units or 0) > 1
    ):
        return say(
            "categorical cross-entropy reads each sample's outputs as a distribution over the "
            "classes, but these do not sum to 1 (independent values in [0, 1], as a sigmoid "
            "makes)",
            "a softmax on the head (one class out of N), or a sigmoid head with "
            "binary_crossentropy for independent yes/no outputs",
        )
    if "categorical_" in loss and "crossentropy" in loss and (units == 1 or act == "sigmoid"):
        return say(
            "categorical cross-entropy compares a distribution over classes, but "
            + ("one unit holds no distribution (the loss is constant)" if units == 1
               else "sigmoid outputs are independent yes/no probabilities, not a distribution"),
            "for one yes/no output: Dense(1, activation='sigmoid') with binary_crossentropy; "
            "for one class out of N: Dense(N, activation='softmax') with "
            "sparse_categorical_crossentropy",
        )  # fmt: skip
    crossentropy = "crossentropy" in loss and any(w in loss for w in CROSSENTROPY)
    if crossentropy and not from_logits and act in NOT_PROBABILITIES:
        return say(
            "with from_logits=False Keras reads the outputs as probabilities and clips them to "
            f"[1e-7, 1 - 1e-7]: a {act} head's outputs outside that range get no gradient",
            f"from_logits=True in the loss (e.g. keras.losses.{_class_name(loss)}"
            "(from_logits=True)), or a softmax / sigmoid on the head",
        )
    if loss == "kl_divergence" and act in NOT_PROBABILITIES:
        return say(
            "KL divergence reads the outputs as a distribution and clips them to [1e-7, 1]: "
            f"a {act} head's outputs outside that range get no gradient",
            "a softmax on the head (the targets are distributions)",
        )
    if loss == "poisson" and act in NEGATIVE:
        return say(
            f"the Poisson loss takes the log of the predicted rate, but a {act} head's "
            "outputs go negative (log of a negative number: NaN)",
            "activation='exponential' or 'softplus' on the head (a positive rate)",
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
    if head.before in ("relu", "relu6") and head.before_layer is not None:
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


def _linear_network(
    graph: ModelGraph, heads: Sequence[Head], specs: Sequence[tuple[str, bool] | None]
) -> tuple[Mismatch, bool] | None:
    """A network of two or more weight layers with no non-linearity before its one head:
    (the mismatch, True) before a classifier's head, (the warning, False) before a regression
    head (it fits what one Dense layer fits, and trains)."""
    if len(heads) != 1:
        return None
    head, spec = heads[0], specs[0]
    stack = whole_network(graph, head.layer)
    if stack is None:
        return None
    classifier = head.activation in ("sigmoid", "softmax") or (
        spec is not None and ("crossentropy" in spec[0] or "hinge" in spec[0])
    )
    regression = head.activation in ("linear", "relu", "softplus", "exponential") and (
        spec is not None and spec[0] in REGRESSION_LOSSES
    )
    if not classifier and not regression:
        return None
    count = len(stack.layers)
    if classifier:
        return Mismatch(
            head.name,
            spec[0] if spec is not None else "the loss",
            f"output '{head.name}': the {count} layers with weights have no activation between "
            f"them, so the network is one linear map before the {head.activation} at "
            f"'{head.layer}', however deep: it can only draw straight class boundaries",
            "an activation on the hidden layers (e.g. activation='relu')",
            head.layer,
        ), True
    first = stack.layers[0]
    return Mismatch(
        head.name,
        spec[0] if spec is not None else "the loss",
        f"layer '{first}': the {count} layers with weights ({_listed(stack)}) have no "
        f"activation between them, so output '{head.name}' is one linear map of the inputs, "
        "however deep: it fits what a single Dense layer fits",
        "an activation on the hidden layers (e.g. activation='relu'), or one Dense layer if "
        "a linear model is meant",
        first,
    ), False


def _pair(stack: LinearStack) -> Mismatch:
    first, second = stack.layers[0], stack.layers[-1]
    return Mismatch(
        "",
        "",
        f"layer '{first}' has no activation and feeds '{second}' directly, so the two compute "
        f"one linear map: '{first}' adds weights but nothing one layer could not do",
        f"an activation on '{first}' (e.g. activation='relu'), or drop it",
        first,
    )


def _listed(stack: LinearStack) -> str:
    names = [f"'{n}'" for n in stack.layers[:4]]
    return ", ".join(names) + (", ..." if len(stack.layers) > 4 else "")


def _describe(head: Head) -> str:
    units = f"{head.units} unit{'s' if head.units != 1 else ''}, " if head.units else ""
    if head.observed is not None:
        return f"output '{head.name}' ({units}{head.observed})"
    return f"output '{head.name}' ({units}{head.activation})"


def _class_name(loss: str) -> str:
    return "".join(part.capitalize() for part in loss.split("_"))
