"""The static safety audit: what in a model's config would run code when Keras deserializes it.

It reads the config only (no TensorFlow, nothing imported) and refuses, at any depth:
Lambda layers carrying Python bytecode; legacy Lambda layers that name a function in a
module; ``TFSMLayer``; references to functions outside Keras (``os.system``, ``eval`` from
``builtins``); classes from ``builtins`` or from modules that are neither Keras nor named
with ``--import``.
"""

from __future__ import annotations

import builtins
import importlib.util
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from layergrad.core.errors import UnsafeModelError, UsageError
from layergrad.files.file_info import FileInfo
from layergrad.files.guards import require_regular
from layergrad.model.config import layer_name

KERAS_PACKAGES = ("keras", "keras_hub", "keras_cv", "keras_nlp")
_PYTHON_BUILTINS = frozenset(dir(builtins))
_IMPORTED = "named with --import"
_NOT_NAMED = f"which is neither Keras nor {_IMPORTED}"


@dataclass(frozen=True)
class Finding:
    """One static-audit finding: something that would run code when Keras deserializes."""

    layer: str
    class_name: str
    reason: str


def module_name(spec: str) -> str:
    """The module name an `--import` spec defines: the name itself, or a `.py` file's stem."""
    return Path(spec).stem if is_path(spec) else spec


def is_path(spec: str) -> bool:
    """Whether an `--import` spec is a path to a `.py` file rather than a module name."""
    return spec.endswith(".py") or os.sep in spec or "/" in spec


def check_import_specs(specs: Sequence[str], find: bool = True) -> None:
    """Refuse an `--import` that cannot be imported, before anything is loaded: a path that is
    no file, a name that is not a module name, or a module this Python cannot find (a `.py`
    file in the working directory is not on the path of the installed `layergrad`: the error
    says to pass its path). Finding a top-level module imports nothing; `find=False` (for a
    command that only trusts the names, `layers`) leaves module names unlooked-up.

    Raises:
        UsageError: the first spec that cannot be imported.
    """
    for spec in specs:
        if is_path(spec):
            if not os.path.exists(spec):
                raise UsageError(f"--import {spec}: no such file; pass a module name or a .py path")
            if os.path.isdir(spec):
                raise UsageError(
                    f"--import {spec} is a directory; pass the .py file that defines the "
                    "layers, or the package's module name"
                )
            # a FIFO would block the import, a device never end it
            require_regular(Path(spec), "a Python file", lambda m: UsageError(f"--import {m}"))
            continue
        parts = spec.split(".")
        if not spec or not all(p.isidentifier() for p in parts):
            raise UsageError(f"--import {spec!r} is neither a module name nor a path to a .py file")
        if not find:
            continue
        if not installed(parts[0]):
            here = f"{parts[0]}.py"
            hint = (
                f"; {here} in the working directory is not on the module path: pass --import {here}"
                if len(parts) == 1 and os.path.isfile(here)
                else "; install it or pass the path to its .py file"
            )
            raise UsageError(
                f"--import {spec}: no module named {parts[0]!r} in this environment{hint}"
            )


def installed(module: str) -> bool:
    """Whether the top-level `module` can be imported here (found, nothing imported)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a broken or blocked install
        return False


def check_safety(info: FileInfo, allowed_modules: Sequence[str], unsafe: bool) -> tuple[str, ...]:
    """Run the static audit; raise UnsafeModelError unless `unsafe`, else return the warnings."""
    findings = audit(info, allowed_modules)
    if not findings:
        return ()
    lines = tuple(f"layer {f.layer!r} ({f.class_name}): {f.reason}" for f in findings)
    if unsafe:
        return lines
    more = f" (and {len(findings) - 1} more)" if len(findings) > 1 else ""
    raise UnsafeModelError(
        f"refusing to load {info.path}: {lines[0]}{more}. Loading it could run code from the "
        "file. If you trust it, pass --unsafe; for a custom layer class, pass --import MODULE "
        "that defines it"
    )


def audit(info: FileInfo, allowed_modules: Sequence[str] = ()) -> tuple[Finding, ...]:
    """Findings for everything in the config that would run code when Keras deserializes it.

    Looks at every serialized object at any depth (nested models included). ``allowed_modules``
    are module names, registered packages, or ``.py`` paths whose stem is the module name.
    """
    allowed = tuple(module_name(a) for a in allowed_modules)
    out: list[Finding] = []
    top = info.config
    _scan(top, info.graph.name, str(top.get("class_name", "")), "", allowed, out)
    return tuple(dict.fromkeys(out))


def _scan(
    obj: object, layer: str, cls: str, prefix: str, allowed: tuple[str, ...], out: list[Finding]
) -> None:
    if isinstance(obj, list):
        for value in obj:
            _scan(value, layer, cls, prefix, allowed, out)
        return
    if not isinstance(obj, Mapping):
        return
    if (reason := _check(obj, cls, allowed)) is not None:
        out.append(Finding(layer, cls, reason))
    for key, value in obj.items():
        if key == "layers" and isinstance(value, list) and "class_name" not in obj:
            for member in value:
                if isinstance(member, Mapping):
                    path = prefix + layer_name(member)
                    _scan(member, path, str(member.get("class_name")), path + "/", allowed, out)
        else:
            _scan(value, layer, cls, prefix, allowed, out)


def _check(obj: Mapping[str, object], cls: str, allowed: tuple[str, ...]) -> str | None:
    """Why deserializing `obj` would run code outside Keras, or None."""
    name = obj.get("class_name")
    if not isinstance(name, str):
        return None
    inner = obj.get("config")
    module = obj.get("module")
    if name == "__lambda__":
        what = "Lambda layer" if cls == "Lambda" else f"{cls} layer"
        return f"{what} carries Python bytecode (a serialized lambda)"
    if name == "Lambda" and isinstance(inner, Mapping):
        return _legacy_lambda(inner, allowed)
    if name == "TFSMLayer":
        return "TFSMLayer loads and runs a TensorFlow SavedModel"
    if name == "function":
        return _function(inner, module, obj.get("registered_name"), allowed)
    if module == "builtins":
        return f"{name} is a class from module 'builtins', not Keras"
    if isinstance(module, str):
        if _allowed_module(module, obj.get("registered_name"), allowed):
            return None
        return f"{name} comes from module '{module}', {_NOT_NAMED}"
    if ">" in name and name.split(">", 1)[0] not in allowed:
        if allowed and module is None and _registered_name(name):
            # legacy .h5 writes only `package>Name`: Keras finds it only among the objects
            # a module registered (one the user named with --import), never by importing
            return None
        package = name.split(">", 1)[0]
        return f"{name} is a custom class from package '{package}', which is not {_IMPORTED}"
    return None


def _legacy_lambda(config: Mapping[str, object], allowed: tuple[str, ...]) -> str | None:
    """Why a Keras 2 Lambda config runs code: bytecode, or a function named in a module."""
    if config.get("function_type") == "lambda" or isinstance(config.get("function"), list):
        return "Lambda layer carries Python bytecode (a serialized lambda)"
    for kind, fn, mod in (
        ("function_type", "function", "module"),
        ("output_shape_type", "output_shape", "output_shape_module"),
    ):
        module, function = config.get(mod), config.get(fn)
        if config.get(kind) == "function" and not _allowed_module(str(module), None, allowed):
            return f"Lambda layer calls function {function!r} from module {module!r}, {_NOT_NAMED}"
    return None


def _registered_name(name: str) -> bool:
    parts = name.split(">")
    return len(parts) == 2 and all(p.replace(".", "_").isidentifier() for p in parts)


def _function(
    inner: object, module: object, registered: object, allowed: tuple[str, ...]
) -> str | None:
    """Why a serialized function reference is refused, or None for Keras's own functions.

    Keras resolves a function from ``builtins`` only among its own activations, losses and
    the like, by name; a Python builtin's name there (``eval``, ``exec``) is never Keras's.
    """
    fn = inner if isinstance(inner, str) else repr(inner)
    if module == "builtins":
        if isinstance(inner, str) and inner.isidentifier() and inner not in _PYTHON_BUILTINS:
            return None
        if allowed and isinstance(inner, str) and _registered_name(inner):
            # `package>name`: Keras finds it only among the objects a module registered (a
            # module the user named with --import), never by importing anything
            return None
        return f"function reference {fn!r} names a Python builtin, not a Keras function"
    if isinstance(module, str) and _allowed_module(module, registered, allowed):
        return None
    named = registered if isinstance(registered, str) and ">" in registered else fn
    package = named.split(">", 1)[0] if ">" in named else None
    if module is None and (package is None or package in allowed):
        return None  # a bare name resolves only among registered and Keras objects
    where = f"module {module!r}" if isinstance(module, str) else "no module"
    return f"function reference {fn!r} from {where}, {_NOT_NAMED}"


def _allowed_module(module: str, registered: object, allowed: tuple[str, ...]) -> bool:
    if module.split(".", 1)[0] in KERAS_PACKAGES:
        return True
    package = (
        registered.split(">", 1)[0] if isinstance(registered, str) and ">" in registered else None
    )
    return any(module == a or module.startswith(a + ".") or package == a for a in allowed)
