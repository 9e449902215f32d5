"""The Python API under the CLI: each function runs the pipeline and returns result objects.

Nothing here prints. Example:

    >>> from layergrad.api import inspect_model
    >>> report = inspect_model("sample_models/seed.keras", "dense", ["dense_1"])
    >>> report.results[0].status
    'ok'
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from layergrad.errors import InputError
from layergrad.limits import DEFAULT_MAX_MEMORY
from layergrad.results import InspectReport, ModelMeta, ProbeMeta, ScanReport

REDUCTIONS = ("sum", "mean")
PathLike = str | os.PathLike[str]


@dataclass(frozen=True)
class ProbeOptions:
    """How to make the probe batch and run the model (the options every command shares)."""

    input_file: PathLike | None = None
    batch_size: int = 8
    seed: int = 0
    reduce: str = "sum"
    training: bool = False
    max_memory: int = DEFAULT_MAX_MEMORY


def inspect_model(
    path: PathLike,
    source: str,
    targets: Sequence[str],
    *,
    input_file: PathLike | None = None,
    batch_size: int = 8,
    seed: int = 0,
    reduce: str = "sum",
    training: bool = False,
    imports: Sequence[str] = (),
    unsafe: bool = False,
    max_memory: int = DEFAULT_MAX_MEMORY,
) -> InspectReport:
    """Gradient of each target layer's activation with respect to the source layer's.

    Args:
        path: a `.keras` or legacy `.h5` model file.
        source: layer reference for `--from` (`dense`, `encoder/dense_1`, `shared@1`, `-2`).
        targets: one or more layer references for `--to`.
        input_file: `.npy` / `.npz` probe batch; random from the input spec when None.
        batch_size, seed: size and seed of the random probe batch.
        reduce: "sum" or "mean" of each target before differentiating.
        training: run the model in training mode.
        imports: modules (names or `.py` paths) that register custom layers.
        unsafe: let Keras deserialize Python code in the file.
        max_memory: budget in bytes for the probe's memory, estimated from the config before
            Keras builds the model.

    Returns:
        An InspectReport with one Result per target, in order.

    Raises:
        LoadError, LayerNotFound, InputError: user errors (the CLI exits with code 2).
    """
    if not targets:
        raise InputError("give at least one target layer (--to)")
    options = ProbeOptions(input_file, batch_size, seed, reduce, training, max_memory)
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
    batch_size: int = 8,
    seed: int = 0,
    reduce: str = "sum",
    training: bool = False,
    imports: Sequence[str] = (),
    unsafe: bool = False,
    max_memory: int = DEFAULT_MAX_MEMORY,
) -> ScanReport:
    """Gradient of one target with respect to every layer's output, in one backward pass.

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
    options = ProbeOptions(input_file, batch_size, seed, reduce, training, max_memory)
    from layergrad import explain, layer_refs, probe, scan

    loaded, batch = _open(path, options, imports, unsafe)
    model = loaded.model
    site = None if target is None else layer_refs.resolve(model, target)
    trace = probe.run_trace(model, batch, site, training=training, reduce=reduce)
    explainer = explain.Explainer(model, batch, loaded.info.graph, training, reduce)
    classes = {p: type(layer).__name__ for p, layer in layer_refs.iter_layers(model)}
    rows = scan.scan_rows(trace, loaded.info.graph, explainer, classes, layers)
    note = scan.softmax_note(model, site.layer if site else None)
    return ScanReport(
        model=model_meta(path, loaded),
        probe=probe_meta(batch, options),
        target=site.ref if site else None,
        rows=rows,
        notes=(note,) if note else (),
    )


def _open(
    path: PathLike, options: ProbeOptions, imports: Sequence[str], unsafe: bool
) -> tuple[Any, Any]:
    """Load the model (audited, within the memory budget, safe mode) and make its probe batch.

    An `--input` file is checked (its headers) before the model is loaded, so a bad one is
    reported in a second, and its rows are the batch the memory estimate is made for.
    """
    from layergrad import inputs, loader

    rows = options.batch_size
    if options.input_file is not None:
        rows = inputs.peek_rows(options.input_file)
    loaded, _ = loader.load_model(
        path, imports=imports, unsafe=unsafe, batch_rows=rows, max_memory=options.max_memory
    )
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
        specs,
        options.batch_size,
        options.seed,
        inputs.integer_ranges(model),
        max_bytes=options.max_memory,
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
