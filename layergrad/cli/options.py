"""The options every `layergrad` command shares, declared once: loading, probing, data,
measures, formats.

Nothing here imports TensorFlow (or numpy) at import time, so `layergrad --help` is instant.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, TypedDict, TypeVar, cast

import click

from layergrad.cli.running import handle_errors, usage_error
from layergrad.core.errors import LayergradError, UsageError
from layergrad.core.limits import MAX_PROBES, MAX_STEPS, parse_size
from layergrad.core.probe_options import DATA_BATCH_SIZE, DEFAULT_TOP, Cli, cli_fields, probe_from
from layergrad.core.vocab import Measure, OutputFormat, Word, Wrt

if TYPE_CHECKING:
    from layergrad.core.probe_options import MeasureFields

F = TypeVar("F", bound=Callable[..., object])


W = TypeVar("W", bound=Word)
T = TypeVar("T")


Decorator = Callable[[Callable[..., object]], Callable[..., object]]  # click.option(...)


def _stack(func: F, options: Sequence[Decorator]) -> F:
    """`func` under `options`, the first outermost (as if written above it in that order)."""
    decorated: Callable[..., object] = func
    return cast(F, functools.reduce(lambda f, option: option(f), reversed(options), decorated))


def _rewriting(
    func: F, rewrite: Callable[[dict[str, object]], None], options: Sequence[Decorator]
) -> F:
    """`options` on `func`, whose keyword arguments `rewrite` changes in place first (several
    options become the one argument the command receives)."""

    @functools.wraps(func)
    def rewritten(*args: object, **kwargs: object) -> object:
        rewrite(kwargs)
        return func(*args, **kwargs)

    return _stack(cast(F, rewritten), options)


def bundle(kind: Callable[..., T], fields: Mapping[str, object], **more: object) -> T:
    """`kind(**fields, **more)`: a command's options (`CheckOptions`, `FitOptions`, ...) made
    of the click parameters named as its fields, whose types click has checked."""
    return kind(**fields, **more)


# the MODEL argument of every command that opens one model
model_argument = click.argument("model", type=click.Path(dir_okay=True, path_type=str))


class Load(TypedDict):
    """What `load_options` gives a command: the API's keyword arguments of the same names."""

    imports: tuple[str, ...]
    unsafe: bool


def load_options(func: Callable[..., bool | None]) -> Callable[..., None]:
    """`--import`, `--unsafe`, `--debug`: options of every command that opens a model, the
    last of its options: the command receives `load` (a `Load`) and runs under
    `handle_errors` (a True return: exit 1)."""
    return _rewriting(
        handle_errors(func),
        _load_fields,
        [
            click.option(
                "--import",
                "imports",
                multiple=True,
                metavar="MODULE",
                callback=_imports,
                help="A module (name or .py path) defining the model's custom layers: trusted "
                "by the safety audit and imported before loading (its classes are found "
                "registered or not). Importing runs its top-level code: it must only define "
                "classes (not train or save a model). Repeatable.",
            ),
            click.option(
                "--unsafe",
                is_flag=True,
                help="Let Keras deserialize Python code (Lambda bytecode). Only for trusted files.",
            ),
            click.option("--debug", is_flag=True, help="Show tracebacks and library warnings."),
        ],
    )


def _load_fields(kwargs: dict[str, object]) -> None:
    imports = cast("tuple[str, ...]", kwargs.pop("imports"))
    kwargs["load"] = Load(imports=imports, unsafe=bool(kwargs.pop("unsafe")))


def _imports(
    ctx: click.Context, _param: click.Parameter, value: tuple[str, ...]
) -> tuple[str, ...]:
    """A click callback: each `--import` can be imported (checked before anything loads;
    `layers` imports nothing, it only trusts the names)."""
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
    try:
        return parse_size(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def _size_text(n: int) -> str:
    """A byte count as `--max-memory` reads it back: 8GB, 512MB, or the bytes."""
    for unit, size in (("TB", 1 << 40), ("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if n % size == 0:
            return f"{n // size}{unit}"
    return str(n)


_FIELD_DEFAULT = object()  # `_option`: the field's own default


def _option(
    name: str,
    spec: dataclasses.Field[object],
    help_text: str | None = None,
    default: object = _FIELD_DEFAULT,
) -> Decorator:
    """The click option `name` of one probe options field: its `Cli` metadata and its default
    (or `default`, for a command whose default differs)."""
    how: Cli = spec.metadata["cli"]
    types: dict[str, object] = {
        "path": click.Path(dir_okay=False, path_type=str),
        "int": click.IntRange(min=how.low, max=how.high),
        "float": float,
        "word": click.Choice(how.words.words()) if how.words else None,
    }
    if default is _FIELD_DEFAULT:
        default = None if spec.default is dataclasses.MISSING else spec.default
    if how.kind == "size":
        default = _size_text(cast(int, default))
    elif isinstance(default, Word):
        default = default.value
    return click.option(
        how.flag,
        name,
        type=types.get(how.kind),
        default=default,
        show_default=default is not None and how.kind != "flag",
        is_flag=how.kind == "flag",
        metavar=how.metavar,
        callback=_size if how.kind == "size" else None,
        help=help_text or how.help,
    )


def _options(
    groups: Sequence[str], helps: Mapping[str, str | None] | None = None
) -> list[Decorator]:
    """The click options of the probe options fields of `groups`, in declaration order."""
    return [
        _option(name, spec, (helps or {}).get(name))
        for name, spec in cli_fields()
        if spec.metadata["cli"].group in groups
    ]


QUIET_OPTION = click.option(
    "--quiet", is_flag=True, help="No progress bar on stderr (with --data)."
)


def data_options(func: F) -> F:
    """`--data` and what goes with it (`--limit`, `--distribute`, `--cpu-replicas`, `--quiet`,
    `--first-sample`, `--peer-timeout`).

    Under `probe_options` they join the `probe` bundle (every command that takes them).
    """
    return _stack(func, [*_options(["data"]), QUIET_OPTION, *_options(["shard"])])


def training_data_options(func: F) -> F:
    """`data_options` without `--first-sample` and `--peer-timeout`, for training (`fit`)."""
    return _stack(func, [*_options(["data"]), QUIET_OPTION])


def field_option(
    name: str, help_text: str | None = None, default: object = _FIELD_DEFAULT
) -> Decorator:
    """The click option of the probe options field `name` (`--batch-size`, `--seed`,
    `--data`, `--limit`, `--max-memory`), for a command that takes it without the rest of its
    group; `default=` when the command's differs."""
    spec = dict(cli_fields())[name]
    return _option(name, spec, help_text, default)


def word_option(flag: str, default: Word, help_text: str, *name: str) -> Decorator:
    """An option taking one word of `default`'s vocabulary (`--measure`, `--format`, `--wrt`)."""
    return click.option(
        flag,
        *name,
        type=click.Choice(type(default).words()),
        default=default.value,
        show_default=True,
        help=help_text,
    )


def count_option(flag: str, metavar: str, help_text: str, default: int | None = None) -> Decorator:
    """A whole number of steps (`--steps`, `--epochs`, `--every`), 1 to `MAX_STEPS`."""
    return click.option(
        flag,
        type=click.IntRange(min=1, max=MAX_STEPS),
        default=default,
        show_default=default is not None,
        metavar=metavar,
        help=help_text,
    )


def fail_on_option(
    allowed: Iterable[W], what: str, metavar: str, help_text: str, default: Iterable[W] = ()
) -> Decorator:
    """`--fail-on` with the words of `allowed` (a `what`, in its errors), comma-separated; the
    command receives `fail_on`, a frozenset of members."""
    members = {str(m): m for m in allowed}

    def parse(_ctx: click.Context, _param: click.Parameter, value: str) -> frozenset[W]:
        wanted = {v.strip() for v in value.split(",") if v.strip()}
        unknown = sorted(wanted - set(members))
        if unknown:
            raise click.BadParameter(
                f"unknown {what} {', '.join(unknown)}; use {','.join(members)}"
            )
        return frozenset(members[w] for w in wanted)

    words = ",".join(str(w) for w in default)
    return click.option(
        "--fail-on",
        default=words,
        show_default=bool(words),
        callback=parse,
        metavar=metavar,
        help=help_text,
    )


def target_option(help_text: str) -> Decorator:
    """`--to REF`, the one layer differentiated; the command receives `target`."""
    return click.option("--to", "target", metavar="REF", help=help_text)


def training_options(
    *, steps: int | None, steps_help: str, batch_size_help: str
) -> Callable[[F], F]:
    """`--steps`, `--batch-size`, `--seed` of the commands that train (`fit`, `fix`), declared
    once with their bounds (`--batch-size` and `--seed` as the probe options declare them);
    `steps` is the default of `--steps` (None: the command decides)."""
    return lambda func: _stack(
        func,
        [
            count_option("--steps", "N", steps_help, steps),
            field_option("batch_size", batch_size_help, default=DATA_BATCH_SIZE),
            field_option("seed"),
        ],
    )


def probe_options(
    *,
    run_options: bool = True,
    batch_size_help: str | None = None,
    input_help: str | None = None,
) -> Callable[[F], F]:
    """How to make the probe batch and run the model, made from `ProbeOptions`' fields; the
    command receives one `probe` argument, a `ProbeOptions` (the command's `data_options`, if
    it has them, join the bundle too), with its cluster read from TF_CONFIG here, once.

    `run_options=False` leaves out `--reduce` and `--training` (`check` chooses them itself);
    the `*_help` texts let a command say what the option means for it.
    """
    helps = {"batch_size": batch_size_help, "input_file": input_help}
    groups = ["probe", "run"] if run_options else ["probe"]

    return lambda func: _rewriting(func, _probe_bundle, _options(groups, helps))


def _probe_bundle(kwargs: dict[str, object]) -> None:
    given = {name: kwargs.pop(name) for name, _ in cli_fields() if name in kwargs}
    try:
        kwargs["probe"] = probe_from(None, given)
    except LayergradError as exc:  # options that do not go together
        usage_error(str(exc), bool(kwargs.get("debug", False)))


def measure_options(func: F) -> F:
    """`--measure`, `--probes`, `--exact`, `--top` (inspect, scan); the command receives
    `measure`, a `MeasureFields`: the API's keyword arguments of the same names."""

    return _rewriting(
        func,
        _measure_fields,
        [
            word_option(
                "--measure",
                Measure.GRADIENT,
                "gradient: d reduce(to) / d from. jacobian: also the norms of the "
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
                default=DEFAULT_TOP,
                show_default=True,
                metavar="K",
                help="With --measure jacobian --data: report the K most sensitive samples "
                "(largest Jacobian norms), by their index in the data.",
            ),
        ],
    )


def _measure_fields(kwargs: dict[str, object]) -> None:
    given = {key: kwargs.pop(key) for key in ("measure", "probes", "exact", "top")}
    given["measure"] = Measure(given["measure"])
    kwargs["measure"] = cast("MeasureFields", given)


# `--tolerance DECADES` of `diff` and `check --baseline`; the command receives `tolerance`
tolerance_option = click.option(
    "--tolerance",
    default=2.0,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    metavar="DECADES",
    help="Largest change of mean |g| in decades (log10), up or down, not a regression.",
)


def format_options(func: F) -> F:
    """`--format table|json|markdown` and its shorthand `--json`; the command receives `fmt`."""

    return _rewriting(
        func,
        _output_format,
        [
            word_option(
                "--format",
                OutputFormat.TABLE,
                "Output: a table for people, JSON for programs, markdown for pull-request "
                "comments, html for one self-contained page (> report.html).",
                "fmt",
            ),
            click.option("--json", "as_json", is_flag=True, help="Shorthand for --format json."),
        ],
    )


def _output_format(kwargs: dict[str, object]) -> None:
    as_json, fmt = kwargs.pop("as_json"), OutputFormat(kwargs["fmt"])
    if as_json and fmt not in (OutputFormat.TABLE, OutputFormat.JSON):  # (table: the default)
        raise click.UsageError(f"--json is --format json, not --format {fmt}: give one of them")
    kwargs["fmt"] = OutputFormat.JSON if as_json else fmt


def wrt_options(func: F) -> F:
    """`--wrt activations|weights` and `--loss NAME` (scan, diff)."""
    return _stack(
        func,
        [
            word_option(
                "--wrt",
                Wrt.ACTIVATIONS,
                "Every layer's output, or (weights) the training loss's gradient for "
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


# `--plot FILE`: also write the command's chart; the format follows the extension
plot_option = click.option(
    "--plot",
    "plot_file",
    metavar="FILE",
    type=click.Path(dir_okay=False, path_type=str),
    help="Also write the chart: .png, .svg or .pdf (gradient flow for scan, unit "
    "sensitivity for inspect).",
)


# `--force`: let outputs replace an existing file layergrad did not write
force_option = click.option(
    "--force",
    is_flag=True,
    help="Let --junit, --plot and --save-gradient replace an existing file that layergrad "
    "did not write (never an input of the run).",
)
