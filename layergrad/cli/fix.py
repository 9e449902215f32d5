"""`layergrad fix`: the repair of each finding, as code and in a copy, with the evidence.

Registered on the `layergrad` group by `app.py`; it parses, calls `commands.fix.fix_model`,
renders and sets the exit code, nothing more.
"""

from __future__ import annotations

import click

from layergrad.cli.options import (
    field_option,
    format_options,
    load_options,
    model_argument,
    training_options,
)
from layergrad.cli.running import emit, said
from layergrad.commands.fit.checks import DEFAULT_STEPS
from layergrad.core.vocab import OutputFormat


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
    output: str | None,
    steps: int,
    batch_size: int,
    seed: int,
    limit: int | None,
    max_memory: int,
    force: bool,
    fmt: OutputFormat,
    imports: tuple[str, ...],
    unsafe: bool,
    debug: bool,
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

    options = FixOptions(output=output, force=force, steps=steps, batch_size=batch_size,
                         seed=seed, limit=limit, max_memory=max_memory)  # fmt: skip
    report = fix_model(model, data, options, imports=imports, unsafe=unsafe)
    if report.output:
        said(f"wrote the repaired copy to {report.output}")
    elif report.unwritten:
        said(report.unwritten)
    emit("fix", fmt, report)
    return not report.ok
