"""The repairs of `target_mismatch`: the head and its loss for what the labels hold.

With `--data` the labels are summarised (`target_fit.LabelSummary`: their form, range and
width). A head is repaired only when a label rule of `target_fit.RULES` names it and a copy of
the model can repair it (not when the labels themselves must change); the repair changes the
loss for the label form (one-hot rows: categorical; class ids: sparse), the head's units for
the class ids or the columns, the head for a regression, or the activation for targets beyond
its range. No TensorFlow.
"""

from __future__ import annotations

from layergrad.core.results import ConfigChange as Change
from layergrad.model.head_forms import Head
from layergrad.model.head_rules import CHANGES_LOSS
from layergrad.model.target_fit import (
    BY_NAME,
    MAX_CLASSES,
    LabelSummary,
    TargetFacts,
    judge,
    missing_flatten,
    rank_differs,
)

FAR_BEYOND = 100  # class ids past this many times the labels read are not classes


def target_plan(head: Head, spec: tuple[str, bool] | None, y: LabelSummary | None) -> Change | None:
    """The repair of a head whose labels do not fit it or its loss; None when none fits."""
    if y is None or not y.count:
        return None
    found = judge(TargetFacts(head, y, spec))
    if found is None or not BY_NAME[found.rule].repairs:
        return None  # labels that fit the head (by check's rules), or only new labels repair
    loss = spec[0] if spec else ""
    act, units = head_activation(head), head.units or 0
    sparse = loss.startswith("sparse_categorical")
    one_hot_loss = loss.startswith("categorical_")
    ids = y.integers and y.width == 1 and y.low >= 0
    if missing_flatten(head, y, sparse):
        return Change("flatten", "a Flatten goes before the head: a Dense on a feature map "
                      "gives a prediction per position, the labels one per sample")  # fmt: skip
    if rank_differs(head, y, sparse):
        return None  # labels of another rank: the data must change (check's hint says how)
    if units == 1 and y.width > 1:
        return _widen(loss, y)
    if sparse and y.one_hot:
        return Change("loss", f"{CHANGES_LOSS}: the labels are one-hot rows, which "
                      "categorical_crossentropy reads",
                      loss="categorical_crossentropy")  # fmt: skip
    if one_hot_loss and ids and units > 1:
        return Change("loss", f"{CHANGES_LOSS}: the labels are class ids, which the sparse "
                      "loss reads", loss="sparse_categorical_crossentropy")  # fmt: skip
    classes = int(y.high) + 1 if ids else 0
    if units == 1 and ids and classes == 2 and (sparse or one_hot_loss):
        return _head("sigmoid", "the head and loss change: the labels are 0 and 1, one yes/no "
                     "answer per sample: one sigmoid unit with binary_crossentropy",
                     loss="binary_crossentropy")  # fmt: skip
    if ids and classes > max(units, 2) and ids_beyond_count(y) is not None:
        return None  # a data problem, said as such (`rules`): no head is widened to it
    if sparse and ids and units and classes > units:
        logits = act == "linear" and bool(spec and spec[1])  # the loss applies the softmax
        return _head("linear" if logits else "softmax", f"the head's units change: class ids "
                     f"run to {int(y.high)}, so the head needs {classes} units",
                     units=classes)  # fmt: skip
    if units <= 1 and ids and classes > 2 and y.classes is not None and y.classes > 2:
        return _head("softmax", f"the head changes: {classes} classes need {classes} softmax "
                     "units and the sparse loss", units=classes,
                     loss="sparse_categorical_crossentropy")  # fmt: skip
    if units > 1 and y.width > 1 and y.width != units:
        return _head(act, f"the head's units change: each label row has {y.width} columns",
                     units=y.width)  # fmt: skip
    if units > 1 and y.width == 1 and not sparse:
        if ids and classes > 2:
            return _head("softmax", "the head and loss change: the labels are class ids",
                         loss="sparse_categorical_crossentropy")  # fmt: skip
        if ids:
            return _head("sigmoid", "the head changes: one yes/no label per sample needs one "
                         "sigmoid unit", units=1, loss="binary_crossentropy")  # fmt: skip
        return _head("linear", "the head changes: one number per sample needs one linear unit",
                     units=1)  # fmt: skip
    if "binary" in loss and (y.low < 0 or y.high > 1):
        return _head("linear", "the head and loss change: the targets lie outside [0, 1], a "
                     "regression: a linear head with mean_squared_error",
                     loss="mean_squared_error")  # fmt: skip
    bounded = {"sigmoid": (0, 1), "softmax": (0, 1), "tanh": (-1, 1), "relu": (0, None)}
    bounds = bounded.get(act)
    if bounds is not None and not sparse:
        low, high = bounds
        if y.low < low or (high is not None and y.high > high):
            return _head("linear", f"the activation changes: the targets run from {y.low:g} to "
                         f"{y.high:g}, beyond what a {act} can output; a linear head can reach "
                         "them")  # fmt: skip
    return None


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
    observed = getattr(head, "observed", None)
    return head.activation if head.known or not observed else str(observed)
