"""`--measure jacobian --data` for `inspect` and `scan`: each result, or each scan row, whose
gradient is ok or zero gets its per-sample Jacobian norms over every sample of the data (a
second pass, `engine/jacobian_data.py`), combined over every worker's shard.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from layergrad.core.probe_options import ProbeOptions, Progress
from layergrad.core.results import Result, ScanRow
from layergrad.core.tf_types import KerasModel, Strategy
from layergrad.core.vocab import Status

if TYPE_CHECKING:
    from layergrad.core.results import FrobeniusNorms
    from layergrad.data.sources import DataStream
    from layergrad.engine.jacobian import JacobianOptions
    from layergrad.model.layer_refs import Site


def scan_jacobians_over(
    model: KerasModel,
    batches: DataStream,
    site: Site | None,
    rows: tuple[ScanRow, ...],
    options: ProbeOptions,
    how: JacobianOptions,
    top: int,
    on_progress: Progress | None = None,
    strategy: Strategy | None = None,
) -> tuple[tuple[ScanRow, ...], tuple[str, ...]]:
    """Rows with their per-sample Jacobian norms over every sample, and how they were
    measured."""
    from layergrad.core.results import ScanJacobian
    from layergrad.engine.jacobian_data import scan_jacobians

    norms, notes = scan_jacobians(
        model,
        batches,
        site,
        how,
        training=options.training,
        reduce=options.reduce,
        top=top,
        on_progress=on_progress,  # a second pass: the bar starts again
        strategy=strategy,  # every worker's shard, combined
    )
    by_ref: dict[str, FrobeniusNorms] = {}
    for (path, call, _), found in norms.items():
        by_ref.setdefault(f"{path}@{call}" if call else path, found)
    out = []
    for row in rows:
        norm = by_ref.get(row.layer)
        if norm is not None and row.status in (Status.OK, Status.ZERO):
            row = replace(row, jacobian=ScanJacobian(frobenius=norm))
        out.append(row)
    return tuple(out), notes


def inspect_jacobians_over(
    model: KerasModel,
    batches: DataStream,
    source: Site,
    results: list[Result],
    options: ProbeOptions,
    how: JacobianOptions,
    top: int,
    on_progress: Progress | None = None,
    strategy: Strategy | None = None,
) -> list[Result]:
    """Each result whose gradient is ok or zero with its Jacobian norms over the data."""
    from layergrad.engine.jacobian_data import inspect_jacobians
    from layergrad.model import layer_refs

    chosen = [i for i, r in enumerate(results) if r.status in (Status.OK, Status.ZERO)]
    if not chosen:
        return results
    sites = [layer_refs.resolve(model, results[i].target.layer) for i in chosen]
    found = inspect_jacobians(
        model,
        batches,
        source,
        sites,
        how,
        training=options.training,
        reduce=options.reduce,
        top=top,
        on_progress=on_progress,  # a second pass: the bar starts again
        strategy=strategy,  # every worker's shard, combined
    )
    out = list(results)
    for i, (stats, warnings) in zip(chosen, found, strict=True):
        out[i] = replace(out[i], jacobian=stats, warnings=(*out[i].warnings, *warnings))
    return out
