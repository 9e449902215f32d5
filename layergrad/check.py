"""The CI gate: named checks of one model file, from static reading to gradient flow.

1. readable   the file is a well-formed .keras / .h5 (no TensorFlow)
2. safe       the static audit finds nothing that would run code on load
3. weights    every stored weight is finite
4. loads      Keras loads it in safe mode
5. forward    a forward pass on a random probe batch is finite
6. gradient   the gradient of the outputs reaches every differentiable layer, finite

`static_only` stops after 3 and never imports TensorFlow.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from layergrad.errors import InputError, LayergradError, describe
from layergrad.fileinfo import FileInfo, read_file_info
from layergrad.results import CheckItem, FileVerdict, ScanRow

FINDINGS = (
    "unreadable",
    "unsafe",
    "error",
    "blocked",
    "nonfinite",
    "dead",
    "vanishing",
    "exploding",
)
DEFAULT_FAIL_ON = ("unreadable", "unsafe", "error", "nonfinite", "blocked")


@dataclass(frozen=True)
class CheckOptions:
    """What a check run looks for and how it probes."""

    fail_on: frozenset[str] = frozenset(DEFAULT_FAIL_ON)
    static_only: bool = False
    imports: tuple[str, ...] = ()
    unsafe: bool = False
    batch_size: int | None = 2  # None: 2, or 32 with data
    seed: int = 0
    data: Any = None  # data_api.DataOptions: forward and gradient checks over a data set


def data_options(
    data: str | None,
    limit: int | None = None,
    distribute: str | None = None,
    cpu_replicas: int | None = None,
    on_progress: Callable[[int, int | None], None] | None = None,
) -> Any:
    """`data_api.DataOptions` for `CheckOptions.data`, or None without a data path."""
    if data is None:
        given = [n for n, v in (("--limit", limit), ("--distribute", distribute),
                                ("--cpu-replicas", cpu_replicas)) if v is not None]  # fmt: skip
        if given:
            raise LayergradError(f"{', '.join(given)} only apply with --data PATH; add --data")
        return None
    from layergrad.data_api import DataOptions

    return DataOptions(data, limit, distribute, cpu_replicas, on_progress)


def check_files(
    paths: Sequence[str | os.PathLike[str]],
    options: CheckOptions = CheckOptions(),
    on_file: Callable[[str], None] | None = None,
) -> tuple[FileVerdict, ...]:
    """Check each file; `on_file(path)` is called as each one starts (for a progress bar)."""
    unknown = sorted(options.fail_on - set(FINDINGS))
    if unknown:
        raise LayergradError(
            f"unknown --fail-on finding {', '.join(unknown)}; use {','.join(FINDINGS)}"
        )
    verdicts = []
    for path in paths:
        if on_file is not None:
            on_file(os.fspath(path))
        verdicts.append(check_file(path, options))
    return tuple(verdicts)


def check_file(path: str | os.PathLike[str], options: CheckOptions = CheckOptions()) -> FileVerdict:
    """Run the checks on one file, stopping at the first that leaves nothing to check next."""
    items: list[CheckItem] = []

    def add(name: str, message: str, findings: Sequence[str] = ()) -> bool:
        passed = not set(findings) & options.fail_on
        items.append(CheckItem(name, passed, message, tuple(findings)))
        return passed

    try:
        info = read_file_info(path, read_weights=True)
    except LayergradError as exc:
        add("readable", str(exc), ["unreadable"])
        return _verdict(path, items)
    add("readable", f"{info.format} file, {len(info.graph.layers)} layers")
    if not _safe(info, options, add):
        return _verdict(path, items)
    _weights(info, add)
    if not options.static_only:
        _dynamic(path, info, options, add)
    return _verdict(path, items)


Add = Callable[..., bool]


def _verdict(path: str | os.PathLike[str], items: list[CheckItem]) -> FileVerdict:
    return FileVerdict(os.fspath(path), all(i.passed for i in items), tuple(items))


def _safe(info: FileInfo, options: CheckOptions, add: Add) -> bool:
    from layergrad.loader import check_safety, module_name

    try:
        accepted = check_safety(info, [module_name(m) for m in options.imports], options.unsafe)
    except LayergradError as exc:
        add("safe", str(exc), ["unsafe"])
        return False
    message = (
        f"accepted with --unsafe: {'; '.join(accepted)}"
        if accepted
        else "nothing runs code on load"
    )
    return add("safe", message)


def _weights(info: FileInfo, add: Add) -> None:
    bad = [w for w in info.weights if w.nan or w.inf]
    if bad:
        listed = ", ".join(f"{w.layer} ({w.nan} NaN, {w.inf} Inf)" for w in bad[:5])
        add("weights", f"non-finite weights in {listed}", ["nonfinite"])
    else:
        params = sum(w.params for w in info.weights)
        add("weights", f"{params:,} stored weights, all finite")


def _dynamic(path: str | os.PathLike[str], info: FileInfo, options: CheckOptions, add: Add) -> None:
    from layergrad import explain, layer_refs, loader, probe, scan
    from layergrad.api import ProbeOptions, probe_batch

    if options.data is not None:
        _dynamic_data(path, info, options, add)
        return
    try:
        loaded, _ = loader.load_model(path, options.imports, options.unsafe, info=info)
    except LayergradError as exc:
        add("loads", str(exc), ["unreadable"])
        return
    model = loaded.model
    add(
        "loads",
        f"{type(model).__name__} {model.name!r} loads in safe mode"
        if not options.unsafe
        else "loads",
    )
    try:
        batch = probe_batch(
            model, ProbeOptions(batch_size=options.batch_size or 2, seed=options.seed)
        )
    except LayergradError as exc:  # e.g. a model that does not declare its inputs
        add("forward", f"not run: {exc}")
        return
    try:
        trace = probe.run_trace(model, batch)
    except Exception as exc:  # the model's own code failed: the file fails, the run goes on
        add("forward", f"the forward pass failed: {describe(exc)}", ["error"])
        return
    first_bad = next((a for a in trace.activations if a.is_float and not _finite(a.value)), None)
    if first_bad is not None:
        add(
            "forward", f"non-finite activations from layer {first_bad.site.ref!r} on", ["nonfinite"]
        )
    else:
        add("forward", f"finite on a random batch of {batch.batch_size}")
    explainer = explain.Explainer(model, batch, info.graph, False, "sum")
    classes = {p: type(layer).__name__ for p, layer in layer_refs.iter_layers(model)}
    try:
        rows = scan.scan_rows(trace, info.graph, explainer, classes)
    except Exception as exc:  # diagnosis of an unusual layer failed: report, do not abort
        add("gradient", f"could not be analysed: {describe(exc)}", ["error"])
        return
    _gradient(rows, add)


def _dynamic_data(
    path: str | os.PathLike[str], info: FileInfo, options: CheckOptions, add: Add
) -> None:
    """The forward and gradient checks over every sample of `options.data` (one pass)."""
    from layergrad import data_api
    from layergrad.stream import BatchFailed

    try:
        loaded, strategy = data_api.open_model(
            path, options.data, options.imports, options.unsafe, info
        )
    except LayergradError as exc:
        add("loads", str(exc), ["unreadable"])
        return
    model = loaded.model
    safe = f"{type(model).__name__} {model.name!r} loads in safe mode"
    add("loads", safe if not options.unsafe else "loads")
    batch_size = options.batch_size or data_api.DEFAULT_BATCH_SIZE
    try:
        batches = data_api.open_stream(model, options.data, batch_size)
    except LayergradError as exc:  # the data does not fit this model: a usage error (exit 2)
        raise InputError(f"{os.fspath(path)}: {exc}") from exc
    try:
        run, rows = data_api.scan_over(loaded, strategy, batches, options.data)
    except BatchFailed as exc:  # the model's own code failed: the file fails, the run goes on
        add("forward", str(exc), ["error"])
        return
    add("forward", *data_api.forward_check(run))
    _gradient(rows, add)


def _gradient(rows: Sequence[ScanRow], add: Add) -> None:
    findings = sorted(
        {f if f != "blocked" else "blocked" for r in rows for f in r.flags}, key=FINDINGS.index
    )
    problems = [r for r in rows if r.flags]
    if not problems:
        differentiable = sum(1 for r in rows if r.status != "integer")
        add("gradient", f"reaches all {differentiable} differentiable layers, finite")
        return
    parts = []
    for flag in findings:
        layers = [r for r in problems if flag in r.flags]
        cause = next((c for r in layers for c in r.causes), None)
        why = f" ({cause.code} at {cause.layer})" if cause else ""
        names = ", ".join(r.layer for r in layers[:4]) + ("..." if len(layers) > 4 else "")
        parts.append(f"{flag}: {names}{why}")
    add("gradient", "; ".join(parts), findings)


def _finite(value: object) -> bool:
    import numpy as np

    return bool(np.all(np.isfinite(value)))  # type: ignore[call-overload]


def expand_paths(paths: Sequence[str]) -> list[str]:
    """Model files to check: files as given; a directory's .keras / .h5 files, recursively.

    A directory holding `saved_model.pb` is kept as it is, so its check explains SavedModels.
    """
    out: list[str] = []
    for text in paths:
        p = Path(text)
        if p.is_dir() and not (p / "saved_model.pb").exists():
            found = sorted(str(f) for f in p.rglob("*") if f.suffix in (".keras", ".h5"))
            if not found:
                raise LayergradError(f"no .keras or .h5 files in directory {text}")
            out.extend(found)
        else:
            out.append(text)
    if not out:
        raise LayergradError("give at least one model file to check")
    return out
