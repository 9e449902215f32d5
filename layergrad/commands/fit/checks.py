"""What `layergrad fit` checks around training: outputs before the model loads, an endless
data source, and the options the API takes as plain values.

Kept apart from `run.py`, which trains, so they come before TensorFlow loads.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from numbers import Integral

from layergrad.core.errors import InputError, UsageError
from layergrad.core.limits import MAX_BATCH_SIZE, MAX_SEED, MAX_STEPS, MAX_UNSIZED_EPOCH
from layergrad.core.probe_options import PathLike

Notice = Callable[[str], None]

DEFAULT_STEPS = 300  # what `fit` trains for without --steps or --epochs


@dataclass(frozen=True)
class FitOptions:
    """How `layergrad fit` trains: `steps` or `epochs` (not both; neither: DEFAULT_STEPS),
    rows per batch, the learning rate, loss and optimizer overriding the file's (None keeps
    them), a checkpoint `every` steps (None: about 50 checkpoints), TensorBoard `log_dir`."""

    steps: int | None = None
    epochs: int | None = None
    batch_size: int = 32
    learning_rate: float | None = None
    loss: str | None = None
    optimizer: str | None = None
    every: int | None = None
    seed: int = 0
    log_dir: str | None = None

    def __post_init__(self) -> None:
        if self.steps is not None and self.epochs is not None:
            raise InputError("--steps and --epochs exclude each other; pass one of them")
        check_counts(self.steps, self.batch_size, self.seed, epochs=self.epochs, every=self.every)
        check_options(self.learning_rate, self.optimizer, self.loss)


def check_counts(
    steps: int | None,
    batch_size: int,
    seed: int,
    *,
    epochs: int | None = None,
    every: int | None = None,
) -> None:
    """Refuse a count outside its option's bounds, as the command line does (`fit` and `fix`
    share them): steps, epochs and every 1 to MAX_STEPS, the batch size 1 to
    MAX_BATCH_SIZE, the seed 0 to MAX_SEED."""
    bounds = {
        "steps": (steps, 1, MAX_STEPS, ""),
        "epochs": (epochs, 1, MAX_STEPS, ""),
        "every": (every, 1, MAX_STEPS, ""),
        "batch_size": (batch_size, 1, MAX_BATCH_SIZE, ""),
        "seed": (seed, 0, MAX_SEED, " (2**32 - 1)"),
    }
    for name, (value, low, high, note) in bounds.items():
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, Integral) or not low <= value <= high:
            raise UsageError(
                f"--{name.replace('_', '-')} must be {low} to {high:,}{note}: {name}={value!r}"
            )


def check_options(learning_rate: float | None, optimizer: str | None, loss: str | None) -> None:
    """Refuse a learning rate that is not a positive finite number and an empty name."""
    if learning_rate is not None and not (
        isinstance(learning_rate, (int, float)) and 0 < learning_rate < math.inf
    ):
        raise UsageError(
            f"--learning-rate must be a positive number, finite: learning_rate={learning_rate}"
        )
    for option, name in (("--optimizer", optimizer), ("--loss", loss)):
        if name is not None and not name.strip():
            raise UsageError(
                f"{option} is empty; give a name (e.g. --optimizer adam, --loss mse), or leave "
                "the option out to use the file's"
            )


def check_before_loading(
    log_dir: str | None, data: PathLike | None, distribute: str | None
) -> None:
    """Before the model loads: `fit` trains on one machine (`--distribute mirrored` at
    most), and `--log-dir` must be a folder that can be written."""
    if distribute == "multi-worker":
        raise UsageError(
            "fit trains on one machine: --distribute mirrored (every GPU) or none; "
            "--distribute multi-worker is for inspect, scan and check; drop it"
        )
    if log_dir is None:
        return
    from layergrad.files.outputs import data_inputs
    from layergrad.training.report_files import check_log_dir

    check_log_dir(log_dir, "--log-dir", inputs=data_inputs(data))


def unsized_epoch_notice(data: PathLike, limit: int | None) -> str:
    """What `fit --epochs` says over a source that does not say its size."""
    return (
        f"--data {os.fspath(data)} does not say how many samples it holds: an epoch ends when "
        f"it stops yielding, so an endless source never ends one; it is counted first, and "
        f"refused past {MAX_UNSIZED_EPOCH:,} samples"
        + ("" if limit is None else f" (--limit {limit:,} bounds it)")
        + "; --steps N or --limit N bound the run"
    )


def check_unsized(seen: int, data: PathLike) -> None:
    """Refuse an epoch of an unsized source that runs past MAX_UNSIZED_EPOCH samples."""
    if seen > MAX_UNSIZED_EPOCH:
        raise InputError(
            f"--data {os.fspath(data)}: more than {MAX_UNSIZED_EPOCH:,} samples and no end of "
            "the epoch yet; a source without a length (a generator) may never end one; pass "
            "--steps N to train N steps, or --limit N to read N samples per epoch"
        )
