"""`layergrad fit`: train a copy of a saved model in memory, with `GradientMonitor` on.

The file is read, audited and loaded in safe mode like every command, and the loaded model
trains (nothing is written back), compiled with its file's optimizer and loss or `--optimizer`
/ `--loss`, on the labelled `--data` (`data/label_stream.py`) for `--steps` or `--epochs`.
The options and files are checked here, before TensorFlow loads; the run is `run.py`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

from layergrad.commands.fit.checks import FitOptions, Notice, check_before_loading
from layergrad.commands.session import load
from layergrad.core.errors import InputError
from layergrad.core.fit_results import FitReport
from layergrad.core.probe_options import PathLike, ProbeOptions

if TYPE_CHECKING:
    from layergrad.core.vocab import Distribute


def fit_model(
    path: PathLike,
    data: PathLike | None,
    options: FitOptions | None = None,
    *,
    limit: int | None = None,
    distribute: str | None = None,
    cpu_replicas: int | None = None,
    imports: Sequence[str] = (),
    unsafe: bool = False,
    stall_timeout: float | None = None,
    on_stall: Notice | None = None,
    on_notice: Notice | None = None,
) -> FitReport:
    """Train a copy of the model in `path` on `data` (with labels) with the gradient monitor
    on: every step's loss, the checkpoints, the findings. `limit`, `distribute`,
    `cpu_replicas`, `imports`, `unsafe` are as for every command; `on_stall(message)` is
    called (from another thread) when no batch came for `stall_timeout` seconds, `on_notice`
    with what the run should say (a source of unknown size under `--epochs`).

    Raises:
        InputError: no `--data` (training on random labels proves nothing), data without
            labels or with labels the outputs cannot take, no loss or optimizer to train with.
    """
    options = options or FitOptions()
    if data is None:
        raise InputError(
            "layergrad fit needs --data with labels (a .npz with the inputs and `y`, a folder "
            "of class sub-folders, or a function yielding (x, y)): training on random labels "
            "proves nothing"
        )
    check_before_loading(options.log_dir, data, distribute)
    probe = ProbeOptions(
        batch_size=options.batch_size,
        seed=options.seed,
        data=data,
        limit=limit,
        distribute=cast("Distribute | None", distribute),  # its word: ProbeOptions checks it
        cpu_replicas=cpu_replicas,
    )
    loaded, _warnings, strategy = load(path, probe, imports=imports, unsafe=unsafe)
    from layergrad.commands.fit.run import train_loaded  # TensorFlow: after the checks

    return train_loaded(loaded, strategy, data, options, limit, stall_timeout, on_stall, on_notice)
