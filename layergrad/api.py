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

from layergrad.errors import InputError
from layergrad.results import InspectReport, ModelMeta, ProbeMeta

REDUCTIONS = ("sum", "mean")


def inspect_model(
    path: str | os.PathLike[str],
    source: str,
    targets: Sequence[str],
    *,
    input_file: str | os.PathLike[str] | None = None,
    batch_size: int = 8,
    seed: int = 0,
    reduce: str = "sum",
    training: bool = False,
    imports: Sequence[str] = (),
    unsafe: bool = False,
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

    Returns:
        An InspectReport with one Result per target, in order.

    Raises:
        LoadError, LayerNotFound, InputError: user errors (the CLI exits with code 2).
    """
    if reduce not in REDUCTIONS:
        raise InputError(f"reduce must be one of {', '.join(REDUCTIONS)}: reduce={reduce!r}")
    if not targets:
        raise InputError("give at least one target layer (--to)")
    from layergrad import diagnose, explain, inputs, loader, probe, select

    loaded, _ = loader.load_model(path, imports=imports, unsafe=unsafe)
    model = loaded.model
    source_site = select.resolve(model, source)
    target_sites = [select.resolve(model, ref) for ref in targets]
    specs = inputs.input_specs(model)
    if input_file is not None:
        batch = inputs.load_batch(input_file, specs)
    else:
        batch = inputs.random_batch(specs, batch_size, seed, inputs.integer_ranges(model))
    run = probe.run_probe(
        model, batch, [source_site], target_sites, training=training, reduce=reduce
    )
    explainer = explain.Explainer(model, batch, loaded.info.graph, training, reduce)
    results = diagnose.build_results(run, loaded.info.graph, explainer.causes)
    return InspectReport(
        model=ModelMeta(
            path=os.fspath(path),
            format=loaded.info.format,
            class_name=type(model).__name__,
            name=model.name,
        ),
        probe=ProbeMeta(
            source=batch.source,
            seed=batch.seed,
            batch_size=batch.batch_size,
            training=training,
            reduce=reduce,
        ),
        results=results,
    )


def save_gradients(report: InspectReport, path: str | os.PathLike[str]) -> None:
    """Write the raw gradient arrays: `.npy` for one result, `.npz` keyed by `--to` reference.

    A result whose gradient is None is left out of an `.npz`; a `.npy` of a None gradient is
    an error, since there is nothing to write.
    """
    import numpy as np

    text = os.fspath(path)
    arrays = {r.target.layer: r.array for r in report.results if r.array is not None}
    if text.endswith(".npy"):
        if len(report.results) != 1:
            raise InputError(f"--save-gradient {text}: several --to layers need a .npz file")
        if not arrays:
            raise InputError(f"--save-gradient {text}: the gradient is None, nothing to save")
        np.save(text, next(iter(arrays.values())))
    elif text.endswith(".npz"):
        np.savez(text, **arrays)  # type: ignore[arg-type]
    else:
        raise InputError(f"--save-gradient must end in .npy or .npz: {text}")
