"""The values of `--data` checked as they are read, in the graph: what `probe_input.fit_array`
refuses for `--input` (float ids that are NaN, infinite or beyond int32, integers outside the
input's dtype, floats that overflow it) is refused for arrays read in place and for a data
function's `tf.data.Dataset` alike, batch by batch, by a `tf.debugging.Assert` whose message
names the sample and its value; `reader_refusal` reads it back from the error TensorFlow
raises (from the iterator, or from a Keras `fit` over it) as a `DataError`.
"""

from __future__ import annotations

import re

from layergrad.core.errors import DataError
from layergrad.core.tf_runtime import tf
from layergrad.core.tf_types import Tensor, TFDType
from layergrad.data.probe_input import SAMPLE, VALUE, InputSpec, ids_refused, outside, overflows

REFUSED = " refused: "  # marks the message of a check in the graph (`reader_refusal`)


def tf_dtype(dtype: str) -> str:
    """The dtype fed to an input of Keras dtype `dtype` (bfloat16 inputs are fed float32)."""
    return "float32" if dtype == "bfloat16" else dtype


def checked(held: TFDType, spec: InputSpec) -> bool:
    """Whether values of dtype `held` for the input `spec` are checked as they are cast."""
    target = tf.as_dtype(tf_dtype(spec.dtype))
    return bool(
        (spec.ids and held.is_floating)
        or (target.is_integer and held.is_integer and held != target)
        or (target.is_floating and held.is_floating and held.size > target.size)
    )


def fitted_cast(values: Tensor, source: str, spec: InputSpec, first: Tensor) -> Tensor:
    """Cast to the input's dtype, refusing what `fit_array` refuses for `--input`: ids saved as
    floats that are not finite or beyond int32, integers outside the dtype (int64 ids beyond
    int32 would wrap) and floats that overflow it. `source` is the `--data` source, `first`
    the index of the batch's first sample in it."""
    target = tf.as_dtype(tf_dtype(spec.dtype))
    cast = tf.cast(values, target)
    where = f"--data {source}{REFUSED.rstrip(': ')}"
    held = values.dtype
    if spec.ids and held.is_floating:
        ok = tf.math.is_finite(values) & (values >= -(2.0**31)) & (values < 2.0**31)
        return _refused(ok, values, first, ids_refused(where, spec, SAMPLE, VALUE), cast)
    if target.is_integer and held.is_integer and held != target:
        low, high = max(target.min, held.min), min(target.max, held.max)
        ok = values <= tf.constant(high, held)
        if low > held.min:
            ok &= values >= tf.constant(low, held)
        message = outside(where, spec, target.name, (target.min, target.max), SAMPLE, VALUE)
        return _refused(ok, values, first, message, cast)
    if target.is_floating and held.is_floating and held.size > target.size:
        ok = tf.math.is_finite(cast) == tf.math.is_finite(values)
        message = overflows(where, spec, target.name, SAMPLE, VALUE)
        return _refused(ok, values, first, message, cast)
    return cast


def _refused(ok: Tensor, values: Tensor, first: Tensor, message: str, cast: Tensor) -> Tensor:
    """`cast`, once every element of `values` is `ok`; else an error with `message`, its
    SAMPLE and VALUE the file's row and the value of the first element that is not."""
    rows = tf.reshape(ok, [tf.shape(ok)[0], -1])
    row = tf.argmin(tf.cast(tf.reduce_all(rows, axis=1), tf.int32))  # the first bad row
    column = tf.argmin(tf.cast(rows[row], tf.int32))
    value = tf.reshape(values, [tf.shape(values)[0], -1])[row, column]
    shown = tf.strings.as_string(value, shortest=True) if values.dtype.is_floating else (
        tf.strings.as_string(value))  # fmt: skip
    before, middle, after = _split(message)
    text = tf.strings.join([before, tf.strings.as_string(first + row), middle, shown, after])
    check = tf.debugging.Assert(tf.reduce_all(ok), [text])
    with tf.control_dependencies([check]):
        return tf.identity(cast)


def _split(message: str) -> tuple[str, str, str]:
    """A message built with SAMPLE and VALUE in it, cut around them."""
    before, rest = message.split(SAMPLE, 1)
    middle, after = rest.split(VALUE, 1)
    return before, middle, after


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
