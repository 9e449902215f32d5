"""The options every `layergrad` command shares, declared once: loading, probing, data,
measures, formats.

Nothing here imports TensorFlow (or numpy) at import time, so `layergrad --help` is instant.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, TypeVar, cast

import click

from layergrad.cli.running import usage_error
from layergrad.core.errors import LayergradError
from layergrad.core.limits import (
    MAX_BATCH_SIZE,
    MAX_CPU_REPLICAS,
    MAX_LIMIT,
    MAX_PROBES,
    MAX_SEED,
)
from layergrad.core.vocab import Measure, OutputFormat, Word, Wrt

if TYPE_CHECKING:
    from layergrad.core.probe_options import MeasureFields, ProbeFields

F = TypeVar("F", bound=Callable[..., object])


W = TypeVar("W", bound=Word)


def comma_list(
    allowed: Iterable[W], what: str
) -> Callable[[click.Context, click.Parameter, str], frozenset[W]]:
    """A click callback parsing a comma-separated list of `allowed` words into their members."""
    members = {str(m): m for m in allowed}

    def parse(_ctx: click.Context, _param: click.Parameter, value: str) -> frozenset[W]:
        wanted = {v.strip() for v in value.split(",") if v.strip()}
        unknown = sorted(wanted - set(members))
        if unknown:
            raise click.BadParameter(
                f"unknown {what} {', '.join(unknown)}; use {','.join(members)}"
            )
        return frozenset(members[w] for w in wanted)

    return parse


Decorator = Callable[[Callable[..., object]], Callable[..., object]]  # click.option(...)


def _stack(func: F, options: Sequence[Decorator]) -> F:
    decorated: Callable[..., object] = func
    for option in reversed(options):
        decorated = option(decorated)
    return cast(F, decorated)


def load_options(func: F) -> F:
    """`--import`, `--unsafe`, `--debug`: options of every command that opens a model."""
    return _stack(
        func,
        [
            click.option(
                "--import",
                "imports",
                multiple=True,
                metavar="MODULE",
                callback=_imports,
                help="A module (name or .py path) defining the model's custom layers: trusted "
                "by the safety audit and imported before loading. Repeatable.",
            ),
            click.option(
                "--unsafe",
                is_flag=True,
                help="Let Keras deserialize Python code (Lambda bytecode). Only for trusted files.",
            ),
            click.option("--debug", is_flag=True, help="Show tracebacks and library warnings."),
        ],
    )


def _imports(
    ctx: click.Context, _param: click.Parameter, value: tuple[str, ...]
) -> tuple[str, ...]:
    """A click callback: each `--import` can be imported (checked before anything loads;
    `layers` imports nothing, it only trusts the names)."""
    from layergrad.core.errors import UsageError
    from layergrad.files.audit import check_import_specs

    try:
        check_import_specs(value, find=ctx.info_name != "layers")
    except UsageError as exc:
        raise click.BadParameter(
            str(exc).removeprefix("--import "), param_hint="--import"
        ) from None
    return value


def _size(_ctx: click.Context, _param: click.Parameter, value: str) -> int:
    """A click callback parsing a size such as 8GB into bytes."""
    from layergrad.core.limits import parse_size

    try:
        return parse_size(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def max_memory_option(func: F) -> F:
    """`--max-memory SIZE`: the budget for the probe's memory, estimated before loading."""
    return click.option(
        "--max-memory",
        default="8GB",
        show_default=True,
        callback=_size,
        metavar="SIZE",
        help="Refuse a model whose probe would need more memory than this (estimated from "
        "the shapes in its config before Keras builds it), e.g. 32GB.",
    )(func)


PROBE_KEYS = ("input_file", "batch_size", "seed", "reduce", "training", "max_memory")
RUN_KEYS = ("reduce", "training")  # how the model runs; `check` decides these itself
DATA_KEYS = ("data", "limit", "distribute", "cpu_replicas", "first_sample", "peer_timeout")


def data_options(func: F) -> F:
    """`--data` and what goes with it (`--limit`, `--distribute`, `--cpu-replicas`,
    `--first-sample`, `--quiet`).

    Under `probe_options` they join the `probe` bundle (every command that takes them).
    """
    return _stack(func, [*_data_option_list(), FIRST_SAMPLE_OPTION, PEER_TIMEOUT_OPTION])


def training_data_options(func: F) -> F:
    """`data_options` without `--first-sample`, for training (`fit`): no shards to number."""
    return _stack(func, _data_option_list())


def _data_option_list() -> list[Decorator]:
    return [
        click.option(
            "--data",
            metavar="PATH",
            help="Run over a whole data set, streamed: .npy, .npz (keys = input names, or x "
            "for one input; y = labels), a folder of images, or FILE.py:function / "
            "module:function returning batches. Statistics are over all samples.",
        ),
        click.option(
            "--limit",
            type=click.IntRange(min=1, max=MAX_LIMIT),
            metavar="N",
            help="With --data: read at most N samples.",
        ),
        click.option(
            "--distribute",
            type=click.Choice(["mirrored", "multi-worker"]),
            help="With --data: mirrored runs on every visible GPU "
            "(tf.distribute.MirroredStrategy); multi-worker on every worker of the cluster "
            "in TF_CONFIG (MultiWorkerMirroredStrategy), each over its shard; only the "
            "chief prints the report.",
        ),
        click.option(
            "--cpu-replicas",
            type=click.IntRange(min=1, max=MAX_CPU_REPLICAS),
            metavar="N",
            help="With --data: split the CPU into N devices and mirror over them (a "
            "testing aid for the distributed path).",
        ),
        click.option("--quiet", is_flag=True, help="No progress bar on stderr (with --data)."),
    ]


FIRST_SAMPLE_OPTION = click.option(
    "--first-sample",
    type=click.IntRange(min=0),
    default=0,
    metavar="N",
    help="With --data: PATH is a shard of a larger data set starting at its sample "
    "N, so the samples are numbered from N (the default scan target's projection "
    "is seeded per sample): shards then merge exactly (`layergrad merge`).",
)


PEER_TIMEOUT_OPTION = click.option(
    "--peer-timeout",
    type=float,
    metavar="SECONDS",
    help="With --distribute multi-worker: wait at most this long for the other workers "
    "of TF_CONFIG to start (default 300), then stop with an error.",
)


BATCH_SIZE_HELP = (
    "Rows of the random probe batch (default 8), or of each batch of --data (default 32)."
)
SEED_HELP = "Seed of the random batch."
INPUT_HELP = (
    "Probe batch: .npy (one input) or .npz keyed by input name (x for one input; y = labels)."
)


def probe_options(
    *,
    run_options: bool = True,
    batch_size_help: str = BATCH_SIZE_HELP,
    seed_help: str = SEED_HELP,
    input_help: str = INPUT_HELP,
) -> Callable[[F], F]:
    """How to make the probe batch and run the model, declared once for every command; the
    command receives one `probe` argument, a `ProbeOptions` (the command's `data_options`, if
    it has them, join the bundle too).

    `run_options=False` leaves out `--reduce` and `--training` (`check` chooses them itself);
    the `*_help` texts let a command say what the option means for it.
    """
    keys = PROBE_KEYS if run_options else tuple(k for k in PROBE_KEYS if k not in RUN_KEYS)

    def decorate(func: F) -> F:
        @functools.wraps(func)
        def bundled(*args: object, **kwargs: object) -> object:
            from layergrad.core.probe_options import ProbeOptions

            wanted = [*keys, *(k for k in DATA_KEYS if k in kwargs)]
            given = {key: kwargs.pop(key) for key in wanted}
            try:
                kwargs["probe"] = ProbeOptions(**cast("ProbeFields", given))  # click's types
            except LayergradError as exc:  # options that do not go together
                usage_error(exc, bool(kwargs.get("debug", False)))
            return func(*args, **kwargs)

        options = [
            click.option(
                "--input",
                "input_file",
                type=click.Path(dir_okay=False, path_type=str),
                help=input_help,
            ),
            click.option(
                "--batch-size",
                type=click.IntRange(min=1, max=MAX_BATCH_SIZE),
                help=batch_size_help,
            ),
            click.option(
                "--seed",
                default=0,
                show_default=True,
                type=click.IntRange(min=0, max=MAX_SEED),
                help=seed_help,
            ),
        ]
        if run_options:
            options += [
                click.option(
                    "--reduce",
                    type=click.Choice(["sum", "mean"]),
                    default="sum",
                    show_default=True,
                    help="Reduce the target activation to a scalar by sum or mean.",
                ),
                click.option(
                    "--training",
                    is_flag=True,
                    help="Run the model in training mode (default: inference).",
                ),
            ]
        return _stack(cast(F, bundled), [*options, max_memory_option])

    return decorate


def measure_options(func: F) -> F:
    """`--measure`, `--probes`, `--exact`, `--top` (inspect, scan); the command receives
    `measure`, a `MeasureFields`: the API's keyword arguments of the same names."""

    @functools.wraps(func)
    def bundled(*args: object, **kwargs: object) -> object:
        keys = ("measure", "probes", "exact", "top")
        kwargs["measure"] = cast("MeasureFields", {key: kwargs.pop(key) for key in keys})
        return func(*args, **kwargs)

    return _stack(
        cast(F, bundled),
        [
            click.option(
                "--measure",
                type=click.Choice(Measure.words()),
                default=Measure.GRADIENT.value,
                show_default=True,
                help="gradient: d reduce(to) / d from. jacobian: also the norms of the "
                "per-sample Jacobians d to[i] / d from[i] (Frobenius, spectral, per unit).",
            ),
            click.option(
                "--probes",
                type=int,
                metavar="K",
                help="Estimate the Jacobian norms from K random projections (default 32 when "
                f"estimating, 2 to {MAX_PROBES}); forces the estimate.",
            ),
            click.option(
                "--exact",
                is_flag=True,
                help="Compute the Jacobian norms exactly, from every row of the Jacobians "
                "(the default for inspect when one sample's has at most 2^20 entries, for scan "
                "when the target has at most 32 entries per sample).",
            ),
            click.option(
                "--top",
                type=click.IntRange(min=1),
                default=10,
                show_default=True,
                metavar="K",
                help="With --measure jacobian --data: report the K most sensitive samples "
                "(largest Jacobian norms), by their index in the data.",
            ),
        ],
    )


def tolerance_option(func: F) -> F:
    """`--tolerance DECADES` of `diff` and `check --baseline`; the command receives `tolerance`."""
    return click.option(
        "--tolerance",
        default=2.0,
        show_default=True,
        type=click.FloatRange(min=0, min_open=True),
        metavar="DECADES",
        help="Largest change of mean |g| in decades (log10), up or down, not a regression.",
    )(func)


def format_options(func: F) -> F:
    """`--format table|json|markdown` and its shorthand `--json`; the command receives `fmt`."""

    @functools.wraps(func)
    def merged(*args: object, **kwargs: object) -> object:
        as_json = kwargs.pop("as_json")
        kwargs["fmt"] = OutputFormat.JSON if as_json else OutputFormat(kwargs["fmt"])
        return func(*args, **kwargs)

    return _stack(
        cast(F, merged),
        [
            click.option(
                "--format",
                "fmt",
                type=click.Choice(OutputFormat.words()),
                default=OutputFormat.TABLE.value,
                show_default=True,
                help="Output: a table for people, JSON for programs, markdown for pull-request "
                "comments, html for one self-contained page (> report.html).",
            ),
            click.option("--json", "as_json", is_flag=True, help="Shorthand for --format json."),
        ],
    )


def wrt_options(func: F) -> F:
    """`--wrt activations|weights` and `--loss NAME` (scan, diff)."""
    return _stack(
        func,
        [
            click.option(
                "--wrt",
                type=click.Choice(Wrt.words()),
                default=Wrt.ACTIVATIONS.value,
                show_default=True,
                help="Every layer's output, or (weights) the training loss's gradient for "
                "every trainable variable.",
            ),
            click.option(
                "--loss",
                "loss",
                metavar="NAME",
                help="With --wrt weights: a keras.losses name (default: the loss compiled in "
                "the file).",
            ),
        ],
    )


def plot_option(func: F) -> F:
    """`--plot FILE`: also write the command's chart; the format follows the extension."""
    return click.option(
        "--plot",
        "plot_file",
        metavar="FILE",
        type=click.Path(dir_okay=False, path_type=str),
        help="Also write the chart: .png, .svg or .pdf (gradient flow for scan, unit "
        "sensitivity for inspect).",
    )(func)


def force_option(func: F) -> F:
    """`--force`: let outputs replace an existing file layergrad did not write."""
    return click.option(
        "--force",
        is_flag=True,
        help="Let --junit, --plot and --save-gradient replace an existing file that layergrad "
        "did not write (never an input of the run).",
    )(func)
