"""The commands that train: `fit` (a copy of a model trained in memory with the gradient
monitor on) and `fix` (the repair of each finding, as code and in a copy, with the evidence).

Registered on the `layergrad` group by `app.py`; each parses, calls `commands.fit.fit_model`
or `commands.fix.fix_model`, renders and sets the exit code, nothing more.
"""

from __future__ import annotations

import click

from layergrad.cli.options import (
    Load,
    bundle,
    count_option,
    fail_on_option,
    field_option,
    format_options,
    load_options,
    model_argument,
    training_data_options,
    training_options,
)
from layergrad.cli.running import abort_now, emit, note, said
from layergrad.commands.fit.checks import DEFAULT_STEPS
from layergrad.core.vocab import DEFAULT_FIT_FAIL_ON, TRAINING_FINDINGS, OutputFormat
from layergrad.data.stall import DEFAULT_STALL_SECONDS


@click.command()
@model_argument
@training_data_options
@training_options(
    steps=None,
    steps_help="Train N steps (default 300; not with --epochs).",
    batch_size_help="Rows per training batch.",
)
@count_option("--epochs", "E", "Train E epochs instead.")
@click.option(
    "--learning-rate",
    type=float,
    metavar="LR",
    help="Learning rate (default: the compiled optimizer's).",
)
@click.option("--loss", metavar="NAME", help="A keras.losses name (default: the compiled loss).")
@click.option(
    "--optimizer",
    metavar="NAME",
    help="A keras.optimizers name (default: the compiled optimizer, fresh state).",
)
@count_option("--every", "N", "Reduce the gradients every N steps (default: about 50 checkpoints).")
@click.option("--log-dir", metavar="DIR", help="Also write TensorBoard summaries here.")
@click.option(
    "--stall-timeout",
    type=click.FloatRange(min=0, max=1e9),
    default=DEFAULT_STALL_SECONDS,
    show_default=True,
    metavar="SECONDS",
    help="Stop with an error when --data gives no batch for this long (0: wait forever).",
)
@format_options
@fail_on_option(
    TRAINING_FINDINGS,
    "finding",
    "FINDINGS",
    f"Exit 1 on one of: {','.join(TRAINING_FINDINGS)}.",
    DEFAULT_FIT_FAIL_ON,
)
@load_options
def fit(
    model: str,
    data: str | None,
    limit: int | None,
    distribute: str | None,
    cpu_replicas: int | None,
    quiet: bool,
    stall_timeout: float,
    fmt: OutputFormat,
    fail_on: frozenset[str],
    load: Load,
    **training: object,  # `FitOptions`' fields, by their names
) -> bool:
    """Does the model learn at all? Train a copy in memory and watch the gradient.

    Trains the model of the file (never written) on --data with its compiled
    optimizer and loss (or --optimizer / --loss) for --steps or --epochs, with
    the gradient monitor on: every few steps d loss / d every trainable variable
    on that step's batch (update ratio, gradient L2, dead units, NaN/Inf). Finds
    nonfinite (where the first NaN/Inf appeared), diverging, not_learning,
    plateau_at_chance, constant_predictions, oscillating, slow_convergence,
    vanishing, exploding, dying_units and stalled_layer; labels that do not fit
    an output are target_mismatch and inputs in raw units reaching the first
    layer with weights are input_range, both before the first step. --data must hold labels:
    a .npz with the inputs by name and y (or y:NAME per output), a folder of
    images in class sub-folders, or FILE.py:function yielding (x, y).

    \b
    Examples:
        layergrad fit model.keras --data train.npz
        layergrad fit model.keras --data images/ --steps 500 --learning-rate 1e-3 --json
        layergrad fit model.keras --data train.py:batches --epochs 2 --format html > fit.html
        layergrad fit model.keras --data train.npz --log-dir logs/ --fail-on nonfinite
    """
    from layergrad.commands.fit.train import FitOptions, fit_model

    report = fit_model(
        model,
        data,
        bundle(FitOptions, training),
        limit=limit,
        distribute=distribute,
        cpu_replicas=cpu_replicas,
        **load,
        stall_timeout=stall_timeout,
        on_stall=abort_now,
        on_notice=note,
    )
    emit("fit", fmt, report)
    return report.failed(fail_on)


@click.command()
@model_argument
@field_option(
    "data",
    "Labelled data as for fit (.npz with y, a folder of class sub-folders, or "
    "FILE.py:function yielding (x, y)): train the original and each repaired copy on it "
    "and judge each repair.",
)
@click.option(
    "--output",
    metavar="FILE",
    help="Where the repaired copy goes (default: MODEL.fixed.keras in the working directory).",
)
@training_options(
    steps=DEFAULT_STEPS,
    steps_help="With --data: train each model N steps (the same batches for all).",
    batch_size_help="With --data: rows per training batch.",
)
@field_option("limit", "With --data: read at most N samples.")
@field_option(
    "max_memory",
    "Refuse a model, or a repaired copy before it is built, whose estimated memory (from "
    "the shapes in its config) is more than this, e.g. 32GB.",
)
@click.option(
    "--force", is_flag=True, help="Let --output replace an existing file (never the model)."
)
@format_options
@load_options
def fix(
    model: str,
    data: str | None,
    fmt: OutputFormat,
    load: Load,
    **fixing: object,  # `FixOptions`' fields, by their names
) -> bool:
    """What to change, as code, in a repaired copy, with the evidence that it trains.

    Checks the model (never written), plans a repair for every finding that has a
    mechanical one (the activation or loss of a head, from_logits, the head's
    units, a ReLU before a softmax, a Dropout after the logits, a linear stack,
    raw inputs, kernels or biases far off their initialiser, the learning
    rate), writes the code lines and a copy with every repair. With --data the
    original and each copy train on the same batches for --steps and each
    repair is verified or not. Exit 0 when every failing finding has a
    verified repair (or nothing to fix), 1 otherwise.

    \b
    Examples:
        layergrad fix model.keras
        layergrad fix model.keras --data train.npz --steps 300
        layergrad fix model.keras --data train.npz --format markdown > comment.md
    """
    from layergrad.commands.fix.repair import FixOptions, fix_model

    report = fix_model(model, data, bundle(FixOptions, fixing), **load)
    if report.output:
        again = " (replaced it)" if report.replaced else ""
        said(f"wrote the repaired copy to {report.output}{again}")
    elif report.unwritten:
        said(report.unwritten)
    emit("fix", fmt, report)
    return not report.ok
