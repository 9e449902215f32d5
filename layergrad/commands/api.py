"""The Python API under the CLI: each function runs the pipeline and returns result objects.

Nothing here prints. Probe options are keyword arguments (`input_file`, `batch_size`, `seed`,
`reduce`, `training`, ...: the fields of `ProbeOptions`, by their names), or one
`options=ProbeOptions(...)`.

    >>> from layergrad.commands.api import inspect_model
    >>> report = inspect_model("sample_models/seed.keras", "dense", ["dense_1"])
    >>> report.results[0].status
    <Status.OK: 'ok'>
    >>> report.results[0].gradient.shape
    (8, 8)
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from layergrad.commands.session import Session, open_session
from layergrad.core.errors import InputError, UsageError
from layergrad.core.probe_options import PathLike, ProbeOptions, Progress, probe_from
from layergrad.core.results import InspectReport, Result, ScanReport, WeightScanReport
from layergrad.core.vocab import Measure, Status

if TYPE_CHECKING:
    from layergrad.engine.jacobian import JacobianOptions
    from layergrad.files.outputs import Written
    from layergrad.model.graph import ModelGraph
    from layergrad.model.layer_refs import Site

__all__ = ["ProbeOptions", "inspect_model", "save_gradients", "scan_model", "scan_weights_model"]


def inspect_model(
    path: PathLike,
    source: str,
    targets: str | Sequence[str],
    *,
    imports: str | Sequence[str] = (),
    unsafe: bool = False,
    options: ProbeOptions | None = None,
    measure: Measure | str = Measure.GRADIENT,
    probes: int | None = None,
    exact: bool = False,
    top: int = 10,
    on_progress: Progress | None = None,
    **probe: object,
) -> InspectReport:
    """Gradient of each target layer's activation with respect to the source layer's.

    Args:
        path: a `.keras` or legacy `.h5` model file.
        source: layer reference for `--from` (`dense`, `encoder/dense_1`, `shared@1`, `-2`).
        targets: a layer reference for `--to`, or a list of them (one result each, in order).
        imports: a module (a name or `.py` path) that registers custom layers, or a list.
        unsafe: let Keras deserialize Python code in the file.
        options, **probe: how to make the probe batch and run the model (`ProbeOptions`).
        measure: "gradient" (d reduce(to) / d from), or "jacobian" to also measure the
            per-sample Jacobians d to[i] / d from[i] (`Result.jacobian`).
        probes: K random projections; forces the estimated Jacobian norms.
        exact: forces the exact Jacobian norms (not with `probes`).
        top: with `data` and measure "jacobian": how many of the most sensitive samples
            (largest norms) to report.
        on_progress: with `data`, called with (0, samples expected or None) before the step
            is traced, then after each batch with (samples done, samples expected or None).

    With `data` (see `ProbeOptions`) the statistics are those of every sample of the data set
    as one batch, and each result gains `data` (dead units, per-sample L2).

    Returns:
        An InspectReport with one Result per target, in order.

    Raises:
        LoadError, LayerNotFound, InputError: user errors (the CLI exits with code 2).
    """
    targets, imports = _one_or_many(targets), _one_or_many(imports)
    if not targets:
        raise InputError("give at least one target layer (--to)")
    options = probe_from(options, probe)
    how = _jacobian_options(measure, probes, exact, top, options.seed)
    if options.data_set is not None:
        from layergrad.commands import over_data

        return over_data.inspect_data(
            path,
            source,
            targets,
            options,
            imports=imports,
            unsafe=unsafe,
            on_progress=on_progress,
            jacobian=how,
            top=top,
        )
    session = open_session(
        path,
        options,
        refs=[source, *targets],
        imports=imports,
        unsafe=unsafe,
    )
    from layergrad.commands.untrained_batchnorm import in_training, probe_in_training

    results = _inspect(session, source, targets, how)
    wrong = any(res.status != Status.OK for res in results)
    said = probe_in_training(session.model, session.options.training, wrong)
    if said:  # never-trained BatchNormalization: probe again as training runs it
        session = in_training(session)
        results = tuple(
            replace(res, warnings=(*res.warnings, said))
            for res in _inspect(session, source, targets, how)
        )
    return InspectReport(model=session.model_meta, probe=session.probe_meta, results=results)


def _inspect(
    session: Session, source: str, targets: Sequence[str], how: JacobianOptions | None
) -> tuple[Result, ...]:
    """One probe of the session's model: the results of `inspect_model` (with their Jacobian
    norms when `how` says how to measure them)."""
    from layergrad.diagnose import diagnoser
    from layergrad.engine import jacobian
    from layergrad.engine import probe as probing
    from layergrad.model import layer_refs

    model, opts = session.model, session.options
    source_site = layer_refs.resolve(model, source)
    target_sites = [layer_refs.resolve(model, ref) for ref in targets]
    live = None
    if how is not None:  # one forward pass serves the gradient and the Jacobians
        live = probing.live_probe(
            model,
            session.batch,
            [source_site],
            target_sites,
            training=opts.training,
            reduce=opts.reduce,
        )
        run = probing.probe_gradients(live)
    else:
        run = probing.run_probe(
            model,
            session.batch,
            [source_site],
            target_sites,
            training=opts.training,
            reduce=opts.reduce,
        )
    results = diagnoser.build_results(run, session.info.graph, session.diagnoser)
    notes = [
        diagnoser.softmax_target_note(site, "take --to the layer before it")
        for site in target_sites
    ]
    results = tuple(
        replace(res, warnings=(note, *res.warnings)) if note else res  # the strongest first
        for res, note in zip(results, notes, strict=True)
    )
    graph = session.info.graph
    first = [_first_call_note(graph, source, source_site, "--from")]
    results = tuple(
        replace(res, warnings=(*res.warnings, *(n for n in said if n)))
        for res, said in (
            (res, [*first, _first_call_note(graph, ref, site, "--to")])
            for res, ref, site in zip(results, targets, target_sites, strict=True)
        )
    )
    if live is not None and how is not None:
        results = jacobian.with_jacobians(results, live, how)
    return results


def _first_call_note(graph: ModelGraph, ref: str, site: Site, option: str) -> str | None:
    """A note when `ref` names a layer called several times without `@K`: it means call 0."""
    entry = graph.get(site.path) if site.input_index is None else None
    if entry is None or entry.num_calls < 2 or "@" in ref:
        return None
    last = entry.num_calls - 1
    others = f"{site.path}@1" if last == 1 else f"{site.path}@1 to {site.path}@{last}"
    return (
        f"{option} {ref}: '{site.path}' is called {entry.num_calls} times (a shared layer) and "
        f"{ref} means its first call, {site.path}@0; name the other calls {others}"
    )


def scan_model(
    path: PathLike,
    *,
    target: str | None = None,
    layers: str | Sequence[str] = (),
    imports: str | Sequence[str] = (),
    unsafe: bool = False,
    options: ProbeOptions | None = None,
    measure: Measure | str = Measure.GRADIENT,
    probes: int | None = None,
    exact: bool = False,
    top: int = 10,
    on_progress: Progress | None = None,
    **probe: object,
) -> ScanReport:
    """Gradient of one target with respect to every layer's output, in one backward pass.

    Args:
        target: a layer reference; None differentiates a seeded random projection of the
            model's outputs (not degenerate for softmax outputs, unlike their sum).
        layers: a shell glob (`conv*`, `encoder/*`), or a list, keeping only matching layers.
        measure: "jacobian" also gives each row the per-sample Frobenius norms of
            d target[i] / d layer[i] (`ScanRow.jacobian`), from K backward passes in all
            (`probes`, or exactly from one pass per target entry: `exact`).
        (the rest as in `inspect_model`; `scan_weights_model` differentiates the loss instead)

    Returns:
        A ScanReport with one row per layer call the target depends on, in execution order.

        >>> rows = scan_model("sample_models/residual.keras").rows
        >>> [r.layer for r in rows][:2]
        ['x', 'stem']
    """
    from layergrad.commands.scan import scan_session

    layers, imports = _one_or_many(layers), _one_or_many(imports)
    options = probe_from(options, probe)
    how = _jacobian_options(measure, probes, exact, top, options.seed)
    if options.data_set is not None:
        from layergrad.commands import over_data

        return over_data.scan_data(
            path,
            options,
            target=target,
            layers=layers,
            imports=imports,
            unsafe=unsafe,
            on_progress=on_progress,
            jacobian=how,
            top=top,
        )
    session = open_session(
        path,
        options,
        refs=[target] if target is not None else [],
        globs=layers,
        imports=imports,
        unsafe=unsafe,
    )
    return scan_session(session, target, layers, jacobian=how)


def _jacobian_options(
    measure: Measure | str, probes: int | None, exact: bool, top: int, seed: int
) -> JacobianOptions | None:
    """The measure keywords of `inspect_model` and `scan_model`, checked: how to measure the
    Jacobian norms, or None for the gradient alone."""
    from layergrad.engine.jacobian import JacobianOptions, check_options

    check_options(measure, probes, exact)
    if top < 1:
        raise UsageError(f"--top must be at least 1: top={top}")
    return JacobianOptions(probes, exact, seed) if measure == Measure.JACOBIAN else None


def scan_weights_model(
    path: PathLike,
    *,
    loss: str | None = None,
    imports: str | Sequence[str] = (),
    unsafe: bool = False,
    options: ProbeOptions | None = None,
    on_progress: Progress | None = None,
    **probe: object,
) -> WeightScanReport:
    """Gradient of the training loss with respect to every trainable variable (one pass).

    Args:
        loss: a `keras.losses` name; None uses the loss compiled in the file.
        (the rest as in `inspect_model`; labels are `y` from an `--input` .npz, else random)

    With `data` the gradient is that of the loss averaged over every sample of the data set
    (labels `y` / `y:NAME` in a `.npz`), and the report gains each layer's gradient
    signal-to-noise ratio across batches (`WeightScanReport.noise`).

    Returns:
        A WeightScanReport with one row per trainable variable (`layer/name`).

    Raises:
        InputError: the file has no compiled loss and `loss` is None.
    """
    from layergrad.commands.weight_scan import scan_weights

    imports = _one_or_many(imports)
    options = probe_from(options, probe)
    if options.data_set is not None:
        from layergrad.commands.weights_data import scan_weights_data

        return scan_weights_data(
            path, options, loss=loss, imports=imports, unsafe=unsafe, on_progress=on_progress
        )
    session = open_session(path, options, imports=imports, unsafe=unsafe)
    return scan_weights(session, loss)


def _one_or_many(value: str | Sequence[str]) -> list[str]:
    """One reference or several: a string is one name, never a sequence of one-letter names.

    >>> _one_or_many("dense_1"), _one_or_many(["dense", "dense_1"])
    (['dense_1'], ['dense', 'dense_1'])
    """
    return [value] if isinstance(value, str) else list(value)


def save_gradients(
    report: InspectReport,
    path: PathLike,
    inputs: Sequence[PathLike | None] = (),
    *,
    force: bool = False,
) -> Written:
    """Write the raw gradients: `.npy` for one result, `.npz` keyed by the `--to` reference.

    A None gradient is not written (left out of an `.npz`); `inputs` are files never to write
    over; `force` replaces an existing file that is not an array file. Returns an
    `outputs.Written` whose message says what was written.
    """
    from layergrad.files import outputs

    return outputs.save_gradients(report, os.fspath(path), inputs, force=force)
