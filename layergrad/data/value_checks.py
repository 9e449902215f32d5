"""Every value of an array checked against the model input it feeds, a refusal naming the
sample: in memory (`fit_array`) and in the graph (`fitted_cast`, read back from TensorFlow's
error by `reader_refusal`), the same values refused in the same words. Only the checks in the
graph import TensorFlow.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import DTypeLike

from layergrad.core.errors import DataError, InputError
from layergrad.core.limits import MAX_TEXT_BATCH_BYTES, human
from layergrad.core.tf_types import Tensor


@dataclass(frozen=True)
class InputSpec:
    """One model input: its name, shape without the batch axis (None = open) and the dtype it
    is fed as: the declared one, or int32 for a float input that carries ids (`ids` names the
    layer that takes them, see `data/input_kinds.py`); "string" for text. `table` names the
    Embedding that reads its values as rows of a table, which reads a negative id from the
    table's end: a negative value is refused."""

    name: str
    shape: tuple[int | None, ...]
    dtype: str
    ids: str | None = None
    table: str | None = None


def tf_dtype(dtype: str) -> str:
    """The dtype fed to an input of Keras dtype `dtype` (bfloat16 inputs are fed float32)."""
    return "float32" if dtype == "bfloat16" else dtype


def dtype_kind(dtype: str) -> str:
    """The numpy kind of an input dtype: "f", "i", "u", "b", or "U" for strings."""
    return "U" if dtype == "string" else np.dtype(tf_dtype(dtype)).kind


SAMPLE, VALUE = "\x00sample\x00", "\x00value\x00"  # where a refusal names them (in the graph too)


def refusal(check: str, where: str, spec: InputSpec, target: str) -> str:
    """The refusal of a value of the input `spec` (fed as `target`) that fails `check` (see
    `checked`), its sample and value left as SAMPLE and VALUE, filled in where it is found."""
    if check == "ids":
        return (
            f"{where}: input {spec.name!r} holds ids ({spec.ids} takes them), but sample {SAMPLE} "
            f"holds {VALUE}, which is not finite or does not fit int32; save the ids as integers"
        )
    if check == "negative":
        return (
            f"{where}: sample {SAMPLE} of input {spec.name!r} holds id {VALUE}, below 0: "
            f"{spec.table} takes ids from 0 and would read a negative one from the end of its "
            "table; save ids from 0"
        )
    if check == "range":
        bounds = np.iinfo(target)
        fault = f"outside {target} [{bounds.min}, {bounds.max}]; save values that fit {target}"
    else:
        fault = (
            f"which overflows {target} (the model's input dtype) to inf; scale the data or save "
            f"it as {target}"
        )
    return f"{where}: sample {SAMPLE} of input {spec.name!r} holds {VALUE}, {fault}"


def fit_array(array: np.ndarray, spec: InputSpec, where: str, first: int = 0) -> np.ndarray:
    """Check an array against an input spec; cast numbers to the input's dtype when they fit.

    `where` starts the error message and says where the array came from (`--input
    batch.npz`, `--data x.npy: batch 3`); `first` is the index of its first sample in the
    data, by which a refusal names the sample. Ids saved as floats, for a float input that
    carries ids, are cast to int32 as the layer that takes them would; text stays text.

    Raises:
        InputError: the array's shape or dtype does not fit the input.
        DataError: a value does not (ids that are NaN, text that is not valid Unicode...).
    """
    check_fits(array.shape, array.dtype, spec, where)
    if spec.dtype == "string":
        return fit_text(array, spec, where, first)
    target, check = np.dtype(tf_dtype(spec.dtype)), checked(array.dtype, spec)
    with np.errstate(over="ignore", invalid="ignore"):
        cast = array.astype(target, copy=False)
        if check:
            ok = within(check, array, cast, np.isfinite)
            _refuse(ok, array, first, refusal(check, where, spec, target.name))
        if spec.table:
            _refuse(cast >= 0, cast, first, refusal("negative", where, spec, target.name))
    return cast


def checked(held: DTypeLike, spec: InputSpec) -> str:
    """The check values of dtype `held` for the input `spec` get as they are cast: "ids"
    (floats carrying ids), "range" (integers of another dtype), "overflow" (wider floats),
    or none ("")."""
    if spec.dtype == "string":
        return ""
    held, target = np.dtype(held), np.dtype(tf_dtype(spec.dtype))
    if spec.ids and held.kind == "f":
        return "ids"
    if target.kind in "iu" and held.kind in "iu" and held != target:
        return "range"
    wider = held.kind == target.kind == "f" and held.itemsize > target.itemsize
    return "overflow" if wider else ""


def within(check: str, values: Tensor, cast: Tensor, finite: Callable[[Tensor], Tensor]) -> Tensor:
    """Which of `values` (numpy or TensorFlow, with its `finite`) pass `check` once `cast`:
    ids that are finite and fit int32, integers within the cast's dtype, floats that stay
    finite."""
    if check == "ids":
        return finite(values) & (values >= -(2.0**31)) & (values < 2.0**31)
    if check == "range":  # within both dtypes: bounds that the values' dtype can hold
        a, b = np.iinfo(values.dtype.name), np.iinfo(cast.dtype.name)
        low, high = max(int(a.min), int(b.min)), min(int(a.max), int(b.max))
        return (values >= low) & (values <= high)
    return finite(cast) == finite(values)


def _refuse(ok: np.ndarray, array: np.ndarray, first: int, message: str) -> None:
    """Raise DataError with `message`, its SAMPLE and VALUE those of the first element of
    `array` that is not `ok`, if one is not."""
    if ok.all():
        return
    where = np.unravel_index(int(np.argmin(ok)), ok.shape)
    row, value = where[0], array[where]
    kind = array.dtype.kind
    shown = f"{value:g}" if kind == "f" else str(int(value)) if kind in "iub" else repr(value)
    raise DataError(message.replace(SAMPLE, str(first + int(row))).replace(VALUE, shown))


def fit_text(array: np.ndarray, spec: InputSpec, where: str, first: int = 0) -> np.ndarray:
    """A batch of text for a string input: unicode or bytes arrays as they are, an object
    array of Python strings as unicode; within MAX_TEXT_BATCH_BYTES, and valid Unicode
    (TensorFlow takes text as UTF-8, which a lone surrogate has no form in)."""
    if array.dtype.kind == "O":
        if not all(isinstance(v, (str, bytes)) for v in array.flat):
            raise InputError(
                f"{where}: array for input {spec.name!r} holds Python objects that are not "
                "strings; give text as an array of str"
            )
        array = array.astype(str)
    text_budget(f"{where}: the text of {len(array)} rows of input {spec.name!r}", array.nbytes,
                len(array), array.dtype)  # fmt: skip
    if array.dtype.kind == "U" and array.size and array.dtype.itemsize:
        points = np.ascontiguousarray(array).view(np.uint32).reshape(len(array), -1)
        bad = ((points >= 0xD800) & (points <= 0xDFFF)) | (points > 0x10FFFF)
        if bad.any():
            row, column = np.unravel_index(int(np.argmax(bad)), bad.shape)
            code = int(points[row, column])
            what = "a lone surrogate" if 0xD800 <= code <= 0xDFFF else "beyond U+10FFFF"
            raise DataError(
                f"{where}: sample {first + int(row)} of input {spec.name!r} holds text that is "
                f"not valid Unicode (U+{code:04X}, {what}), which TensorFlow cannot encode as "
                "UTF-8; decode the text with errors='replace', or save it as bytes"
            )
    return array


def text_budget(
    what: str, nbytes: int, rows: int, dtype: DTypeLike, fix: str = "pass --batch-size {} or less"
) -> None:
    """Refuse `rows` rows of text taking `nbytes`, over what a batch of text may take; `what`
    starts the message, `fix` is told how many rows fit."""
    if nbytes > MAX_TEXT_BATCH_BYTES:
        fits = max(1, MAX_TEXT_BATCH_BYTES // max(1, nbytes // max(1, rows)))
        raise InputError(
            f"{what} takes {human(nbytes)} ({np.dtype(dtype)}: numpy keeps every string as wide "
            f"as the longest), more than the {human(MAX_TEXT_BATCH_BYTES)} a batch of text may "
            f"take; {fix.format(fits)}, or shorten the longest strings"
        )


def same_rows(where: str, names: Sequence[str], rows: Sequence[int]) -> int:
    """The rows every input has in one batch; InputError naming each when they differ."""
    if len(set(rows)) > 1:
        sizes = ", ".join(f"{n}: {r}" for n, r in zip(names, rows, strict=True))
        raise InputError(
            f"{where}: the inputs have different batch sizes ({sizes}); give every input "
            "the same number of rows"
        )
    return rows[0] if rows else 0


def check_fits(
    shape: tuple[int | None, ...], dtype: DTypeLike, spec: InputSpec, where: str
) -> None:
    """Raise InputError unless an array of `shape` and `dtype` can feed the input `spec`.

    A None in `shape` (a size not known yet, as in a tf.data element spec) is not checked.
    Text (unicode, bytes, or the objects tf.data reports for strings) feeds a string input;
    floats feed an input that carries ids.
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
    want = dtype_kind(spec.dtype)
    got = np.dtype(dtype).kind
    if want == "U":
        if got in "USO":
            return
        raise InputError(
            f"{where}: array for input {spec.name!r} has dtype {np.dtype(dtype)}, but the model "
            "expects text (dtype string); save an array of str (np.array(texts))"
        )
    if (want == "f" and got in "fiub") or (want in "iu" and got in "iu") or want == got:
        return
    if spec.ids and got == "f":
        return
    expects = f"ids ({spec.ids} takes them)" if spec.ids else spec.dtype
    fix = "astype('int32')" if spec.ids else f"astype({spec.dtype!r})"
    raise InputError(
        f"{where}: array for input {spec.name!r} has dtype {np.dtype(dtype)}, but the model "
        f"expects {expects}; convert it with array.{fix}"
    )


REFUSED = " refused: "  # marks the message of a check in the graph (`reader_refusal`)


def fitted_cast(values: Tensor, source: str, spec: InputSpec, first: Tensor) -> Tensor:
    """Cast to the input's dtype, refusing what `fit_array` refuses for `--input` (`checked`).
    `source` is the `--data` source, `first` the index of the batch's first sample in it."""
    from layergrad.core.tf_runtime import tf  # the checks in the graph only

    cast = tf.cast(values, tf_dtype(spec.dtype))
    where = f"--data {source}{REFUSED.rstrip(': ')}"
    check = checked(values.dtype.as_numpy_dtype, spec)
    if check:
        ok = within(check, values, cast, tf.math.is_finite)
        cast = _refused(ok, values, first, refusal(check, where, spec, cast.dtype.name), cast)
    if spec.table:
        message = refusal("negative", where, spec, cast.dtype.name)
        cast = _refused(cast >= 0, cast, first, message, cast)
    return cast


def _refused(ok: Tensor, values: Tensor, first: Tensor, message: str, cast: Tensor) -> Tensor:
    """`cast`, once every element of `values` is `ok`; else an error with `message`, its
    SAMPLE and VALUE the file's row and the value of the first element that is not."""
    from layergrad.core.tf_runtime import tf  # the checks in the graph only

    rows = tf.reshape(ok, [tf.shape(ok)[0], -1])
    row = tf.argmin(tf.cast(tf.reduce_all(rows, axis=1), tf.int32))  # the first bad row
    column = tf.argmin(tf.cast(rows[row], tf.int32))
    value = tf.reshape(values, [tf.shape(values)[0], -1])[row, column]
    shown = tf.strings.as_string(value, shortest=True) if values.dtype.is_floating else (
        tf.strings.as_string(value))  # fmt: skip
    before, rest = message.split(SAMPLE, 1)
    middle, after = rest.split(VALUE, 1)
    text = tf.strings.join([before, tf.strings.as_string(first + row), middle, shown, after])
    check = tf.debugging.Assert(tf.reduce_all(ok), [text])
    with tf.control_dependencies([check]):
        return tf.identity(cast)


def reader_refusal(exc: BaseException) -> DataError | None:
    """The refusal of a check in the graph (`_refused`) that stopped the reader, if `exc`
    (a TensorFlow error, from tf.data or from a Keras `fit` over it) carries one."""
    found = re.search(rf"\[(--data [^\n]*?{REFUSED}[^\n]*)\](?=\n|$)", str(exc))
    if found is None:
        return None
    text = found.group(1).replace(REFUSED, ": ", 1)
    return DataError(re.sub(r"\\([0-7]{3}|.)", _unescaped, text))  # the op escapes the text


def _unescaped(escape: re.Match[str]) -> str:
    code = escape.group(1)
    if len(code) == 3:
        return chr(int(code, 8))
    return {"n": "\n", "t": "\t", "r": "\r"}.get(code, code)
