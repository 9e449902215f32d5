"""Where the inputs, and the labels, are inside one element of a data function's batches.

An element is what the user's dataset or iterable yields: one array (a single input), a list
of arrays in input order, a dict keyed by input name, or `(x, y)` with x any of those, as
`model.fit` takes them. The same rules read a Python element and a `tf.data` element spec.
The labels are `y` of `(x, y)` (or of a dict element, under the key `y`): one array for a
model with one output, else a dict keyed by output name or a tuple in output order.
`(x, y, sample_weight)` is read as `(x, y)` where only the labels' values matter (`check`),
and refused where they make a gradient (`fit`, the weight scan: every sample weighs the same).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from layergrad.core.errors import InputError
from layergrad.core.tf_types import TensorTree

Path = tuple[int | str, ...]  # the keys and indices that lead to one array of an element


def locate_inputs(element: TensorTree, names: list[str], where: str) -> list[Path]:
    """Where each model input is inside one element: a dict by input name, `(x, y)` with x
    an array / list / dict, a list of arrays in input order, or one array."""
    if isinstance(element, dict):
        return _by_name(element, names, (), where)
    if isinstance(element, (tuple, list)):
        if not element:
            raise InputError(f"{where} is an empty {type(element).__name__}, not a batch")
        first = element[0]
        if isinstance(first, dict):
            return _by_name(first, names, (0,), where)
        if isinstance(first, (tuple, list)) and len(first) == len(names):
            return [(0, i) for i in range(len(names))]
        if len(names) == 1:
            return [(0,)]
        if len(element) == len(names):
            return [(i,) for i in range(len(names))]
        raise InputError(
            f"{where} holds {len(element)} values but the model has {len(names)} inputs "
            f"({', '.join(names)}); give one array per input, in that order, or a dict keyed "
            "by input name"
        )
    if len(names) == 1:
        return [()]
    raise InputError(
        f"{where} is one {type(element).__name__} but the model has {len(names)} inputs "
        f"({', '.join(names)}); give a dict keyed by input name or a tuple of arrays in that order"
    )


def locate_labels(
    element: TensorTree,
    inputs: Sequence[Path],
    outputs: Sequence[str],
    where: str,
    weights_ignored: bool = False,
) -> list[Path] | None:
    """Where each output's labels are inside one element whose inputs are at `inputs`; None
    when the element holds no labels (x alone, or a tuple of inputs). `weights_ignored`
    reads `(x, y, sample_weight)` as `(x, y)`.

    Raises:
        InputError: `(x, y, sample_weight)` (without `weights_ignored`), more values, or
            labels that do not match the outputs.
    """
    if isinstance(element, dict):
        if "y" not in element:
            return None
        base: Path = ("y",)
    elif (
        isinstance(element, (tuple, list))
        and len(element) >= 2
        and all(p and p[0] == 0 for p in inputs)
    ):
        if len(element) > 3 or (len(element) == 3 and not weights_ignored):
            shown = "(x, y, sample_weight)" if len(element) == 3 else f"{len(element)} values"
            raise InputError(
                f"{where} is {shown}; layergrad weighs every sample alike, so it reads (x, y): "
                "yield (x, y), e.g. dataset.map(lambda x, y, w: (x, y))"
            )
        base = (1,)
    else:
        return None
    y = pick(element, base)
    names = list(outputs)
    if len(names) <= 1:
        if not isinstance(y, dict):
            return [base]
        if names and list(y) == names:
            return [(*base, names[0])]
        raise InputError(
            f"{where}: the labels are a dict keyed {sorted(map(str, y))}, but the model has "
            f"one output{f' ({names[0]})' if names else ''}; give y as one array"
        )
    if isinstance(y, dict):
        return _by_name(y, names, base, f"{where}: the labels dict", "outputs")
    if isinstance(y, (tuple, list)) and len(y) == len(names):
        return [(*base, i) for i in range(len(names))]
    raise InputError(
        f"{where}: the model has {len(names)} outputs ({', '.join(names)}); give y as a dict "
        "keyed by output name, or a tuple of arrays in output order"
    )


@dataclass(frozen=True)
class LabelColumn:
    """One output's labels in a Python element: where they are, and one sample's label (its
    shape and dtype, as the first element has them)."""

    path: Path
    shape: tuple[int, ...]
    dtype: np.dtype


def label_columns(
    element: TensorTree, paths: Sequence[Path], sample: bool, where: str
) -> list[LabelColumn]:
    """The label columns of a first element (`sample`: it is one sample, no batch axis)."""
    out = []
    for path in paths:
        y = np.asarray(pick(element, path))
        if y.dtype.kind not in "biuf":
            raise InputError(
                f"{where}: the labels are {y.dtype}, not numbers; give class ids, one-hot rows "
                "or values"
            )
        if not sample and y.ndim == 0:
            raise InputError(f"{where}: the labels have no batch axis; give one label per row")
        out.append(LabelColumn(path, tuple(y.shape if sample else y.shape[1:]), y.dtype))
    return out


def read_labels(
    element: TensorTree, columns: Sequence[LabelColumn], rows: int, sample: bool, where: str
) -> tuple[np.ndarray, ...]:
    """The labels of one element, checked against the first element's: `rows` of the same
    shape, of a dtype that casts to the first one's."""
    out = []
    for column in columns:
        try:
            y = np.asarray(pick(element, column.path))
        except (KeyError, IndexError, TypeError):
            raise InputError(
                f"{where} has no labels where the first batch had them; yield every batch as (x, y)"
            ) from None
        y = y[np.newaxis] if sample else y
        if y.ndim == 0 or y.shape[1:] != column.shape or len(y) != rows:
            raise InputError(
                f"{where}: labels of shape {y.shape}, but the inputs have {rows} rows and the "
                f"first batch's labels were {column.shape} per sample"
            )
        if y.dtype != column.dtype:
            if not np.can_cast(y.dtype, column.dtype, "same_kind"):
                raise InputError(
                    f"{where}: labels of dtype {y.dtype}, but the first batch's were "
                    f"{column.dtype}; give every batch labels of one dtype"
                )
            y = y.astype(column.dtype)
        out.append(y)
    return tuple(out)


def _by_name(
    mapping: dict[str, TensorTree],
    names: list[str],
    prefix: Path,
    where: str,
    what: str = "inputs",
) -> list[Path]:
    """The path of each of the model's `what` (its names) in a dict keyed by them."""
    missing = [n for n in names if n not in mapping]
    if missing:
        raise InputError(
            f"{where} has keys {sorted(map(str, mapping))} but the model's {what} are {names}; "
            f"missing: {', '.join(missing)}"
        )
    return [(*prefix, n) for n in names]


def pick(element: TensorTree, path: Path) -> TensorTree:
    """The array at `path` inside `element`."""
    for step in path:
        element = element[step]
    return element
