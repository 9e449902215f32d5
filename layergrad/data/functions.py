"""`--data FILE.py:function` / `module:function`: batches from the user's own code.

The function is called with no arguments, or, when it takes one, with a
`tf.distribute.InputContext` (one input pipeline in a single process; under `--distribute
multi-worker` the worker's, so that it returns that worker's shard). It returns a
`tf.data.Dataset`, whose elements are selected and cast in the graph and re-cut into batches
of `batch_size` rows, or any other iterable of batches (a generator, a list), read in
Python, checked batch by batch against the model's inputs and re-cut the same way. An
element is an array, an `(x, y)` tuple, a list of arrays in input order, or a dict keyed by
input name; one without the batch axis is a sample.
This is the convention of TensorFlow Lite's `representative_dataset`.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import cast

import numpy as np

from layergrad.core.errors import InputError, one_line
from layergrad.core.keras_backend import quiet_import
from layergrad.core.limits import MAX_EMPTY_BATCHES
from layergrad.core.tf_types import Dataset, InputContext, Tensor, TensorSpec, TensorTree
from layergrad.data.probe_input import InputSpec, check_fits, fit_array
from layergrad.files.guards import require_regular

FUNCTION = re.compile(r"^(?P<target>.+):(?P<name>[A-Za-z_]\w*)$")
MODULE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


@dataclass
class Failure:
    """An error met while `tf.data` pulled from a Python reader (raised when the stream ends)."""

    error: InputError | None = None


Reader = Callable[[], Iterator[tuple[np.ndarray, ...]]]


def python_dataset(
    read: Reader, signature: tuple[TensorSpec, ...], failure: Failure, source: str
) -> Dataset:
    """A tf.data.Dataset pulling from a Python reader; its errors are kept in `failure`
    (TensorFlow would turn them into an error without their type or message)."""
    tf, _ = quiet_import()

    def generate() -> Iterator[tuple[np.ndarray, ...]]:
        failure.error = None
        try:
            yield from read()
        except InputError as exc:
            failure.error = exc
        except (Exception, SystemExit) as exc:  # keep it: TensorFlow would lose its type
            failure.error = InputError(f"--data {source}: reading failed: {_raised(exc)}")

    return tf.data.Dataset.from_generator(generate, output_signature=signature)


def is_function(text: str) -> bool:
    match = FUNCTION.match(text)
    if match is None:
        return False
    target = match["target"]
    return target.endswith(".py") or bool(MODULE.match(target))


def function_source(
    ref: str,
    specs: Sequence[InputSpec],
    batch_size: int,
    limit: int | None,
    signature: tuple[TensorSpec, ...],
    failure: Failure,
    context: InputContext | None = None,
) -> tuple[Dataset, int | None, bool]:
    """Batches from a user function: a tf.data.Dataset, or an iterable read in Python; and
    whether the function took `context` (a tf.distribute.InputContext)."""
    tf, _ = quiet_import()
    function = _load_function(ref)
    sharded = context is not None and takes_argument(function)
    arguments = (context,) if sharded else ()

    def call() -> object:
        try:
            return function(*arguments)
        except (Exception, SystemExit) as exc:  # a gate must never pass by sys.exit(0)
            raise InputError(f"--data {ref}: the function raised {_raised(exc)}") from exc

    first = [call()]
    result = first[0]
    if isinstance(result, tf.data.Dataset):
        return (*_from_tf_dataset(result, ref, specs, batch_size, limit), sharded)
    if isinstance(result, (dict, str, bytes)) or not isinstance(result, Iterable):
        raise InputError(
            f"--data {ref}: the function returned {type(result).__name__}, not batches; return "
            "a tf.data.Dataset or an iterable (generator, list) of batches: arrays, (x, y) "
            "tuples or dicts keyed by input name"
        )

    def read() -> Iterator[tuple[np.ndarray, ...]]:
        # the first pass uses the first call; the function returns batches (checked above)
        items = cast(Iterable[object], first.pop() if first else call())
        yield from _rebatched(_parts(items, ref, specs), batch_size, limit)

    rows = len(result) if isinstance(result, np.ndarray) else None  # an array of samples
    return python_dataset(read, signature, failure, ref), rows, sharded


def takes_argument(function: Callable[..., object]) -> bool:
    """Whether `function` can be called with one positional argument (the InputContext)."""
    try:
        parameters = list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError):  # a builtin without a signature: call it without
        return False
    positional = (
        inspect.Parameter.POSITIONAL_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
        inspect.Parameter.VAR_POSITIONAL,
    )
    return any(p.kind in positional for p in parameters)


def labels_of(ref: str, inputs: int, limit: int | None) -> Iterator[TensorTree]:
    """The labels of each element a data function gives (a second call of the function):
    `y` of `(x, y)` tuples, of dicts keyed `y`, or None; at most `limit` samples."""
    tf, _ = quiet_import()
    function = _load_function(ref)
    try:
        result = function()
    except (Exception, SystemExit) as exc:  # a gate must never pass by sys.exit(0)
        raise InputError(f"--data {ref}: the function raised {_raised(exc)}") from exc
    if isinstance(result, tf.data.Dataset):
        result = result.as_numpy_iterator()
    if isinstance(result, np.ndarray) or not isinstance(result, Iterable):
        return
    seen = 0
    for element in _checked_iteration(result, ref):
        y = _label_of(element, inputs)
        if y is None:
            return
        yield y
        seen += int(np.shape(y)[0]) if np.ndim(y) else 1
        if limit is not None and seen >= limit:
            return


def _label_of(element: TensorTree, inputs: int) -> TensorTree:
    if isinstance(element, dict):
        return element.get("y")
    if isinstance(element, (tuple, list)) and len(element) >= 2:
        first = element[0]
        if inputs == 1 or isinstance(first, (dict, tuple, list)):
            return element[1]
    return None


def _load_function(ref: str) -> Callable[[], object]:
    match = FUNCTION.match(ref)
    if match is None:
        raise InputError(f"--data {ref}: expected FILE.py:function or module:function")
    target, name = match["target"], match["name"]
    try:
        if target.endswith(".py"):
            module = _import_file(Path(target), ref)
        else:
            sys.path.insert(0, os.getcwd())  # as `python -m` would, for a module beside the data
            try:
                module = importlib.import_module(target)
            finally:
                sys.path.remove(os.getcwd())
    except InputError:
        raise
    except ModuleNotFoundError as exc:
        raise InputError(
            f"--data {ref}: no module named {exc.name!r}; pass FILE.py:function with the path "
            "to the file, or install the module"
        ) from exc
    except (Exception, SystemExit) as exc:
        raise InputError(f"--data {ref}: importing {target} raised {_raised(exc)}") from exc
    function = getattr(module, name, None)
    if not callable(function):
        found = sorted(k for k, v in vars(module).items() if callable(v) and not k.startswith("_"))
        raise InputError(
            f"--data {ref}: {target} has no function {name!r}; it defines "
            f"{', '.join(found[:8]) or 'no public functions'}"
        )
    return function


def _checked_iteration(items: Iterable[object], ref: str) -> Iterator[object]:
    """The elements of a user iterable; what its code raises (SystemExit too) is one line."""
    iterator = iter(items)
    while True:
        try:
            element = next(iterator)
        except StopIteration:
            return
        except (Exception, SystemExit) as exc:
            raise InputError(f"--data {ref}: the batches raised {_raised(exc)}") from exc
        yield element


def _raised(exc: BaseException) -> str:
    """What a user's code raised, in one line; SystemExit is named as the call it was."""
    if isinstance(exc, SystemExit):
        return (
            f"SystemExit (it called sys.exit({exc.code!r})); a data function must return or "
            "yield batches, not end the program"
        )
    text = one_line(str(exc))[:300]
    return f"{type(exc).__name__}: {text}" if text != "error" else type(exc).__name__


def _import_file(path: Path, ref: str) -> ModuleType:
    if not path.exists():
        raise InputError(f"--data {ref}: no such file {path}; pass FILE.py:function")
    require_regular(path, "a Python file", lambda m: InputError(f"--data {ref}: {m}"))
    spec = importlib.util.spec_from_file_location(f"_layergrad_data_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise InputError(f"--data {ref}: {path} is not an importable Python file")
    module = importlib.util.module_from_spec(spec)
    folder = str(path.resolve().parent)
    sys.path.insert(0, folder)  # so the file can import its neighbours
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(folder)
    return module


def _parts(
    items: Iterable[object], ref: str, specs: Sequence[InputSpec]
) -> Iterator[tuple[np.ndarray, ...]]:
    """Each element of a user iterable as checked arrays in input order (samples get a batch
    axis of 1)."""
    iterator = iter(items)
    index = 0
    while True:
        where = f"--data {ref}: batch {index}"
        try:
            element = next(iterator)
        except StopIteration:
            return
        except (Exception, SystemExit) as exc:
            raise InputError(f"{where}: the batches raised {_raised(exc)}") from exc
        names = [s.name for s in specs]
        arrays = [np.asarray(_pick(element, p)) for p in _locate(element, names, where)]
        arrays = [
            a[np.newaxis] if a.ndim == len(s.shape) else a
            for a, s in zip(arrays, specs, strict=True)
        ]
        fitted = tuple(fit_array(a, s, where) for a, s in zip(arrays, specs, strict=True))
        rows = [len(a) for a in fitted]
        if len(set(rows)) > 1:
            sizes = ", ".join(f"{n}: {r}" for n, r in zip(names, rows, strict=True))
            raise InputError(
                f"{where}: the inputs have different batch sizes ({sizes}); give every input "
                "the same number of rows"
            )
        yield fitted
        index += 1


def _rebatched(
    parts: Iterable[tuple[np.ndarray, ...]], batch_size: int, limit: int | None
) -> Iterator[tuple[np.ndarray, ...]]:
    """Cut a stream of row blocks into batches of `batch_size` rows, up to `limit` rows."""
    pending: list[tuple[np.ndarray, ...]] = []
    held = emitted = empty = 0
    for part in parts:
        if limit is not None:
            part = tuple(a[: limit - emitted - held] for a in part)
        if not len(part[0]):
            if limit is not None and emitted + held >= limit:
                break
            empty += 1
            if empty >= MAX_EMPTY_BATCHES:
                raise InputError(_EMPTY_FOREVER.format(n=MAX_EMPTY_BATCHES, at=emitted + held))
            continue
        empty = 0
        pending.append(part)
        held += len(part[0])
        while held >= batch_size:
            joined = _join(pending)
            yield tuple(a[:batch_size] for a in joined)
            emitted, held = emitted + batch_size, held - batch_size
            pending = [tuple(a[batch_size:] for a in joined)] if held else []
        if limit is not None and emitted + held >= limit:
            break
    if held:
        yield _join(pending)


_EMPTY_FOREVER = (
    "--data: the source yielded {n:,} empty batches in a row after {at:,} samples; a source "
    "that never yields a sample would run forever; make it end, or yield rows"
)


def _join(parts: list[tuple[np.ndarray, ...]]) -> tuple[np.ndarray, ...]:
    if len(parts) == 1:
        return parts[0]
    return tuple(np.concatenate(column) for column in zip(*parts, strict=True))


def _from_tf_dataset(
    dataset: Dataset, ref: str, specs: Sequence[InputSpec], batch_size: int, limit: int | None
) -> tuple[Dataset, int | None]:
    """Select and cast the inputs of a user's tf.data.Dataset, and cut it into batches."""
    tf, _ = quiet_import()
    where = f"--data {ref}"
    element = dataset.element_spec
    paths = _locate(element, [s.name for s in specs], where)
    leaves = [_pick(element, p) for p in paths]
    batched = []
    for leaf, spec in zip(leaves, specs, strict=True):
        if not isinstance(leaf, tf.TensorSpec):
            raise InputError(
                f"{where}: input {spec.name!r} is a {type(leaf).__name__}; expected dense "
                "tensors (convert ragged or sparse values with .to_tensor())"
            )
        rank = leaf.shape.rank
        if rank is None:
            raise InputError(
                f"{where}: input {spec.name!r} has an unknown rank (tf.data does not know how "
                "many axes its tensors have); give it a shape, e.g. "
                "dataset.map(lambda x: tf.ensure_shape(x, [None, ...]))"
            )
        is_batch = rank == len(spec.shape) + 1
        shape = tuple(leaf.shape) if is_batch else (None, *leaf.shape)
        check_fits(shape, leaf.dtype.as_numpy_dtype, spec, where)
        batched.append(is_batch)
    if len(set(batched)) > 1:
        raise InputError(
            f"{where}: some inputs have a batch axis and some do not; give them all one"
        )
    tuple_element = isinstance(element, tuple)
    dtypes = [tf_dtype(s.dtype) for s in specs]

    def select(*args: TensorTree) -> tuple[Tensor, ...]:
        value = args if tuple_element else args[0]
        picked = [_pick(value, p) for p in paths]
        if len(picked) > 1:  # unbatch would fail with a message that names no input
            rows = [tf.shape(t)[0] for t in picked]
            for t in rows[1:]:
                tf.debugging.assert_equal(
                    t, rows[0], message="the inputs have different batch sizes"
                )
        return tuple(tf.cast(t, d) for t, d in zip(picked, dtypes, strict=True))

    out = dataset.map(select)
    if batched and batched[0]:
        out = out.scan(tf.constant(0, tf.int64), _count_empty).unbatch()
        rows = None
    else:
        cardinality = int(dataset.cardinality())
        rows = cardinality if cardinality >= 0 else None
    if limit is not None:
        out = out.take(limit)
    return out.batch(batch_size), rows


def _count_empty(count: Tensor, batch: tuple[Tensor, ...]) -> tuple[Tensor, tuple[Tensor, ...]]:
    """Count empty batches in a row; fail at MAX_EMPTY_BATCHES (unbatch would spin forever
    over a source that yields only empty batches, `--limit` or not)."""
    tf, _ = quiet_import()
    rows = tf.shape(batch[0], out_type=tf.int64)[0]
    count = tf.where(rows == 0, count + 1, tf.constant(0, tf.int64))
    message = (
        f"the source yielded {MAX_EMPTY_BATCHES:,} empty batches in a row; a source that "
        "never yields a sample would run forever; make it end, or yield rows"
    )
    check = tf.debugging.assert_less(count, tf.constant(MAX_EMPTY_BATCHES, tf.int64), message)
    with tf.control_dependencies([check]):
        return count, tuple(tf.identity(t) for t in batch)


def _locate(element: TensorTree, names: list[str], where: str) -> list[tuple[int | str, ...]]:
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


def _by_name(
    mapping: dict[str, TensorTree], names: list[str], prefix: tuple[int | str, ...], where: str
) -> list[tuple[int | str, ...]]:
    missing = [n for n in names if n not in mapping]
    if missing:
        raise InputError(
            f"{where} has keys {sorted(map(str, mapping))} but the model's inputs are {names}; "
            f"missing: {', '.join(missing)}"
        )
    return [(*prefix, n) for n in names]


def _pick(element: TensorTree, path: tuple[int | str, ...]) -> TensorTree:
    for step in path:
        element = element[step]
    return element


def tf_dtype(dtype: str) -> str:
    """The dtype fed to an input of Keras dtype `dtype` (bfloat16 inputs are fed float32)."""
    return "float32" if dtype == "bfloat16" else dtype
