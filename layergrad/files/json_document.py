"""Reading a JSON file layergrad wrote (a scan profile, a report): bounded, strict, one-line
errors."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import NoReturn

from layergrad.core.errors import InputError
from layergrad.files.guards import require_regular


def read_json_document(
    path: str | os.PathLike[str], where: str, limit: int, kind: str, advice: str
) -> object:
    """The strict JSON document in the file `path` (NaN and Infinity refused).

    `where` names the file in errors, `kind` says what it should be ("a scan JSON"), and
    `advice` ends each message (what to do instead).

    Raises:
        InputError: the file is missing, not a regular file, unreadable, over `limit` bytes,
            not UTF-8 text, not strict JSON, or nested too deeply to parse.
    """
    text = os.fspath(path)
    if os.path.exists(text) and not os.path.isdir(text):  # a FIFO would block, /dev/zero never end
        require_regular(Path(text), f"{kind} file", lambda m: InputError(f"{where}: {m}"))
    try:
        with open(text, "rb") as handle:
            data = handle.read(limit + 1)
    except FileNotFoundError:
        raise InputError(f"{where}: no such file; {advice}") from None
    except IsADirectoryError:
        raise InputError(f"{where} is a directory, not {kind} file; {advice}") from None
    except OSError as exc:
        raise InputError(f"{where}: cannot read it ({exc.strerror or exc})") from None
    if len(data) > limit:
        raise InputError(
            f"{where} is larger than {limit / 2**20:g} MiB, far more than {kind} holds; {advice}"
        )
    try:
        return json.loads(data.decode("utf-8"), parse_constant=_no_constant)
    except UnicodeDecodeError:
        raise InputError(f"{where} is not a JSON document (not UTF-8 text); {advice}") from None
    except ValueError as exc:
        raise InputError(f"{where} is not a JSON document ({str(exc)[:80]}); {advice}") from None
    except RecursionError:  # layergrad's documents are a few levels deep; the parser recurses
        raise InputError(f"{where} is nested too deeply for {kind}; {advice}") from None


def _no_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not valid JSON")
