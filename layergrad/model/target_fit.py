"""Can the output produce the labels? The labels given with the data (what they hold:
`label_summary.LabelSummary`) against each output's activation and compiled loss: the
`target_mismatch` finding. NumPy only, no TensorFlow.

The rules are one table (`RULES`, tried in order; the first that applies names the head):
each entry holds its predicate over `HeadFacts`, its message and hint, its severity, the
docs' words, its examples and near misses, and its repair, the `ConfigChange` `fix` makes
(`label_repair`; none when the labels themselves must change).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from layergrad.core.results import ConfigChange as Change
from layergrad.core.results import Reason
from layergrad.core.vocab import Finding, Severity, with_article
from layergrad.model.head_forms import Head
from layergrad.model.head_rules import CHANGES_LOSS, HeadFacts, loss_of, units_words
from layergrad.model.label_summary import MAX_CLASSES, LabelSummary

FAR_BEYOND = 100  # class ids past this many times the labels read are not classes
# the range each activation can produce (closed: labels of exactly 0 and 1 are ordinary)
RANGES = {
    "sigmoid": (0.0, 1.0),
    "softmax": (0.0, 1.0),
    "tanh": (-1.0, 1.0),
    "relu": (0.0, np.inf),
    "softplus": (0.0, np.inf),
    "relu6": (0.0, 6.0),
    "exponential": (0.0, np.inf),
}


def target_mismatches(
    heads: Sequence[Head],
    losses: Sequence[tuple[str, bool] | None],
    labels: Mapping[str, LabelSummary],
    custom: Collection[str] = (),
) -> list[Reason]:
    """Every output whose labels do not fit its activation or loss.

    `losses[i]` is (canonical loss name, from_logits) of output i (see `loss_fit.per_output`),
    None when unknown; `labels` maps an output name to its labels' summary. The outputs named
    in `custom` have a loss Keras does not ship (`loss_forms.unknown_outputs`): it reads the
    labels its own way, so only what no loss can train on (text, NaN/Inf) is said of them.
    """
    found = []
    for head, spec in zip(heads, losses, strict=True):
        summary = labels.get(head.name)
        if summary is not None and summary.count:
            problem = judge(HeadFacts(head, *loss_of(spec), summary, custom=head.name in custom))
            found += [problem] if problem is not None else []
    return found


def _where(f: HeadFacts) -> str:
    head = f.head
    if f.custom:
        return f"output '{head.name}' (layer '{head.layer}') with a custom loss"
    return (f"output '{head.name}' ({units_words(head.units)}{head.activation}, layer "
            f"'{head.layer}') with {f.loss_name}")  # fmt: skip


@dataclass(frozen=True)
class TargetExample:
    """A head, its loss and its labels (one sample a row; `output_rank`: the output's rank
    without the batch axis, when the file tells it)."""

    activation: str
    units: int
    loss: str
    labels: tuple[object, ...]
    output_rank: int | None = None
    from_logits: bool = False

    @property
    def label(self) -> str:
        logits = ", from_logits=True" if self.from_logits else ""
        return f"Dense({self.units}, {self.activation}) + {self.loss}{logits}"

    def facts(self) -> HeadFacts:
        """The facts check reads for this head and these labels."""
        y = LabelSummary()
        y.add(np.array(self.labels), self.output_rank)
        head = Head("head", "head", self.activation, self.units, layer_class="Dense")
        spec = None if self.loss == "custom" else (self.loss, self.from_logits)
        return HeadFacts(head, *loss_of(spec), y, custom=spec is None)


@dataclass(frozen=True)
class TargetRule:
    """One rule of the labels against a head: the docs' words for the labels and the head it
    judges (`labels`, `head_and_loss`) and for `fix`'s repair (`repair_words`), its predicate,
    its message and hint, its severity, and the examples that show it (`any_loss`: it holds
    under a custom loss too, which reads its labels its own way)."""

    name: str
    labels: str
    head_and_loss: str
    applies: Callable[[HeadFacts], bool]
    message: Callable[[HeadFacts], str]
    hint: Callable[[HeadFacts], str]
    repair_words: str
    examples: tuple[TargetExample, ...]
    near_misses: tuple[TargetExample, ...]
    severity: Severity = Severity.FAIL
    any_loss: bool = False
    # the change `fix` makes, from the facts this rule judged (None: the labels must change)
    repair: Callable[[HeadFacts], Change | None] = lambda f: None


def _first(facts: HeadFacts) -> TargetRule | None:
    """The first rule of `RULES` that applies to `facts`."""
    return next((r for r in RULES if (r.any_loss or not facts.custom) and r.applies(facts)), None)


def judge(facts: HeadFacts) -> Reason | None:
    """The finding of the first rule of `RULES` that applies to `facts`; None when none does."""
    rule = _first(facts)
    if rule is None:
        return None
    return Reason(Finding.TARGET_MISMATCH, f"{_where(facts)}: the labels are "
                  f"{facts.y.describe()}: {rule.message(facts)}", rule.hint(facts),
                  facts.head.layer, facts.head.name, facts.loss_name, rule.name, rule.severity,
                  facts=facts.read(labels=True))  # fmt: skip


def _ranked(f: HeadFacts) -> bool:
    """Whether each sample's labels have another rank than the (known) loss reads from the
    output."""
    y, sparse, rank = f.y, f.sparse, f.y.output_rank
    if f.loss is None or rank is None or rank < 1 or y.text or not y.count:
        return False
    got, wanted = len(y.shape), rank - 1 if sparse else rank
    if got == wanted or (got == wanted + 1 and y.shape[-1:] == (1,)) or (sparse and got > wanted):
        return False
    # one label per sample for one unit, or for a row of units (the width rules' case)
    return sparse or not (got == rank - 1 and (rank == 1 or f.head.units == 1))


def _missing_flatten(f: HeadFacts) -> bool:
    """Whether the head is a Dense on a feature map (its output keeps axes) while the labels
    are what a flat head takes: one class id (sparse loss) or one row of its units."""
    y, units = f.y, f.head.units
    one = len(y.shape) == 0 or y.shape == (1,)  # one number (or class id) per sample
    flat = one if f.sparse else y.shape == (units,) or (one and units == 1)
    return flat and (y.output_rank or 1) > 1 and f.head.layer_class == "Dense"


def _said_rank(f: HeadFacts) -> str:
    """What a label of another rank than the output's is, in words."""
    rank = f.y.output_rank or 1
    dims = (*(-1 for _ in range(rank - 1)), f.head.units or -1)  # "?": not known from the file
    reads = f"shape {_shape(dims[:-1])} (a class id per position)" if f.sparse else (
        "the output's shape")  # fmt: skip
    axes = f"{rank} ax{'is' if rank == 1 else 'es'}"
    shape = _shape(f.y.shape)
    return (f"each sample's labels have shape {shape}, but the output gives {_shape(dims)} "
            f"per sample ({axes}), and the loss reads labels of {reads}")  # fmt: skip


def _reshape_hint(f: HeadFacts) -> str:
    rank, units, y = f.y.output_rank or 1, f.head.units, f.y
    size = int(np.prod(y.shape)) if y.shape else 1
    dims = (*(-1 for _ in range(rank - 1)), units or -1)
    reshape = (
        f"y.reshape(len(y), {units}) gives each sample the output's shape"
        if rank == 1 and units and size == units
        else f"give each sample labels of the output's shape {_shape(dims)}"
    )
    return f"{reshape}; the labels are data, so a copy of the model cannot change them"


def _sparse_rank(f: HeadFacts) -> bool:
    """A sparse loss's labels with axes beyond one class id per position."""
    rank, y = f.y.output_rank, f.y
    trailing_one = rank is not None and len(y.shape) == rank and y.shape[-1:] == (1,)
    return f.sparse and rank is not None and rank >= 1 and len(y.shape) > rank - 1 and (
        not trailing_one)  # fmt: skip


def _outside(f: HeadFacts) -> bool:
    """Labels beyond what the head's activation can output (a sparse loss reads class ids)."""
    low, high = RANGES.get(f.act, (-np.inf, np.inf))
    return not f.sparse and (f.y.low < low or f.y.high > high)


def _wider(f: HeadFacts) -> str:
    y = f.y
    return f"Dense({int(y.high) + 1}) on the head (one unit per class), or " if (
        y.low >= 0 and y.high < MAX_CLASSES) else ""  # fmt: skip


def _columns(f: HeadFacts) -> Change:
    """A unit per label column: one unit widened for rows (`_widen`), else the head's units."""
    if f.units == 1:
        return _widen(f.loss_name, f.y)
    return _head(head_activation(f.head), "the head's units change: each label row has "
                 f"{f.y.width} columns", units=f.y.width)  # fmt: skip


def _units_for_ids(f: HeadFacts) -> Change | None:
    """A sparse loss's head with fewer units than class ids: a unit per class id (one
    sigmoid unit for ids 0 and 1); none when the ids run far beyond their count."""
    y = f.y
    if y.width > 1:  # rows: a unit per column
        return _columns(f) if y.width != f.units else None
    classes = int(y.high) + 1
    if f.units == 1 and classes == 2:
        return _head("sigmoid", "the head and loss change: the labels are 0 and 1, one yes/no "
                     "answer per sample: one sigmoid unit with binary_crossentropy",
                     loss="binary_crossentropy")  # fmt: skip
    logits = head_activation(f.head) == "linear" and f.from_logits  # the loss applies softmax
    return _unless_far(f, _head("linear" if logits else "softmax", "the head's units change: "
                                f"class ids run to {int(y.high)}, so the head needs {classes} "
                                "units", units=classes))  # fmt: skip


def _softmax_for_ids(f: HeadFacts) -> Change:
    classes = int(f.y.high) + 1
    return _head("softmax", f"the head changes: {classes} classes need {classes} softmax units "
                 "and the sparse loss", units=classes,
                 loss="sparse_categorical_crossentropy")  # fmt: skip


def _one_label(f: HeadFacts) -> Change | None:
    """Several units for one label a sample: by what the label is (class ids, 0/1, a number)."""
    if f.ids and int(f.y.high) + 1 > 2:
        return _unless_far(f, _head("softmax", "the head and loss change: the labels are class "
                                    "ids", loss="sparse_categorical_crossentropy"))  # fmt: skip
    if f.ids:
        return _head("sigmoid", "the head changes: one yes/no label per sample needs one "
                     "sigmoid unit", units=1, loss="binary_crossentropy")  # fmt: skip
    return _head("linear", "the head changes: one number per sample needs one linear unit",
                 units=1)  # fmt: skip


def _regression(f: HeadFacts) -> Change | None:
    """A linear head for targets beyond the head's range (and `mean_squared_error` for targets
    beyond binary cross-entropy's [0, 1])."""
    y = f.y
    if f.loss_name.startswith("binary") and (y.low < 0 or y.high > 1):
        return _head("linear", "the head and loss change: the targets lie outside [0, 1], a "
                     "regression: a linear head with mean_squared_error",
                     loss="mean_squared_error")  # fmt: skip
    if _outside(f):
        return _head("linear", f"the activation changes: the targets run from {y.low:g} to "
                     f"{y.high:g}, beyond what {with_article(f.act)} can output; a linear head can "
                     "reach them")  # fmt: skip
    return None


def _unless_far(f: HeadFacts, change: Change | None) -> Change | None:
    """`change`, or None when the labels are class ids far beyond their count (a data
    problem, `ids_beyond_count`: no head is widened to them)."""
    return None if f.ids and ids_beyond_count(f.y) is not None else change


_E = TargetExample
CATEGORICAL_FOR_ROWS = Change("loss", f"{CHANGES_LOSS}: the labels are one-hot rows, which "
                              "categorical_crossentropy reads",
                              loss="categorical_crossentropy")  # fmt: skip
FLATTEN = Change("flatten", "a Flatten goes before the head: a Dense on a feature map gives a "
                 "prediction per position, the labels one per sample")  # fmt: skip
SPARSE_FOR_IDS = Change("loss", f"{CHANGES_LOSS}: the labels are class ids, which the sparse "
                        "loss reads", loss="sparse_categorical_crossentropy")  # fmt: skip
DATA = "none: the labels are data"
IDS_SPARSE = "sparse_categorical_crossentropy"
ONE_HOT = ((1, 0, 0), (0, 1, 0), (0, 0, 1))
IDS = (0, 1, 2)
# fmt: off

# In the order check judges them: the first that applies is the finding.
RULES: tuple[TargetRule, ...] = (
    TargetRule(
        "missing_flatten", "one label (or row) per sample", "a Dense head on a feature map "
        "(no Flatten before it)",
        lambda f: _ranked(f) and _missing_flatten(f),
        lambda f: f"{_said_rank(f)}: the head '{f.head.layer}' is a Dense applied at every "
        f"position of {with_article(str((f.y.output_rank or 1) + 1))}-D input (batch axis "
        "included), since no Flatten comes before it",
        lambda f: f"Flatten() (or GlobalAveragePooling{(f.y.output_rank or 1) - 1}D()) before "
        f"'{f.head.layer}', so it gives one prediction per sample",
        "a `Flatten` before the head",
        (_E("softmax", 10, IDS_SPARSE, (0, 3, 9), output_rank=3),),
        (_E("softmax", 10, IDS_SPARSE, (0, 3, 9), output_rank=1),),
        repair=lambda f: FLATTEN,
    ),
    TargetRule(
        "label_rank", "each sample's labels of another rank", "what the loss reads of the "
        "output",
        _ranked, _said_rank, _reshape_hint, DATA,
        (_E("softmax", 3, "categorical_crossentropy", tuple((r,) for r in ONE_HOT),
            output_rank=1),),
        (_E("softmax", 3, "categorical_crossentropy", ONE_HOT, output_rank=1),),
    ),
    TargetRule(
        "sparse_on_one_hot", "one-hot rows", "a sparse categorical loss",
        lambda f: f.sparse and f.y.one_hot and f.y.finite and not f.y.text,
        lambda f: "sparse categorical cross-entropy reads one class id per sample, not one-hot "
        "rows",
        lambda f: "categorical_crossentropy for one-hot labels, or pass the class ids "
        "(np.argmax(y, axis=-1)) with the sparse loss",
        "the loss: `categorical_crossentropy`",
        (_E("softmax", 3, IDS_SPARSE, ONE_HOT),),
        (_E("softmax", 3, IDS_SPARSE, IDS),),
        repair=lambda f: _columns(f) if f.units == 1 else CATEGORICAL_FOR_ROWS,
    ),
    TargetRule(
        "labels_not_numbers", "text or objects", "any loss",
        lambda f: bool(f.y.text),
        lambda f: "a loss needs numbers",
        lambda f: "map the labels to class ids first, e.g. "
        "`classes, y = np.unique(labels, return_inverse=True)`",
        DATA,
        (_E("softmax", 3, "categorical_crossentropy", ("cat", "dog")),
         _E("softmax", 3, "custom", ("cat", "dog"))),
        (_E("softmax", 3, "categorical_crossentropy", ONE_HOT),),
        any_loss=True,
    ),
    TargetRule(
        "labels_nonfinite", "NaN or Inf values", "any loss",
        lambda f: not f.y.finite,
        lambda f: f"{f.y.nonfinite:,} label value{'s' if f.y.nonfinite != 1 else ''} NaN or "
        "Inf, and one makes the loss NaN",
        lambda f: "drop or fill the samples whose labels are NaN/Inf",
        DATA,
        (_E("linear", 1, "mean_squared_error", (1.0, float("nan"))),
         _E("linear", 1, "custom", (1.0, float("inf")))),
        (_E("linear", 1, "mean_squared_error", (1.0, 2.0)),),
        any_loss=True,
    ),
    TargetRule(
        "sparse_label_rank", "axes beyond one class id per position", "a sparse categorical "
        "loss",
        _sparse_rank,
        lambda f: "sparse categorical cross-entropy reads one class id per sample (labels of "
        f"shape {_shape(f.y.shape[: (f.y.output_rank or 1) - 1])} per sample), but each "
        f"sample's labels have shape {_shape(f.y.shape)}",
        lambda f: "one class id per sample (np.argmax(y, axis=-1) of one-hot rows), or "
        "categorical_crossentropy for rows",
        DATA,
        (_E("softmax", 4, IDS_SPARSE, ((0, 1), (2, 3)), output_rank=1),),
        (_E("softmax", 4, IDS_SPARSE, ((0,), (2,)), output_rank=1),),
    ),
    TargetRule(
        "labels_divided", "class ids divided by 255 (or 256, 65535) with the pixels", "a "
        "sparse categorical loss",
        lambda f: f.sparse and _divided(f.y) is not None,
        lambda f: (_divided(f.y) or ("", ""))[0],
        lambda f: (_divided(f.y) or ("", ""))[1],
        DATA,
        (_E("softmax", 10, IDS_SPARSE, (0.0, 3 / 255, 9 / 255)),),
        (_E("softmax", 10, IDS_SPARSE, (0, 3, 9)),),
    ),
    TargetRule(
        "fractional_ids", "fractions", "a sparse categorical loss",
        lambda f: f.sparse and not f.y.integers,
        lambda f: "class ids must be whole numbers (a fraction would be cut to the id below "
        "it)",
        lambda f: "pass integer class ids, or a regression loss (mse) for real-valued targets",
        DATA,
        (_E("softmax", 3, IDS_SPARSE, (0.5, 1.2, 0.7)),),
        (_E("softmax", 3, IDS_SPARSE, IDS),),
        severity=Severity.WARN,  # the loss cuts them to whole ids, and trains on those
    ),
    TargetRule(
        "negative_ids", "whole numbers, some < 0", "a sparse categorical loss",
        lambda f: f.sparse and f.y.low < 0,
        lambda f: "class ids must be 0 or more",
        lambda f: "relabel the classes from 0",
        DATA,
        (_E("softmax", 3, IDS_SPARSE, (-1, 0, 1)),),
        (_E("softmax", 3, IDS_SPARSE, IDS),),
    ),
    TargetRule(
        "ids_with_one_hot_loss", "class ids (whole numbers >= 0, one per sample)",
        "`categorical_crossentropy` (one-hot) and more than one unit",
        lambda f: f.one_hot_loss and f.ids and f.units > 1,
        lambda f: f"{f.loss_name} compares one-hot rows with the {f.units} outputs, but the labels "
        "are class ids",
        lambda f: "sparse_categorical_crossentropy for class ids, or one-hot labels "
        "(keras.utils.to_categorical(y, num_classes))",
        "the loss: `sparse_categorical_crossentropy`",
        (_E("softmax", 3, "categorical_crossentropy", IDS),),
        (_E("softmax", 3, "categorical_crossentropy", ONE_HOT),),
        repair=lambda f: SPARSE_FOR_IDS,
    ),
    TargetRule(
        "ids_beyond_units", "class ids >= units", "a sparse categorical loss",
        lambda f: f.sparse and f.y.integers and f.units > 0 and f.y.high >= f.units,
        lambda f: f"class ids must lie in 0 to {f.units - 1} for {f.units} units",
        lambda f: f"{_wider(f)}relabel the classes 0 to {f.units - 1}",
        "the head's units: one per class id (none when the ids run far beyond their count: a "
        "data problem)",
        (_E("softmax", 3, IDS_SPARSE, (0, 1, 5)),),
        (_E("softmax", 3, IDS_SPARSE, IDS),),
        repair=_units_for_ids,
    ),
    TargetRule(
        "one_label_many_units", "one label per sample", "a loss that is not sparse, more than "
        "one unit",
        lambda f: not f.sparse and f.units > 1 and f.y.width == 1 and f.loss is not None,
        lambda f: f"one label per sample, but the output has {f.units} units: each unit is "
        "trained against the same label (the loss broadcasts it)",
        lambda f: "Dense(1, activation='sigmoid') for one yes/no label, Dense(1) for one "
        f"number, or Dense({f.units}, activation='softmax') with "
        "sparse_categorical_crossentropy for class ids",
        "the head: a softmax and the sparse loss (class ids), one sigmoid unit and "
        "`binary_crossentropy` (0/1), one linear unit (numbers)",
        (_E("sigmoid", 3, "binary_crossentropy", (0, 1, 1)),),
        (_E("sigmoid", 3, "binary_crossentropy", ((0, 1, 1), (1, 0, 0))),),
        repair=_one_label,
    ),
    TargetRule(
        "widths_differ", "width W per sample", "a loss that is not sparse, U != W units",
        lambda f: not f.sparse and f.units > 0 and f.y.width > 1 and f.y.width != f.units,
        lambda f: f"each sample's labels have width {f.y.width}, but the output has {f.units} "
        "units",
        lambda f: f"Dense({f.y.width}) on the head, one unit per label column",
        "the head's units: W (and a loss for what the rows hold, from one unit)",
        (_E("sigmoid", 3, "binary_crossentropy", ((0, 1), (1, 0))),),
        (_E("sigmoid", 2, "binary_crossentropy", ((0, 1), (1, 0))),),
        repair=_columns,
    ),
    TargetRule(
        "classes_in_one_unit", "more than two classes", "one unit, sigmoid / softmax or binary "
        "cross-entropy",
        lambda f: f.units == 1 and (f.y.classes or 0) > 2 and f.y.width == 1 and f.y.integers
        and (f.head.activation in ("sigmoid", "softmax") or f.loss_name.startswith("binary")),
        lambda f: f"{f.y.classes} classes cannot be told apart by one {f.head.activation} unit",
        lambda f: f"Dense({f.y.classes}, activation='softmax') with "
        "sparse_categorical_crossentropy",
        "the head: K softmax units and `sparse_categorical_crossentropy`",
        (_E("sigmoid", 1, "binary_crossentropy", (0, 1, 2, 3, 4)),),
        (_E("sigmoid", 1, "binary_crossentropy", (0, 1, 1, 0)),),
        repair=lambda f: _unless_far(f, _softmax_for_ids(f) if f.ids else _regression(f)),
    ),
    TargetRule(
        "binary_outside_unit", "outside [0, 1]", "binary cross-entropy without `from_logits`",
        lambda f: f.loss_name.startswith("binary") and not f.from_logits
        and (f.y.low < 0 or f.y.high > 1),
        lambda f: "binary cross-entropy needs targets in [0, 1]",
        lambda f: "scale the targets to [0, 1], or a regression loss (mse) with a linear head",
        "the head and loss: a linear head with `mean_squared_error`",
        (_E("linear", 1, "binary_crossentropy", (0.5, 3.0)),),
        (_E("linear", 1, "binary_crossentropy", (0.2, 0.9)),),
        repair=lambda f: _unless_far(f, _regression(f)),
    ),
    TargetRule(
        "outside_range", "outside the head's range", "sigmoid / softmax [0, 1], tanh [-1, 1], "
        "ReLU / softplus / exponential [0, inf), relu6 [0, 6] (not for sparse losses, not with "
        "`from_logits`)",
        lambda f: not f.from_logits and _outside(f),
        lambda f: f"{with_article(f.head.activation)} output lies in "
        f"[{RANGES[f.head.activation][0]:g}, {RANGES[f.head.activation][1]:g}], so it "
        "can never reach them",
        lambda f: "a linear head (Dense with no activation) for unbounded targets, or scale "
        f"the targets into the {f.head.activation}'s range",
        "the activation: `linear`",
        (_E("sigmoid", 1, "mean_squared_error", (50.0, 499.5)),),
        (_E("linear", 1, "mean_squared_error", (50.0, 499.5)),),
        repair=lambda f: _unless_far(f, _regression(f)),
        severity=Severity.WARN,  # a linear head on targets this far out trains no better
    ),
)
# fmt: on


PIXEL_SCALES = (255.0, 256.0, 65535.0)  # what images are divided by (8-bit, 16-bit)


def _divided(y: LabelSummary) -> tuple[str, str] | None:
    """Class ids (or one-hot rows) divided by a pixel scale with the images: fractions that
    are each a whole number over 255 (`y_train = y_train / 255`). The message and hint: the
    data is what must change, so no copy of the model can repair it."""
    if y.integers or y.low < 0 or not y.values or len(y.values) > MAX_CLASSES:
        return None
    values = np.array(sorted(y.values))
    for scale in PIXEL_SCALES:
        ids = values * scale
        whole = np.allclose(ids, np.rint(ids), atol=1e-3 * scale / 255)
        if whole and np.rint(ids).max() <= min(scale, MAX_CLASSES):
            low, high = int(np.rint(ids.min())), int(np.rint(ids.max()))
            return (
                f"each label is a whole number over {scale:g} (class ids {low} to {high} divided "
                f"by {scale:g}, as the pixels are)",
                f"divide only the inputs by {scale:g} and pass the class ids as they were (or "
                f"np.rint(y * {scale:g}).astype(int)); the labels are data, so fix writes no "
                "copy of the model: no change to the model makes these labels class ids",
            )
    return None


def _shape(shape: tuple[int, ...]) -> str:
    """A shape as Python writes it; an unknown dim (-1) as "?"."""
    dims = ["?" if d < 0 else str(d) for d in shape]
    return "(" + ", ".join(dims) + ("," if len(shape) == 1 else "") + ")"


def label_repair(
    head: Head, spec: tuple[str, bool] | None, y: LabelSummary | None
) -> Change | None:
    """The repair of a head whose labels do not fit it or its loss: the change of the label
    rule that names it (None when none does, or the labels themselves must change)."""
    if y is None or not y.count:
        return None
    facts = HeadFacts(head, *loss_of(spec), y)
    rule = _first(facts)
    return rule.repair(facts) if rule is not None else None


def _head(act: str, why: str, units: int | None = None, loss: str | None = None) -> Change:
    """The head's activation becomes `act` (its units `units`, its loss `loss`, when given)."""
    return Change("activation", why, activation=act, loss=loss, units=units)


def ids_beyond_count(y: LabelSummary) -> str | None:
    """Why class ids that run far beyond their count are a data problem (a corrupt value, ids
    never renumbered), not a head to widen to them: more than MAX_CLASSES classes, and more
    than FAR_BEYOND times the labels read. None when the ids may be classes."""
    classes = int(y.high) + 1
    if classes <= MAX_CLASSES or classes <= FAR_BEYOND * y.count:
        return None
    distinct = f" ({y.classes} distinct)" if y.classes is not None else ""
    return (
        f"class ids run to {int(y.high):,} in {y.count:,} labels{distinct}: a head of "
        f"{classes:,} units is not what these labels justify, the ids are a data problem "
        "(a corrupt value, or ids never renumbered); no head is widened for them"
    )


IDS_HINT = (
    "renumber the classes 0 to K-1 (np.unique(y, return_inverse=True)), or find the label "
    "that holds the stray id"
)


def _widen(loss: str, y: LabelSummary) -> Change:
    """One unit for label rows of several columns: a unit per column, with the activation and
    loss of what the rows hold (one-hot: a softmax, 0/1: sigmoids, else a linear head); a
    loss that already reads them is kept."""
    width = y.width
    if y.one_hot:
        act, fits, name = "softmax", loss.startswith("categorical_"), "categorical_crossentropy"
        held = "one-hot rows"
    elif y.low >= 0 and y.high <= 1:
        act, fits, name = "sigmoid", "binary" in loss, "binary_crossentropy"
        held = "rows of 0/1 answers"
    else:
        act, fits = "linear", "crossentropy" not in loss.replace("_", "")
        name, held = "mean_squared_error", "rows of numbers"
    why = (f"the head changes: the labels are {held} of width {width}, so the head needs "
           f"{width} {act} units" + ("" if fits else f" and {name}"))  # fmt: skip
    return _head(act, why, units=width, loss=None if fits else name)


def head_activation(head: Head) -> str:
    """What the head applies last: from the file, else what its values showed on the probe."""
    return head.activation if head.known or not head.observed else head.observed
