"""`--data FILE.py:function` / `module:function`: batches from the user's own code.

The function returns a `tf.data.Dataset` (selected and cast in the graph) or any iterable of
batches (read and checked in Python), re-cut into batches of `batch_size` rows. An element is
x as `model.fit` takes it, or `(x, y)`; one without the batch axis is a sample.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import cast

import numpy as np

from layergrad.core.errors import InputError
from layergrad.core.limits import MAX_EMPTY_BATCHES
from layergrad.core.tf_runtime import tf
from layergrad.core.tf_types import Dataset, Tensor, TensorTree
from layergrad.core.vocab import with_article
from layergrad.data.shards import Part, Reading
from layergrad.data.user_code import (
    checked_iteration,
    load_function,
    raised,
    running_user_code,
    takes_argument,
)
from layergrad.data.value_checks import (
    InputSpec,
    check_fits,
    fit_array,
    fitted_cast,
    same_rows,
    tf_dtype,
)

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


# one output's labels in a Python element: where they are, and one sample's label (its shape
# and dtype, as the first element has them)
LabelColumn = tuple[Path, InputSpec]


def read_labels(
    element: TensorTree, columns: Sequence[LabelColumn], rows: int, sample: bool, where: str
) -> tuple[np.ndarray, ...]:
    """The labels of one element, checked against the first element's: `rows` of the same
    shape, of a dtype that casts to the first one's."""
    out = []
    for path, column in columns:
        try:
            y = np.asarray(pick(element, path))
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


@dataclass
class Failure:
    """An error met while `tf.data` pulled from a Python reader (raised when the stream ends)."""

    error: InputError | None = None


Reader = Callable[[], Iterator[tuple[np.ndarray, ...]]]


def python_dataset(
    read: Reader, columns: Sequence[InputSpec], failure: Failure, source: str
) -> Dataset:
    """A tf.data.Dataset of batches of `columns` pulled from a Python reader; its errors are
    kept in `failure` (TensorFlow would turn them into an error without their type or
    message)."""

    def generate() -> Iterator[tuple[np.ndarray, ...]]:
        failure.error = None
        try:
            yield from read()
        except InputError as exc:
            failure.error = exc
        except (Exception, SystemExit) as exc:  # keep it: TensorFlow would lose its type
            failure.error = InputError(f"--data {source}: reading failed: {raised(exc)}")

    signature = tuple(tf.TensorSpec((None, *c.shape), tf_dtype(c.dtype)) for c in columns)
    return tf.data.Dataset.from_generator(generate, output_signature=signature)


def function_source(
    how: Reading,
    failure: Failure,
    outputs: Sequence[str] | None = None,
    weights_ignored: bool = False,
) -> tuple[Dataset, int | None, Part | None, bool]:
    """Batches from a user function: a tf.data.Dataset, or an iterable read in Python; the
    rows when known; this worker's part when the function took the InputContext of
    `how.shard` (it returned its own shard); whether the batches hold labels. With `outputs`
    (the model's output names), each batch also holds the labels `y` of the same elements as
    its inputs, when the elements have labels (`locate_labels`); `weights_ignored` reads
    `(x, y, sample_weight)` elements as `(x, y)`."""
    ref, specs = how.text, how.specs
    function = load_function(ref)
    sharded = takes_argument(function)
    worker, workers = how.shard or (0, 1)  # (InputContext: pipelines, this one, replicas)
    arguments = (tf.distribute.InputContext(workers, worker, how.replicas),) if sharded else ()

    def call() -> object:
        try:
            with running_user_code():
                return function(*arguments)
        except (Exception, SystemExit) as exc:  # a gate must never pass by sys.exit(0)
            raise InputError(f"--data {ref}: the function raised {raised(exc)}") from exc

    result = call()
    if isinstance(result, tf.data.Dataset):
        dataset, rows, labelled = _from_tf_dataset(result, how, outputs, weights_ignored)
    elif isinstance(result, (dict, str, bytes)) or not isinstance(result, Iterable):
        raise InputError(
            f"--data {ref}: the function returned {type(result).__name__}, not batches; return "
            "a tf.data.Dataset or an iterable (generator, list) of batches: arrays, (x, y) "
            "tuples or dicts keyed by input name"
        )
    else:
        rows = len(result) if isinstance(result, np.ndarray) else None  # an array of samples
        first: list[Iterable[object]] = [cast(Iterable[object], result)]
        columns: list[LabelColumn] = []
        signature = list(specs)
        if outputs is not None and rows is None:  # the first element says where its labels are
            iterator = iter(first[0])
            head = list(itertools.islice(checked_iteration(iterator, ref), 1))
            first = [itertools.chain(head, iterator)]
            if head:
                columns = _label_columns(
                    head[0], specs, outputs, f"--data {ref}: batch 0", weights_ignored
                )
                signature += [spec for _, spec in columns]

        def read() -> Iterator[tuple[np.ndarray, ...]]:
            # the first pass uses the first call; the function returns batches (checked above)
            items = first.pop() if first else cast(Iterable[object], call())
            yield from _rebatched(_parts(items, ref, specs, columns), how.batch_size, how.limit)

        dataset, labelled = python_dataset(read, signature, failure, ref), bool(columns)
    own = how.shard is not None and sharded  # the function returned its own shard
    return dataset, rows, Part(dataset.prefetch(tf.data.AUTOTUNE), None) if own else None, labelled


def _label_columns(
    element: TensorTree,
    specs: Sequence[InputSpec],
    outputs: Sequence[str],
    where: str,
    weights_ignored: bool = False,
) -> list[LabelColumn]:
    """Where the labels of the first element are and what one sample's label is like."""
    paths = locate_inputs(element, [s.name for s in specs], where)
    sample = np.ndim(pick(element, paths[0])) == len(specs[0].shape)  # no batch axis
    out = []
    for i, path in enumerate(locate_labels(element, paths, outputs, where, weights_ignored) or []):
        y = np.asarray(pick(element, path))
        _check_labels(where, y.dtype, y.dtype.kind, sample or y.ndim > 0)
        out.append((path, InputSpec(f"y{i}", y.shape if sample else y.shape[1:], y.dtype.name)))
    return out


def _parts(
    items: Iterable[object],
    ref: str,
    specs: Sequence[InputSpec],
    columns: Sequence[LabelColumn] = (),
) -> Iterator[tuple[np.ndarray, ...]]:
    """Each element of a user iterable as checked arrays in input order, then its labels in
    output order when `columns` says where they are (samples get a batch axis of 1)."""
    seen, names = 0, [s.name for s in specs]  # samples read so far
    for index, element in enumerate(checked_iteration(items, ref, numbered=True)):
        where = f"--data {ref}: batch {index}"
        arrays = [np.asarray(pick(element, p)) for p in locate_inputs(element, names, where)]
        sample = arrays[0].ndim == len(specs[0].shape)
        fitted = tuple(
            fit_array(_batched(a, s, where), s, where, seen)
            for a, s in zip(arrays, specs, strict=True)
        )
        rows = same_rows(where, names, [len(a) for a in fitted])
        yield (*fitted, *read_labels(element, columns, rows, sample, where))
        seen += rows


def _batched(array: np.ndarray, spec: InputSpec, where: str) -> np.ndarray:
    """`array` with a batch axis of 1 when it is one sample (the rank of the input without its
    batch axis); a sample of another shape is refused by the shape it was yielded with."""
    if array.ndim != len(spec.shape):
        return array
    if any(d is not None and d != got for d, got in zip(spec.shape, array.shape, strict=True)):
        sizes = ["any" if d is None else str(d) for d in spec.shape]
        one = f"({sizes[0]},)" if len(sizes) == 1 else f"({', '.join(sizes)})"
        raise InputError(
            f"{where}: array for input {spec.name!r} has shape {tuple(array.shape)}, expected "
            f"(batch, {', '.join(sizes)}), or {one} for one sample; yield arrays of that shape "
            "(the first axis is the batch)"
        )
    return array[np.newaxis]


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
            empty += 1
            if empty >= MAX_EMPTY_BATCHES:
                raise InputError(f"--data: {_empty_forever(f' after {emitted + held:,} samples')}")
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


def _empty_forever(after: str = "") -> str:
    return (
        f"the source yielded {MAX_EMPTY_BATCHES:,} empty batches in a row{after}; a source that "
        "never yields a sample would run forever; make it end, or yield rows"
    )


def _join(parts: list[tuple[np.ndarray, ...]]) -> tuple[np.ndarray, ...]:
    if len(parts) == 1:
        return parts[0]
    return tuple(np.concatenate(column) for column in zip(*parts, strict=True))


def _from_tf_dataset(
    dataset: Dataset, how: Reading, outputs: Sequence[str] | None, weights_ignored: bool
) -> tuple[Dataset, int | None, bool]:
    """Select and cast the inputs of a user's tf.data.Dataset (and with `outputs` its labels,
    as they are), cut into batches, their values checked as they are cast (`value_checks`);
    the rows when known; whether it has labels."""
    ref, specs, batch_size, limit = how.text, how.specs, how.batch_size, how.limit
    where = f"--data {ref}"
    element = dataset.element_spec
    paths = locate_inputs(element, [s.name for s in specs], where)
    leaves = [pick(element, p) for p in paths]
    batched = []
    for leaf, spec in zip(leaves, specs, strict=True):
        rank = _dense_rank(leaf, f"input {spec.name!r}", where)
        is_batch = rank == len(spec.shape) + 1
        shape = tuple(leaf.shape) if is_batch else (None, *leaf.shape)
        check_fits(shape, leaf.dtype.as_numpy_dtype, spec, where)
        batched.append(is_batch)
    if len(set(batched)) > 1:
        raise InputError(
            f"{where}: some inputs have a batch axis and some do not; give them all one"
        )
    labels = (
        None if outputs is None else locate_labels(element, paths, outputs, where, weights_ignored)
    )
    for path in labels or []:
        leaf = pick(element, path)
        axis = not batched[0] or bool(_dense_rank(leaf, "the labels", where))
        kind = getattr(getattr(leaf, "dtype", None), "as_numpy_dtype", None)
        shown = getattr(leaf, "dtype", type(leaf).__name__)
        _check_labels(where, shown, np.dtype(kind).kind if kind else "", axis)
    tuple_element = isinstance(element, tuple)

    def select(*args: TensorTree) -> tuple[Tensor, ...]:
        value = args if tuple_element else args[0]
        picked = [pick(value, p) for p in paths]
        ys = [pick(value, p) for p in labels or []]
        if batched[0] and len(picked) + len(ys) > 1:  # unbatch would fail naming no input
            rows = [tf.shape(t)[0] for t in picked + ys]
            for t in rows[1:]:
                tf.debugging.assert_equal(
                    t, rows[0], message="the inputs and labels have different batch sizes"
                )
        return (*picked, *ys)  # cast once batched, checked as arrays read in place are

    out = dataset.map(select)
    if batched and batched[0]:
        out = out.scan(tf.constant(0, tf.int64), _count_empty).unbatch()
        rows = None
    else:
        cardinality = int(dataset.cardinality())
        rows = cardinality if cardinality >= 0 else None
    if limit is not None:
        out = out.take(limit)

    def checked(index: Tensor, batch: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
        first = index * batch_size  # the index of the batch's first sample
        n = len(specs)
        inputs = [fitted_cast(t, ref, s, first) for t, s in zip(batch[:n], specs, strict=True)]
        return (*inputs, *batch[n:])

    return out.batch(batch_size).enumerate().map(checked), rows, bool(labels)


def _check_labels(where: str, dtype: object, kind: str, batch_axis: bool) -> None:
    """Refuse labels without a batch axis, or that are not numbers (of numpy kind `kind`)."""
    if not batch_axis:
        raise InputError(f"{where}: the labels have no batch axis; give one label per row")
    if not kind or kind not in "biuf":
        raise InputError(
            f"{where}: the labels are {dtype}, not numbers; give class ids, one-hot rows or "
            "numeric targets"
        )


def _dense_rank(leaf: TensorTree, what: str, where: str) -> int:
    """The rank of a dense tensor of known rank in a tf.data element spec."""
    if not isinstance(leaf, tf.TensorSpec):
        raise InputError(
            f"{where}: {what} is {with_article(type(leaf).__name__)}; expected dense tensors "
            "(convert ragged or sparse values with .to_tensor())"
        )
    rank = leaf.shape.rank
    if rank is None:
        raise InputError(
            f"{where}: {what} has an unknown rank (tf.data does not know how many axes its "
            "tensors have); give it a shape, e.g. "
            "dataset.map(lambda x: tf.ensure_shape(x, [None, ...]))"
        )
    return int(rank)


def _count_empty(count: Tensor, batch: tuple[Tensor, ...]) -> tuple[Tensor, tuple[Tensor, ...]]:
    """Count empty batches in a row; fail at MAX_EMPTY_BATCHES (unbatch would spin forever
    over a source that yields only empty batches, `--limit` or not)."""
    rows = tf.shape(batch[0], out_type=tf.int64)[0]
    count = tf.where(rows == 0, count + 1, tf.constant(0, tf.int64))
    limit = tf.constant(MAX_EMPTY_BATCHES, tf.int64)
    check = tf.debugging.assert_less(count, limit, _empty_forever())
    with tf.control_dependencies([check]):
        return count, tuple(tf.identity(t) for t in batch)
