"""The `layergrad` command line: parse options, call the API, render, set the exit code.

TensorFlow is imported only inside commands that need it, so `layergrad --help` is instant.
"""

from __future__ import annotations

import functools
import os
import shutil
import sys
import traceback
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

import click

from layergrad import __version__
from layergrad.errors import LayergradError, describe

F = TypeVar("F", bound=Callable[..., Any])
STATUSES = ("none", "zero", "nonfinite")


def _choices(allowed: tuple[str, ...], what: str) -> Callable[[Any, Any, str], frozenset[str]]:
    """A click callback parsing a comma-separated list of `allowed` words."""

    def parse(_ctx: Any, _param: Any, value: str) -> frozenset[str]:
        wanted = frozenset(v.strip() for v in value.split(",") if v.strip())
        unknown = sorted(wanted - set(allowed))
        if unknown:
            raise click.BadParameter(
                f"unknown {what} {', '.join(unknown)}; use {','.join(allowed)}"
            )
        return wanted

    return parse


_statuses = _choices(STATUSES, "status")
SCAN_FLAGS = ("blocked", "nonfinite", "dead", "vanishing", "exploding")
CHECK_FINDINGS = ("unreadable", "unsafe", "error", *SCAN_FLAGS)
_scan_flags = _choices(SCAN_FLAGS, "flag")
_check_findings = _choices(CHECK_FINDINGS, "finding")


def handle_errors(func: F) -> F:
    """Turn API errors into one line on stderr and exit code 2 (a traceback with --debug)."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        debug = kwargs.get("debug", False)
        try:
            with warnings.catch_warnings():
                if not debug:
                    warnings.simplefilter("ignore")
                return func(*args, **kwargs)
        except click.ClickException:
            raise
        except LayergradError as exc:
            if debug:
                traceback.print_exc()
            click.echo(f"error: {exc}", err=True)
            sys.exit(2)
        except Exception as exc:  # an unexpected failure still gets one readable line
            if debug:
                traceback.print_exc()
            click.echo(
                f"error: unexpected {type(exc).__name__}: {describe(exc)} (run again with "
                "--debug for the traceback)",
                err=True,
            )
            sys.exit(2)

    return wrapper  # type: ignore[return-value]


def load_options(func: F) -> F:
    """Options every command that loads a model takes."""
    for option in reversed(
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
        ]
    ):
        func = option(func)
    return func


PROBE_KEYS = ("input_file", "batch_size", "seed", "reduce", "training")


def probe_options(func: F) -> F:
    """Options that say how to make the probe batch and run the model.

    The command receives them as one dict, `probe`, of API keyword arguments.
    """

    command = func

    @functools.wraps(command)
    def bundled(*args: Any, **kwargs: Any) -> Any:
        kwargs["probe"] = {key: kwargs.pop(key) for key in PROBE_KEYS}
        return command(*args, **kwargs)

    func = bundled  # type: ignore[assignment]
    for option in reversed(
        [
            click.option(
                "--input",
                "input_file",
                type=click.Path(dir_okay=False, path_type=str),
                help="Probe batch: .npy (one input) or .npz keyed by input name.",
            ),
            click.option(
                "--batch-size",
                type=click.IntRange(min=1),
                help="Rows of the random probe batch (default 8), or of each batch of --data "
                "(default 32).",
            ),
            click.option(
                "--seed", default=0, show_default=True, type=int, help="Seed of the random batch."
            ),
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
    ):
        func = option(func)
    return func


DATA_KEYS = ("data", "limit", "distribute", "cpu_replicas")


def data_options(func: F) -> F:
    """Options that run over a whole data set; the command receives them as one dict, `data`
    (API keyword arguments), and `quiet`."""

    command = func

    @functools.wraps(command)
    def bundled(*args: Any, **kwargs: Any) -> Any:
        kwargs["data"] = {key: kwargs.pop(key) for key in DATA_KEYS}
        return command(*args, **kwargs)

    func = bundled  # type: ignore[assignment]
    for option in reversed(
        [
            click.option(
                "--data",
                metavar="PATH",
                help="Run over a whole data set, streamed: .npy, .npz (keys = input names, "
                "y = labels), a folder of images, or FILE.py:function / module:function "
                "returning batches. Statistics are over all samples.",
            ),
            click.option(
                "--limit",
                type=click.IntRange(min=1),
                metavar="N",
                help="With --data: read at most N samples.",
            ),
            click.option(
                "--distribute",
                type=click.Choice(["mirrored"]),
                help="With --data: run on every visible GPU (tf.distribute.MirroredStrategy).",
            ),
            click.option(
                "--cpu-replicas",
                type=click.IntRange(min=1),
                metavar="N",
                help="With --data: split the CPU into N devices and mirror over them (a "
                "testing aid for the distributed path).",
            ),
            click.option(
                "--quiet", is_flag=True, help="No progress bar on stderr (with --data)."
            ),
        ]
    ):
        func = option(func)
    return func


def format_options(func: F) -> F:
    """`--format table|json|markdown` and its shorthand `--json`."""
    func = click.option("--json", "as_json", is_flag=True, help="Shorthand for --format json.")(
        func
    )
    return click.option(
        "--format",
        "fmt",
        type=click.Choice(["table", "json", "markdown"]),
        default="table",
        show_default=True,
        help="Output: a table for people, JSON for programs, markdown for pull-request comments.",
    )(func)


def emit(
    text_fn: Callable[..., str],
    json_fn: Callable[[Any], str],
    md_fn: Callable[[Any], str],
    value: Any,
    fmt: str,
    as_json: bool,
) -> None:
    """Print a report in the chosen format (JSON returns before any colour logic)."""
    if as_json or fmt == "json":
        click.echo(json_fn(value))
    elif fmt == "markdown":
        click.echo(md_fn(value), nl=False)
    else:
        color, width = _terminal()
        click.echo(text_fn(value, color=color, width=width), nl=False)


def _terminal() -> tuple[bool, int]:
    """(use colour, width) for stdout."""
    color = sys.stdout.isatty() and "NO_COLOR" not in os.environ
    return color, shutil.get_terminal_size((100, 24)).columns


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="layergrad")
def main() -> None:
    """How much does one Keras layer's output move when an earlier one moves?

    layergrad runs a saved Keras model once under tf.GradientTape, watches the
    activation of one layer and differentiates later ones with respect to it.
    When the gradient is None, zero or NaN it says why and how to fix it.

    \b
    Example:
        layergrad inspect model.keras --from dense --to dense_1
    """


@main.command()
@click.argument("model", type=click.Path(dir_okay=True, path_type=str))
@click.option(
    "--from", "source", required=True, metavar="REF", help="Layer to differentiate with respect to."
)
@click.option(
    "--to",
    "targets",
    required=True,
    multiple=True,
    metavar="REF",
    help="Layer whose output is differentiated. Repeatable.",
)
@probe_options
@data_options
@format_options
@click.option(
    "--save-gradient",
    metavar="FILE",
    help="Write raw gradients: .npy (one --to) or .npz keyed by --to.",
)
@click.option(
    "--fail-on",
    default="",
    callback=_statuses,
    metavar="STATUSES",
    help="Exit 1 when a result has one of these statuses, e.g. none,zero,nonfinite.",
)
@load_options
@handle_errors
def inspect(
    model: str,
    source: str,
    targets: tuple[str, ...],
    probe: dict[str, Any],
    data: dict[str, Any],
    quiet: bool,
    fmt: str,
    as_json: bool,
    save_gradient: str | None,
    fail_on: frozenset[str],
    imports: tuple[str, ...],
    unsafe: bool,
    debug: bool,
) -> None:
    """Gradient of --to layers' outputs with respect to the --from layer's output.

    Computes d sum(TO) / d FROM over the whole probe batch (what tape.gradient
    returns) and flags None, zero and non-finite results with their causes.

    \b
    Layer references (REF):
        dense            a layer name (nested layers by their own name when unique)
        encoder/dense_1  a path through nested models
        shared@1         the second call of a layer used twice
        -2               an index into the top-level layers

    \b
    Examples:
        layergrad inspect model.keras --from dense --to dense_1
        layergrad inspect model.keras --from embedding --to head --to pool --json
        layergrad inspect model.h5 --from 1 --to -1 --input batch.npy --fail-on none,nonfinite
        layergrad inspect model.keras --from conv --to head --data images/ --limit 10000
    """
    from layergrad import api, report
    from layergrad.progress import sample_progress

    if save_gradient and not save_gradient.endswith((".npy", ".npz")):
        raise click.BadParameter("must end in .npy or .npz", param_hint="--save-gradient")
    if save_gradient and save_gradient.endswith(".npy") and len(targets) > 1:
        raise click.BadParameter("several --to layers need a .npz", param_hint="--save-gradient")
    if save_gradient and data["data"] is not None:
        raise click.BadParameter(
            "with --data no gradient array is kept (only its statistics); drop --data, or "
            "pass one batch with --input",
            param_hint="--save-gradient",
        )
    with sample_progress(data["data"] is not None and not quiet) as on_progress:
        result = api.inspect_model(
            model, source, list(targets), imports=imports, unsafe=unsafe,
            on_progress=on_progress, **probe, **data,
        )  # fmt: skip
    emit(report.inspect_text, report.inspect_json, report.inspect_markdown, result, fmt, as_json)
    if save_gradient:
        api.save_gradients(result, save_gradient)
    if any(r.status in fail_on for r in result.results):
        sys.exit(1)


@main.command()
@click.argument("model", type=click.Path(dir_okay=True, path_type=str))
@format_options
@load_options
@handle_errors
def layers(
    model: str,
    fmt: str,
    as_json: bool,
    imports: tuple[str, ...],
    unsafe: bool,
    debug: bool,
) -> None:
    """List every layer of a model file: the names --from and --to accept.

    One row per layer (nested models expanded as outer/inner): index, class,
    inbound layers, stored parameters, dtype policy, trainable, and the health
    of its stored weights (NaN/Inf values, all-zero tensors). The file is read
    without TensorFlow and audited first: a file that would run code when
    loaded is refused unless --unsafe. Here --import only marks a module's
    classes as trusted; nothing is imported.

    \b
    Examples:
        layergrad layers model.keras
        layergrad layers model.h5 --json
        layergrad layers custom.keras --import my_layers.py
    """
    from layergrad import layer_table, loader
    from layergrad.fileinfo import read_file_info

    info = read_file_info(model)
    accepted = loader.check_safety(info, [loader.module_name(s) for s in imports], unsafe)
    for line in accepted:
        click.echo(f"warning: {line}; listed anyway because of --unsafe", err=True)
    emit(
        layer_table.layers_text,
        layer_table.layers_json,
        layer_table.layers_markdown,
        layer_table.build_listing(info, accepted),
        fmt,
        as_json,
    )


@main.command()
@click.argument("model", type=click.Path(dir_okay=True, path_type=str))
@click.option(
    "--to", "target", metavar="REF", help="Target layer (default: the sum of the model's outputs)."
)
@click.option(
    "--layers",
    "patterns",
    multiple=True,
    metavar="GLOB",
    help="Only layers matching this shell glob, e.g. 'conv4_*'. Repeatable.",
)
@probe_options
@data_options
@format_options
@click.option(
    "--fail-on",
    default="",
    callback=_scan_flags,
    metavar="FLAGS",
    help=f"Exit 1 when a layer is flagged with one of: {','.join(SCAN_FLAGS)}.",
)
@load_options
@handle_errors
def scan(
    model: str,
    target: str | None,
    patterns: tuple[str, ...],
    probe: dict[str, Any],
    data: dict[str, Any],
    quiet: bool,
    fmt: str,
    as_json: bool,
    fail_on: frozenset[str],
    imports: tuple[str, ...],
    unsafe: bool,
    debug: bool,
) -> None:
    """Gradient flow through the whole model in one forward and one backward pass.

    Differentiates one target (the sum of the model's outputs, or --to) with
    respect to every layer's output, and shows them in depth order with a
    log-scale bar. Flags: blocked (None), nonfinite, dead (mostly exact zeros),
    vanishing / exploding (1e6 times below / above the target end). Integer-valued
    layers are shown as not differentiable.

    \b
    Examples:
        layergrad scan model.keras
        layergrad scan model.keras --to dense_1 --layers 'conv*' --json
        layergrad scan model.keras --fail-on blocked,nonfinite
        layergrad scan model.keras --data x.npz --distribute mirrored --json
    """
    from layergrad import api, scan_report
    from layergrad.progress import sample_progress

    with sample_progress(data["data"] is not None and not quiet) as on_progress:
        result = api.scan_model(
            model, target=target, layers=patterns, imports=imports, unsafe=unsafe,
            on_progress=on_progress, **probe, **data,
        )  # fmt: skip
    emit(
        scan_report.scan_text,
        scan_report.scan_json,
        scan_report.scan_markdown,
        result,
        fmt,
        as_json,
    )
    if any(set(row.flags) & fail_on for row in result.rows):
        sys.exit(1)


@main.command()
@click.argument("models", nargs=-1, required=True, type=click.Path(path_type=str))
@click.option(
    "--fail-on",
    default="unreadable,unsafe,error,nonfinite,blocked",
    show_default=True,
    callback=_check_findings,
    metavar="FINDINGS",
    help=f"Findings that fail a file: {','.join(CHECK_FINDINGS)}.",
)
@click.option(
    "--static-only",
    is_flag=True,
    help="Stop after reading, the safety audit and weight health; never import TensorFlow.",
)
@format_options
@click.option(
    "--junit",
    "junit_file",
    metavar="FILE",
    type=click.Path(dir_okay=False, path_type=str),
    help="Also write JUnit XML (one testcase per file and check).",
)
@click.option(
    "--batch-size",
    type=click.IntRange(min=1),
    help="Rows of the random probe batch (default 2), or of each batch of --data (default 32).",
)
@click.option(
    "--seed", default=0, show_default=True, type=int, help="Seed of the random probe batch."
)
@data_options
@load_options
@handle_errors
def check(
    models: tuple[str, ...],
    fail_on: frozenset[str],
    static_only: bool,
    fmt: str,
    as_json: bool,
    junit_file: str | None,
    batch_size: int | None,
    seed: int,
    data: dict[str, Any],
    quiet: bool,
    imports: tuple[str, ...],
    unsafe: bool,
    debug: bool,
) -> None:
    """Check model files for CI: exit 1 when any file fails.

    Each file gets named checks: readable, safe (static audit), weights (all
    finite), loads (Keras safe mode), forward (finite on a random batch),
    gradient (the outputs' gradient reaches every differentiable layer,
    finite). An unreadable or hostile file fails; it is not a usage error.
    A directory stands for the .keras / .h5 files under it.

    \b
    Examples:
        layergrad check models/*.keras
        layergrad check models/ --junit layergrad.xml
        layergrad check model.h5 --static-only --fail-on unreadable,unsafe,nonfinite
        layergrad check model.keras --data validation.npz
    """
    from layergrad import check as checks
    from layergrad import check_report
    from layergrad.progress import sample_progress

    paths = checks.expand_paths(models)
    with sample_progress(data["data"] is not None and not quiet) as on_progress:
        options = checks.CheckOptions(
            fail_on=fail_on,
            static_only=static_only,
            imports=imports,
            unsafe=unsafe,
            batch_size=batch_size,
            seed=seed,
            data=checks.data_options(**data, on_progress=on_progress),
        )
        verdicts = _with_progress(
            paths if on_progress is None else [], lambda on: checks.check_files(paths, options, on)
        )
    if junit_file:
        with open(junit_file, "w", encoding="utf-8") as out:
            out.write(check_report.check_junit(verdicts))
    emit(
        check_report.check_text,
        check_report.check_json,
        check_report.check_markdown,
        verdicts,
        fmt,
        as_json,
    )
    if not all(v.passed for v in verdicts):
        sys.exit(1)


def _with_progress(paths: list[str], run: Callable[[Callable[[str], None] | None], Any]) -> Any:
    """Run with a progress bar on stderr when there are several files."""
    if len(paths) < 2:
        return run(None)
    from rich.console import Console
    from rich.progress import Progress

    with Progress(console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task("checking", total=len(paths))
        started = 0

        def on_file(path: str) -> None:
            nonlocal started
            progress.update(task, completed=started, description=f"checking {path}")
            started += 1

        result = run(on_file)
        progress.update(task, completed=len(paths))
    return result


if __name__ == "__main__":
    main()
