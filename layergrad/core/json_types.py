"""Types for JSON documents and Keras configs, and the narrowing that reads them.

Code that walks a Keras config takes a `Config`
(a JSON object whose values are read as `object`) and narrows each value it uses with
`member` / `members` / `listed`: a value of the wrong kind is a TypeError (which the file
reader turns into "malformed config"), never a silent wrong answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeAlias

Config: TypeAlias = Mapping[str, object]  # a JSON object of a Keras config, values narrowed


def as_config(value: object, what: str = "value") -> Config:
    """`value` as a JSON object; TypeError when it is something else."""
    if not isinstance(value, Mapping):
        raise TypeError(f"{what} is {type(value).__name__}, not an object")
    return value


def member(cfg: Config, key: str) -> Config:
    """`cfg[key]` as a JSON object: KeyError when missing, TypeError when not an object."""
    return as_config(cfg[key], key)


def listed(value: object, what: str = "value") -> list[object]:
    """`value` as a JSON list; TypeError when it is something else."""
    if not isinstance(value, list):
        raise TypeError(f"{what} is {type(value).__name__}, not a list")
    return value


def members(value: object, what: str = "value") -> list[Config]:
    """`value` as a JSON list of objects; TypeError when it is something else."""
    return [as_config(v, what) for v in listed(value, what)]
