"""Build the probe batch: from a `.npy` / `.npz` file, or random from the model's input spec."""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import DTypeLike

from layergrad.core.errors import InputError, UsageError
from layergrad.core.limits import human
from layergrad.core.tf_types import KerasLayer, KerasModel
from layergrad.data.input_keys import input_keys, is_label
from layergrad.files.array_files import ArrayHeader, read_arrays, read_headers

UNKNOWN_DIM = 16  # size used for a non-batch dimension the model leaves open (None)
DEFAULT_INT_HIGH = 10  # integer inputs that feed no layer with a known vocabulary size


@dataclass(frozen=True)
class InputSpec:
    """One model input: its name, shape without the batch axis (None = open) and dtype."""

    name: str
    shape: tuple[int | None, ...]
    dtype: str


@dataclass(frozen=True)
class InputDraw:
    """How a random float input is drawn when the model preprocesses its own inputs.

    `kind` "uniform" draws from [a, b); "normal" from mean a, standard deviation b (per
    channel: the last axis). `why` says which layer asked for it.
    """

    kind: str
    a: tuple[float, ...]
    b: tuple[float, ...]
    why: str

    def describe(self, name: str) -> str:
        """`image uniform 0-255 (Rescaling 'rescaling' expects raw pixels)`."""
        if self.kind == "uniform":
            return f"{name} uniform {self.a[0]:g}-{self.b[0]:g} ({self.why})"
        return f"{name} normal around the adapted mean ({self.why})"


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
    try:
        tensors = list(model.inputs)
    except (AttributeError, ValueError):
        tensors = []
    if not tensors:
        raise InputError(
            f"model {model.name!r} ({type(model).__name__}) does not declare its inputs, so a "
            "random probe batch cannot be made; pass one with --input FILE.npy"
        )
    return tuple(
        InputSpec(name=t.name, shape=tuple(t.shape[1:]), dtype=str(t.dtype)) for t in tensors
    )


def _label(name: str | None) -> bool:
    return name is not None and is_label(name)


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
    if np.dtype(_np_dtype(dtype)).kind != "f":
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
) -> ProbeBatch:
    """Random inputs: float standard normal, integer uniform in [0, int_high[name]), bool 0/1.

    A float input named in `draws` (see `preprocessing_draws`) is drawn from the range the
    model's own preprocessing expects instead.

    Raises InputError, before allocating, when the batch (drawn in float64) would take more
    than ``max_bytes``.
    """
    if batch_size < 1:
        raise UsageError(f"--batch-size must be at least 1: batch_size={batch_size}")
    shapes = [(batch_size, *(UNKNOWN_DIM if d is None else d for d in s.shape)) for s in specs]
    need = sum(math.prod(shape) * 8 for shape in shapes)
    if max_bytes is not None and need > max_bytes:
        raise InputError(
            f"a random batch of {batch_size} rows for inputs "
            f"{', '.join(f'{s.name} {shape[1:]}' for s, shape in zip(specs, shapes, strict=True))}"
            f" would take {human(need)}, more than the {human(max_bytes)} budget; pass a smaller "
            "--batch-size or raise --max-memory"
        )
    rng = np.random.default_rng(seed)
    arrays = []
    for spec in specs:
        shape = (batch_size, *(UNKNOWN_DIM if d is None else d for d in spec.shape))
        kind = np.dtype(spec.dtype).kind if spec.dtype != "bfloat16" else "f"
        draw = (draws or {}).get(spec.name)
        if kind == "f" and draw is not None:
            arrays.append(_drawn(rng, shape, draw).astype(_np_dtype(spec.dtype)))
        elif kind == "f":
            arrays.append(rng.standard_normal(shape).astype(_np_dtype(spec.dtype)))
        elif kind == "b":
            arrays.append(rng.integers(0, 2, shape).astype(bool))
        elif kind in "iu":
            high = int_high.get(spec.name, DEFAULT_INT_HIGH)
            arrays.append(rng.integers(0, high, shape).astype(spec.dtype))
        else:
            raise InputError(
                f"input {spec.name!r} has dtype {spec.dtype}, which a random probe cannot make; "
                "pass the probe batch with --input FILE.npy"
            )
    used = [
        draws[s.name].describe(s.name)
        for s in specs
        if draws and s.name in draws and np.dtype(_np_dtype(s.dtype)).kind == "f"
    ]
    return ProbeBatch(
        tuple(arrays),
        tuple(s.name for s in specs),
        "random",
        seed,
        drawn="; ".join(used) or None,
    )


def _drawn(rng: np.random.Generator, shape: tuple[int, ...], draw: InputDraw) -> np.ndarray:
    a, b = np.asarray(draw.a), np.asarray(draw.b)
    if draw.kind == "uniform":
        return a + (b - a) * rng.random(shape)
    return a + b * rng.standard_normal(shape)


PIXELS = 255.0  # a Rescaling that maps [0, 255] onto [0, 1] or [-1, 1] expects raw pixels


def preprocessing_draws(model: KerasModel) -> dict[str, InputDraw]:
    """For each float input whose first layer preprocesses it, the range the model expects.

    `Rescaling(scale, offset)` with 0 < scale < 1 maps raw x to x * scale + offset; the raw
    range is the one mapped onto [offset, 1] (0-255 for `1/255` and for `1/127.5, -1`). An
    adapted `Normalization` expects its own mean and variance. keras.applications models
    that preprocess inside the model start with one of these.
    """
    out: dict[str, InputDraw] = {}
    for input_name, layer in _input_consumers(model):
        kind = type(layer).__name__
        ref = f"{kind} '{layer.name}'"
        if kind == "Rescaling":
            scale, offset = _scalar(layer.scale), _scalar(layer.offset)
            if scale is None or offset is None or not 0 < scale < 1 or offset >= 1:
                continue
            high = (1 - offset) / scale
            high = PIXELS if abs(high - PIXELS) < 1 else high
            out[input_name] = InputDraw(
                "uniform", (0.0,), (float(high),), f"{ref} expects raw values"
            )
        elif kind == "Normalization" and not getattr(layer, "invert", False):
            mean, variance = getattr(layer, "mean", None), getattr(layer, "variance", None)
            if mean is None or variance is None:
                continue
            m = np.asarray(mean, dtype=np.float64).reshape(-1)
            v = np.asarray(variance, dtype=np.float64).reshape(-1)
            if not m.size or (np.all(m == 0) and np.all(v == 1)) or np.any(v < 0):
                continue
            out[input_name] = InputDraw(
                "normal",
                tuple(float(x) for x in m),
                tuple(float(x) for x in np.sqrt(v)),
                f"{ref} is adapted to mean {_short(m)}, std {_short(np.sqrt(v))}",
            )
    return out


def _scalar(value: object) -> float | None:
    array = np.asarray(value, dtype=np.float64).reshape(-1)
    return float(array[0]) if array.size and np.all(array == array[0]) else None


def _short(values: np.ndarray) -> str:
    shown = ", ".join(f"{x:.3g}" for x in values[:3])
    return f"[{shown}{', ...' if values.size > 3 else ''}]" if values.size > 1 else shown


def load_batch(path: str | os.PathLike[str], specs: Sequence[InputSpec] | None) -> ProbeBatch:
    """Read `--input`: a `.npy` (single-input models) or `.npz` keyed by input name (`x` for
    a model with one input; see `data/input_keys.py`).

    With `specs=None` (a model that does not declare its inputs) the arrays are used as they
    are: the `.npy` array, or the `.npz` arrays in the order they were saved. The file is read
    within what it holds (`array_files`); an empty batch or values that do not fit the
    input's dtype are refused.
    """
    text = os.fspath(path)
    headers, arrays = read_arrays(text)
    _require_rows(headers, text)
    names = [h.name for h in headers]
    if specs is None:  # the inputs are the arrays but the labels (`y`, `y:NAME`)
        kept = [(n or "input", a) for n, a in zip(names, arrays, strict=True) if not _label(n)]
        given = {n: a for n, a in zip(names, arrays, strict=True) if n and _label(n)}
        if not kept:
            raise InputError(
                f"--input {text} holds only labels ({', '.join(given)}); save the inputs "
                "beside them (`x`)"
            )
        keys = tuple(n for n, _ in kept)
        return ProbeBatch(tuple(a for _, a in kept), keys, text, None, given or None)
    labels = None
    if names == [None]:
        if len(specs) != 1:
            raise InputError(
                f"--input {text} holds one array but the model has {len(specs)} inputs "
                f"({', '.join(s.name for s in specs)}); save them with "
                "np.savez(FILE, **{name: array}) and pass the .npz."
            )
        chosen = list(arrays)
    else:
        by_name = dict(zip(names, arrays, strict=True))
        where = f"--input {text}"
        fed = input_keys([n for n in names if n is not None], [s.name for s in specs], where)
        chosen = [by_name[fed[s.name]] for s in specs]
        labels = {k: a for k, a in by_name.items() if k is not None and is_label(k)} or None
    checked = tuple(fit_array(a, s, f"--input {text}") for a, s in zip(chosen, specs, strict=True))
    sizes = {a.shape[0] for a in checked}
    if len(sizes) > 1:
        raise InputError(
            f"--input {text}: the arrays have different batch sizes {sorted(sizes)}; give every "
            "input the same number of rows"
        )
    return ProbeBatch(checked, tuple(s.name for s in specs), text, None, labels)


def peek_rows(path: str | os.PathLike[str]) -> int:
    """Rows of the `--input` batch, from the headers alone (the file is checked, not read).

    Raises InputError for everything the headers show: a missing, special, damaged or
    forged file, an object array, an empty batch.
    """
    headers = read_headers(os.fspath(path))
    _require_rows(headers, os.fspath(path))
    return max(h.shape[0] for h in headers)


def _require_rows(headers: Sequence[ArrayHeader], source: str) -> None:
    for header in headers:
        if not header.shape or header.shape[0] == 0:
            label = f"array {header.name!r}" if header.name is not None else "its array"
            raise InputError(
                f"--input {source}: {label} has shape {header.shape}, a batch of 0 rows; "
                "expected at least one row (the first axis is the batch)"
            )


def fit_array(array: np.ndarray, spec: InputSpec, where: str) -> np.ndarray:
    """Check an array against an input spec; cast numbers to the input's dtype when they fit.

    `where` starts the error message and says where the array came from (`--input
    batch.npz`, `--data x.npy: batch 3`).
    """
    check_fits(array.shape, array.dtype, spec, where)
    target = np.dtype(_np_dtype(spec.dtype))
    want, got = target.kind, array.dtype.kind
    if want == "f" and got in "fiu":
        with np.errstate(over="ignore"):
            cast = array.astype(target, copy=False)
        if got == "f" and not np.array_equal(np.isfinite(cast), np.isfinite(array)):
            peak = float(np.max(np.abs(array[np.isfinite(array)])))
            raise InputError(
                f"{where}: values of input {spec.name!r} reach {peak:.3g}, which overflows "
                f"{target} (the model's input dtype) to inf; scale the data or save it as "
                f"{target}"
            )
        return cast
    if want in "iu" and got in "iu":
        bounds = np.iinfo(target)
        low, high = (int(array.min()), int(array.max())) if array.size else (0, 0)
        if low < bounds.min or high > bounds.max:
            raise InputError(
                f"{where}: values of input {spec.name!r} span [{low}, {high}], outside "
                f"{target} [{bounds.min}, {bounds.max}]; save values that fit {target}"
            )
        return array.astype(target, copy=False)
    return array


def check_fits(
    shape: tuple[int | None, ...], dtype: DTypeLike, spec: InputSpec, where: str
) -> None:
    """Raise InputError unless an array of `shape` and `dtype` can feed the input `spec`.

    A None in `shape` (a size not known yet, as in a tf.data element spec) is not checked.
    """
    expected = ("batch", *("any" if d is None else d for d in spec.shape))
    if len(shape) != len(spec.shape) + 1 or any(
        d is not None and got is not None and d != got
        for d, got in zip(spec.shape, shape[1:], strict=True)
    ):
        shown = str(tuple(shape)).replace("None", "?")
        raise InputError(
            f"{where}: array for input {spec.name!r} has shape {shown}, expected "
            f"({', '.join(map(str, expected))}); save an array of that shape (the first axis "
            "is the batch)"
        )
    want = np.dtype(_np_dtype(spec.dtype)).kind
    got = np.dtype(dtype).kind
    if (want == "f" and got in "fiu") or (want in "iu" and got in "iu") or want == got:
        return
    raise InputError(
        f"{where}: array for input {spec.name!r} has dtype {np.dtype(dtype)}, but the model "
        f"expects {spec.dtype}; convert it with array.astype({spec.dtype!r})"
    )


def _np_dtype(dtype: str) -> str:
    return "float32" if dtype == "bfloat16" else dtype


def integer_ranges(model: KerasModel) -> dict[str, int]:
    """For each integer input, the exclusive upper bound of valid ids (Embedding `input_dim`).

    Looks at the layers that consume each input directly; an input feeding several such
    layers gets the smallest bound so every id is valid everywhere.
    """
    bounds: dict[str, int] = {}
    for input_name, layer in _input_consumers(model):
        size = getattr(layer, "input_dim", None) or getattr(layer, "num_tokens", None)
        if isinstance(size, int) and size > 0:
            bounds[input_name] = min(size, bounds.get(input_name, size))
    return bounds


def _input_consumers(model: KerasModel) -> Iterator[tuple[str, KerasLayer]]:
    """Yield `(input name, layer)` for each layer whose call takes a model input directly."""
    try:
        inputs = {id(t): t.name for t in model.inputs}
    except (AttributeError, ValueError):
        return
    found = False
    for layer in model.layers:
        for node in getattr(layer, "_inbound_nodes", []):
            for tensor in getattr(node, "input_tensors", ()):
                if id(tensor) in inputs:
                    found = True
                    yield inputs[id(tensor)], _first_leaf(layer)
    if not found and len(inputs) == 1 and model.layers:
        # A Sequential reloaded from a file has stale call records: its first layer is the consumer.
        yield next(iter(inputs.values())), _first_leaf(model.layers[0])


def _first_leaf(layer: KerasLayer) -> KerasLayer:
    """The first real layer inside a nested model (where its inputs go), else the layer."""
    while hasattr(layer, "layers") and layer.layers:
        layer = layer.layers[0]
    return layer
