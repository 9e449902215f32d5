"""What a report over `--data` says of its model (path, format, class, loader warnings) and of
its probe (the data's source and content hash, samples, batch size, mode, replicas).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from layergrad.core.probe_options import PathLike, ProbeOptions
from layergrad.core.results import ModelMeta, ProbeMeta
from layergrad.core.tf_types import KerasModel

if TYPE_CHECKING:
    from layergrad.engine.data_step import StreamRun
    from layergrad.engine.loader import LoadedModel
    from layergrad.engine.weight_stream import WeightTotals


def probe_meta(
    source: str,
    run: StreamRun | WeightTotals,
    options: ProbeOptions,
    seeded: bool = False,
    model: KerasModel | None = None,
) -> ProbeMeta:
    """`seeded`: the seed matters (the default target's projection, random labels), so it is
    reported; so it is when `model`'s random layers draw (training mode)."""
    from layergrad.data.fingerprint import data_sha256
    from layergrad.engine.random_layers import draws_in

    seeded = seeded or (model is not None and draws_in(model, options.training))

    return ProbeMeta(
        data_sha256=data_sha256(source),
        source=source,
        seed=options.seed if seeded else None,
        batch_size=options.rows,
        training=options.training,
        reduce=options.reduce,
        samples=run.samples,
        replicas=run.replicas,
        first_sample=(options.data_set.first_sample or None) if options.data_set else None,
    )


def model_meta(path: PathLike, loaded: LoadedModel, warnings: Sequence[str]) -> ModelMeta:
    return ModelMeta(
        path=os.fspath(path),
        format=loaded.info.format,
        class_name=type(loaded.model).__name__,
        name=loaded.model.name,
        warnings=tuple(warnings),
    )
