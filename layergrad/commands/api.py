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

from collections.abc import Sequence

from layergrad.commands.session import open_source
from layergrad.core.errors import InputError, UsageError
from layergrad.core.probe_options import (
    DEFAULT_TOP,
    JacobianOptions,
    PathLike,
    ProbeOptions,
    Progress,
    check_options,
    probe_from,
)
from layergrad.core.results import InspectReport, ScanReport, WeightScanReport
from layergrad.core.vocab import Measure

__all__ = ["ProbeOptions", "inspect_model", "scan_model", "scan_weights_model"]


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
    top: int = DEFAULT_TOP,
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
    how = _jacobian_options(measure, probes, exact, top, options)
    session = open_source(path, options, refs=[source, *targets], imports=imports, unsafe=unsafe)
    from layergrad.commands.inspect import inspect_session  # TensorFlow: after the checks

    return inspect_session(session, source, targets, how, top, on_progress)


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
    top: int = DEFAULT_TOP,
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
    layers, imports = _one_or_many(layers), _one_or_many(imports)
    options = probe_from(options, probe)
    how = _jacobian_options(measure, probes, exact, top, options)
    refs = [target] if target is not None else []
    session = open_source(path, options, refs=refs, globs=layers, imports=imports, unsafe=unsafe)
    from layergrad.commands.scan import scan_session  # TensorFlow: after the checks of the file

    return scan_session(session, target, layers, how, top, on_progress)


def _jacobian_options(
    measure: Measure | str, probes: int | None, exact: bool, top: int, options: ProbeOptions
) -> JacobianOptions | None:
    """The measure keywords of `inspect_model` and `scan_model`, checked: how to measure the
    Jacobian norms, or None for the gradient alone. `top` other than its default is refused
    where it ranks nothing (without `--measure jacobian` and `--data`)."""
    check_options(measure, probes, exact)
    if top < 1:
        raise UsageError(f"--top must be at least 1: top={top}")
    if top != DEFAULT_TOP and (measure != Measure.JACOBIAN or options.data_set is None):
        raise UsageError(
            "--top only applies with --measure jacobian and --data PATH (it ranks the samples "
            "of a data set); add them or drop --top"
        )
    return JacobianOptions(probes, exact, options.seed) if measure == Measure.JACOBIAN else None


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

    options = probe_from(options, probe)
    session = open_source(path, options, False, imports=_one_or_many(imports), unsafe=unsafe)
    return scan_weights(session, loss, layers=False, on_progress=on_progress)


def _one_or_many(value: str | Sequence[str]) -> list[str]:
    """One reference or several: a string is one name, never a sequence of one-letter names.

    >>> _one_or_many("dense_1"), _one_or_many(["dense", "dense_1"])
    (['dense_1'], ['dense', 'dense_1'])
    """
    return [value] if isinstance(value, str) else list(value)
