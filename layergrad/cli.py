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
from layergrad.errors import LayergradError

F = TypeVar("F", bound=Callable[..., Any])
STATUSES = ("none", "zero", "nonfinite")


def _fail_on(_ctx: Any, _param: Any, value: str) -> frozenset[str]:
    wanted = frozenset(v.strip() for v in value.split(",") if v.strip())
    unknown = sorted(wanted - set(STATUSES))
    if unknown:
        raise click.BadParameter(f"unknown status {', '.join(unknown)}; use {','.join(STATUSES)}")
    return wanted


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
            first = (str(exc).strip().splitlines() or [""])[0]
            click.echo(
                f"error: unexpected {type(exc).__name__}: {first} (run again with --debug "
                "for the traceback)",
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
                help="Import a module (name or .py path) that registers custom layers. Repeatable.",
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
@click.option(
    "--input",
    "input_file",
    type=click.Path(dir_okay=False, path_type=str),
    help="Probe batch: .npy (one input) or .npz keyed by input name.",
)
@click.option(
    "--batch-size",
    default=8,
    show_default=True,
    type=click.IntRange(min=1),
    help="Rows of the random probe batch.",
)
@click.option(
    "--seed", default=0, show_default=True, type=int, help="Seed of the random probe batch."
)
@click.option(
    "--reduce",
    type=click.Choice(["sum", "mean"]),
    default="sum",
    show_default=True,
    help="Reduce each --to activation to a scalar by sum or mean.",
)
@click.option(
    "--training", is_flag=True, help="Run the model in training mode (default: inference)."
)
@click.option(
    "--json", "as_json", is_flag=True, help="Print one JSON object (schema layergrad.inspect/1)."
)
@click.option(
    "--save-gradient",
    metavar="FILE",
    help="Write raw gradients: .npy (one --to) or .npz keyed by --to.",
)
@click.option(
    "--fail-on",
    default="",
    callback=_fail_on,
    metavar="STATUSES",
    help="Exit 1 when a result has one of these statuses, e.g. none,zero,nonfinite.",
)
@load_options
@handle_errors
def inspect(
    model: str,
    source: str,
    targets: tuple[str, ...],
    input_file: str | None,
    batch_size: int,
    seed: int,
    reduce: str,
    training: bool,
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
    """
    from layergrad import api, report

    if save_gradient and not save_gradient.endswith((".npy", ".npz")):
        raise click.BadParameter("must end in .npy or .npz", param_hint="--save-gradient")
    if save_gradient and save_gradient.endswith(".npy") and len(targets) > 1:
        raise click.BadParameter("several --to layers need a .npz", param_hint="--save-gradient")
    result = api.inspect_model(
        model,
        source,
        list(targets),
        input_file=input_file,
        batch_size=batch_size,
        seed=seed,
        reduce=reduce,
        training=training,
        imports=imports,
        unsafe=unsafe,
    )
    if save_gradient:
        api.save_gradients(result, save_gradient)
    if as_json:
        click.echo(report.inspect_json(result))
    else:
        color, width = _terminal()
        click.echo(report.inspect_text(result, color=color, width=width), nl=False)
    if any(r.status in fail_on for r in result.results):
        sys.exit(1)


if __name__ == "__main__":
    main()
