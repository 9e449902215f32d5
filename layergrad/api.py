"""The Python API under the CLI: each function runs the pipeline and returns result objects.

Nothing here prints. Example:

    >>> from layergrad.api import inspect_model
    >>> report = inspect_model("sample_models/seed.keras", "dense", ["dense_1"])
    >>> report.results[0].status
    'ok'
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from layergrad.errors import InputError
from layergrad.results import InspectReport, ModelMeta, ProbeMeta, ScanReport

REDUCTIONS = ("sum", "mean")
DEFAULT_BATCH_SIZE = 8  # the random probe batch; data_api.DEFAULT_BATCH_SIZE with --data
PathLike = str | os.PathLike[str]
Progress = Callable[[int, "int | None"], None]


@dataclass(frozen=True)
class ProbeOptions:
    """How to make the probe batch and run the model (the options every command shares)."""

    input_file: PathLike | None = None
    batch_size: int = 8
    seed: int = 0
    reduce: str = "sum"
    training: bool = False


def inspect_model(
    path: PathLike,
    source: str,
    targets: Sequence[str],
    *,
    input_file: PathLike | None = None,
    batch_size: int | None = None,
    seed: int = 0,
    reduce: str = "sum",
    training: bool = False,
    imports: Sequence[str] = (),
    unsafe: bool = False,
    data: PathLike | None = None,
    limit: int | None = None,
    distribute: str | None = None,
    cpu_replicas: int | None = None,
    on_progress: Progress | None = None,
) -> InspectReport:
    """Gradient of each target layer's activation with respect to the source layer's.

    Args:
        path: a `.keras` or legacy `.h5` model file.
        source: layer reference for `--from` (`dense`, `encoder/dense_1`, `shared@1`, `-2`).
        targets: one or more layer references for `--to`.
        input_file: `.npy` / `.npz` probe batch; random from the input spec when None.
        batch_size, seed: size (default 8, 32 with `data`) and seed of the random probe batch.
        reduce: "sum" or "mean" of each target before differentiating.
        training: run the model in training mode.
        imports: modules (names or `.py` paths) that register custom layers.
        unsafe: let Keras deserialize Python code in the file.
        data: run over every sample of a data set instead of one batch: `.npy`, `.npz`, an
            image folder or `FILE.py:function` (see `data_api`); statistics are those of the
            whole set as one batch, and each result gains `data` (dead units, per-sample L2).
        limit, distribute, cpu_replicas, on_progress: with `data`, see `data_api.DataOptions`.

    Returns:
        An InspectReport with one Result per target, in order.

    Raises:
        LoadError, LayerNotFound, InputError: user errors (the CLI exits with code 2).
    """
    if not targets:
        raise InputError("give at least one target layer (--to)")
    options = _data_options(input_file, data, limit, distribute, cpu_replicas, on_progress)
    if options is not None:
        from layergrad import data_api

        _check_reduce(reduce)
        return data_api.inspect_data(
            path, source, targets, options, batch_size=batch_size or data_api.DEFAULT_BATCH_SIZE,
            reduce=reduce, training=training, imports=imports, unsafe=unsafe,
        )  # fmt: skip
    options = ProbeOptions(input_file, batch_size or DEFAULT_BATCH_SIZE, seed, reduce, training)
    from layergrad import diagnose, explain, layer_refs, probe, scan

    loaded, batch = _open(path, options, imports, unsafe)
    model = loaded.model
    source_site = layer_refs.resolve(model, source)
    target_sites = [layer_refs.resolve(model, ref) for ref in targets]
    run = probe.run_probe(
        model, batch, [source_site], target_sites, training=training, reduce=reduce
    )
    explainer = explain.Explainer(model, batch, loaded.info.graph, training, reduce)
    results = diagnose.build_results(run, loaded.info.graph, explainer.causes)
    notes = [
        None if site.layer is None else scan.softmax_note(model, site.layer)
        for site in target_sites
    ]
    results = tuple(
        replace(res, warnings=(*res.warnings, note)) if note else res
        for res, note in zip(results, notes, strict=True)
    )
    return InspectReport(
        model=model_meta(path, loaded), probe=probe_meta(batch, options), results=results
    )


def scan_model(
    path: PathLike,
    *,
    target: str | None = None,
    layers: Sequence[str] = (),
    input_file: PathLike | None = None,
    batch_size: int | None = None,
    seed: int = 0,
    reduce: str = "sum",
    training: bool = False,
    imports: Sequence[str] = (),
    unsafe: bool = False,
    data: PathLike | None = None,
    limit: int | None = None,
    distribute: str | None = None,
    cpu_replicas: int | None = None,
    on_progress: Progress | None = None,
) -> ScanReport:
    """Gradient of one target with respect to every layer's output, in one backward pass.

    The statistics are reduced inside the pass, so no layer's gradient is kept; a row that
    is not ok gets its causes from one more pass that keeps them.

    Args:
        target: a layer reference; None differentiates the sum of the model's outputs.
        layers: shell globs (`conv*`, `encoder/*`) that keep only matching layers.
        (the rest as in `inspect_model`)

    Returns:
        A ScanReport with one row per layer call the target depends on, in execution order.

    Example:
        >>> rows = scan_model("sample_models/residual.keras").rows
        >>> [r.layer for r in rows][:2]
        ['x', 'stem']
    """
    data_options = _data_options(input_file, data, limit, distribute, cpu_replicas, on_progress)
    if data_options is not None:
        from layergrad import data_api

        _check_reduce(reduce)
        return data_api.scan_data(
            path, data_options, target=target, layers=layers,
            batch_size=batch_size or data_api.DEFAULT_BATCH_SIZE, reduce=reduce,
            training=training, imports=imports, unsafe=unsafe,
        )  # fmt: skip
    options = ProbeOptions(input_file, batch_size or DEFAULT_BATCH_SIZE, seed, reduce, training)
    from layergrad import explain, layer_refs, probe, scan, stream

    loaded, batch = _open(path, options, imports, unsafe)
    model = loaded.model
    site = None if target is None else layer_refs.resolve(model, target)
    plan = stream.Plan(targets=(site,), every_leaf=True, training=training, reduce=reduce)
    run = stream.run_batch(model, plan, batch.arrays)

    def full_trace() -> tuple[Any, Any]:  # only when a row is not ok
        trace = probe.run_trace(model, batch, site, training=training, reduce=reduce)
        return trace, explain.Explainer(model, batch, loaded.info.graph, training, reduce)

    classes = {p: type(layer).__name__ for p, layer in layer_refs.iter_layers(model)}
    causes = scan.trace_causes(full_trace, loaded.info.graph)
    rows = scan.summary_rows(run, loaded.info.graph, classes, layers, causes)
    note = scan.softmax_note(model, site.layer if site else None)
    return ScanReport(
        model=model_meta(path, loaded),
        probe=probe_meta(batch, options),
        target=site.ref if site else None,
        rows=rows,
        notes=(note,) if note else (),
    )


def _data_options(
    input_file: PathLike | None,
    data: PathLike | None,
    limit: int | None,
    distribute: str | None,
    cpu_replicas: int | None,
    on_progress: Progress | None,
) -> Any:
    """The `data_api.DataOptions` for `data`, or None; the data options need `data`."""
    if data is None:
        given = [
            name
            for name, value in (
                ("--limit", limit), ("--distribute", distribute), ("--cpu-replicas", cpu_replicas)
            )
            if value is not None
        ]  # fmt: skip
        if given:
            raise InputError(f"{', '.join(given)} only apply with --data PATH; add --data")
        return None
    if input_file is not None:
        raise InputError(
            "--data and --input exclude each other: --input is one probe batch, --data a "
            "whole data set; pass one of them"
        )
    from layergrad.data_api import DataOptions

    return DataOptions(data, limit, distribute, cpu_replicas, on_progress)


def _check_reduce(reduce: str) -> None:
    if reduce not in REDUCTIONS:
        raise InputError(f"reduce must be one of {', '.join(REDUCTIONS)}: reduce={reduce!r}")


def _open(
    path: PathLike, options: ProbeOptions, imports: Sequence[str], unsafe: bool
) -> tuple[Any, Any]:
    """Load the model (audited, safe mode) and make its probe batch."""
    from layergrad import loader

    loaded, _ = loader.load_model(path, imports=imports, unsafe=unsafe)
    return loaded, probe_batch(loaded.model, options)


def probe_batch(model: Any, options: ProbeOptions) -> Any:
    """The probe batch for `model`: the `--input` file, or random from its input spec."""
    from layergrad import inputs

    if options.reduce not in REDUCTIONS:
        raise InputError(
            f"reduce must be one of {', '.join(REDUCTIONS)}: reduce={options.reduce!r}"
        )
    if options.input_file is not None:
        try:
            specs: Any = inputs.input_specs(model)
        except InputError:  # a subclassed model: its inputs are whatever the file holds
            specs = None
        return inputs.load_batch(options.input_file, specs)
    specs = inputs.input_specs(model)
    return inputs.random_batch(
        specs, options.batch_size, options.seed, inputs.integer_ranges(model)
    )


def model_meta(path: PathLike, loaded: Any) -> ModelMeta:
    """What the report says about the model file."""
    return ModelMeta(
        path=os.fspath(path),
        format=loaded.info.format,
        class_name=type(loaded.model).__name__,
        name=loaded.model.name,
    )


def probe_meta(batch: Any, options: ProbeOptions) -> ProbeMeta:
    """What the report says about the probe batch and mode."""
    return ProbeMeta(
        source=batch.source,
        seed=batch.seed,
        batch_size=batch.batch_size,
        training=options.training,
        reduce=options.reduce,
    )


def save_gradients(report: InspectReport, path: PathLike) -> None:
    """Write the raw gradient arrays: `.npy` for one result, `.npz` keyed by `--to` reference.

    A result whose gradient is None is left out of an `.npz`; a `.npy` of a None gradient is
    an error, since there is nothing to write.
    """
    import numpy as np

    text = os.fspath(path)
    arrays = {
        r.target.layer: r.array if r.array.dtype.kind == "f" else r.array.astype(np.float32)
        for r in report.results
        if r.array is not None
    }  # bfloat16 arrays would be saved as opaque void bytes
    if text.endswith(".npy"):
        if len(report.results) != 1:
            raise InputError(f"--save-gradient {text}: several --to layers need a .npz file")
        if not arrays:
            raise InputError(f"--save-gradient {text}: the gradient is None, nothing to save")
        _write(np.save, text, next(iter(arrays.values())))
    elif text.endswith(".npz"):
        _write(np.savez, text, **arrays)
    else:
        raise InputError(f"--save-gradient must end in .npy or .npz: {text}")


def _write(save: Any, path: str, *args: Any, **kwargs: Any) -> None:
    try:
        save(path, *args, **kwargs)
    except OSError as exc:
        raise InputError(f"--save-gradient {path}: cannot write it ({exc.strerror})") from exc
