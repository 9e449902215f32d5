"""Exceptions the API raises for user errors; the CLI turns each into exit code 2."""

from __future__ import annotations

import re


class LayergradError(Exception):
    """A problem with what the user gave us (a file, a layer name, an option).

    The message is one line that says what was found, what was expected, and the
    next step; it reads as a sentence, with its full stop added when the text lacks one.
    The CLI prints it without a traceback and exits with code 2.
    """

    def __str__(self) -> str:
        text = super().__str__().rstrip()
        return text if not text or text.endswith((".", "!", "?")) else text + "."


class UsageError(LayergradError):
    """Options that cannot work: a bad value, options that exclude each other, or a file given
    for the wrong job (a baseline made with another probe). Exit 2, even inside `check`, where a
    bad model file would only fail its own check."""


class LoadError(LayergradError):
    """The model file cannot be read, is malformed, or failed to load."""


class UnsafeModelError(LoadError):
    """The file was refused: the static audit found something that would run code on load."""


class LayerNotFound(LayergradError):
    """A layer reference (`--from`, `--to`, `--layers`) matched nothing."""


class InputError(LayergradError):
    """The data does not fit the model: a probe batch (`--input`, random from the input spec) or
    a data set (`--data`) that is unreadable, of the wrong shape, dtype or range."""


class DataError(InputError, UsageError):
    """Values in the data that no model takes as they are: text that is not valid Unicode, ids
    that are not finite or beyond int32, integers beyond the input's dtype. The data is wrong,
    not the model file: exit 2, even inside `check`. Refused where the data is read, naming
    the sample (`data/array_records.py`, `data/value_checks.fit_array`)."""


class OutputError(LayergradError):
    """An output file (`--junit`, `--save-gradient`) cannot or must not be written there."""


def without_styles(text: str) -> str:
    """The text without the terminal styles Keras puts in some messages (bold: `ESC[1m`)."""
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def describe(exc: BaseException) -> str:
    """One line for an exception from Keras or TensorFlow: the layer, and the op's message.

    Keras wraps errors raised inside a layer as "Exception encountered when calling X.call()"
    followed by the original message and the arguments; keep the first two parts.
    """
    text = re.sub(r"\{\{function_node [^}]*\}\}\s*", "", without_styles(str(exc)))
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if not lines:
        return type(exc).__name__
    if lines[0].startswith("Graph execution error"):  # a tf.function's: the stack, then the op's
        said = [ln for ln in lines[1:] if not ln.startswith(("Detected at node", "File ", "[["))]
        if said:
            return said[-1]
    detail = next((ln for ln in lines[1:] if not ln.startswith("Arguments received")), "")
    # the tensors Keras appends print their values over many lines: the first would end the
    # message mid-array (`Inputs received: [<tf.Tensor: shape=(6, 5), ..., numpy=`)
    detail = re.split(r"\s*(?:Inputs received|Received: inputs=|Arguments received)", detail)[0]
    return f"{lines[0]} {detail}".strip()


def op_message(exc: BaseException) -> str:
    """`describe`, without the op and node tags TensorFlow appends (`[Op:GatherV2] name:`)."""
    text = re.sub(r"\s*\[\[\{\{node [^]]*\]\]|\s*\[Op:[^]]*\](?: name:)?", "", describe(exc))
    return text.strip()


def one_line(text: str) -> str:
    """A message as one line: a Python traceback quoted in it is cut off, whitespace joined."""
    text = text.split("Traceback (most recent call last):")[0]
    return " ".join(text.split()).rstrip(":; ") or "error"
