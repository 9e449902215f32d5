"""What every `layergrad` command shares: options, error handling, and printing a report.

Nothing here imports TensorFlow (or numpy) at import time, so `layergrad --help` is instant.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import sys
import traceback
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, NoReturn, TextIO, TypeVar, cast

import click

from layergrad.core.errors import LayergradError, describe, one_line
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
    from layergrad.core.results import InspectReport, ScanReport, WeightScanReport

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


def handle_errors(func: F) -> F:
    """Turn API errors into one line on stderr and exit code 2 (a traceback with --debug)."""

    @functools.wraps(func)
    def wrapper(*args: object, **kwargs: object) -> object:
        debug = kwargs.get("debug", False)
        try:
            with warnings.catch_warnings(), report_stdout():
                if not debug:
                    warnings.simplefilter("ignore")
                return func(*args, **kwargs)
        except click.ClickException:
            raise
        except LayergradError as exc:
            usage_error(exc, bool(debug))
        except Exception as exc:  # an unexpected failure still gets one readable line
            if debug:
                traceback.print_exc()
            from layergrad.render.escape import visible

            click.echo(
                f"error: unexpected {type(exc).__name__}: {one_line(visible(describe(exc)))} "
                "(run again with --debug for the traceback)",
                err=True,
            )
            sys.exit(2)

    wrapper.report_stdout = True  # type: ignore[attr-defined]  # tests find it on every command
    return cast(F, wrapper)


_REPORT_STREAMS: list[TextIO] = []  # where `emit` writes: the real stdout of each command


@contextlib.contextmanager
def report_stdout() -> Iterator[None]:
    """While a command runs, send whatever anything prints to stdout to stderr instead.

    Keras (`Found 40 files.`), TensorFlow and a user's data function print while the tool
    works; stdout must hold exactly one report. `sys.stdout` points at stderr for the duration,
    and so does file descriptor 1 when stdout is a real file (C code writes to it directly);
    `emit` writes the report to the real stdout, kept aside.
    """
    real = sys.stdout
    try:
        descriptor = real.fileno()
    except (AttributeError, OSError, ValueError):  # click's test runner: an in-memory stream
        descriptor = -1
    kept = -1
    report: TextIO = real
    if descriptor == 1:
        real.flush()
        kept = os.dup(1)
        os.dup2(2, 1)
        report = open(  # noqa: SIM115  (closed below, after the command)
            kept, "w", encoding=real.encoding, errors=real.errors, closefd=False
        )
    _REPORT_STREAMS.append(report)
    sys.stdout = sys.stderr
    try:
        yield
    finally:
        sys.stdout = real
        _REPORT_STREAMS.pop()
        if kept >= 0:
            report.close()
            real.flush()
            os.dup2(kept, 1)
            os.close(kept)


def _report_stream() -> TextIO:
    """The stream a report goes to: the command's real stdout."""
    return _REPORT_STREAMS[-1] if _REPORT_STREAMS else sys.stdout


def usage_error(exc: LayergradError, debug: bool = False) -> NoReturn:
    """One line on stderr (a traceback too with --debug), exit code 2."""
    from layergrad.render.escape import visible

    if debug:
        traceback.print_exc()
    click.echo(f"error: {one_line(visible(str(exc)))}", err=True)
    sys.exit(2)


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
DATA_KEYS = ("data", "limit", "distribute", "cpu_replicas", "first_sample")


def data_options(func: F) -> F:
    """`--data` and what goes with it (`--limit`, `--distribute`, `--cpu-replicas`,
    `--first-sample`, `--quiet`).

    Under `probe_options` they join the `probe` bundle (every command that takes them).
    """
    return _stack(func, [*_data_option_list(), FIRST_SAMPLE_OPTION])


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


def write_plot(
    report: InspectReport | ScanReport | WeightScanReport,
    path: str,
    protected: Sequence[str | os.PathLike[str] | None] = (),
    force: bool = False,
) -> None:
    """Save the report's chart (never over a `protected` file) and say so on stderr."""
    from layergrad.render import plot

    written = plot.save_figure(plot.report_figure(report), path, protected, force=force)
    kind = "unit-sensitivity" if hasattr(report, "results") else "gradient-flow"
    click.echo(f"wrote {kind} chart to {path} ({written})", err=True)


def emit(
    command: str, fmt: OutputFormat, value: object, accepted: Iterable[str] = (), **options: object
) -> None:
    """Print a report on stdout in the chosen format; the audit findings accepted with
    --unsafe go to stderr first. `options` go to the renderer (`show_all` for `diff`)."""
    from layergrad.render import render
    from layergrad.render.escape import visible

    for line in accepted:
        click.echo(f"warning: {visible(line)}; accepted because of --unsafe", err=True)
    stream = _report_stream()
    color, width = _terminal(stream)
    text = render(command, fmt, value, color=color, width=width, **options)
    click.echo(text, file=stream, nl=fmt == OutputFormat.JSON)
    stream.flush()


def _terminal(stream: TextIO) -> tuple[bool, int | None]:
    """(use colour, width) for stdout; width None (as wide as needed) when it is not a terminal."""
    if not stream.isatty():
        columns = os.environ.get("COLUMNS", "")
        return False, int(columns) if columns.isdigit() else None
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit():
        return "NO_COLOR" not in os.environ, int(columns)
    try:
        width = os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, OSError, ValueError):
        width = shutil.get_terminal_size((100, 24)).columns
    return "NO_COLOR" not in os.environ, width
