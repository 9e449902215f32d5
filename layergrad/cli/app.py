"""The `layergrad` command line: parse options, call the API, render, set the exit code.

TensorFlow is imported only inside commands that need it, so `layergrad --help` is instant.
Shared options are in `cli/options.py`; error handling and printing in `cli/running.py`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

import click

from layergrad import __version__
from layergrad.cli import gate, train
from layergrad.cli.options import (
    Load,
    data_options,
    fail_on_option,
    force_option,
    format_options,
    load_options,
    measure_options,
    model_argument,
    plot_option,
    probe_options,
    target_option,
    wrt_options,
)
from layergrad.cli.running import OneLineErrors, emit, protected_reads, said, write_plot
from layergrad.core.vocab import FAILING_STATUSES, SCAN_FLAGS, OutputFormat, Wrt

if TYPE_CHECKING:
    from layergrad.core.probe_options import MeasureFields, ProbeOptions
    from layergrad.core.results import ScanReport


@click.group(
    "layergrad", cls=OneLineErrors, context_settings={"help_option_names": ["-h", "--help"]}
)
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
@model_argument
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
@probe_options()
@data_options
@measure_options
@format_options
@plot_option
@click.option(
    "--save-gradient",
    metavar="FILE",
    help="Write raw gradients: .npy (one --to) or .npz keyed by --to.",
)
@fail_on_option(
    FAILING_STATUSES,
    "status",
    "STATUSES",
    "Exit 1 when a result has one of these statuses, e.g. none,zero,nonfinite.",
)
@force_option
@load_options
def inspect(
    model: str,
    source: str,
    targets: tuple[str, ...],
    probe: ProbeOptions,
    quiet: bool,
    measure: MeasureFields,
    fmt: OutputFormat,
    plot_file: str | None,
    save_gradient: str | None,
    fail_on: frozenset[str],
    force: bool,
    load: Load,
) -> bool:
    """Gradient of --to layers' outputs with respect to the --from layer's output.

    Computes d sum(TO) / d FROM over the whole probe batch (what tape.gradient
    returns) and flags None, zero and non-finite results with their causes.
    With --measure jacobian it also reports, per sample i, the Frobenius and
    spectral norms of J_i = d TO[i] / d FROM[i] and which FROM units move TO
    most: exact when one sample's J has at most 2^20 entries, else estimated
    (--probes K random projections, Lanczos steps) with error bars.

    \b
    Layer references (REF):
        dense            a layer name (nested layers by their own name when unique)
        encoder/dense_1  a path through nested models
        shared@1         the second call of a layer used twice
        -2               an index into the top-level layers
        head:logits      any of them + :logits: a Dense / convolution's output
                         before its activation (the logits of a softmax head)

    \b
    Examples:
        layergrad inspect model.keras --from dense --to dense_1
        layergrad inspect model.keras --from embedding --to head --to pool --json
        layergrad inspect model.h5 --from 1 --to -1 --input batch.npy --fail-on none,nonfinite
        layergrad inspect model.keras --from dense --to dense_1 --format html > report.html
        layergrad inspect model.keras --from dense --to dense_1 --measure jacobian
        layergrad inspect model.keras --from conv1 --to conv5 --measure jacobian --probes 64
        layergrad inspect model.keras --from conv --to head --data images/ --limit 10000
    """
    from layergrad.cli.progress import data_progress
    from layergrad.commands import api
    from layergrad.files import outputs

    if save_gradient and not save_gradient.endswith((".npy", ".npz")):
        raise click.BadParameter("must end in .npy or .npz", param_hint="--save-gradient")
    if save_gradient and save_gradient.endswith(".npy") and len(targets) > 1:
        raise click.BadParameter("several --to layers need a .npz", param_hint="--save-gradient")
    if save_gradient and probe.data_set is not None:
        raise click.BadParameter(
            "with --data no gradient array is kept (only its statistics); drop --data, or "
            "pass one batch with --input",
            param_hint="--save-gradient",
        )
    reads = protected_reads(model, probe, load["imports"], plot_file, force)
    if save_gradient:
        outputs.check_target(
            save_gradient, "--save-gradient", save_gradient[-3:], reads, force=force
        )
    with data_progress(probe, quiet) as on_progress:
        result = api.inspect_model(
            model,
            source,
            list(targets),
            **load,
            options=probe,
            on_progress=on_progress,
            **measure,
        )
    if not probe.reports_here:  # another worker of the cluster writes the report
        return False
    emit("inspect", fmt, result, result.model.warnings)
    if plot_file:
        write_plot(result, plot_file, reads, force)
    if save_gradient:
        said(outputs.save_gradients(result, save_gradient, reads, force=force))
    return any(r.status in fail_on for r in result.results)


@main.command()
@model_argument
@format_options
@load_options
def layers(model: str, fmt: OutputFormat, load: Load) -> None:
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
        layergrad layers model.keras --format html > layers.html
    """
    from layergrad.files.layer_listing import list_layers

    listing = list_layers(model, **load)
    emit("layers", fmt, listing, listing.warnings)


@main.command()
@model_argument
@target_option("Target layer (default: a seeded random projection of the model's outputs).")
@click.option(
    "--layers",
    "patterns",
    multiple=True,
    metavar="GLOB",
    help="Only layers matching this shell glob, e.g. 'conv4_*'. Repeatable.",
)
@wrt_options
@probe_options()
@data_options
@measure_options
@format_options
@plot_option
@fail_on_option(
    SCAN_FLAGS,
    "flag",
    "FLAGS",
    f"Exit 1 when a layer is flagged with one of: {','.join(SCAN_FLAGS)}.",
)
@force_option
@load_options
def scan(
    model: str,
    target: str | None,
    patterns: tuple[str, ...],
    wrt: str,
    loss: str | None,
    probe: ProbeOptions,
    quiet: bool,
    measure: MeasureFields,
    fmt: OutputFormat,
    plot_file: str | None,
    fail_on: frozenset[str],
    force: bool,
    load: Load,
) -> bool:
    """Gradient flow through the whole model in one forward and one backward pass.

    Differentiates one target (a seeded random projection of the model's
    outputs, or --to) with respect to every layer's output, and shows them in
    depth order with a log-scale bar. With --wrt weights: the training loss
    (compiled in the file, or --loss) with respect to every trainable variable,
    the answer to Keras's "Gradients do not exist for variables". Flags: blocked
    (None), nonfinite, dead (mostly exact zeros), vanishing / exploding (1e6
    times below / above the target end). Integer-valued layers are shown as not
    differentiable. With --measure jacobian each layer also gets the per-sample
    Frobenius norm of d target[i] / d layer[i], from K backward passes in all
    (--probes K), or exact when the target has at most 32 entries per sample
    (--exact forces it).

    \b
    Examples:
        layergrad scan model.keras
        layergrad scan model.keras --to dense_1 --layers 'conv*' --json
        layergrad scan model.keras --fail-on blocked,nonfinite
        layergrad scan model.keras --plot flow.png --format html > scan.html
        layergrad scan model.keras --wrt weights --loss sparse_categorical_crossentropy
        layergrad scan model.keras --measure jacobian --probes 16
        layergrad scan model.keras --data x.npz --distribute mirrored --json
        layergrad scan model.keras --data x.npy --distribute multi-worker --json  # TF_CONFIG
    """
    from layergrad.cli.progress import data_progress
    from layergrad.commands import api
    from layergrad.core.results import WeightScanReport

    if wrt == Wrt.WEIGHTS and (target or patterns):
        raise click.UsageError("--to and --layers choose activations; drop them with --wrt weights")
    if loss and wrt != Wrt.WEIGHTS:
        raise click.UsageError("--loss needs --wrt weights")
    if wrt == Wrt.WEIGHTS and measure["measure"] != "gradient":
        raise click.UsageError("--measure jacobian is for activations; drop it with --wrt weights")
    reads = protected_reads(model, probe, load["imports"], plot_file, force)
    run: Callable[..., WeightScanReport | ScanReport] = (
        functools.partial(api.scan_weights_model, loss=loss)
        if wrt == Wrt.WEIGHTS
        else functools.partial(api.scan_model, target=target, layers=patterns, **measure)
    )
    with data_progress(probe, quiet) as on_progress:
        result = run(model, **load, options=probe, on_progress=on_progress)
    if not probe.reports_here:  # another worker of the cluster writes it
        return False
    emit("weights" if wrt == Wrt.WEIGHTS else "scan", fmt, result, result.model.warnings)
    if plot_file:
        write_plot(result, plot_file, reads, force)
    rows = result.variables if isinstance(result, WeightScanReport) else result.rows
    return any(set(row.flags) & fail_on for row in rows)


for command in (gate.check, gate.diff, train.fit, train.fix, gate.merge):
    main.add_command(command)
