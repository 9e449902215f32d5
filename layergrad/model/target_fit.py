"""Can the output produce the labels? Labels given with the data against each output's
activation and compiled loss (the `target_mismatch` finding). NumPy only, no TensorFlow.

The most common bug a built model hides is an output that cannot produce its targets: a
sigmoid trained on targets outside (0, 1), several classes fed into one unit, class ids with
a one-hot loss, one-hot rows with the sparse loss, class ids beyond the number of units.
`LabelSummary` holds what the labels are, accumulated batch by batch over a data set.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial

import numpy as np

from layergrad.core.results import Reason
from layergrad.core.vocab import Finding
from layergrad.model.head_forms import Head

MAX_CLASSES = 1024  # distinct integer values remembered; more is a regression target
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


@dataclass
class LabelSummary:
    """What the labels of one output hold: range, width, integers, one-hot rows, classes."""

    count: int = 0
    low: float = np.inf
    high: float = -np.inf
    width: int = 1  # the last axis of one sample's label (1 for a scalar label)
    integers: bool = True  # every value is a whole number
    one_hot: bool = True  # every row is 0/1 with exactly one 1 (and width > 1)
    finite: bool = True
    values: set[float] = field(default_factory=set)  # distinct values, up to MAX_CLASSES + 1
    nonfinite: int = 0  # NaN/Inf label values
    text: str = ""  # the dtype of labels that are not numbers (strings, objects)
    shape: tuple[int, ...] = ()  # one sample's label shape (the last batch's)
    output_rank: int | None = None  # the output's rank without the batch axis, when known

    def add(self, labels: np.ndarray, output_rank: int | None = None) -> None:
        """Take in one batch of labels (batch axis first)."""
        y = np.asarray(labels)
        self.output_rank = output_rank if output_rank is not None else self.output_rank
        if y.size and y.dtype.kind not in "biuf":
            self.text = self.text or str(y.dtype)
            self.count += int(y.shape[0]) if y.ndim else 1
            return
        if y.size == 0:
            return
        y = y.astype(np.float64)
        sample = y.shape[1:]
        self.shape = tuple(int(d) for d in sample)
        rank = output_rank if output_rank is not None else len(sample)
        self.width = int(sample[-1]) if sample and len(sample) >= rank and rank else 1
        finite = y[np.isfinite(y)]
        self.finite &= finite.size == y.size
        self.nonfinite += int(y.size - finite.size)
        self.count += int(y.shape[0])
        if not finite.size:
            return
        self.low = min(self.low, float(finite.min()))
        self.high = max(self.high, float(finite.max()))
        self.integers &= bool(np.all(finite == np.round(finite)))
        rows = y.reshape(-1, self.width) if self.width > 1 else None
        self.one_hot &= bool(
            rows is not None and np.all((rows == 0) | (rows == 1)) and np.all(rows.sum(axis=1) == 1)
        )
        if len(self.values) <= MAX_CLASSES:
            self.values.update(np.unique(finite)[: MAX_CLASSES + 1].tolist())

    @property
    def classes(self) -> int | None:
        """Distinct class ids of integer labels (the width of one-hot rows); None otherwise."""
        if self.one_hot:
            return self.width
        if self.integers and len(self.values) <= MAX_CLASSES:
            return len(self.values)
        return None

    def describe(self) -> str:
        """What the labels hold, in words."""
        if not self.count:
            return "no labels"
        if self.text:
            return f"not numbers (dtype {self.text})"
        if self.one_hot:
            return f"one-hot rows of width {self.width}"
        span = f"{_num(self.low)} to {_num(self.high)}"
        if self.integers and self.classes is not None and self.width == 1:
            return f"integer class ids {span} ({self.classes} distinct)"
        kind = "integer" if self.integers else "real"
        width = f", width {self.width}" if self.width > 1 else ""
        bad = f", {self.nonfinite:,} NaN/Inf" if self.nonfinite else ""
        return f"{kind} values {span}{width}{bad}"


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
        if summary is None or not summary.count:
            continue
        judge = _unusable if head.name in custom else partial(_judge, spec=spec)
        problem = judge(head, y=summary)
        if problem is not None:
            found.append(problem)
    return found


def _judge(head: Head, spec: tuple[str, bool] | None, y: LabelSummary) -> Reason | None:
    loss, from_logits = spec if spec is not None else ("no loss", False)
    act, units = head.activation, head.units
    sparse = loss.startswith("sparse_categorical")
    one_hot_loss = loss.startswith("categorical_") and "hinge" not in loss
    binary = loss.startswith("binary")
    held = y.describe()

    def say(message: str, hint: str) -> Reason:
        where = f"output '{head.name}' ({_units(units)}{act}, layer '{head.layer}') with {loss}"
        return Reason(Finding.TARGET_MISMATCH, f"{where}: the labels are {held}: {message}",
                      hint, head.layer, head.name, loss)  # fmt: skip

    ids = y.integers and y.width == 1 and y.low >= 0
    problem = _rank(say, head, y, sparse) if spec is not None else None
    if problem is not None:
        return problem
    if sparse and y.one_hot and y.finite:
        return say(
            "sparse categorical cross-entropy reads one class id per sample, not one-hot rows",
            "categorical_crossentropy for one-hot labels, or pass the class ids "
            "(np.argmax(y, axis=-1)) with the sparse loss",
        )
    problem = _values(say, y, sparse, units)
    if problem is not None:
        return problem
    if one_hot_loss and ids and (units or 0) > 1:
        return say(
            f"{loss} compares one-hot rows with the {units} outputs, but the labels are class ids",
            "sparse_categorical_crossentropy for class ids, or one-hot labels "
            "(keras.utils.to_categorical(y, num_classes))",
        )
    if sparse and y.integers and units and (y.high >= units or y.low < 0):
        wider = (
            f"Dense({int(y.high) + 1}) on the head (one unit per class), or "
            if (y.low >= 0 and y.high < MAX_CLASSES)
            else ""
        )
        return say(
            f"class ids must lie in 0 to {units - 1} for {units} units",
            f"{wider}relabel the classes 0 to {units - 1}",
        )
    if not sparse and units and units > 1 and y.width == 1 and spec is not None:
        return say(
            f"one label per sample, but the output has {units} units: each unit is trained "
            "against the same label (the loss broadcasts it)",
            "Dense(1, activation='sigmoid') for one yes/no label, Dense(1) for one number, or "
            f"Dense({units}, activation='softmax') with sparse_categorical_crossentropy for "
            "class ids",
        )
    if not sparse and units and y.width > 1 and y.width != units:
        return say(
            f"each sample's labels have width {y.width}, but the output has {units} units",
            f"Dense({y.width}) on the head, one unit per label column",
        )
    several = y.classes is not None and y.classes > 2 and y.width == 1 and y.integers
    if units == 1 and several and (act in ("sigmoid", "softmax") or binary):
        return say(
            f"{y.classes} classes cannot be told apart by one {act} unit",
            f"Dense({y.classes}, activation='softmax') with sparse_categorical_crossentropy",
        )
    if binary and not from_logits and (y.low < 0 or y.high > 1):
        return say(
            "binary cross-entropy needs targets in [0, 1]",
            "scale the targets to [0, 1], or a regression loss (mse) with a linear head",
        )
    bounds = RANGES.get(act)
    if (
        bounds is not None
        and not sparse
        and not from_logits
        and (y.low < bounds[0] or y.high > bounds[1])
    ):
        low, high = bounds
        return say(
            f"a {act} output lies in [{_num(low)}, {_num(high)}], so it can never reach them",
            "a linear head (Dense with no activation) for unbounded targets, or scale the "
            f"targets into the {act}'s range",
        )
    return None


def _rank(
    say: Callable[[str, str], Reason], head: Head, y: LabelSummary, sparse: bool
) -> Reason | None:
    """Labels of another rank than the loss reads from the output: one-hot rows with an axis
    too many (`(1, 4)` per sample for a `(4,)` output), or one label per sample for an output
    that keeps axes (a Dense on a feature map, with no Flatten before it). The loss would
    raise on them, or broadcast them into a loss of another shape; what `_values` judges
    (a sparse loss's labels with axes too many) is left to it."""
    if not rank_differs(head, y, sparse):
        return None
    rank = y.output_rank or 1
    dims = (*(-1 for _ in range(rank - 1)), head.units or -1)  # "?": not known from the file
    out = _shape(dims)
    reads = f"shape {_shape(dims[:-1])} (a class id per position)" if sparse else (
        "the output's shape")  # fmt: skip
    axes = f"{rank} ax{'is' if rank == 1 else 'es'}"
    said = (f"each sample's labels have shape {_shape(y.shape)}, but the output gives "
            f"{out} per sample ({axes}), and the loss reads labels of {reads}")  # fmt: skip
    if missing_flatten(head, y, sparse):
        return say(
            f"{said}: the head '{head.layer}' is a Dense applied at every position of a "
            f"{rank + 1}-D input (batch axis included), since no Flatten comes before it",
            f"Flatten() (or GlobalAveragePooling{rank - 1}D()) before '{head.layer}', so it "
            "gives one prediction per sample",
        )
    size = int(np.prod(y.shape)) if y.shape else 1
    reshape = (
        f"y.reshape(len(y), {head.units}) gives each sample the output's shape"
        if rank == 1 and head.units and size == head.units
        else f"give each sample labels of the output's shape {out}"
    )
    return say(said, f"{reshape}; the labels are data, so a copy of the model cannot change them")


def rank_differs(head: Head, y: LabelSummary, sparse: bool) -> bool:
    """Whether each sample's labels have another rank than the loss reads from the output
    (see `_rank`)."""
    rank = y.output_rank
    if rank is None or rank < 1 or y.text or not y.count:
        return False
    got, wanted = len(y.shape), rank - 1 if sparse else rank
    if got == wanted or (got == wanted + 1 and y.shape[-1:] == (1,)) or (sparse and got > wanted):
        return False
    # one label per sample for one unit, or for a row of units (the width rules' case)
    return sparse or not (got == rank - 1 and (rank == 1 or head.units == 1))


def missing_flatten(head: Head, y: LabelSummary, sparse: bool) -> bool:
    """Whether the head is a Dense on a feature map (its output keeps axes) while the labels
    are what a flat head takes: one class id (sparse loss) or one row of its units."""
    rank = y.output_rank or 1
    one = len(y.shape) == 0 or y.shape == (1,)  # one number (or class id) per sample
    flat = one if sparse else y.shape == (head.units,) or (one and head.units == 1)
    return flat and rank > 1 and head.layer_class == "Dense"


def _unusable(head: Head, y: LabelSummary) -> Reason | None:
    """Labels no loss can train on, for an output whose loss is a custom one."""

    def say(message: str, hint: str) -> Reason:
        where = f"output '{head.name}' (layer '{head.layer}') with a custom loss"
        return Reason(Finding.TARGET_MISMATCH, f"{where}: the labels are {y.describe()}: "
                      f"{message}", hint, head.layer, head.name, "custom")  # fmt: skip

    return _values(say, y, False, head.units)


def _values(
    say: Callable[[str, str], Reason], y: LabelSummary, sparse: bool, units: int | None
) -> Reason | None:
    """Labels no loss can train on (not numbers, NaN/Inf), and what a sparse loss cannot
    read as class ids (a rank beyond the output's, fractions, negative ids; ids beyond the
    units are `_judge`'s)."""
    if y.text:
        return say(
            "a loss needs numbers",
            "map the labels to class ids first, e.g. "
            "`classes, y = np.unique(labels, return_inverse=True)`",
        )
    if not y.finite:
        return say(
            f"{y.nonfinite:,} label value{'s' if y.nonfinite != 1 else ''} NaN or Inf, and one "
            "makes the loss NaN",
            "drop or fill the samples whose labels are NaN/Inf",
        )
    if not sparse:
        return None
    rank = y.output_rank
    trailing_one = rank is not None and len(y.shape) == rank and y.shape[-1:] == (1,)
    if rank is not None and rank >= 1 and len(y.shape) > rank - 1 and not trailing_one:
        return say(
            f"sparse categorical cross-entropy reads one class id per sample (labels of "
            f"shape {_shape(y.shape[: rank - 1])} per sample), but each sample's labels "
            f"have shape {_shape(y.shape)}",
            "one class id per sample (np.argmax(y, axis=-1) of one-hot rows), or "
            "categorical_crossentropy for rows",
        )
    scaled = _divided(y)
    if scaled:
        return say(*scaled)
    if not y.integers:
        return say(
            "class ids must be whole numbers (a fraction would be cut to the id below it)",
            "pass integer class ids, or a regression loss (mse) for real-valued targets",
        )
    if y.low < 0:
        return say("class ids must be 0 or more", "relabel the classes from 0")
    return None


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


def _units(units: int | None) -> str:
    return f"{units} unit{'s' if units != 1 else ''}, " if units else ""


def _num(value: float) -> str:
    if value in (np.inf, -np.inf):
        return "inf" if value > 0 else "-inf"
    return f"{value:g}"
