"""Typed reads of a JSON document's members; each error names the member and the file."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TypeVar, overload

from layergrad.core.errors import InputError

T = TypeVar("T")
Kind = type | tuple[type, ...]
NUMBER = (int, float)
OPTIONAL = type(None)


class JsonFields:
    """Members of one document read as the types expected, or one clear InputError.

    `missing_hint` ends the message of a member that is missing (what the file should be);
    `wrong_hint` ends that of a member of the wrong type. `text` checks every string read.
    """

    def __init__(self, where: str, missing_hint: str, wrong_hint: str = "") -> None:
        self.where = where
        self.missing_hint = missing_hint
        self.wrong_hint = wrong_hint

    def error(self, name: str, expected: str, got: object) -> InputError:
        try:
            shown = json.dumps(got)[:60]
        except (TypeError, ValueError):
            shown = type(got).__name__
        return InputError(f"{self.where}: {name} is {shown}, expected {expected}{self.wrong_hint}")

    def text(self, value: str, name: str) -> str:
        """A string member as read (subclasses refuse what they cannot show)."""
        return value

    @overload
    def get(self, obj: Mapping[str, object], key: str, kind: type[T], name: str = "") -> T: ...
    @overload
    def get(
        self, obj: Mapping[str, object], key: str, kind: tuple[type[T], type[None]], name: str = ""
    ) -> T | None: ...
    @overload
    def get(
        self,
        obj: Mapping[str, object],
        key: str,
        kind: tuple[type[int], type[float]],
        name: str = "",
    ) -> float: ...
    @overload
    def get(
        self,
        obj: Mapping[str, object],
        key: str,
        kind: tuple[type[int], type[float], type[None]],
        name: str = "",
    ) -> float | None: ...
    def get(self, obj: Mapping[str, object], key: str, kind: Kind, name: str = "") -> object:
        """`obj[key]`, checked to be of `kind` (a bool is not a number)."""
        name = name or key
        if key not in obj:
            raise InputError(f"{self.where}: {name} is missing; {self.missing_hint}")
        value = obj[key]
        numeric = kind in (int, float, NUMBER) or (isinstance(kind, tuple) and int in kind)
        if not isinstance(value, kind) or (isinstance(value, bool) and numeric):
            raise self.error(name, kind_name(kind), value)
        return self.text(value, name) if isinstance(value, str) else value


def kind_name(kind: Kind) -> str:
    """How a message names a JSON type: `an integer or null`."""
    kinds = kind if isinstance(kind, tuple) else (kind,)
    names = {str: "a string", int: "an integer", float: "a number", bool: "true or false",
             list: "a list", dict: "an object", OPTIONAL: "null"}  # fmt: skip
    return " or ".join(dict.fromkeys(names.get(k, k.__name__) for k in kinds))
