"""The rules that judge an output head against its compiled loss: one table, one entry a rule.

Each `HeadRule` holds what the rule reads (`HeadFacts`), its predicate, its message and hint,
its severity (a failure only with `Evidence` that flagged models do not train), its repair
(the `Change` `fix` applies) and its examples and near misses. `check` says the first rule
that applies (`judge`), `fix` makes the first repair (`repairs`), `docs/make_tables.py`
writes the docs' tables from the entries and the tests build every example. No TensorFlow.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from layergrad.core.results import ConfigChange, Fact, Reason
from layergrad.core.vocab import Finding, Severity, with_article
from layergrad.model.head_forms import Head
from layergrad.model.label_summary import LabelSummary
from layergrad.model.loss_forms import REGRESSION_LOSSES, loss_class

# activations whose outputs can be negative
NEGATIVE = frozenset({"linear", "tanh", "leaky_relu", "elu", "selu", "softsign", "prelu",
                      "log_softmax", "log_sigmoid", "hard_tanh", "celu", "tanh_shrink",
                      "soft_shrink", "hard_shrink"})  # fmt: skip
PROBABILITIES = ("softmax", "sigmoid", "hard_sigmoid", "sparsemax", "sparse_sigmoid")
# activations whose outputs leave [0, 1]: never probabilities
NOT_PROBABILITIES = NEGATIVE | {"relu", "relu6", "gelu", "silu", "swish", "softplus",
                                "exponential", "mish", "hard_silu", "hard_swish", "squareplus",
                                "sparse_plus", "threshold", "glu"}  # fmt: skip


CHANGES_LOSS = "the loss changes"


def units_words(units: int | None) -> str:
    """`3 units, ` (nothing when not known)."""
    return f"{units} unit{'s' if units != 1 else ''}, " if units else ""


@dataclass(frozen=True)
class HeadFacts:
    """What a head rule and a label rule (`target_fit`) read: one output's head, its loss
    (None when the file has none for it, or it is not known), the labels given with the data,
    the weight layers of a network that is one linear map up to this head (empty when it is
    not, or the model has several outputs), and whether the loss is a custom one (it reads its
    labels its own way)."""

    head: Head
    loss: str | None = None
    from_logits: bool = False
    labels: LabelSummary | None = None
    linear: tuple[str, ...] = ()
    custom: bool = False

    @property
    def act(self) -> str:
        """What the head applies last: from the file, else what its values showed."""
        return self.head.activation

    @property
    def units(self) -> int:
        """The head's units (0 when the file does not say)."""
        return self.head.units or 0

    @property
    def y(self) -> LabelSummary:
        """The labels (empty when none were given)."""
        return self.labels or LabelSummary()

    @property
    def loss_name(self) -> str:
        """The loss as a label rule's message names it."""
        return "custom" if self.custom else self.loss or "no loss"

    @property
    def crossentropy(self) -> bool:
        """A binary or categorical cross-entropy (they read probabilities, or logits)."""
        loss = self.loss or ""
        return "crossentropy" in loss and ("binary" in loss or "categorical" in loss)

    @property
    def categorical(self) -> bool:
        """A categorical cross-entropy, sparse or not, focal or not."""
        loss = self.loss or ""
        return "categorical_" in loss and "crossentropy" in loss

    @property
    def sparse(self) -> bool:
        return self.loss_name.startswith("sparse_categorical")

    @property
    def one_hot_loss(self) -> bool:
        return self.loss_name.startswith("categorical_") and "hinge" not in self.loss_name

    @property
    def ids(self) -> bool:
        """The labels are class ids (one whole number >= 0 per sample)."""
        y = self.labels
        return y is not None and y.integers and y.width == 1 and y.low >= 0 and not y.one_hot

    @property
    def multi_hot(self) -> bool:
        """The labels are rows of 0/1 with several 1s (multi-label)."""
        y = self.labels
        return y is not None and y.width > 1 and not y.one_hot and y.low >= 0 and y.high <= 1

    def read(self, labels: bool = False) -> tuple[tuple[str, Fact], ...]:
        """The typed values a head rule reads (a label rule's: with the labels), as a finding
        record keeps them."""
        head, y = self.head, self.y
        loss = self.loss_name if labels else self.loss
        read = (("output", head.name), ("activation", self.act), ("units", head.units),
                ("loss", loss), ("from_logits", self.from_logits))  # fmt: skip
        if not labels:
            return (*read, ("linear_layers", len(self.linear)))
        return (*read, ("labels", y.describe()), ("label_width", y.width), ("classes", y.classes))

    def describe(self) -> str:
        head = self.head
        return f"output '{head.name}' ({units_words(head.units)}{head.observed or head.activation})"


def loss_of(spec: tuple[str, bool] | None) -> tuple[str | None, bool]:
    """(loss, from_logits) of a loss as `loss_forms.per_output` gives it (None: not known)."""
    return spec if spec is not None else (None, False)


# The repair a rule makes (the config edit `fix` applies), kept in its finding record.
Change = ConfigChange


@dataclass(frozen=True)
class Example:
    """A head and loss a rule is shown on: the head of a small MLP on `classes` classes of
    learnable data, with its labels as `labels` (`one_hot`, `ids`, `binary`). `structure`:
    `relu_before` (a Dense with ReLU, then a Softmax layer), `dropout_after` (a Dropout after
    the head), `linear_hidden` (the hidden layer without an activation)."""

    activation: str
    units: int
    loss: str
    from_logits: bool = False
    classes: int = 0  # the classes of the labels; `units` when 0
    labels: str = "one_hot"
    structure: str = ""

    @property
    def label(self) -> str:
        logits = ", from_logits=True" if self.from_logits else ""
        shape = f" [{self.structure}]" if self.structure else ""
        return f"Dense({self.units}, {self.activation}) + {self.loss}{logits}{shape}"


@dataclass(frozen=True)
class Evidence:
    """What training showed on the rule's examples (benchmarks/bench_rule_evidence.py): of
    `runs` runs (examples x optimizers x seeds), how many flagged models trained and how many
    repaired copies did, and the cells (the example's index, the optimizer) where no flagged
    seed trained; and what the rule found on the verdict corpus."""

    runs: int
    flagged_trained: int
    repaired_trained: int
    untrained: tuple[tuple[int, str], ...] = ()  # (example, optimizer): no flagged run trained
    # on the verdict corpus (benchmarks/bench_rule_corpus.py): the fault files it names, the
    # mutants of the operators it fires on, the healthy files it fires on, the healthy files
    corpus: tuple[int, int, int, int] | None = None

    @property
    def supports_failing(self) -> bool:
        """Some flagged models do not train under a common optimizer, and every repaired copy
        does."""
        return bool(self.untrained) and self.repaired_trained == self.runs


@dataclass(frozen=True)
class HeadRule:
    """One rule: see the module doc. `needs`: what it holds under (`file`: the file alone;
    `probe`: a head whose activation the probe's outputs showed); `code`: its finding."""

    name: str
    condition: str  # the docs' words for `applies`
    applies: Callable[[HeadFacts], bool]
    message: Callable[[HeadFacts], str]
    hint: Callable[[HeadFacts], str]
    severity: Severity
    repair_words: str  # the docs' words for `repair`
    repair: Callable[[HeadFacts], Change | None]
    examples: tuple[Example, ...]
    near_misses: tuple[Example, ...]
    evidence: Evidence | None = None
    layer: Callable[[HeadFacts], str | None] = lambda f: f.head.layer  # the layer to change
    needs: str = "file"
    code: Finding = Finding.LOSS_MISMATCH


def judge(facts: HeadFacts) -> Reason | None:
    """The finding of the first rule of the table that applies to `facts`; None when none
    does."""
    for rule in RULES:
        if rule.applies(facts):
            return Reason(rule.code, rule.message(facts), rule.hint(facts), rule.layer(facts),
                          facts.head.name, facts.loss or "the loss", rule.name, rule.severity,
                          facts=facts.read(), repair=rule.repair(facts))  # fmt: skip
    return None


def repairs(facts: HeadFacts) -> list[tuple[HeadRule, Change]]:
    """The repair of each rule that applies to `facts`, in table order (a rule without one for
    these facts is skipped: the next rule's repair stands)."""
    found = [(rule, rule.repair(facts)) for rule in RULES if rule.applies(facts)]
    return [(rule, change) for rule, change in found if change is not None]


# -- the words ----------------------------------------------------------------------------


def _on(text: str) -> Callable[[HeadFacts], str]:
    def said(f: HeadFacts) -> str:
        words = text.format(act=f.act, an_act=with_article(f.act), loss=f.loss)
        return f"{f.loss} on {f.describe()}: {words}"

    return said


CLASSIFIER_LOSS = (
    "categorical_crossentropy (one-hot labels) or sparse_categorical_crossentropy (class ids) "
    "for a softmax classifier"
)


BINARY_ON_SOFTMAX = _on(
    "binary cross-entropy scores each softmax output as an independent yes/no, but a softmax "
    "ties them together (and over one unit it is always 1.0)"
)
BINARY_SOFTMAX_HINT = (
    "a softmax head with categorical_crossentropy (one-hot labels) or "
    "sparse_categorical_crossentropy (class ids); for yes/no or multi-label outputs a sigmoid "
    "head with binary_crossentropy"
)


def _class_loss(f: HeadFacts) -> str:
    return "sparse_categorical_crossentropy" if f.ids else "categorical_crossentropy"


# -- the repairs --------------------------------------------------------------------------
# fmt: off


def _probabilities_read(f: HeadFacts) -> Change:
    return Change("loss", f"from_logits=False: the head keeps its {f.act}, so predictions stay "
                  "probabilities; the loss must then read probabilities, not logits",
                  loss=f.loss)  # fmt: skip


def _softmax_under_binary(f: HeadFacts) -> Change:
    if f.units == 1:
        return Change("activation", "the activation changes: a softmax over one unit is always "
                      "1.0; binary_crossentropy asks for one yes/no probability, which a "
                      "sigmoid gives", activation="sigmoid")  # fmt: skip
    if f.multi_hot:
        return Change("activation", "the activation changes: the labels hold several 1s per row "
                      "(multi-label), which independent sigmoids give and a softmax cannot",
                      activation="sigmoid")  # fmt: skip
    name = _class_loss(f)
    held = ("(the labels are class ids)" if f.ids
            else "and takes the one-column-per-unit labels binary_crossentropy took")  # fmt: skip
    return Change("loss", f"{CHANGES_LOSS}: the softmax over {f.units or 'N'} units says one "
                  f"class per sample; {name} scores exactly that {held}", loss=name)  # fmt: skip


def _one_unit_under_categorical(f: HeadFacts) -> Change:
    if f.act == "linear":
        return Change("loss", f"{CHANGES_LOSS}: one unit holds one yes/no answer, not a "
                      "distribution", loss="binary_crossentropy", from_logits=True)  # fmt: skip
    return Change("activation", "the loss and activation change: one unit holds one yes/no "
                  "answer, not a distribution over classes", activation="sigmoid",
                  loss="binary_crossentropy")  # fmt: skip


def _sigmoids_under_categorical(f: HeadFacts) -> Change | None:
    if f.act != "sigmoid":
        return None
    return Change("activation", f"the activation changes: {f.loss} takes one class per "
                  "sample, so the units must form one distribution (a softmax), not independent "
                  "sigmoids", activation="softmax")  # fmt: skip


def _unbounded_under_crossentropy(f: HeadFacts) -> Change | None:
    if f.act == "linear":
        return Change("loss", f"{CHANGES_LOSS}: from_logits=True, the head stays linear and the "
                      "loss applies the softmax / sigmoid itself (also stabler)", loss=f.loss,
                      from_logits=True)  # fmt: skip
    if f.act != "relu":
        return None
    target = "sigmoid" if "binary" in (f.loss or "") or f.units == 1 else "softmax"
    return Change("activation", f"the activation changes: a ReLU head gives no probabilities "
                  f"(and no gradient below 0); {f.loss} reads probabilities, which "
                  f"{with_article(target)} gives", activation=target)  # fmt: skip


def _class_loss_for_softmax(f: HeadFacts) -> Change | None:
    if f.units == 1:
        return None
    name = _class_loss(f)
    return Change("loss", f"{CHANGES_LOSS}: the softmax says one class of {f.head.units}; {name} "
                  "is the loss for class probabilities", loss=name)  # fmt: skip


RELU_HIDDEN = Change("relu_hidden", "a non-linearity between the weight layers lets the network "
                     "fit more than one linear map")  # fmt: skip
SOFTMAX_FOR_KL = Change("activation", "the activation changes: KL divergence compares "
                        "distributions, which a softmax makes", activation="softmax")  # fmt: skip


# -- the predicates -----------------------------------------------------------------------


def _classifier(f: HeadFacts) -> bool:
    loss = f.loss_name
    return f.act in ("sigmoid", "softmax") or "crossentropy" in loss or "hinge" in loss


def _regression(f: HeadFacts) -> bool:
    return f.act in ("linear", "relu", "softplus", "exponential") and f.loss in REGRESSION_LOSSES


def _units_listed(f: HeadFacts) -> str:
    names = [f"'{n}'" for n in f.linear[:4]]
    return ", ".join(names) + (", ..." if len(f.linear) > 4 else "")


# -- the table ----------------------------------------------------------------------------

SOFTMAX_TEN = Example("softmax", 10, "categorical_crossentropy")
# the first two examples: no flagged run trained under either optimizer
UNTRAINED_BOTH = ((0, "adam"), (0, "sgd"), (1, "adam"), (1, "sgd"))

RULES: tuple[HeadRule, ...] = (
    HeadRule(
        "logits_on_probabilities",
        "`from_logits=True` on a softmax / sigmoid head",
        lambda f: f.loss is not None and f.from_logits and f.act in PROBABILITIES,
        _on("from_logits=True applies {act} to an output that already went through {act}, so "
            "the loss sees probabilities squashed twice"),
        lambda f: f"from_logits=False with this head, or drop the {f.act} from '{f.head.layer}' "
        "and keep from_logits=True",
        # Keras's TensorFlow backend takes the logits back from a softmax / sigmoid activation
        # it made itself (`_keras_logits`): the flagged models train on it
        Severity.WARN,
        "the loss: `from_logits=False`",
        _probabilities_read,
        (Example("softmax", 10, "categorical_crossentropy", from_logits=True),
         Example("sigmoid", 1, "binary_crossentropy", from_logits=True, classes=2,
                 labels="binary")),
        (SOFTMAX_TEN, Example("linear", 10, "categorical_crossentropy", from_logits=True)),
        Evidence(8, 8, 8, (), corpus=(37, 41, 0, 193)),
    ),
    HeadRule(
        "binary_on_one_softmax",
        "binary cross-entropy on a softmax over one unit (always 1.0)",
        lambda f: "binary" in (f.loss or "") and f.act == "softmax" and f.units == 1,
        BINARY_ON_SOFTMAX,
        lambda f: BINARY_SOFTMAX_HINT,
        Severity.FAIL,
        "the activation: `sigmoid` (also clears `constant_output`)",
        _softmax_under_binary,
        (Example("softmax", 1, "binary_crossentropy", classes=2, labels="binary"),),
        (Example("sigmoid", 1, "binary_crossentropy", classes=2, labels="binary"),),
        Evidence(4, 0, 4, ((0, "adam"), (0, "sgd")), corpus=(39, 43, 0, 193)),
    ),
    HeadRule(
        "binary_on_two_softmax",
        "binary cross-entropy on a softmax over two units (on one-hot labels the same loss as "
        "categorical cross-entropy)",
        lambda f: "binary" in (f.loss or "") and f.act == "softmax" and f.units == 2,
        _on("binary cross-entropy scores each softmax output as an independent yes/no, but a "
            "softmax ties them together; over two units and one-hot labels it equals "
            "categorical cross-entropy, over multi-label rows it cannot fit them"),
        lambda f: "categorical_crossentropy for one class of two (the same loss, clearer "
        "metrics), or a sigmoid head for multi-label rows",
        Severity.WARN,
        "the loss: `categorical_crossentropy` (`sparse_categorical_crossentropy` for class "
        "ids); the activation `sigmoid` when the labels are multi-hot",
        _softmax_under_binary,
        (Example("softmax", 2, "binary_crossentropy"),),
        (Example("softmax", 2, "categorical_crossentropy"),),
        Evidence(4, 4, 4, (), corpus=(0, 0, 0, 193)),
    ),
    HeadRule(
        "binary_on_softmax",
        "binary cross-entropy on a softmax over three or more units",
        lambda f: "binary" in (f.loss or "") and f.act == "softmax" and f.units not in (1, 2),
        BINARY_ON_SOFTMAX,
        lambda f: BINARY_SOFTMAX_HINT,
        Severity.FAIL,
        "the loss: `categorical_crossentropy` (`sparse_categorical_crossentropy` when the labels "
        "are class ids); the activation `sigmoid` when the labels are multi-hot",
        _softmax_under_binary,
        tuple(Example("softmax", units, "binary_crossentropy") for units in (3, 10)),
        (Example("sigmoid", 3, "binary_crossentropy", labels="one_hot"),),
        Evidence(8, 6, 8, ((1, "sgd"),), corpus=(60, 92, 0, 193)),
    ),
    HeadRule(
        "categorical_on_unit_range",
        "a categorical loss on outputs in [0, 1] that do not sum to 1 (seen on the probe)",
        lambda f: f.categorical and "sparse" not in (f.loss or "") and not f.from_logits
        and f.act == "unit_range" and (f.units or 0) > 1,
        _on("categorical cross-entropy reads each sample's outputs as a distribution over the "
            "classes, but these do not sum to 1 (independent values in [0, 1], as a sigmoid "
            "makes); Keras divides them by their sum, so it trains, but the outputs are no "
            "probabilities"),
        lambda f: "a softmax on the head (one class out of N), or a sigmoid head with "
        "binary_crossentropy for independent yes/no outputs",
        Severity.WARN,
        "none (the head's activation is not in the file)",
        lambda f: None,
        (),
        (),
        needs="probe",
    ),
    HeadRule(
        "categorical_on_one_unit",
        "a categorical loss on one unit (the loss is constant)",
        lambda f: f.categorical and f.units == 1,
        _on("categorical cross-entropy compares a distribution over classes, but one unit holds "
            "no distribution (the loss is constant)"),
        lambda f: "for one yes/no output: Dense(1, activation='sigmoid') with "
        "binary_crossentropy; for one class out of N: Dense(N, activation='softmax') with "
        "sparse_categorical_crossentropy",
        Severity.FAIL,
        "the loss `binary_crossentropy` and a `sigmoid` (or `from_logits=True` on a linear unit)",
        _one_unit_under_categorical,
        (Example("sigmoid", 1, "categorical_crossentropy", classes=2, labels="binary"),
         Example("softmax", 1, "sparse_categorical_crossentropy", classes=2, labels="binary")),
        (Example("sigmoid", 1, "binary_crossentropy", classes=2, labels="binary"),),
        Evidence(8, 0, 8, UNTRAINED_BOTH, corpus=(194, 214, 0, 193)),
    ),
    HeadRule(
        "categorical_on_sigmoids",
        "a categorical loss on two or more sigmoids (Keras divides them by their sum)",
        lambda f: f.categorical and f.act == "sigmoid" and (f.units or 2) > 1,
        _on("categorical cross-entropy compares a distribution over classes, but sigmoid "
            "outputs are independent yes/no probabilities, not a distribution; Keras divides "
            "them by their sum, so it trains, but the outputs are no class probabilities"),
        lambda f: "activation='softmax' on the head for one class out of N (its outputs are "
        "then the probabilities the loss reads); a sigmoid head with binary_crossentropy for "
        "independent yes/no outputs",
        Severity.WARN,
        "the activation: `softmax`",
        _sigmoids_under_categorical,
        (Example("sigmoid", 3, "categorical_crossentropy"),
         Example("sigmoid", 3, "sparse_categorical_crossentropy", labels="ids")),
        (Example("softmax", 3, "categorical_crossentropy"),),
        Evidence(8, 8, 8, (), corpus=(66, 141, 0, 193)),
    ),
    HeadRule(
        "probabilities_loss_on_unbounded",
        "a cross-entropy without `from_logits` on a head whose outputs leave [0, 1] (linear, "
        "ReLU, tanh, ELU, GELU, softplus, log-softmax...)",
        lambda f: f.crossentropy and not f.from_logits and f.act in NOT_PROBABILITIES,
        _on("with from_logits=False Keras reads the outputs as probabilities and clips them to "
            "[1e-7, 1 - 1e-7]: {an_act} head's outputs outside that range get no gradient"),
        lambda f: f"from_logits=True in the loss (e.g. keras.losses.{loss_class(f.loss or '')}"
        "(from_logits=True)), or a softmax / sigmoid on the head",
        Severity.FAIL,
        "linear head: the loss `from_logits=True`; ReLU head: the activation `sigmoid` (binary "
        "or one unit) or `softmax`",
        _unbounded_under_crossentropy,
        tuple(Example(act, 10, "categorical_crossentropy") for act in ("linear", "relu")),
        (Example("linear", 10, "categorical_crossentropy", from_logits=True),),
        Evidence(8, 0, 8, UNTRAINED_BOTH, corpus=(268, 519, 0, 193)),
    ),
    HeadRule(
        "kl_on_unbounded",
        "`kl_divergence` on a head whose outputs leave [0, 1]",
        lambda f: f.loss == "kl_divergence" and f.act in NOT_PROBABILITIES,
        _on("KL divergence reads the outputs as a distribution and clips them to [1e-7, 1]: "
            "{an_act} head's outputs outside that range get no gradient"),
        lambda f: "a softmax on the head (the targets are distributions)",
        Severity.FAIL,
        "the activation: `softmax`",
        lambda f: SOFTMAX_FOR_KL,
        (Example("linear", 10, "kl_divergence"),),
        (Example("softmax", 10, "kl_divergence"),),
        evidence=Evidence(4, 0, 4, ((0, "adam"), (0, "sgd")), corpus=(0, 0, 0, 193)),
    ),
    HeadRule(
        "poisson_on_negative",
        "`poisson` on a head whose outputs can go negative (the log of a negative rate is NaN)",
        lambda f: f.loss == "poisson" and f.act in NEGATIVE,
        _on("the Poisson loss takes the log of the predicted rate, but {an_act} head's outputs go "
            "negative (log of a negative number: NaN)"),
        lambda f: "activation='exponential' or 'softplus' on the head (a positive rate)",
        Severity.FAIL,
        "the activation: `softplus` (a positive rate that does not overflow)",
        lambda f: Change("activation", "the activation changes: the Poisson loss takes the log "
                         "of the rate, which a softplus keeps positive", activation="softplus"),
        (Example("linear", 1, "poisson", classes=2, labels="binary"),),
        (Example("softplus", 1, "poisson", classes=2, labels="binary"),),
        evidence=Evidence(4, 0, 4, ((0, "adam"), (0, "sgd")), corpus=(0, 0, 0, 193)),
    ),
    HeadRule(
        "squared_error_on_softmax",
        "mean squared / absolute error on a softmax classifier",
        lambda f: f.loss in ("mean_squared_error", "mean_absolute_error") and f.act == "softmax"
        and (f.units or 2) > 1,
        _on("a squared or absolute error on class probabilities gives small, flat gradients "
            "where the prediction is most wrong"),
        lambda f: CLASSIFIER_LOSS,
        Severity.FAIL,
        "the loss: `categorical_crossentropy` (sparse for class ids)",
        _class_loss_for_softmax,
        (Example("softmax", 10, "mean_squared_error"),),
        (SOFTMAX_TEN,),
        Evidence(4, 2, 4, ((0, "sgd"),), corpus=(120, 124, 0, 193)),
    ),
    HeadRule(
        "margin_loss_on_softmax",
        "`poisson`, `hinge` or `squared_hinge` on a softmax",
        lambda f: f.act == "softmax" and f.loss in ("poisson", "hinge", "squared_hinge"),
        lambda f: f"{f.loss} on {f.describe()}: {f.loss} is meant for "
        + ("counts from an exponential or softplus head" if f.loss == "poisson"
           else "-1 / +1 targets scored on raw margins")
        + ", not for class probabilities that sum to 1",
        lambda f: CLASSIFIER_LOSS,
        Severity.FAIL,
        "the loss: `categorical_crossentropy` (sparse for class ids)",
        _class_loss_for_softmax,
        (Example("softmax", 10, "hinge"),),
        (SOFTMAX_TEN,),
        evidence=Evidence(4, 2, 4, ((0, "sgd"),), corpus=(180, 186, 0, 193)),
    ),
    HeadRule(
        "relu_before_softmax",
        "ReLU on the logits right before a `Softmax` / `Activation('softmax')` layer",
        lambda f: f.head.before in ("relu", "relu6") and f.head.before_layer is not None,
        lambda f: f"output '{f.head.name}': layer '{f.head.before_layer}' applies ReLU to the "
        f"logits before the softmax at '{f.head.layer}', so every negative logit becomes 0 and "
        "its class can never win",
        lambda f: f"no activation on '{f.head.before_layer}' (the softmax turns raw logits into "
        "probabilities)",
        Severity.WARN,
        "the activation of the logits layer removed (a `ReLU` / `Activation` layer is taken out)",
        lambda f: Change("remove_before", f"the activation of '{f.head.before_layer}' is removed: "
                         f"the softmax at '{f.head.layer}' must see raw logits, negative ones "
                         "included"),
        (Example("softmax", 10, "categorical_crossentropy", structure="relu_before"),),
        (SOFTMAX_TEN,),
        Evidence(4, 4, 4, (), corpus=(60, 60, 0, 193)),
        layer=lambda f: f.head.before_layer,
    ),
    HeadRule(
        "dropout_after_head",
        "`Dropout` after the last layer with weights",
        lambda f: f.head.dropout is not None,
        lambda f: f"output '{f.head.name}': Dropout '{f.head.dropout}' comes after the last "
        "layer with weights, so in training it zeroes whole outputs (the logits) at random",
        lambda f: f"move '{f.head.dropout}' before the last Dense layer",
        Severity.FAIL,
        "the Dropout moves before that layer; it is removed when a Dropout already feeds that "
        "layer (two in a row would stack)",
        lambda f: Change("move_dropout", "dropout regularises the features, never the logits"),
        (Example("softmax", 10, "categorical_crossentropy", structure="dropout_after"),),
        (SOFTMAX_TEN,),
        Evidence(4, 0, 4, ((0, "adam"), (0, "sgd")), corpus=(149, 149, 0, 193)),
        layer=lambda f: f.head.dropout,
    ),
    HeadRule(
        "linear_classifier",
        "a classifier (sigmoid / softmax head, or a cross-entropy or hinge loss) whose two or "
        "more weight layers have no non-linearity between them",
        lambda f: len(f.linear) >= 2 and _classifier(f),
        lambda f: f"output '{f.head.name}': the {len(f.linear)} layers with weights have no "
        f"activation between them, so the network is one linear map before the {f.act} at "
        f"'{f.head.layer}', however deep: it can only draw straight class boundaries",
        lambda f: "an activation on the hidden layers (e.g. activation='relu')",
        Severity.FAIL,
        "`activation='relu'` on every hidden weight layer",
        lambda f: RELU_HIDDEN,
        (Example("softmax", 10, "categorical_crossentropy", structure="linear_hidden"),),
        (SOFTMAX_TEN,),
        layer=lambda f: f.head.layer,
        evidence=Evidence(4, 0, 4, ((0, "adam"), (0, "sgd")), corpus=(40, 64, 0, 193)),
    ),
    HeadRule(
        "linear_regression",
        "a regression head whose two or more weight layers have no non-linearity between them "
        "(it fits what one Dense layer fits, and trains)",
        lambda f: len(f.linear) >= 2 and not _classifier(f) and _regression(f),
        lambda f: f"layer '{f.linear[0]}': the {len(f.linear)} layers with weights "
        f"({_units_listed(f)}) have no activation between them, so output '{f.head.name}' is "
        "one linear map of the inputs, however deep: it fits what a single Dense layer fits",
        lambda f: "an activation on the hidden layers (e.g. activation='relu'), or one Dense "
        "layer if a linear model is meant",
        Severity.WARN,
        "`activation='relu'` on the hidden weight layers (or one Dense layer, if a linear map "
        "is meant)",
        lambda f: RELU_HIDDEN,
        (Example("linear", 1, "mean_squared_error", structure="linear_hidden", labels="real"),),
        (Example("linear", 1, "mean_squared_error", labels="real"),),
        layer=lambda f: f.linear[0],
        evidence=Evidence(4, 4, 4, (), corpus=(24, 64, 0, 193)),
        code=Finding.LINEAR_STACK,
    ),
)
# fmt: on

BY_NAME = {rule.name: rule for rule in RULES}
