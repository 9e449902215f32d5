"""The commands for CI: `check` (a gate over model files) and `diff` (a regression gate).

Registered on the `layergrad` group by `cli/app.py`; like every command here, they parse, call
the API, render and set the exit code, nothing more.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import click

from layergrad.cli.options import (
    Load,
    bundle,
    data_options,
    fail_on_option,
    force_option,
    format_options,
    load_options,
    probe_options,
    target_option,
    tolerance_option,
    wrt_options,
)
from layergrad.cli.running import emit, handle_errors, said
from layergrad.core.vocab import CHECK_FINDINGS, DEFAULT_FAIL_ON, OutputFormat

if TYPE_CHECKING:
    from layergrad.core.probe_options import ProbeOptions


@click.command()
@click.argument("models", nargs=-1, required=True, type=click.Path(path_type=str))
@fail_on_option(
    CHECK_FINDINGS,
    "finding",
    "FINDINGS",
    f"Findings that fail a file: {','.join(CHECK_FINDINGS)}. A file that could not be checked "
    "(unreadable, unsafe, error) fails whatever this names.",
    DEFAULT_FAIL_ON,
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
@probe_options(
    run_options=False,
    batch_size_help="Rows of the random probe batch (default 8; an output constant over fewer "
    "than 4 rows is not reported), or of each batch of --data (default 32).",
    input_help="Probe batch instead of a random one: .npy (one input) or .npz keyed by input "
    "name (x for one input; y = labels).",
)
@click.option(
    "--loss",
    "loss",
    metavar="NAME",
    help="A keras.losses name for the gradient and trainable checks (default: the loss "
    "compiled in each file; without one, trainable is skipped).",
)
@click.option(
    "--baseline",
    "baselines",
    multiple=True,
    metavar="SCAN.json",
    type=click.Path(path_type=str),
    help="A committed `layergrad scan --json` (`scan --wrt weights --json` for a file with a "
    "loss): fail on a regression against it, scanning with its probe. Repeatable: each applies "
    "to the file it was made from.",
)
@click.option(
    "--allow-other-data",
    is_flag=True,
    help="With --baseline and --data: compare with a baseline made over other data (another "
    "content hash or sample count) instead of refusing.",
)
@tolerance_option
@data_options
@force_option
@load_options
def check(
    models: tuple[str, ...],
    fmt: OutputFormat,
    junit_file: str | None,
    probe: ProbeOptions,
    baselines: tuple[str, ...],
    quiet: bool,
    force: bool,
    load: Load,
    **checking: object,  # the rest of `CheckOptions`' fields, by their names
) -> bool:
    """Check model files for CI: exit 1 when any file fails.

    Each file gets named checks: readable, safe (static audit), weights (all
    finite), loss (the compiled loss fits each head), loads (Keras safe mode),
    targets (with labels: each output can produce them), forward (finite and
    varying on a random batch), gradient (the loss's gradient, or a projection
    of the outputs', reaches every differentiable layer, finite), trainable
    (every trainable variable gets a gradient from the loss; dead, vanishing
    and exploding layers, judged on their weights), and with --baseline,
    baseline (no regression against a committed scan). Findings not named by
    --fail-on are warnings: the file passes ("PASS, 1 warning"). An unreadable
    or hostile file fails; it is not a usage error.
    A directory stands for the .keras / .h5 files under it.

    \b
    Examples:
        layergrad check models/*.keras
        layergrad check models/ --junit layergrad.xml
        layergrad check model.h5 --static-only --fail-on unreadable,unsafe,nonfinite
        layergrad check models/ --format html > check.html
        layergrad scan model.keras --wrt weights --json > baseline.json  # once, commit it
        layergrad check model.keras --baseline baseline.json
        layergrad check model.keras --data validation.npz
        layergrad check model.keras --data val.npz --baseline val.gradients.json
    """
    from layergrad.cli.progress import data_progress, file_progress
    from layergrad.commands.check import check_files as checks
    from layergrad.files import outputs
    from layergrad.render.check import junit

    paths = checks.expand_paths(models)
    files = [m for m in models if not os.path.isdir(m)]  # a folder of models may hold the report
    data = outputs.data_inputs(probe.data_path)
    reads = outputs.protected_inputs(
        files, paths, load["imports"], probe.input_file, baselines, data
    )
    if junit_file:
        outputs.check_target(junit_file, "--junit", "xml", reads, force=force)
    with data_progress(probe, quiet) as on_progress:
        options = bundle(checks.CheckOptions, checking, **load, probe=probe,
                         baselines=baselines, on_progress=on_progress)  # fmt: skip
        # one bar at a time: the samples' bar when there is one, else the files'
        listed = paths if on_progress is None else []
        verdicts = file_progress(listed, lambda on: checks.check_files(paths, options, on))
    if not probe.reports_here:  # another worker of the cluster writes the report
        return False
    emit("check", fmt, verdicts)
    if junit_file:
        xml = junit(verdicts)
        said(
            outputs.write_report(junit_file, xml, "--junit", "the JUnit report", reads, force=force)
        )
    return not all(v.passed for v in verdicts)


@click.command()
@click.argument("base", type=click.Path(dir_okay=True, path_type=str))
@click.argument("new", type=click.Path(dir_okay=True, path_type=str))
@target_option("Target layer, in both models (default: a seeded random projection of the outputs).")
@wrt_options
@probe_options()
@tolerance_option
@click.option(
    "--all", "show_all", is_flag=True, help="Show every layer, not only the ones that changed."
)
@format_options
@load_options
def diff(
    base: str,
    new: str,
    target: str | None,
    wrt: str,
    loss: str | None,
    probe: ProbeOptions,
    tolerance: float,
    show_all: bool,
    fmt: OutputFormat,
    load: Load,
) -> bool:
    """Compare gradient flow in two model files: exit 1 on a regression.

    Scans BASE and NEW with the same probe (as `scan` does) and compares them
    layer by layer. A regression: a layer that was ok and is now none, zero
    or nonfinite; an ok layer newly flagged dead; or mean |g| moved by more
    than --tolerance decades either way. Layers in one file only are
    reported as added / removed. The table shows the layers that changed,
    regressions first; markdown is for pull-request comments. With --wrt
    weights the rows are trainable variables (d loss / d each). Either file may
    be a `layergrad scan --json` instead: it is read, not scanned, and its
    probe is used for the other.

    \b
    Examples:
        layergrad diff model_v1.keras model_v2.keras
        layergrad diff base.keras new.keras --tolerance 1 --all
        layergrad diff baseline.json model.keras --format markdown > comment.md
        layergrad diff base.keras new.keras --wrt weights --format html > diff.html
    """
    from layergrad.commands.diff import diff_models

    report = diff_models(
        base, new, target=target, wrt=wrt, loss=loss, tolerance=tolerance, options=probe, **load
    )
    emit("diff", fmt, report, (*report.base.warnings, *report.new.warnings), show_all=show_all)
    return bool(report.regressions)


@click.command()
@click.argument("shards", nargs=-1, required=True, type=click.Path(path_type=str))
@format_options
@click.option("--debug", is_flag=True, help="Show tracebacks.")
@handle_errors
def merge(shards: tuple[str, ...], fmt: OutputFormat) -> None:
    """Combine inspect or scan JSON reports of runs over shards of a data set.

    For runs split by a scheduler without collectives (a job array, one
    `--data SHARD` each): the result is the report of one run over every
    shard, in the order given, of the same schema as one run's (`diff` reads
    it). Sums add, extrema combine, means weight by samples,
    the per-sample std comes from each shard's mean and std; p50 and p95 do
    not combine and are null. Jacobian reports (--measure jacobian) merge
    too: histograms add, the top samples are numbered as in the whole data.
    Shards of different models, probes or schemas, and weight scans (their
    gradient norms do not combine), are refused.

    \b
    Examples:
        layergrad scan model.keras --data part0.npy --json > shard0.json    # one per job
        layergrad merge shard0.json shard1.json --json > scan.json
        layergrad merge shard*.json
    """
    from layergrad.commands.merge import merge_reports
    from layergrad.core.results import InspectReport

    report = merge_reports(shards)
    emit("inspect" if isinstance(report, InspectReport) else "scan", fmt, report)
