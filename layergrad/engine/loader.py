"""Open a model file: read and audit it without TensorFlow, then let Keras load it safely."""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import re
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from layergrad.core.errors import LayergradError, LoadError, UsageError, one_line, without_styles
from layergrad.core.limits import DEFAULT_MAX_MEMORY
from layergrad.core.tf_types import KerasModel
from layergrad.files.audit import check_import_specs, check_safety, is_path, module_name
from layergrad.files.file_info import FileInfo, file_stamp, read_file_info
from layergrad.files.guards import require_regular
from layergrad.model import memory_estimate


@dataclass(frozen=True)
class LoadedModel:
    """A Keras model and what was read from its file before Keras saw it."""

    model: KerasModel
    info: FileInfo


def import_modules(specs: Sequence[str]) -> tuple[str, ...]:
    """Import each `--import` (a module name or a path to a `.py` file); return module names.

    The user names these modules, so they are trusted; a model file never causes an import.
    """
    check_import_specs(specs)
    names = []
    for spec in specs:
        try:
            names.append(_import_one(spec))
        except LayergradError:
            raise
        except (Exception, SystemExit) as exc:  # the user's module failed while importing
            what = (
                f"it called sys.exit({exc.code!r})"
                if isinstance(exc, SystemExit)
                else f"{type(exc).__name__}: {one_line(str(exc))}"
            )  # a gate must never pass because a module ended the program
            raise LoadError(f"--import {spec} failed: {what}") from exc
    return tuple(names)


def _import_one(spec: str) -> str:
    if is_path(spec):
        path = Path(spec)
        # a FIFO would block the import
        require_regular(path, "a Python file", lambda m: LoadError(f"--import {m}"))
        name = path.stem
        if name not in sys.modules:
            module_spec = importlib.util.spec_from_file_location(name, path)
            if module_spec is None or module_spec.loader is None:
                raise LoadError(f"--import {spec}: not an importable Python file")
            module = importlib.util.module_from_spec(module_spec)
            sys.modules[name] = module
            module_spec.loader.exec_module(module)
        return name
    try:
        importlib.import_module(spec)
    except ModuleNotFoundError as exc:
        raise UsageError(
            f"--import {spec}: no module named {exc.name!r} in this environment; "
            "install it or pass the path to its .py file"
        ) from exc
    return spec


def load_model(
    path: str | os.PathLike[str],
    imports: Sequence[str] = (),
    unsafe: bool = False,
    info: FileInfo | None = None,
    *,
    batch_rows: int = 8,
    max_memory: int = DEFAULT_MAX_MEMORY,
) -> tuple[LoadedModel, tuple[str, ...]]:
    """Read, audit and load a `.keras` or `.h5` model file (never writes to it or beside it).

    Before TensorFlow is imported, the file must pass the audit and `memory_estimate.preflight`
    (its graph, its stored weights and the probe's estimated memory for ``batch_rows`` rows
    within ``max_memory``). Returns the loaded model and the audit warnings accepted by
    `unsafe=True`. Pass `info` when the file was read already.

    Raises:
        LoadError: the file is unreadable, malformed, over a budget or fails to load;
            UnsafeModelError when the audit refuses it.
        UsageError: the file names a custom class that neither Keras nor an `--import`
            module defines (the file itself reads fine), or an `--import` wrote the file.

    Example:
        >>> loaded, _ = load_model("sample_models/seed.keras")
        >>> loaded.model.name
        'sequential'
    """
    check_import_specs(imports)
    info = info or read_file_info(path, read_weights=False)
    warnings = check_safety(info, [module_name(spec) for spec in imports], unsafe)
    memory_estimate.preflight(info, batch_rows, max_memory)
    from layergrad.core.keras_backend import quiet_import

    _, keras = quiet_import()  # before user modules, which may import TensorFlow noisily
    names = import_modules(imports)
    if info.stamp is not None and file_stamp(path) != info.stamp:
        raise UsageError(_changed_message(info, imports))  # the audit read another file
    custom = defined_classes(names, keras)
    with _system_temp_copy(Path(path), info.format) as local:
        try:
            model = keras.saving.load_model(
                local, custom_objects=custom, compile=False, safe_mode=not unsafe
            )
        except Exception as exc:
            missing = _MISSING.search(str(exc))
            if missing is None:
                raise LoadError(_explain_keras_error(info, exc, local, unsafe)) from exc
            kind, name = (missing[1], missing[2]) if missing[1] else (missing[3], missing[4])
            if _h5_operation(info, name, keras):  # no --import helps
                raise LoadError(
                    f"{info.path} uses the Keras operation {name!r} between its layers (keras.ops "
                    "or an operator on tensors), which Keras saves in the legacy .h5 format but "
                    'cannot load back from it; save the model as .keras (model.save("model.keras"))'
                ) from exc
            raise UsageError(_missing_message(info, kind, name, imports)) from exc
    return LoadedModel(model=model, info=info), warnings


def defined_classes(modules: Sequence[str], keras: ModuleType) -> dict[str, type]:
    """The classes each `--import` module defines itself (not those it imports), by name: Keras
    finds a class the file names among them even when the module does not register it
    (`@keras.saving.register_keras_serializable`), as it finds a registered one. A class named
    as one of Keras's own is left out: a legacy .h5 file would load it in place of Keras's."""
    kinds = [getattr(keras, kind, None) for kind in _KERAS_KINDS]
    found: dict[str, type] = {}
    for name in modules:
        module = sys.modules.get(name)
        for attr, value in vars(module).items() if module is not None else ():
            keras_own = any(hasattr(kind, attr) for kind in kinds if kind is not None)
            if isinstance(value, type) and value.__module__ == name and not keras_own:
                found.setdefault(attr, value)
    return found


# the namespaces of the objects a model file names
_KERAS_KINDS = (
    "layers", "models", "losses", "metrics", "optimizers", "activations", "initializers",
    "regularizers", "constraints",
)  # fmt: skip


def _changed_message(info: FileInfo, imports: Sequence[str]) -> str:
    """The model file was written after layergrad read it (by an `--import`, most likely)."""
    if not imports:
        return f"{info.path} changed while layergrad read it; run again once it is written"
    return (
        f"{info.path} changed after --import {' '.join(imports)} was imported: the module runs "
        "code that writes the model (a training script?); --import takes a module that only "
        "defines the custom classes (importing it runs its top-level code); move them into one"
    )


# how Keras says it could not find a class or function a file names (.keras, legacy .h5)
_MISSING = re.compile(r"Could not locate (class|function) '([^']+)'|Unknown (\w+): '([^']+)'")


def _missing_message(info: FileInfo, kind: str, name: str, imports: Sequence[str]) -> str:
    """The file reads fine: the command lacks the module that defines its custom class."""
    given = (
        f"neither Keras nor --import {' '.join(imports)} defines or registers it"
        if imports
        else "no --import module defines it"
    )
    return (
        f"{info.path} uses the custom {kind} {name!r}, and {given}; pass --import MODULE (a "
        f"name or a .py path) naming the module that defines {name} (a module that only "
        "defines classes: importing it runs its top-level code)"
    )


def _h5_operation(info: FileInfo, name: str, keras: ModuleType) -> bool:
    """Whether the class Keras could not find is one of its own operations (`keras.ops.sum`,
    `a * 2.0` between layers) in a legacy .h5 file: Keras writes them there but cannot read
    them back, so no `--import` helps."""
    if info.format != "h5" or all(e.class_name != name for e in info.graph.unlisted):
        return False  # the graph's unlisted entries: its operations (and input layers)
    todo = [keras.Operation]
    while todo:
        kind = todo.pop()
        if kind.__name__ == name and kind.__module__.startswith("keras.src.ops"):
            return True
        todo.extend(kind.__subclasses__())
    return False


@contextlib.contextmanager
def _system_temp_copy(path: Path, fmt: str) -> Iterator[str]:
    """A path to the model inside a fresh folder of the system temp directory.

    For weights over half the free memory (or 512 MB without psutil) Keras extracts them into
    a temporary folder *next to the file it is given*, and leaves it behind if interrupted.
    Giving Keras a symbolic link in the system temp directory keeps that folder there; the
    link is named for the format, since Keras picks the format from the name.
    """
    with tempfile.TemporaryDirectory(prefix="layergrad-") as folder:
        link = Path(folder) / ("model.keras" if fmt == "keras" else "model.h5")
        try:
            link.symlink_to(path.resolve())
        except OSError:  # no symbolic links here: Keras reads the file where it is
            yield os.fspath(path)
            return
        yield os.fspath(link)


def _explain_keras_error(info: FileInfo, exc: Exception, local: str, unsafe: bool) -> str:
    text = " ".join(without_styles(str(exc)).replace(local, info.path).split())
    text = text or type(exc).__name__
    lowered = text.lower()
    if "could not locate" in lowered or "unknown layer" in lowered:
        return (
            f"{info.path} uses a custom class that is not registered ({_clip(text)}); pass "
            "--import MODULE naming the module that defines it"
        )
    if not unsafe and ("safe_mode" in lowered or "lambda" in lowered):
        return (
            f"{info.path}: Keras refused to deserialize Python code ({_clip(text)}); "
            "pass --unsafe only if you trust the file"
        )
    shapes = "shape" in lowered and any(w in lowered for w in ("weight", "variable", "expected"))
    counts = "layer count mismatch" in lowered or ("expected" in lowered and "variables" in lowered)
    if shapes or counts:
        return (
            f"the weights in {info.path} do not match its architecture ({_clip(text)}); "
            "re-save the model from the code that trained it"
        )
    return f"Keras could not load {info.path}: {_clip(text)}"


def _clip(text: str, limit: int = 240) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
