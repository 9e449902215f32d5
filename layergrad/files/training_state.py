"""Whether a model file records training: the optimizer's step count saved with it (`.keras`:
`optimizer/vars/0` of its weights, `.h5`: `optimizer_weights/<name>/iteration`). No
TensorFlow; reads two small datasets, never the weights."""

from __future__ import annotations

import os
import zipfile

import h5py
import numpy as np

WEIGHTS = "model.weights.h5"  # the weights inside a .keras archive


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
                return _scalar(weights.get("optimizer/vars/0"))
        with h5py.File(path, "r") as weights:
            group = weights.get("optimizer_weights")
            if not isinstance(group, h5py.Group):
                return None
            for name in group:
                inner = group[name]
                if isinstance(inner, h5py.Group):
                    found = _scalar(inner.get("iteration", inner.get("iter")))
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
