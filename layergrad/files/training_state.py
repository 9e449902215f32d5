"""Whether a model file records training: the optimizer's step count saved with it (`.keras`:
`optimizer/vars/0` of its weights, `.h5`: `optimizer_weights/<name>/iteration`). No
TensorFlow; reads two small datasets, never the weights."""

from __future__ import annotations

import os
import zipfile

import h5py
import numpy as np

WEIGHTS = "model.weights.h5"  # the weights inside a .keras archive
STEPS_AT = ("", "inner_optimizer/")  # where a .keras archive keeps an optimizer's step count


def training_steps(path: str | os.PathLike[str]) -> int | None:
    """The optimizer steps the file records; None when it holds no optimizer state (saved
    without one, never compiled) or cannot be read."""
    try:
        if zipfile.is_zipfile(path):
            with (
                zipfile.ZipFile(path) as archive,
                archive.open(WEIGHTS) as member,
                h5py.File(member, "r") as weights,
            ):
                # a LossScaleOptimizer (mixed precision) keeps its own counter first, reset
                # whenever the scale grows; the optimizer it wraps counts the steps
                counts = [_scalar(weights.get(f"optimizer/{inner}vars/0")) for inner in STEPS_AT]
                return max((c for c in counts if c is not None), default=None)
        with h5py.File(path, "r") as weights:
            group = weights.get("optimizer_weights")
            if not isinstance(group, h5py.Group):
                return None
            for name in group:
                inner = group[name]
                if isinstance(inner, h5py.Group):
                    for key in inner:  # `iteration`, `iter`, `iterations:0`, ...
                        found = _scalar(inner[key]) if key.startswith("iter") else None
                        if found is not None:
                            return found
    except (OSError, KeyError, ValueError, zipfile.BadZipFile, RuntimeError):
        return None
    return None


def _scalar(dataset: object) -> int | None:
    if not isinstance(dataset, h5py.Dataset) or dataset.shape not in ((), (1,)):
        return None
    if dataset.dtype.kind not in "iuf":
        return None
    value = np.asarray(dataset[()]).reshape(-1)
    return int(value[0]) if value.size and np.isfinite(value[0]) else None
