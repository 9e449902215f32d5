"""The front of the pipeline every command shares: open the model, make the probe batch.

`open_session` reads and audits the file, checks the layer references against the graph in
the file (so a typo fails in a second, before TensorFlow loads), loads the model in safe mode,
makes the probe batch and the diagnoser. `inspect`, `scan` and `check` all start here.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from layergrad.errors import InputError, UsageError
from layergrad.limits import (
    DEFAULT_MAX_MEMORY,
    MAX_BATCH_SIZE,
    MAX_CPU_REPLICAS,
    MAX_LIMIT,
    MAX_SEED,
)
from layergrad.results import ModelMeta, ProbeMeta

REDUCTIONS = ("sum", "mean")
PathLike = str | os.PathLike[str]
Progress = Callable[[int, "int | None"], None]  # (samples done, samples expected or None)


@dataclass(frozen=True)
class ProbeOptions:
    """How to make the probe batch and run the model (the options every command shares).

    `input_file` is a `.npy` / `.npz` probe batch; without it the batch is random from the
    model's input spec (`batch_size` rows, seeded by `seed`). `reduce` turns each target into
    a scalar ("sum" or "mean"); `training` runs the model in training mode. `max_memory` is
    the budget in bytes for the probe's memory, estimated from the config before loading.

    `data` runs over a whole data set instead of one batch (`.npy`, `.npz`, an image folder,
    `FILE.py:function`; see `datasets.py`), in batches of `batch_size`, at most `limit`
    samples, on `distribute` ("mirrored": every GPU) or `cpu_replicas` logical CPU devices.
    `batch_size` defaults to 8, or 32 with `data`.
    """

    input_file: PathLike | None = None
    batch_size: int | None = None
    seed: int = 0
    reduce: str = "sum"
    training: bool = False
    max_memory: int = DEFAULT_MAX_MEMORY
    data: PathLike | None = None
    limit: int | None = None
    distribute: str | None = None
    cpu_replicas: int | None = None

    def __post_init__(self) -> None:
        if self.reduce not in REDUCTIONS:
            raise InputError(
                f"reduce must be one of {', '.join(REDUCTIONS)}: reduce={self.reduce!r}"
            )
        if self.batch_size is None:  # frozen: set the default once, here
            default = DATA_BATCH_SIZE if self.data is not None else BATCH_SIZE
            object.__setattr__(self, "batch_size", default)
        if not 1 <= self.rows <= MAX_BATCH_SIZE:
            raise InputError(
                f"--batch-size must be 1 to {MAX_BATCH_SIZE:,}: batch_size={self.batch_size}"
            )
        if isinstance(self.seed, bool) or not 0 <= self.seed <= MAX_SEED:
            raise UsageError(f"--seed must be 0 to {MAX_SEED:,} (2**32 - 1): seed={self.seed}")
        check_data_options(
            self.data, self.input_file, self.limit, self.distribute, self.cpu_replicas
        )

    @property
    def rows(self) -> int:
        """The batch size, as set or defaulted."""
        return int(self.batch_size or BATCH_SIZE)


BATCH_SIZE, DATA_BATCH_SIZE = 8, 32


def check_data_options(
    data: PathLike | None,
    input_file: PathLike | None,
    limit: int | None,
    distribute: str | None,
    cpu_replicas: int | None,
) -> None:
    """Raise InputError for data options that cannot go together."""
    if data is None:
        given = [
            name
            for name, value in (
                ("--limit", limit), ("--distribute", distribute), ("--cpu-replicas", cpu_replicas)
            )
            if value is not None
        ]  # fmt: skip
        if given:
            raise InputError(f"{', '.join(given)} only apply with --data PATH; add --data")
    elif input_file is not None:
        raise InputError(
            "--data and --input exclude each other: --input is one probe batch, --data a "
            "whole data set; pass one of them"
        )
    if limit is not None and not 1 <= limit <= MAX_LIMIT:
        raise InputError(f"--limit must be 1 to {MAX_LIMIT:,} (2**53): limit={limit}")
    if cpu_replicas is not None and not 1 <= cpu_replicas <= MAX_CPU_REPLICAS:
        raise InputError(
            f"--cpu-replicas must be 1 to {MAX_CPU_REPLICAS}: cpu_replicas={cpu_replicas}"
        )


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
    loaded, warnings, _ = load(path, options, refs, globs, imports, unsafe, info)
    return session_for(loaded, options, warnings)


def load(
    path: PathLike,
    options: ProbeOptions,
    refs: Sequence[str] = (),
    globs: Sequence[str] = (),
    imports: Sequence[str] = (),
    unsafe: bool = False,
    info: Any = None,
) -> tuple[Any, tuple[str, ...], Any]:
    """Read, audit and load the model: (`loader.LoadedModel`, audit warnings, strategy).

    The references are checked against the file before TensorFlow starts. With `--data` the
    devices are chosen first (logical CPU devices must be set before TensorFlow uses any) and
    the model is loaded under that `tf.distribute` strategy, so its variables live on every
    replica; the strategy is None without `--data`.
    """
    from layergrad import inputs, layer_refs, loader
    from layergrad.fileinfo import read_file_info

    info = info or read_file_info(path, read_weights=False)
    info.graph.require_expandable()  # before anything walks every call of every layer
    layer_refs.check_in_graph(info.graph, refs, globs)
    rows = options.rows
    if options.input_file is not None:
        rows = inputs.peek_rows(options.input_file)
    strategy = None
    if options.data is not None:
        from layergrad import datasets, devices

        datasets.precheck(options.data)  # a FIFO, a forged header: refused before TensorFlow

        strategy = devices.strategy_for(options.distribute, options.cpu_replicas)
    with strategy.scope() if strategy is not None else contextlib.nullcontext():
        loaded, warnings = loader.load_model(
            path,
            imports=imports,
            unsafe=unsafe,
            info=info,
            batch_rows=rows,
            max_memory=options.max_memory,
        )
    return loaded, tuple(warnings), strategy


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
        options.rows,
        options.seed,
        inputs.integer_ranges(model),
        max_bytes=options.max_memory,
    )
