"""The front of the pipeline every command shares: open the model, make the probe batch.

`open_session` reads and audits the file, checks the layer references against the graph in
the file (so a typo fails in a second, before TensorFlow loads), loads the model in safe mode,
makes the probe batch and the diagnoser. `inspect`, `scan` and `check` all start here.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from layergrad.errors import InputError
from layergrad.limits import DEFAULT_MAX_MEMORY
from layergrad.results import ModelMeta, ProbeMeta

REDUCTIONS = ("sum", "mean")
PathLike = str | os.PathLike[str]


@dataclass(frozen=True)
class ProbeOptions:
    """How to make the probe batch and run the model (the options every command shares).

    `input_file` is a `.npy` / `.npz` probe batch; without it the batch is random from the
    model's input spec (`batch_size` rows, seeded by `seed`). `reduce` turns each target into
    a scalar ("sum" or "mean"); `training` runs the model in training mode. `max_memory` is
    the budget in bytes for the probe's memory, estimated from the config before loading.
    """

    input_file: PathLike | None = None
    batch_size: int = 8
    seed: int = 0
    reduce: str = "sum"
    training: bool = False
    max_memory: int = DEFAULT_MAX_MEMORY

    def __post_init__(self) -> None:
        if self.reduce not in REDUCTIONS:
            raise InputError(
                f"reduce must be one of {', '.join(REDUCTIONS)}: reduce={self.reduce!r}"
            )
        if self.batch_size < 1:
            raise InputError(f"--batch-size must be at least 1: batch_size={self.batch_size}")


@dataclass(frozen=True)
class Session:
    """A loaded model with its probe batch, ready to probe and diagnose."""

    path: str
    model: Any
    info: Any  # fileinfo.FileInfo
    batch: Any  # inputs.ProbeBatch
    options: ProbeOptions
    diagnoser: Any  # diagnose.Diagnoser
    warnings: tuple[str, ...] = field(default=())  # audit findings accepted with --unsafe

    @property
    def model_meta(self) -> ModelMeta:
        """What the report says about the model file."""
        return ModelMeta(
            path=self.path,
            format=self.info.format,
            class_name=type(self.model).__name__,
            name=self.model.name,
            warnings=self.warnings,
        )

    @property
    def probe_meta(self) -> ProbeMeta:
        """What the report says about the probe batch and mode."""
        return ProbeMeta(
            source=self.batch.source,
            seed=self.batch.seed,
            batch_size=self.batch.batch_size,
            training=self.options.training,
            reduce=self.options.reduce,
        )


def open_session(
    path: PathLike,
    options: ProbeOptions,
    *,
    refs: Sequence[str] = (),
    globs: Sequence[str] = (),
    imports: Sequence[str] = (),
    unsafe: bool = False,
    info: Any = None,
) -> Session:
    """Read, audit and load the model, check `refs` and `globs`, and make the probe batch.

    Args:
        path: a `.keras` or legacy `.h5` model file.
        options: how to make the probe batch and run the model.
        refs: layer references the command will resolve (`--from`, `--to`); checked against
            the file's graph before TensorFlow is imported.
        globs: `--layers` patterns, checked the same way.
        imports: modules (names or `.py` paths) that register custom layers.
        unsafe: let Keras deserialize Python code in the file.
        info: the file as read already by `fileinfo.read_file_info` (check reads it first).

    An `--input` file is checked (its headers) before the model is loaded, so a bad one is
    reported in a second, and its rows are the batch the memory estimate is made for.

    Raises:
        LoadError, LayerNotFound, InputError: user errors (the CLI exits with code 2).
    """
    from layergrad import inputs, layer_refs, loader
    from layergrad.fileinfo import read_file_info

    info = info or read_file_info(path, read_weights=False)
    info.graph.require_expandable()  # before anything walks every call of every layer
    layer_refs.check_in_graph(info.graph, refs, globs)
    rows = options.batch_size
    if options.input_file is not None:
        rows = inputs.peek_rows(options.input_file)
    loaded, warnings = loader.load_model(
        path,
        imports=imports,
        unsafe=unsafe,
        info=info,
        batch_rows=rows,
        max_memory=options.max_memory,
    )
    return session_for(loaded, options, warnings)


def session_for(loaded: Any, options: ProbeOptions, warnings: Sequence[str] = ()) -> Session:
    """The session of a model loaded by `loader.load_model`: make its probe batch.

    Raises:
        InputError: the probe batch cannot be made (a bad `--input`, undeclared inputs).
    """
    from layergrad.diagnose import Diagnoser

    model, info = loaded.model, loaded.info
    batch = probe_batch(model, options)
    diagnoser = Diagnoser(model, batch, info.graph, options.training, options.reduce)
    return Session(info.path, model, info, batch, options, diagnoser, tuple(warnings))


def probe_batch(model: Any, options: ProbeOptions) -> Any:
    """The probe batch for `model`: the `--input` file, or random from its input spec."""
    from layergrad import inputs

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
