"""The stream of a data set's batches (with its labels), and the batch a result that is not ok
is diagnosed on, over any stream (the probe batch is a stream of one batch): the statistics
are reduced inside the step, so no gradient is kept; a result that is not ok gets its causes
from the first batch where it shows, read again (`Diagnosis`) with its whole arrays.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from layergrad.core.errors import InputError
from layergrad.core.probe_options import ProbeOptions, with_cluster
from layergrad.core.tf_types import KerasModel, Strategy

if TYPE_CHECKING:
    from layergrad.data.label_stream import Labelled, LabelRequest
    from layergrad.data.probe_input import InputSpec, ProbeBatch
    from layergrad.data.sources import DataStream
    from layergrad.diagnose.diagnoser import Diagnoser
    from layergrad.engine.layer_calls import Activation
    from layergrad.engine.trace import Trace
    from layergrad.model.graph import ModelGraph
    from layergrad.model.layer_refs import CallKey, Site

T = TypeVar("T")


def open_stream(model: KerasModel, options: ProbeOptions, strategy: Strategy = None) -> DataStream:
    """The model's batches from its data set (a `sources.DataStream`): this worker's
    shard under `--distribute multi-worker`."""
    from layergrad.data import sources

    data = options.data_set
    assert data is not None
    shard = shard_of(options)
    replicas = 1 if strategy is None else int(strategy.num_replicas_in_sync)
    return sources.open_data(
        data.path, data_specs(model), options.rows, data.limit, shard, replicas,
        data.first_sample,
    )  # fmt: skip


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

    data = options.data_set
    assert data is not None
    return open_labelled(
        data.path, data_specs(model), request, options.rows, data.limit,
        shard_of(options), first_sample=data.first_sample, strict=strict,
    )  # fmt: skip


def shard_of(options: ProbeOptions) -> tuple[int, int] | None:
    """(this worker, workers) under `--distribute multi-worker`, else None."""
    data = with_cluster(options).data_set  # the cluster: read where the command started
    cluster = data.cluster if data else None
    return None if cluster is None else (cluster.index, cluster.workers)


class Diagnosis:
    """One batch of the data read again, and its diagnoser, for results that are not ok."""

    def __init__(
        self,
        model: KerasModel,
        batches: DataStream,
        graph: ModelGraph | None,
        options: ProbeOptions,
    ) -> None:
        self.model, self.batches, self.graph = model, batches, graph
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
