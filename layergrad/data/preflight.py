"""Check `--data` and `--input` against the model's config before TensorFlow loads.

TensorFlow takes seconds to import; a missing file, a `.npz` whose keys name no input or an
array of the wrong shape is known from the file's headers and the model's config in a
fraction of that. The same checks run again on the loaded model (its inputs are the truth);
here they run on what the config declares, and only where it declares it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import numpy as np

from layergrad.core.errors import InputError
from layergrad.core.probe_options import DataSet, OneBatch
from layergrad.data.input_keys import input_keys
from layergrad.data.probe_input import InputSpec, check_fits, peek_rows
from layergrad.model.config import serialized_name
from layergrad.model.graph import ModelGraph


def check_before_loading(graph: ModelGraph, source: OneBatch | DataSet) -> None:
    """Raise InputError for a `source` (`--data` or `--input`) that cannot feed `graph`'s model.

    Paths are always checked; keys, shapes and dtypes when the config declares every input's
    name, shape and dtype (a Keras 3 file always does).
    """
    from layergrad.data.sources import check_source

    specs = config_specs(graph)
    if isinstance(source, DataSet):
        check_source(source.path, specs)
    elif source.input_file is not None:
        peek_rows(source.input_file)  # the file is there, its headers are sound, it has rows
        if specs is not None:
            _check_input_file(os.fspath(source.input_file), specs)


def config_specs(graph: ModelGraph) -> tuple[InputSpec, ...] | None:
    """The model's inputs as its config declares them; None when it does not say it all."""
    if not graph.known or not graph.input_names:
        return None
    specs = []
    for name in graph.input_names:
        entry = graph.get(name)
        spec = _spec(name, entry.config) if entry is not None else None
        if spec is None:
            return None
        specs.append(spec)
    return tuple(specs)


def _spec(name: str, config: Mapping[str, object]) -> InputSpec | None:
    shape = config.get("batch_shape", config.get("batch_input_shape"))
    dtype = serialized_name(config.get("dtype"))
    if not isinstance(shape, list) or not shape or not isinstance(dtype, str):
        return None
    if not all(d is None or (type(d) is int and d >= 0) for d in shape):
        return None
    try:
        if dtype != "string":  # text: unicode or bytes arrays (`probe_input.check_fits`)
            np.dtype("float32" if dtype == "bfloat16" else dtype)
    except TypeError:
        return None
    return InputSpec(name=name, shape=tuple(shape[1:]), dtype=dtype)


def _check_input_file(path: str, specs: tuple[InputSpec, ...]) -> None:
    from layergrad.files.array_files import read_headers

    headers = read_headers(path)
    where = f"--input {path}"
    if [h.name for h in headers] == [None]:
        if len(specs) != 1:
            raise InputError(
                f"{where} holds one array but the model has {len(specs)} inputs "
                f"({', '.join(s.name for s in specs)}); save them with "
                "np.savez(FILE, **{name: array}) and pass the .npz."
            )
        check_fits(headers[0].shape, headers[0].dtype, specs[0], where)
        return
    by_name = {h.name: h for h in headers if h.name is not None}
    keys = input_keys(by_name, [s.name for s in specs], where)
    for spec in specs:
        header = by_name[keys[spec.name]]
        check_fits(header.shape, header.dtype, spec, where)
