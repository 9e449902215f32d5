"""Names are data in every format: show what a reader cannot see, never let it act.

A layer name (or any string read from a model, a data source or a baseline) can hold
terminal escape sequences (an OSC 8 hyperlink, a window title, cursor movement), right-to-left
overrides that reorder what is shown, invisible characters, raw control characters that make
XML ill-formed, and lone surrogates that cannot be encoded. `visible` replaces each such
character by its escape, `\\x1b`, `\\u202e`, `\\n`, so the text stays one line of printable
characters; `scrubbed` applies it to every string inside a report before a text format
renders it (JSON keeps the exact strings: its encoder escapes them).
"""

from __future__ import annotations

import dataclasses
import enum
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
        changes = {}
        for f in dataclasses.fields(value):
            if not f.init:
                continue
            old = getattr(value, f.name)
            new = _scrub(old)
            if new is not old:
                changes[f.name] = new
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
