"""Names are data in every format: show what a reader cannot see, never let it act.

A layer name (or any string read from a model, a data source or a baseline) can hold
terminal escape sequences (an OSC 8 hyperlink, a window title, cursor movement), right-to-left
overrides that reorder what is shown, invisible characters, raw control characters that make
XML ill-formed, and lone surrogates that cannot be encoded. `visible` replaces each such
character by its escape, `\\x1b`, `\\u202e`, `\\n`, so the text stays one line of printable
characters; `scrubbed` applies it to every string inside a report before a text format
renders it (JSON keeps the exact strings: its encoder escapes them).

A name written into code (`fix`'s code lines and suggestions) is never pasted in as it is:
`python_string` makes it a Python string literal, `python_name` uses it bare only where it is
a plain identifier, and `python_value` writes a config value as a literal, so no name can
close a quote and call something.
"""

from __future__ import annotations

import dataclasses
import enum
import keyword
import math
import re
import unicodedata
from typing import TypeVar, cast

T = TypeVar("T")

# Categories shown escaped: controls (C0, C1, DEL), format characters (bidi overrides and
# isolates, zero-width spaces and joiners, the BOM), surrogates, line and paragraph separators.
_HIDDEN = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
_SHORT = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
# Any character outside printable ASCII, or a control; the slow check runs only on these.
_CANDIDATE = re.compile(r"[^\x20-\x7e]")
# What a Python string literal holds as it is: printable ASCII but the quote and backslash.
_PLAIN = re.compile(r"[\x20-\x21\x23-\x5b\x5d-\x7e]*")


def _escape(ch: str) -> str:
    if ch in _SHORT:
        return _SHORT[ch]
    code = ord(ch)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def _hidden(ch: str) -> bool:
    code = ord(ch)
    return (
        unicodedata.category(ch) in _HIDDEN
        or (code & 0xFFFE) == 0xFFFE
        or (0xFDD0 <= code <= 0xFDEF)
    )  # noncharacters: not allowed in XML either


def visible(text: str) -> str:
    """``text`` with every control, format, surrogate or separator character escaped.

    >>> visible("dense\\x1b]8;;http://x\\x07")
    'dense\\\\x1b]8;;http://x\\\\x07'
    >>> visible("abc\\u202edcba")
    'abc\\\\u202edcba'
    """
    if not _CANDIDATE.search(text):
        return text
    return "".join(_escape(ch) if _hidden(ch) else ch for ch in text)


def python_string(text: str) -> str:
    """``text`` as a Python string literal in double quotes, one line of printable characters.

    Quotes and backslashes are escaped, and so is every character Python's ``repr`` escapes or
    `visible` would (controls, separators, bidi overrides, surrogates), so
    ``ast.literal_eval(python_string(t)) == t`` for any ``t``, no name can end the literal
    early, and `visible` leaves the literal as it is.

    >>> print(python_string('p": "mse"}, x=__import__("os").system("id"), z={"q'))
    "p\\": \\"mse\\"}, x=__import__(\\"os\\").system(\\"id\\"), z={\\"q"
    >>> print(python_string("two\\nlines"))
    "two\\nlines"
    """
    if _PLAIN.fullmatch(text):
        return f'"{text}"'
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch.isprintable() and not _hidden(ch):
            out.append(ch)
        else:
            out.append(_escape(ch))
    return '"' + "".join(out) + '"'


def python_name(text: str) -> str | None:
    """``text`` when it can stand bare in Python code (an identifier, not a keyword, nothing
    `visible` would escape); None when it must be written another way."""
    if text.isidentifier() and not keyword.iskeyword(text) and visible(text) == text:
        return text
    return None


def python_value(value: object) -> str:
    """A value of a config (a string, number, bool, None, list or dict of them) as a Python
    literal; a string through `python_string`, anything else as the string of its text."""
    if isinstance(value, str):
        return python_string(value)
    if value is None or isinstance(value, (bool, int)):
        return repr(value)
    if isinstance(value, float):
        return f"{value:g}" if math.isfinite(value) else f'float("{value}")'
    if isinstance(value, list):
        return "[" + ", ".join(python_value(v) for v in value) + "]"
    if isinstance(value, tuple):
        items = [python_value(v) for v in value]
        return f"({items[0]},)" if len(items) == 1 else "(" + ", ".join(items) + ")"
    if isinstance(value, dict):
        pairs = (f"{python_value(k)}: {python_value(v)}" for k, v in value.items())
        return "{" + ", ".join(pairs) + "}"
    return python_string(str(value))


def scrubbed(value: T) -> T:
    """A copy of a report (dataclasses, tuples, lists, dicts) with `visible` applied to every
    string in it; parts without such characters are returned as they are."""
    return cast(T, _scrub(value))


def _scrub(value: object) -> object:
    if isinstance(value, enum.Enum):
        return value
    if isinstance(value, str):
        return visible(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value) if f.init}
        changes = {name: new for name, old in fields.items() if (new := _scrub(old)) is not old}
        return dataclasses.replace(value, **changes) if changes else value
    if isinstance(value, (tuple, list)):
        items = [_scrub(v) for v in value]
        if all(a is b for a, b in zip(items, value, strict=True)):
            return value
        make = getattr(value, "_make", type(value))  # a named tuple is made from its items
        return make(items)
    if isinstance(value, dict):
        pairs = [(_scrub(k), _scrub(v)) for k, v in value.items()]
        if all(a is k and b is v for (a, b), (k, v) in zip(pairs, value.items(), strict=True)):
            return value
        return dict(pairs)
    return value
