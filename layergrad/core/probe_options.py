"""The probe options every command shares, declared once: how to make the batch and run the model.

A frozen, typed bundle that travels from the CLI (or the Python API) to every stage; checking
its values needs no TensorFlow.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypedDict

from layergrad.core.errors import UsageError
from layergrad.core.limits import (
    DEFAULT_MAX_MEMORY,
    MAX_BATCH_SIZE,
    MAX_CPU_REPLICAS,
    MAX_LIMIT,
    MAX_SEED,
)

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
    `FILE.py:function`; see `data/sources.py`), in batches of `batch_size`, at most `limit`
    samples, on `distribute` ("mirrored": every GPU; "multi-worker": every worker of the
    cluster in TF_CONFIG, each over its shard) or `cpu_replicas` logical CPU devices.
    `first_sample` is the index of the data's first sample in a larger data set it is a shard
    of (the default target's projection is seeded per sample index).
    `batch_size` defaults to 8, or 32 with `data`. `peer_timeout` is how long a
    multi-worker run waits for the other workers (None: `cluster.DEFAULT_PEER_TIMEOUT`).
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
    first_sample: int = 0
    peer_timeout: float | None = None

    def __post_init__(self) -> None:
        if self.reduce not in REDUCTIONS:
            raise UsageError(
                f"reduce must be one of {', '.join(REDUCTIONS)}: reduce={self.reduce!r}"
            )
        if self.batch_size is None:  # frozen: set the default once, here
            default = DATA_BATCH_SIZE if self.data is not None else BATCH_SIZE
            object.__setattr__(self, "batch_size", default)
        if not 1 <= self.rows <= MAX_BATCH_SIZE:
            raise UsageError(
                f"--batch-size must be 1 to {MAX_BATCH_SIZE:,}: batch_size={self.batch_size}"
            )
        if isinstance(self.seed, bool) or not 0 <= self.seed <= MAX_SEED:
            raise UsageError(f"--seed must be 0 to {MAX_SEED:,} (2**32 - 1): seed={self.seed}")
        if self.peer_timeout is not None and (
            self.distribute != "multi-worker" or not 0 < self.peer_timeout <= 1e9
        ):
            raise UsageError(
                "--peer-timeout is the wait for the other workers of --distribute "
                f"multi-worker, in seconds above 0: peer_timeout={self.peer_timeout}"
            )
        check_data_options(
            self.data, self.input_file, self.limit, self.distribute, self.cpu_replicas,
            self.first_sample,
        )  # fmt: skip

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
    first_sample: int = 0,
) -> None:
    """Raise UsageError for data options that cannot go together (and a TF_CONFIG that
    `--distribute multi-worker` cannot use)."""
    if first_sample < 0:
        raise UsageError(f"--first-sample must be at least 0: first_sample={first_sample}")
    if data is None:
        given = [
            name
            for name, value in (
                ("--limit", limit), ("--distribute", distribute), ("--cpu-replicas", cpu_replicas),
                ("--first-sample", first_sample or None),
            )
            if value is not None
        ]  # fmt: skip
        if given:
            raise UsageError(f"{', '.join(given)} only apply with --data PATH; add --data")
    elif input_file is not None:
        raise UsageError(
            "--data and --input exclude each other: --input is one probe batch, --data a "
            "whole data set; pass one of them"
        )
    if limit is not None and not 1 <= limit <= MAX_LIMIT:
        raise UsageError(f"--limit must be 1 to {MAX_LIMIT:,} (2**53): limit={limit}")
    if cpu_replicas is not None and not 1 <= cpu_replicas <= MAX_CPU_REPLICAS:
        raise UsageError(
            f"--cpu-replicas must be 1 to {MAX_CPU_REPLICAS}: cpu_replicas={cpu_replicas}"
        )
    if distribute == "multi-worker":
        if cpu_replicas is not None:
            raise UsageError(
                "--cpu-replicas splits one machine's CPU; with --distribute multi-worker each "
                "worker mirrors over its own devices: drop --cpu-replicas"
            )
        from layergrad.core.cluster import cluster_from_env

        cluster_from_env()  # a missing or malformed TF_CONFIG is one line, before loading


class ProbeFields(TypedDict, total=False):
    """`ProbeOptions`' fields as keyword arguments (the API's `**probe`), each optional."""

    input_file: PathLike | None
    batch_size: int | None
    seed: int
    reduce: str
    training: bool
    max_memory: int
    data: PathLike | None
    limit: int | None
    distribute: str | None
    cpu_replicas: int | None
    first_sample: int
    peer_timeout: float | None


class MeasureFields(TypedDict):
    """What `inspect` and `scan` measure (the API's keyword arguments of the same names):
    "gradient" or "jacobian", `probes` random projections or `exact` norms, the `top` samples."""

    measure: str
    probes: int | None
    exact: bool
    top: int
