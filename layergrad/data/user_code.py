"""Load the function of `--data FILE.py:function` / `module:function`, and call it safely.

`FILE.py` is imported from its path (a regular file; its folder first on `sys.path`),
`module` from the working directory as `python -m` would. Whatever the user's code raises
while imported, called or iterated, `SystemExit` included (a gate must never pass by
`sys.exit(0)`), becomes one `InputError` line. While it runs (`running_user_code`, in any
thread of this process, not in a child), `os._exit` raises `UserExit` instead of ending the
process with exit 0 and no report.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import inspect
import itertools
import os
import re
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from types import ModuleType

from layergrad.core.errors import InputError, one_line
from layergrad.files.guards import require_regular

FUNCTION = re.compile(r"^(?P<target>.+):(?P<name>[A-Za-z_]\w*)$")
MODULE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


class UserExit(SystemExit):
    """The user's code called `os._exit(code)` (caught as the `SystemExit` it would be)."""


_REAL_EXIT = os._exit
_guard = {"depth": 0, "pid": -1}
_lock = threading.Lock()


def _exit_from_user_code(code: int) -> None:
    if _guard["depth"] > 0 and os.getpid() == _guard["pid"]:
        raise UserExit(code)
    _REAL_EXIT(code)


@contextlib.contextmanager
def running_user_code() -> Iterator[None]:
    """While the block runs, `os._exit` raises `UserExit` (see the module doc)."""
    with _lock:
        if _guard["depth"] == 0:
            _guard["pid"] = os.getpid()
        _guard["depth"] += 1
        os._exit = _exit_from_user_code  # type: ignore[assignment]
    try:
        yield
    finally:
        with _lock:
            _guard["depth"] -= 1


def is_function(text: str) -> bool:
    """Whether `--data TEXT` names a function: `FILE.py:function` or `module:function`."""
    match = FUNCTION.match(text)
    if match is None:
        return False
    target = match["target"]
    return target.endswith(".py") or bool(MODULE.match(target))


def takes_argument(function: Callable[..., object]) -> bool:
    """Whether `function` can be called with one positional argument (the InputContext)."""
    try:
        parameters = list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError):  # a builtin without a signature: call it without
        return False
    return any(p.kind not in (p.KEYWORD_ONLY, p.VAR_KEYWORD) for p in parameters)


def load_function(ref: str) -> Callable[[], object]:
    """The function `ref` names, its file or module imported.

    Raises:
        InputError: no such file or module, its import raised, or it has no such function.
    """
    match = FUNCTION.match(ref)
    if match is None:
        raise InputError(f"--data {ref}: expected FILE.py:function or module:function")
    target, name = match["target"], match["name"]
    try:
        if target.endswith(".py"):
            with running_user_code():
                module = _import_file(Path(target), ref)
        else:  # from the working directory, as `python -m` would, for a module beside the data
            with running_user_code(), _first_on_path(os.getcwd()):
                module = importlib.import_module(target)
    except InputError:
        raise
    except ModuleNotFoundError as exc:
        raise InputError(
            f"--data {ref}: no module named {exc.name!r}; pass FILE.py:function with the path "
            "to the file, or install the module"
        ) from exc
    except (Exception, SystemExit) as exc:
        raise InputError(f"--data {ref}: importing {target} raised {raised(exc)}") from exc
    function = getattr(module, name, None)
    if not callable(function):
        found = sorted(k for k, v in vars(module).items() if callable(v) and not k.startswith("_"))
        raise InputError(
            f"--data {ref}: {target} has no function {name!r}; it defines "
            f"{', '.join(found[:8]) or 'no public functions'}"
        )
    return function


def checked_iteration(
    items: Iterable[object], ref: str, *, numbered: bool = False
) -> Iterator[object]:
    """The elements of a user iterable; what its code raises (SystemExit too) is one line,
    naming the batch it was reading when `numbered`."""
    iterator = iter(items)
    for index in itertools.count():
        try:
            with running_user_code():
                element = next(iterator)
        except StopIteration:
            return
        except (Exception, SystemExit) as exc:
            where = f"--data {ref}: batch {index}" if numbered else f"--data {ref}"
            raise InputError(f"{where}: the batches raised {raised(exc)}") from exc
        yield element


def raised(exc: BaseException) -> str:
    """What a user's code raised, in one line; SystemExit is named as the call it was."""
    if isinstance(exc, SystemExit):
        call = (
            f"os._exit({exc.code!r}) (it tried to end the process)" if isinstance(exc, UserExit)
            else f"SystemExit (it called sys.exit({exc.code!r}))"
        )  # fmt: skip
        return f"{call}; a data function must return or yield batches, not end the program"
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
    with _first_on_path(str(path.resolve().parent)):  # so the file can import its neighbours
        spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def _first_on_path(folder: str) -> Iterator[None]:
    sys.path.insert(0, folder)
    try:
        yield
    finally:
        sys.path.remove(folder)
