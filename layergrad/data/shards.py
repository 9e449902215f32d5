"""What every reader of `--data` is given (`Reading`), and under `--distribute multi-worker`
each worker's part of a `--data` source, cut on whole batches.

A part is a contiguous run of the batches one process would make (worker w of n gets batches
floor(w*B/n) up to floor((w+1)*B/n)), so every sample keeps its index in the data and every
batch its index among the batches; a source that cannot be read in parts is shared round
robin by batch. `sources.open_data` builds the parts; the step numbers the samples with
`with_sample_indices` (the default target's projection is seeded by them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from layergrad.core.errors import UsageError
from layergrad.core.tf_runtime import tf
from layergrad.core.tf_types import Dataset, Tensor
from layergrad.data.value_checks import InputSpec

Shard = tuple[int, int]  # (this worker, workers)


@dataclass(frozen=True)
class Reading:
    """What `--data` is read with, by every reader (see `sources.open_data`); a batch size or
    a limit below 1 is refused (`UsageError`)."""

    text: str
    specs: tuple[InputSpec, ...]
    batch_size: int
    limit: int | None
    shard: Shard | None
    replicas: int
    first_sample: int

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise UsageError(f"--batch-size must be at least 1: batch_size={self.batch_size}")
        if self.limit is not None and self.limit < 1:
            raise UsageError(f"--limit must be at least 1: limit={self.limit}")


@dataclass(frozen=True)
class Part:
    """This worker's part of a sharded source: its batches, and either the index of its first
    sample in the whole data (a contiguous part) or its batches already followed by their
    samples' indices (`indexed`)."""

    dataset: Dataset
    samples: int | None
    offset: int = 0
    indexed: Dataset | None = None
    first_batch: int = 0  # this part's batch k is batch first_batch + k * stride of the whole
    stride: int = 1


def with_sample_indices(dataset: Dataset, offset: int = 0) -> Dataset:
    """Each batch of `dataset` (a tuple of tensors) followed by its samples' indices in the
    data (int64, from `offset`), whatever the batch sizes."""

    def step(start: Tensor, batch: Tensor) -> tuple[Tensor, Tensor]:
        rows = tf.cast(tf.shape(batch[0])[0], tf.int64)
        return start + rows, (*batch, start + tf.range(rows, dtype=tf.int64))

    return dataset.scan(tf.constant(offset, tf.int64), step)


def part_rows(rows: int, batch_size: int, shard: Shard) -> tuple[int, int]:
    """The rows [start, stop) of worker `shard[0]` of `shard[1]`: whole batches of one
    process, as evenly as they go (the last worker gets the partial batch)."""
    worker, workers = shard
    batches = math.ceil(rows / batch_size)
    first, last = worker * batches // workers, (worker + 1) * batches // workers
    return first * batch_size, min(last * batch_size, rows)


def round_robin(dataset: Dataset, shard: Shard) -> Part:
    """Batch j of the whole data goes to worker j % workers (every worker reads everything,
    as tf.distribute's sharding by data does): for sources that cannot be read in parts."""
    worker, workers = shard
    mine = with_sample_indices(dataset).enumerate().filter(lambda j, _: j % workers == worker)
    indexed = mine.map(lambda _, batch: batch)
    return Part(
        indexed.map(lambda *batch: batch[:-1]),
        None,
        indexed=indexed.prefetch(tf.data.AUTOTUNE),
        first_batch=worker,
        stride=workers,
    )
