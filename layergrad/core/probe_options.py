"""The probe options every command shares, declared once: how to make the batch and run the model.

A frozen, typed bundle that travels from the CLI (or the Python API) to every stage; checking
its values needs no TensorFlow. Each field is declared here once, with how the command line
spells it (`Cli`, in the field's metadata): `cli/options.py` builds the click options from the
fields, and the API's `**probe` keywords are the field names (`probe_from`).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TypedDict, TypeVar, cast

from layergrad.core.cluster import Cluster, cluster_from_env
from layergrad.core.errors import InputError, UsageError
from layergrad.core.limits import (
    DEFAULT_MAX_MEMORY,
    MAX_BATCH_SIZE,
    MAX_CPU_REPLICAS,
    MAX_LIMIT,
    MAX_PROBES,
    MAX_SEED,
)
from layergrad.core.vocab import Distribute, Measure, Reduce, Word

PathLike = str | os.PathLike[str]
Progress = Callable[[int, "int | None"], None]  # (samples done, samples expected or None)
BATCH_SIZE, DATA_BATCH_SIZE = 8, 32
W = TypeVar("W", bound=Word)


@dataclass(frozen=True)
class Cli:
    """How the command line spells one `ProbeOptions` field (`cli/options.py` makes the click
    option). `group` says which options decorator declares it: "probe" (every probing
    command), "run" (not `check`, which decides them itself), "data" (`--data` and its
    company, `fit` too) or "shard" (not `fit`). `kind` is how the text is read: "text",
    "path", "int" or "float" (within `low`..`high`), "size" (8GB), "flag", or "word" (one of
    `words`)."""

    flag: str
    help: str
    group: str
    kind: str = "text"
    metavar: str | None = None
    low: int | None = None
    high: int | None = None
    words: type[Word] | None = None


T = TypeVar("T")


def option(
    default: T,
    flag: str,
    group: str,
    kind: str,
    *,
    help: str,
    metavar: str | None = None,
    low: int | None = None,
    high: int | None = None,
    words: type[Word] | None = None,
) -> T:
    """A `ProbeOptions` field with its `default` and its command-line spelling (a `Cli`)."""
    how = Cli(flag, help, group, kind, metavar, low, high, words)
    return cast(T, field(default=default, metadata={"cli": how}))


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
    `cluster` is this process's place in a multi-worker cluster, read from TF_CONFIG where
    the command starts (`with_cluster`), never here. `reduce` and `distribute` take their
    words too ("mean", "multi-worker") and hold them as `Reduce` / `Distribute`.
    """

    # fmt: off
    input_file: PathLike | None = option(None, "--input", "probe", "path", help=(
        "Probe batch: .npy (one input) or .npz keyed by input name (x for one input; y = labels)."))
    batch_size: int | None = option(None, "--batch-size", "probe", "int", low=1,
        high=MAX_BATCH_SIZE, help="Rows of the random probe batch (default 8), or of each batch "
        "of --data (default 32).")
    seed: int = option(0, "--seed", "probe", "int", low=0, high=MAX_SEED,
        help="Seed of the random batch.")
    reduce: Reduce = option(Reduce.SUM, "--reduce", "run", "word", words=Reduce,
        help="Reduce the target activation to a scalar by sum or mean.")
    training: bool = option(False, "--training", "run", "flag",
        help="Run the model in training mode (default: inference).")
    max_memory: int = option(DEFAULT_MAX_MEMORY, "--max-memory", "probe", "size", metavar="SIZE",
        help="Refuse a model whose probe would need more memory than this (estimated from the "
        "shapes in its config before Keras builds it), e.g. 32GB.")
    data: PathLike | None = option(None, "--data", "data", "text", metavar="PATH",
        help="Run over a whole data set, streamed: .npy, .npz (keys = input names, or x for one "
        "input; y = labels), a folder of images, or FILE.py:function / module:function "
        "returning batches. Statistics are over all samples.")
    limit: int | None = option(None, "--limit", "data", "int", metavar="N", low=1, high=MAX_LIMIT,
        help="With --data: read at most N samples.")
    distribute: Distribute | None = option(None, "--distribute", "data", "word", words=Distribute,
        help="With --data: mirrored runs on every visible GPU (tf.distribute.MirroredStrategy); "
        "multi-worker on every worker of the cluster in TF_CONFIG (MultiWorkerMirroredStrategy), "
        "each over its shard; only the chief prints the report.")
    cpu_replicas: int | None = option(None, "--cpu-replicas", "data", "int", metavar="N", low=1,
        high=MAX_CPU_REPLICAS, help="With --data: split the CPU into N devices and mirror over "
        "them (a testing aid for the distributed path).")
    first_sample: int = option(0, "--first-sample", "shard", "int", metavar="N", low=0,
        help="With --data: PATH is a shard of a larger data set starting at its sample N, so the "
        "samples are numbered from N (the default scan target's projection is seeded per "
        "sample): shards then merge exactly (`layergrad merge`).")
    peer_timeout: float | None = option(None, "--peer-timeout", "shard", "float",
        metavar="SECONDS", help="With --distribute multi-worker: wait at most this long for the "
        "other workers of TF_CONFIG to start (default 300), then stop with an error.")
    cluster: Cluster | None = None  # not an option: from TF_CONFIG, by `with_cluster`
    # fmt: on

    def __post_init__(self) -> None:
        object.__setattr__(self, "reduce", _word(Reduce, self.reduce, "reduce"))
        if self.distribute is not None:
            object.__setattr__(
                self, "distribute", _word(Distribute, self.distribute, "--distribute")
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
            self.distribute != Distribute.MULTI_WORKER or not 0 < self.peer_timeout <= 1e9
        ):
            raise UsageError(
                "--peer-timeout is the wait for the other workers of --distribute "
                f"multi-worker, in seconds above 0: peer_timeout={self.peer_timeout}"
            )
        self._check_data_options()

    @property
    def rows(self) -> int:
        """The batch size, as set or defaulted."""
        return int(self.batch_size or BATCH_SIZE)

    @property
    def reports_here(self) -> bool:
        """Whether this process prints or writes the report: always, except on a worker of a
        multi-worker cluster that is not the chief."""
        return self.cluster is None or self.cluster.is_chief

    def _check_data_options(self) -> None:
        """Raise UsageError for data options that cannot go together."""
        if self.first_sample < 0:
            raise UsageError(f"--first-sample must be at least 0: first_sample={self.first_sample}")
        if self.data is None:
            given = [
                f.metadata["cli"].flag
                for f in cli_fields()
                if f.metadata["cli"].group in ("data", "shard")
                and f.name not in ("data", "peer_timeout")  # --peer-timeout: checked above
                and getattr(self, f.name) != f.default
            ]
            if given:
                raise UsageError(f"{', '.join(given)} only apply with --data PATH; add --data")
        elif self.input_file is not None:
            raise UsageError(
                "--data and --input exclude each other: --input is one probe batch, --data a "
                "whole data set; pass one of them"
            )
        if self.limit is not None and not 1 <= self.limit <= MAX_LIMIT:
            raise UsageError(f"--limit must be 1 to {MAX_LIMIT:,} (2**53): limit={self.limit}")
        if self.cpu_replicas is not None and not 1 <= self.cpu_replicas <= MAX_CPU_REPLICAS:
            raise UsageError(
                f"--cpu-replicas must be 1 to {MAX_CPU_REPLICAS}: cpu_replicas={self.cpu_replicas}"
            )
        if self.distribute == Distribute.MULTI_WORKER and self.cpu_replicas is not None:
            raise UsageError(
                "--cpu-replicas splits one machine's CPU; with --distribute multi-worker each "
                "worker mirrors over its own devices: drop --cpu-replicas"
            )


def _word(kind: type[W], value: object, name: str) -> W:
    """`value` as a member of `kind` (a member, or its word), or one UsageError line."""
    try:
        return kind(value)
    except ValueError:
        raise UsageError(f"{name} must be one of {', '.join(kind.words())}: {name.lstrip('-')}="
                         f"{value!r}") from None  # fmt: skip


def with_cluster(options: ProbeOptions, environ: Mapping[str, str] | None = None) -> ProbeOptions:
    """The options as a command starts with them: under `--distribute multi-worker`, with the
    cluster read from TF_CONFIG in `environ` (default: the process's), once, so a missing or
    malformed one is one line before loading. Raises UsageError for it."""
    if options.distribute != Distribute.MULTI_WORKER or options.cluster is not None:
        return options
    return dataclasses.replace(options, cluster=cluster_from_env(environ))


def probe_from(options: ProbeOptions | None, keywords: Mapping[str, object]) -> ProbeOptions:
    """The API's probe: `options`, or one made of the `**probe` keywords (the field names of
    `ProbeOptions`, each optional), with its cluster (`with_cluster`).

    Raises:
        TypeError: a keyword that is no field (as Python says of an unknown argument).
    """
    if options is None:
        make = cast("Callable[..., ProbeOptions]", ProbeOptions)
        options = make(**keywords)
    return with_cluster(options)


def cli_fields() -> tuple[dataclasses.Field[object], ...]:
    """The fields the command line spells, in declaration order (each has its `Cli`)."""
    return tuple(f for f in dataclasses.fields(ProbeOptions) if "cli" in f.metadata)


class MeasureFields(TypedDict):
    """What `inspect` and `scan` measure (the API's keyword arguments of the same names):
    "gradient" or "jacobian", `probes` random projections or `exact` norms, the `top` samples."""

    measure: Measure
    probes: int | None
    exact: bool
    top: int


@dataclass(frozen=True)
class JacobianOptions:
    """How to measure: `probes` K forces the estimate, `exact` forces the exact method."""

    probes: int | None = None
    exact: bool = False
    seed: int = 0


def check_options(measure: str, probes: int | None, exact: bool) -> None:
    """Raise UsageError for a measure or a combination of options that means nothing."""
    if measure not in Measure.words():
        raise UsageError(
            f"measure must be one of {', '.join(Measure.words())}: measure={measure!r}"
        )
    if measure != Measure.JACOBIAN and (probes is not None or exact):
        raise UsageError("--probes and --exact apply to --measure jacobian; add it or drop them")
    if probes is not None and exact:
        raise UsageError(
            "--probes K asks for the estimate and --exact for the exact norms; give only one"
        )
    if probes is not None and probes < 2:
        raise UsageError(
            f"--probes must be at least 2, so that the spread of the estimates gives an error "
            f"bar: probes={probes}"
        )
    if probes is not None and probes > MAX_PROBES:
        raise InputError(
            f"--probes must be at most {MAX_PROBES} (each is a backward pass, and the error "
            f"bar shrinks as 1/sqrt(K)): probes={probes}; use --exact for exact norms"
        )
