"""The front of the pipeline every command shares: open the model and its source of batches.

`open_source` reads and audits the file, checks the layer references against the graph in
the file (so a typo fails in a second, before TensorFlow loads), loads the model in safe mode,
and opens its batches: the probe batch (a stream of one batch) or the batches of `--data`, one
`Session` type for both. `inspect`, `scan`, `diff` and `check` all start here.

A result that is not ok gets its causes from the first batch where it shows, read again with
its whole arrays (`Diagnosis`): the statistics are reduced inside the step, so no gradient is
kept.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, TypeVar

from layergrad.core.errors import InputError
from layergrad.core.probe_options import DataSet, OneBatch, PathLike, ProbeOptions, with_cluster
from layergrad.core.results import ModelMeta, ProbeMeta
from layergrad.core.tf_types import KerasModel, Strategy
from layergrad.data.probe_input import ProbeBatch
from layergrad.files.file_info import FileInfo

if TYPE_CHECKING:
    from layergrad.data.label_stream import Labelled, LabelRequest
    from layergrad.data.probe_input import InputSpec
    from layergrad.data.sources import DataStream
    from layergrad.diagnose.diagnoser import Diagnoser
    from layergrad.engine.data_step import StreamRun
    from layergrad.engine.layer_calls import Activation
    from layergrad.engine.loader import LoadedModel
    from layergrad.engine.trace import Trace
    from layergrad.engine.weight_gradients import WeightTotals
    from layergrad.model.layer_refs import CallKey, Site

T = TypeVar("T")


@dataclass(frozen=True)
class Session:
    """A loaded model and its stream of batches, ready to run: the probe batch
    (random or `--input`), a stream of one batch, or the batches of `--data` (this worker's
    shard) under their `tf.distribute` strategy."""

    path: str
    model: KerasModel
    info: FileInfo
    options: ProbeOptions
    opened: DataStream | None  # None: `--data` not opened yet (see `open_source`)
    strategy: Strategy | None = None  # None: one device
    warnings: tuple[str, ...] = field(default=())  # audit findings accepted with --unsafe
    probe: ProbeBatch | None = None  # the probe batch (None over `--data`)

    @property
    def stream(self) -> DataStream:
        """The batches: the probe batch's stream of one, or `--data`'s."""
        assert self.opened is not None, "open_source(streamed=False): the caller opens it"
        return self.opened

    @functools.cached_property
    def batch(self) -> ProbeBatch:
        """The probe batch; over `--data` its first batch (read when first asked)."""
        return self.probe if self.probe is not None else self.stream.batch(0)

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

    def probe_meta_of(
        self, run: StreamRun | WeightTotals | None = None, seeded: bool = False
    ) -> ProbeMeta:
        """What the report says about the batches and the mode, after `run` went over them,
        naming the seed also when the run drew from it (`seeded`: a random projection or
        random labels) though the batches are the user's."""
        from layergrad.engine.random_layers import draws_in

        options, batch = self.options, self.probe
        seeded = seeded or draws_in(self.model, options.training)
        if batch is None:  # --data: its content hash, samples and replicas
            from layergrad.data.fingerprint import data_sha256

            assert run is not None
            data = options.data_set
            return ProbeMeta(
                data_sha256=data_sha256(self.stream.source),
                source=self.stream.source,
                seed=options.seed if seeded else None,
                batch_size=options.rows,
                training=options.training,
                reduce=options.reduce,
                samples=run.samples,
                replicas=run.replicas,
                first_sample=(data.first_sample or None) if data else None,
            )
        seed = batch.seed if batch.seed is not None or not seeded else options.seed
        return ProbeMeta(
            source=batch.source,
            seed=seed,
            batch_size=batch.batch_size,
            training=options.training,
            reduce=options.reduce,
            drawn=batch.drawn,
        )


def open_source(
    path: PathLike,
    options: ProbeOptions,
    streamed: bool = True,
    *,
    refs: Sequence[str] = (),
    globs: Sequence[str] = (),
    imports: Sequence[str] = (),
    unsafe: bool = False,
) -> Session:
    """Read, audit and load the model (see `load`), and open its batches: the probe batch, or
    a data set's stream (left to the caller unless `streamed`: `scan --wrt weights` reads the
    data with its labels). LoadError, LayerNotFound, InputError on user errors (the CLI exits
    with code 2)."""
    loaded, warnings, strategy = load(
        path, options, refs=refs, globs=globs, imports=imports, unsafe=unsafe
    )
    if options.data_set is None:
        return session_for(loaded, options, warnings)
    stream = open_stream(loaded.model, options, strategy) if streamed else None
    return Session(
        os.fspath(path), loaded.model, loaded.info, options, stream, strategy, tuple(warnings)
    )


def load(
    path: PathLike,
    options: ProbeOptions,
    *,
    refs: Sequence[str] = (),
    globs: Sequence[str] = (),
    imports: Sequence[str] = (),
    unsafe: bool = False,
    info: FileInfo | None = None,
) -> tuple[LoadedModel, tuple[str, ...], Strategy | None]:
    """Read, audit and load the model: (`loader.LoadedModel`, audit warnings, strategy).

    Before TensorFlow starts, `refs` (`--from`, `--to`) and `globs` (`--layers`) are checked
    against the file's graph, and `--data` and `--input` against the file (`data/preflight.py`;
    an `--input` file's rows are the batch the memory estimate is made for). `imports` register
    custom layers, `unsafe` lets Keras deserialize Python code, `info` is the file as read
    already (check reads it first). With `--data` the devices are chosen first (logical CPU
    devices must be set before TensorFlow uses any) and the model is loaded under that
    `tf.distribute` strategy (None without `--data`). Every random draw of the run is seeded
    from `options.seed` (`engine/random_layers.py`).
    """
    from layergrad.data.preflight import check_before_loading
    from layergrad.files.file_info import read_file_info
    from layergrad.model import layer_refs

    info = info or read_file_info(path, read_weights=False)
    info.graph.require_expandable()  # before anything walks every call of every layer
    layer_refs.check_in_graph(info.graph, refs, globs)
    check_before_loading(info.graph, options.source)
    return load_checked(path, options, info, imports=imports, unsafe=unsafe)


def load_checked(
    path: PathLike,
    options: ProbeOptions,
    info: FileInfo,
    *,
    imports: Sequence[str] = (),
    unsafe: bool = False,
) -> tuple[LoadedModel, tuple[str, ...], Strategy | None]:
    """`load` once the file read as `info` was checked against the command (`check` checks
    `--data` and `--input` itself first, as usage errors): the devices, the model loaded
    under their strategy, and every random draw seeded."""
    from layergrad.data import probe_input

    info.graph.require_expandable()  # (`load` asked already; `check` asks here, as before)
    rows = options.rows if options.input_file is None else probe_input.peek_rows(options.input_file)
    strategy = None
    if (data := options.data_set) is not None:  # its files were checked with the model's inputs
        from layergrad.data import devices

        strategy = devices.strategy_for(
            data.distribute, data.cpu_replicas, data.peer_timeout, data.cluster
        )  # TF_CONFIG read here under multi-worker, unless the command read it already
    from layergrad.engine import loader  # TensorFlow: after the checks of the file

    with strategy.scope() if strategy is not None else contextlib.nullcontext():
        loaded, warnings = loader.load_model(
            path,
            imports=imports,
            unsafe=unsafe,
            info=info,
            batch_rows=rows,
            max_memory=options.max_memory,
        )
    from layergrad.engine.random_layers import seed_model

    seed_model(loaded.model, options.seed)  # Dropout and the other random layers, from --seed
    return loaded, tuple(warnings), strategy


def session_for(
    loaded: LoadedModel | Session,
    options: ProbeOptions,
    warnings: Sequence[str] = (),
    batch: ProbeBatch | None = None,
) -> Session:
    """The session of a model loaded by `loader.load_model` (or of another session's) and one
    batch: `batch` (e.g. a data set's first, with its labels), or the probe batch made here.

    Raises:
        InputError: the probe batch cannot be made (a bad `--input`, undeclared inputs).
    """
    from layergrad.data.sources import ProbeStream

    model, info = loaded.model, loaded.info
    if batch is not None:
        options = replace(options, source=OneBatch())
    batch = batch or probe_batch(model, options)
    return Session(
        info.path, model, info, options, ProbeStream(batch.arrays), warnings=tuple(warnings),
        probe=batch,
    )  # fmt: skip


def probe_batch(model: KerasModel, options: ProbeOptions) -> ProbeBatch:
    """The probe batch for `model`: the `--input` file, or random from its input spec."""
    from layergrad.data import input_kinds, probe_input

    try:
        specs: tuple[probe_input.InputSpec, ...] | None = probe_input.input_specs(model)
    except InputError:  # a subclassed model
        specs = None
    if options.input_file is not None:  # a subclassed model's inputs: whatever the file holds
        return probe_input.load_batch(options.input_file, specs)
    if specs is None:  # a subclassed model: the shape it was built with, if its file says
        specs = probe_input.built_input_specs(model) or probe_input.input_specs(model)
    return probe_input.random_batch(
        specs,
        options.rows,
        options.seed,
        input_kinds.integer_ranges(model),
        max_bytes=options.max_memory,
        draws=input_kinds.preprocessing_draws(model),
        texts=input_kinds.text_draws(model),
    )


def open_stream(model: KerasModel, options: ProbeOptions, strategy: Strategy = None) -> DataStream:
    """The model's batches from its data set (a `sources.DataStream`): this worker's
    shard under `--distribute multi-worker`."""
    from layergrad.data import sources

    data, specs, shard = _reading(model, options)
    replicas = 1 if strategy is None else int(strategy.num_replicas_in_sync)
    return sources.open_data(
        data.path, specs, options.rows, data.limit, shard, replicas, data.first_sample
    )


def data_specs(model: KerasModel) -> tuple[InputSpec, ...]:
    """The model's inputs, for `--data` (refused when the model does not declare them)."""
    from layergrad.data import probe_input

    try:
        return probe_input.input_specs(model)
    except InputError:
        built = probe_input.built_input_specs(model)  # a subclassed model built on one shape
        if built is not None:
            return built
        raise InputError(
            f"model {model.name!r} ({type(model).__name__}) does not declare its inputs and "
            "its file records no input shape (a subclassed model saved before it was built), "
            "so --data cannot be matched to them; call it on one batch before model.save, or "
            "save it as a Functional or Sequential model"
        ) from None


def open_labels(
    model: KerasModel, request: LabelRequest, options: ProbeOptions, strict: bool = True
) -> Labelled:
    """`--data` with its labels in the form the loss takes (`compiled_loss.label_request`):
    they come with the inputs from the same rows, cut into the same shard
    (`label_stream.open_labelled`, `strict` too)."""
    from layergrad.data.label_stream import open_labelled

    data, specs, shard = _reading(model, options)
    return open_labelled(
        data.path, specs, request, options.rows, data.limit, shard,
        first_sample=data.first_sample, strict=strict,
    )  # fmt: skip


def _reading(
    model: KerasModel, options: ProbeOptions
) -> tuple[DataSet, tuple[InputSpec, ...], tuple[int, int] | None]:
    """`--data`, the model's inputs it is read for, and (this worker, workers) under
    `--distribute multi-worker` (else None)."""
    specs = data_specs(model)
    data = with_cluster(options).data_set  # the cluster: read where the command started
    assert data is not None
    cluster = data.cluster
    return data, specs, None if cluster is None else (cluster.index, cluster.workers)


class Diagnosis:
    """One batch of a session read again, and its diagnoser, for results that are not ok."""

    def __init__(self, session: Session) -> None:
        self.model, self.batches, self.graph = session.model, session.stream, session.info.graph
        options = session.options
        self.training, self.reduce, self.seed = options.training, options.reduce, options.seed
        self._batches: dict[int, ProbeBatch] = {}
        self._diagnosers: dict[int, Diagnoser] = {}
        self._traces: dict[tuple[int, CallKey | None], Trace] = {}

    def batch(self, index: int) -> ProbeBatch:
        if index not in self._batches:
            self._batches[index] = self.batches.batch(index)
        return self._batches[index]

    def diagnoser(self, index: int) -> Diagnoser:
        from layergrad.diagnose.diagnoser import Diagnoser

        if index not in self._diagnosers:
            self._diagnosers[index] = Diagnoser(
                self.model, self.batch(index), self.graph, self.training, self.reduce
            )
        return self._diagnosers[index]

    def trace(self, index: int, target: Site | None) -> Trace:
        """The whole trace of batch `index` towards `target` (`trace.run_trace`), made once."""
        from layergrad.engine import trace

        key = (index, None if target is None else target.key)
        if key not in self._traces:
            self._traces[key] = self._replayed(trace.run_trace, index, target)
        return self._traces[key]

    def activations(self, index: int, source: Site, target: Site) -> tuple[Activation, Activation]:
        """The source and target activations of batch `index` (for the causes)."""
        from layergrad.engine import trace

        run = self._replayed(trace.run_probe, index, [source], [target])
        return run.sources[0], run.targets[0]

    def _replayed(self, run: Callable[..., T], index: int, *sites: object) -> T:
        """`run` (a replay of `trace.py`) on batch `index` in the run's mode, with the random
        layers' numbers of that batch."""
        from layergrad.engine.random_layers import drawing_for

        with drawing_for(self.model, index):
            return run(
                self.model, self.batch(index), *sites, training=self.training,
                reduce=self.reduce, seed=self.seed,
            )  # fmt: skip
