"""Build the probe batch: from a `.npy` / `.npz` file, or random from the model's input spec;
and which array of an `.npz` feeds which input, for `--input` and `--data` alike: one per input
name, or, for a model with one input, `x` with the labels as `y` (the `model.fit(x, y)`
convention); labels are `y` (one output) or `y:NAME` (one per output) either way."""

from __future__ import annotations

import math
import os
from collections.abc import Collection, Sequence
from dataclasses import dataclass

import numpy as np

from layergrad.core.errors import InputError, UsageError
from layergrad.core.limits import human
from layergrad.core.tf_types import KerasModel
from layergrad.data.input_kinds import (
    SIMPLE,
    InputDraw,
    TextDraw,
    draw_text,
    drawn,
    id_inputs,
    model_inputs,
    table_inputs,
    text_bytes,
)
from layergrad.data.value_checks import (
    InputSpec,
    check_fits,
    dtype_kind,
    fit_array,
    same_rows,
    text_budget,
    tf_dtype,
)
from layergrad.files.array_files import read_arrays

UNKNOWN_DIM = 16  # size used for a non-batch dimension the model leaves open (None)
DEFAULT_INT_HIGH = 10  # integer inputs that feed no layer with a known vocabulary size


@dataclass(frozen=True)
class ProbeBatch:
    """The arrays fed to the model, in the model's input order, and where they came from."""

    arrays: tuple[np.ndarray, ...]
    names: tuple[str, ...]
    source: str  # "random" or the input file path
    seed: int | None
    # labels from an .npz: `y` (one output) or `y:NAME` per output; None when not given
    labels: dict[str, np.ndarray] | None = None
    drawn: str | None = None  # how random inputs follow the model's preprocessing, if they do

    @property
    def batch_size(self) -> int:
        return int(self.arrays[0].shape[0]) if self.arrays and self.arrays[0].ndim else 1


def input_specs(model: KerasModel) -> tuple[InputSpec, ...]:
    """Read the model's input specs; raises InputError when the model does not declare them."""
    tensors = model_inputs(model)
    if not tensors:
        raise InputError(
            f"model {model.name!r} ({type(model).__name__}) does not declare its inputs, so a "
            "random probe batch cannot be made; pass one with --input FILE.npy"
        )
    ids, tables = id_inputs(model), table_inputs(model)
    return tuple(
        InputSpec(
            name=t.name,
            shape=tuple(t.shape[1:]),
            dtype="int32" if t.name in ids else str(t.dtype),
            ids=ids.get(t.name),
            table=tables.get(t.name),
        )
        for t in tensors
    )


def built_input_specs(model: KerasModel) -> tuple[InputSpec, ...] | None:
    """The input of a model that declares none (a subclassed model) from the shape it was
    built with (`build_config.input_shape` in its file); None when that is not one shape."""
    try:
        shape = (model.get_build_config() or {}).get("input_shape")
    except (AttributeError, TypeError, ValueError):
        return None
    sizes = list(shape) if isinstance(shape, (list, tuple)) else []
    if len(sizes) < 2 or not all(d is None or (type(d) is int and d > 0) for d in sizes):
        return None
    dtype = str(getattr(model, "compute_dtype", None) or "float32")
    if np.dtype(tf_dtype(dtype)).kind != "f":
        dtype = "float32"
    return (InputSpec("input", tuple(sizes[1:]), dtype),)


def random_batch(
    specs: Sequence[InputSpec],
    batch_size: int,
    seed: int,
    int_high: dict[str, int],
    *,
    max_bytes: int | None = None,
    draws: dict[str, InputDraw] | None = None,
    texts: dict[str, TextDraw] | None = None,
) -> ProbeBatch:
    """Random inputs: float standard normal, integer (and ids in a float input) uniform in
    [0, int_high[name]), bool 0/1, strings drawn as `texts` says (`input_kinds.text_draws`).

    A float input named in `draws` (see `preprocessing_draws`) is drawn from the range the
    model's own preprocessing expects instead; an integer (or id) input read by an
    `IntegerLookup` from the ids of its vocabulary.

    Raises InputError, before allocating, when the batch (drawn in float64) would take more
    than ``max_bytes``.
    """
    if batch_size < 1:
        raise UsageError(f"--batch-size must be at least 1: batch_size={batch_size}")
    texts = {s.name: (texts or {}).get(s.name) or SIMPLE for s in specs if s.dtype == "string"}
    shapes = [(batch_size, *(UNKNOWN_DIM if d is None else d for d in s.shape)) for s in specs]
    need = sum(
        text_bytes(shape, texts[s.name]) if s.name in texts else math.prod(shape) * 8
        for s, shape in zip(specs, shapes, strict=True)
    )
    if max_bytes is not None and need > max_bytes:
        raise InputError(
            f"a random batch of {batch_size} rows for inputs "
            f"{', '.join(f'{s.name} {shape[1:]}' for s, shape in zip(specs, shapes, strict=True))}"
            f" would take {human(need)}, more than the {human(max_bytes)} budget; pass a smaller "
            "--batch-size or raise --max-memory"
        )
    rng = np.random.default_rng(seed)
    arrays, used = [], []  # used: how the inputs not drawn as plain numbers were drawn
    for spec, shape in zip(specs, shapes, strict=True):
        kind = dtype_kind(spec.dtype)
        draw = (draws or {}).get(spec.name)
        if spec.name in texts:
            arrays.append(draw_text(rng, shape, texts[spec.name]))
            used.append(f"{spec.name}: {texts[spec.name].why}")
            continue
        if draw is not None and (kind == "f" or (kind in "iu" and draw.kind == "choice")):
            array = drawn(rng, shape, draw)  # the model's preprocessing, a lookup's vocabulary
            used.append(draw.describe(spec.name))
        elif kind == "f":
            array = rng.standard_normal(shape)
        elif kind in "biu":
            high = 2 if kind == "b" else int_high.get(spec.name, DEFAULT_INT_HIGH)
            array = rng.integers(0, high, shape)
            if spec.ids:
                used.append(f"{spec.name}: ids 0-{high - 1} ({spec.ids} takes ids)")
        else:
            raise InputError(
                f"input {spec.name!r} has dtype {spec.dtype}, which a random probe cannot make; "
                "pass the probe batch with --input FILE.npy"
            )
        arrays.append(array.astype(tf_dtype(spec.dtype)))
    names = tuple(s.name for s in specs)
    return ProbeBatch(tuple(arrays), names, "random", seed, drawn="; ".join(used) or None)


def load_batch(path: str | os.PathLike[str], specs: Sequence[InputSpec] | None) -> ProbeBatch:
    """Read `--input`: a `.npy` (single-input models) or `.npz` keyed by input name (`x` for
    a model with one input; see `input_keys`).

    With `specs=None` (a model that does not declare its inputs) the arrays are used as they
    are: the `.npy` array, or the `.npz` arrays in the order they were saved. The file is read
    within what it holds (`array_files`); an empty batch or values that do not fit the
    input's dtype are refused.
    """
    text = os.fspath(path)
    peek_rows(text)  # before a wide text array is read
    headers, arrays = read_arrays(text)
    names = [h.name for h in headers]
    by_name = dict(zip(names, arrays, strict=True))
    labels = {k: a for k, a in by_name.items() if k is not None and is_label(k)}
    if specs is None:  # the inputs are the arrays but the labels (`y`, `y:NAME`)
        # a list: an unnamed array and one saved as `input` are two inputs, both named so
        kept = [(n or "input", a) for n, a in zip(names, arrays, strict=True) if n not in labels]
        if not kept:
            raise InputError(
                f"--input {text} holds only labels ({', '.join(labels)}); save the inputs "
                "beside them (`x`)"
            )
        keys = tuple(n for n, _ in kept)
        return ProbeBatch(tuple(a for _, a in kept), keys, text, None, labels or None)
    where, inputs = f"--input {text}", [s.name for s in specs]
    chosen = [by_name[k] for k in array_keys(names, inputs, where)]
    checked = tuple(fit_array(a, s, where) for a, s in zip(chosen, specs, strict=True))
    same_rows(where, inputs, [len(a) for a in checked])
    return ProbeBatch(checked, tuple(inputs), text, None, labels or None)


def peek_rows(path: str | os.PathLike[str], specs: Sequence[InputSpec] | None = None) -> int:
    """Rows of the `--input` batch, from the headers alone (the file is checked, not read);
    with the model's inputs `specs`, each input's array checked against its input.

    Raises InputError for everything the headers show: a missing, special, damaged or
    forged file, an object array, an empty batch, text over what a batch may take, an array
    missing or of the wrong shape or dtype.
    """
    text = os.fspath(path)
    headers, _ = read_arrays(text, data=False)
    for h in headers:
        label = f"array {h.name!r}" if h.name is not None else "its array"
        if not h.shape or h.shape[0] == 0:
            what = "a batch of 0 rows" if h.shape else "one value, with no batch axis"
            raise InputError(
                f"--input {text}: {label} has shape {h.shape}, {what}; "
                "expected at least one row (the first axis is the batch)"
            )
        if h.dtype.kind in "US":
            label = label if h.name is not None else "its text"
            text_budget(f"--input {text}: {label}", h.nbytes, h.shape[0], h.dtype,
                        "save {} rows or fewer")  # fmt: skip
    if specs is not None:
        by_name, where = {h.name: h for h in headers}, f"--input {text}"
        for spec, key in zip(specs, array_keys(list(by_name), [s.name for s in specs], where),
                             strict=True):  # fmt: skip
            check_fits(by_name[key].shape, by_name[key].dtype, spec, where)
    return max(h.shape[0] for h in headers)


FIT_INPUT = "x"  # the single input's array under the model.fit(x, y) convention


def input_keys(names: Collection[str], inputs: Sequence[str], where: str) -> dict[str, str]:
    """Input name -> the `.npz` key holding its array, among the file's arrays `names`;
    InputError naming both sides (`where` names the file) when an input has none.

    Example:
        >>> input_keys(["x", "y"], ["input_layer"], "--data d.npz")
        {'input_layer': 'x'}
    """
    if all(name in names for name in inputs):
        return {name: name for name in inputs}
    if len(inputs) == 1 and FIT_INPUT in names:
        return {inputs[0]: FIT_INPUT}
    missing = [name for name in inputs if name not in names]
    single = f" (or as `{FIT_INPUT}`, with the labels as `y`)" if len(inputs) == 1 else ""
    raise InputError(
        f"{where} has arrays {sorted(names)} but the model's inputs are {list(inputs)}; "
        f"missing: {', '.join(missing)}. Save one array per input name{single} with "
        "np.savez(FILE, **{name: array})."
    )


def is_label(name: str) -> bool:
    """Whether an `.npz` key holds labels: `y`, or `y:NAME` for the output NAME."""
    return name == "y" or name.startswith("y:")


def array_keys(names: Sequence[str | None], inputs: Sequence[str], where: str) -> list[str | None]:
    """The key of each input's array among a file's arrays `names` (`[None]`: a `.npy`, whose
    one array feeds a model with one input)."""
    if list(names) == [None]:
        if len(inputs) != 1:
            raise InputError(
                f"{where} holds one array but the model has {len(inputs)} inputs "
                f"({', '.join(inputs)}); save them with np.savez(FILE, **{{name: array}}) and "
                "pass the .npz."
            )
        return [None]
    keys = input_keys([n for n in names if n is not None], inputs, where)
    return [keys[n] for n in inputs]
