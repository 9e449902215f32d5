"""The probe options every command shares, declared once: how to make the batch and run the model.

A frozen, typed bundle that travels from the CLI (or the Python API) to every stage; checking
its values needs no TensorFlow. Its source is a union: one probe batch (`OneBatch`) or a data
set (`DataSet`), so only a data set has the data set's options. Each field is declared here
once, with how the command line spells it (`Cli`, in the field's metadata): `cli/options.py`
builds the click options from the fields, and the API's `**probe` keywords are the same
words (`cli_fields`), turned into the union in one place (`ProbeOptions.__init__`).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields, replace
from typing import TypedDict, TypeVar, cast

from layergrad.core import limits
from layergrad.core.cluster import Cluster, cluster_from_env
from layergrad.core.errors import InputError, UsageError
from layergrad.core.vocab import Distribute, Measure, Reduce, Word

PathLike = str | os.PathLike[str]
Progress = Callable[[int, "int | None"], None]  # (samples done, samples expected or None)
BATCH_SIZE, DATA_BATCH_SIZE = 8, 32
DEFAULT_TOP = 10  # --top: the most sensitive samples of a data set a Jacobian result lists
SEED_HELP = (  # one text for every command that runs the model
    "Seeds every random draw of the run: the random batch, Dropout and other random layers "
    "in training mode, data order, projections, fit's and fix's shuffling and new weights; "
    "the same arguments give the same numbers."
)
W = TypeVar("W", bound=Word)
T = TypeVar("T")


@dataclass(frozen=True)
class Cli:
    """How the command line spells one probe option (`cli/options.py` makes the click option).
    `group` says which options decorator declares it: "probe" (every probing command), "run"
    (not `check`, which decides them itself), "data" (`--data` and its company, `fit` too) or
    "shard" (not `fit`). `kind` is how the text is read: "text", "path", "int" or "float"
    (within `low`..`high`, `note` said after `high`), "size" (8GB), "flag", or "word" (one of
    `words`). `keyword` is the API's and click's name when it is not the field's."""

    flag: str
    group: str
    kind: str
    help: str
    metavar: str | None = None
    low: int | None = None
    high: int | None = None
    words: type[Word] | None = None
    keyword: str | None = None
    note: str = ""


def option(default: T, how: Cli) -> T:
    """A probe options field with its `default` and its command-line spelling."""
    return cast(T, field(default=default, metadata={"cli": how}))


@dataclass(frozen=True)
class OneBatch:
    """One probe batch: the `input_file` (`.npy` / `.npz`), or random rows of the input spec."""

    input_file: PathLike | None = option(None, Cli("--input", "probe", "path", help="Probe "
        "batch: .npy (one input) or .npz keyed by input name (x for one input; y = "
        "labels)."))  # fmt: skip


@dataclass(frozen=True)
class DataSet:
    """A whole data set instead of one batch (`path`: see `data/sources.py`), at most `limit`
    samples, on `distribute` ("mirrored", "multi-worker", or its word) or `cpu_replicas` CPU
    devices; `first_sample` numbers a shard's samples in the whole. `peer_timeout` (None:
    `cluster.DEFAULT_PEER_TIMEOUT`); `cluster` is read from TF_CONFIG by `with_cluster`."""

    # fmt: off
    path: PathLike = option(cast(PathLike, MISSING), Cli("--data", "data", "text",
        metavar="PATH", keyword="data", help="Run over a whole data set, streamed: .npy, .npz "
        "(keys = input names, or x for one input; y = labels), a folder of images, or "
        "FILE.py:function / module:function returning batches. Statistics are over all samples."))
    limit: int | None = option(None, Cli("--limit", "data", "int", metavar="N", low=1,
        high=limits.MAX_LIMIT, note=" (2**53)", help="With --data: read at most N samples."))
    distribute: Distribute | None = option(None, Cli("--distribute", "data", "word",
        words=Distribute, help="With --data: mirrored runs on every visible GPU "
        "(tf.distribute.MirroredStrategy); multi-worker on every worker of the cluster in "
        "TF_CONFIG (MultiWorkerMirroredStrategy), each over its shard; only the chief prints "
        "the report."))
    cpu_replicas: int | None = option(None, Cli("--cpu-replicas", "data", "int", metavar="N",
        low=1, high=limits.MAX_CPU_REPLICAS, help="With --data: split the CPU into N devices and "
        "mirror over them (a testing aid for the distributed path)."))
    first_sample: int = option(0, Cli("--first-sample", "shard", "int", metavar="N", low=0,
        help="With --data: PATH is a shard of a larger data set starting at its sample N, so the "
        "samples are numbered from N (the default scan target's projection is seeded per "
        "sample): shards then merge exactly (`layergrad merge`)."))
    peer_timeout: float | None = option(None, Cli("--peer-timeout", "shard", "float",
        metavar="SECONDS", help="With --distribute multi-worker: wait at most this long for the "
        "other workers of TF_CONFIG to start (default 300), then stop with an error."))
    cluster: Cluster | None = None  # not an option: from TF_CONFIG, by `with_cluster`
    # fmt: on

    def __post_init__(self) -> None:
        if (word := self.distribute) is not None:  # frozen: its word as a member, once, here
            object.__setattr__(self, "distribute", _word(Distribute, word, "--distribute"))
        if self.peer_timeout is not None and (
            self.distribute != Distribute.MULTI_WORKER or not 0 < self.peer_timeout <= 1e9
        ):
            raise UsageError(
                "--peer-timeout is the wait for the other workers of --distribute "
                f"multi-worker, in seconds above 0: peer_timeout={self.peer_timeout}"
            )
        _check_ranges(self)
        if self.distribute == Distribute.MULTI_WORKER and self.cpu_replicas is not None:
            raise UsageError(
                "--cpu-replicas splits one machine's CPU; with --distribute multi-worker each "
                "worker mirrors over its own devices: drop --cpu-replicas"
            )


@dataclass(frozen=True, init=False)
class ProbeOptions:
    """How to make the probe batch and run the model: the options every command shares
    (`reduce`: "sum" or "mean"; `max_memory` in bytes; `batch_size` defaults to 8, or 32 with
    a data set) and the `source`, one probe batch or a data set. Made from a `source`, or
    from the flat words of the command line and the API's `**probe`, turned into the union
    here, once: `ProbeOptions(input_file="b.npy")`, `ProbeOptions(data="d.npz", limit=10)`.
    """

    # fmt: off
    batch_size: int | None = option(None, Cli("--batch-size", "probe", "int", low=1,
        high=limits.MAX_BATCH_SIZE, help="Rows of the random probe batch (default 8), or of each "
        "batch of --data (default 32)."))
    seed: int = option(0, Cli("--seed", "probe", "int", low=0, high=limits.MAX_SEED,
        note=" (2**32 - 1)", help=SEED_HELP))
    reduce: Reduce = option(Reduce.SUM, Cli("--reduce", "run", "word", words=Reduce,
        help="Reduce the target activation to a scalar by sum or mean."))
    training: bool = option(False, Cli("--training", "run", "flag",
        help="Run the model in training mode (default: inference)."))
    max_memory: int = option(limits.DEFAULT_MAX_MEMORY, Cli("--max-memory", "probe", "size",
        metavar="SIZE", help="Refuse a model whose probe would need more memory than this "
        "(estimated from the shapes in its config before Keras builds it), e.g. 32GB."))
    source: OneBatch | DataSet = OneBatch()
    # fmt: on

    def __init__(self, *, source: OneBatch | DataSet | None = None, **words: object) -> None:
        """Raises TypeError for a keyword that is no option's (as Python says of an unknown
        argument), UsageError for values or options that do not go together."""
        for spec in fields(self)[:-1]:  # the shared ones (the source comes last)
            object.__setattr__(self, spec.name, words.pop(spec.name, spec.default))
        known = {name for name, _ in cli_fields()} | {"cluster"}
        unknown = sorted(set(words) - known) or sorted(words if source else ())
        if unknown:  # with a source, the words of one are the source's business
            raise TypeError(f"ProbeOptions() got an unexpected keyword argument {unknown[0]!r}")
        object.__setattr__(self, "source", source if source is not None else _source(words))
        object.__setattr__(self, "reduce", _word(Reduce, self.reduce, "reduce"))
        if self.batch_size is None:  # frozen: set the default once, here
            default = DATA_BATCH_SIZE if isinstance(self.source, DataSet) else BATCH_SIZE
            object.__setattr__(self, "batch_size", default)
        _check_ranges(self)

    @property
    def rows(self) -> int:
        """The batch size, as set or defaulted."""
        return int(self.batch_size or BATCH_SIZE)

    @property
    def data_set(self) -> DataSet | None:
        """The data set, or None for one probe batch."""
        return self.source if isinstance(self.source, DataSet) else None

    @property
    def data_path(self) -> PathLike | None:
        """The data set's `--data` text, or None for one probe batch."""
        return self.source.path if isinstance(self.source, DataSet) else None

    @property
    def input_file(self) -> PathLike | None:
        """The probe batch's file, or None (a random batch, or a data set)."""
        return self.source.input_file if isinstance(self.source, OneBatch) else None

    @property
    def reports_here(self) -> bool:
        """Whether this process prints or writes the report: always, except on a worker of a
        multi-worker cluster that is not the chief."""
        data = self.data_set
        return data is None or data.cluster is None or data.cluster.is_chief


def _check_ranges(options: DataSet | ProbeOptions) -> None:
    """One UsageError line for a whole number of `options` (a dataclass) outside its option's
    `low`..`high`: what click's IntRange checks on the command line, for the API."""
    for spec in fields(options):
        how, value = spec.metadata.get("cli"), getattr(options, spec.name)
        if how is None or how.kind != "int" or value is None:
            continue
        if isinstance(value, bool) or value < how.low or value > (how.high or value):
            span = f"at least {how.low}" if how.high is None else f"{how.low} to {how.high:,}"
            raise UsageError(f"{how.flag} must be {span}{how.note}: {spec.name}={value}")


def _source(words: dict[str, object]) -> OneBatch | DataSet:
    """The probe batch or the data set the flat `words` say, with one UsageError line for the
    data set's options without `--data`, and for `--data` with `--input`."""
    input_file, data = words.pop("input_file", None), words.pop("data", None)
    if data is None:
        if words.get("peer_timeout") is not None:  # refused, in its own words, by a data set
            DataSet("", peer_timeout=cast(float, words["peer_timeout"]))  # not multi-worker
        given = [how.metadata["cli"].flag for name, how in cli_fields()
                 if name in words and words[name] != how.default]  # fmt: skip
        if given:
            verb = "applies" if len(given) == 1 else "apply"
            raise UsageError(f"{', '.join(given)} only {verb} with --data PATH; add --data")
        return OneBatch(cast("PathLike | None", input_file))
    if input_file is not None:
        raise UsageError(
            "--data and --input exclude each other: --input is one probe batch, --data a "
            "whole data set; pass one of them"
        )
    return cast("Callable[..., DataSet]", DataSet)(data, **words)


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
    data = options.data_set
    if data is None or data.distribute != Distribute.MULTI_WORKER or data.cluster is not None:
        return options
    return replace(options, source=replace(data, cluster=cluster_from_env(environ)))


def probe_from(options: ProbeOptions | None, keywords: Mapping[str, object]) -> ProbeOptions:
    """The API's probe: `options`, or one made of the `**probe` keywords (`cli_fields`, each
    optional), with its cluster (`with_cluster`).

    Raises:
        TypeError: a keyword that is no option's (as Python says of an unknown argument).
    """
    make = cast("Callable[..., ProbeOptions]", ProbeOptions)
    return with_cluster(options if options is not None else make(**keywords))


def cli_fields() -> tuple[tuple[str, dataclasses.Field[object]], ...]:
    """The fields the command line spells, in its order, each with its keyword (the API's, and
    the click parameter's name): the probe batch's, the shared ones, the data set's."""
    every = (*fields(OneBatch), *fields(ProbeOptions), *fields(DataSet))
    return tuple((f.metadata["cli"].keyword or f.name, f) for f in every if "cli" in f.metadata)


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
    _word(Measure, measure, "measure")
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
    if probes is not None and probes > limits.MAX_PROBES:
        raise InputError(
            f"--probes must be at most {limits.MAX_PROBES} (each is a backward pass, and the error "
            f"bar shrinks as 1/sqrt(K)): probes={probes}; use --exact for exact norms"
        )
