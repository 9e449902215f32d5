"""`layergrad fit`: train a copy of a saved model in memory, with `GradientMonitor` on.

The file is read, audited and loaded in safe mode like every command; the loaded model is the
copy that trains (nothing is ever written back). It is compiled with the optimizer and loss
of its file (a fresh optimizer state, from the compiled config) or `--optimizer` / `--loss`,
and trained on `--data` for `--steps` or `--epochs`. The labels come with the data, read
with the inputs from the same rows (`data/label_stream.py`): `y` (one output) or `y:NAME`
per output in a `.npz`, the class sub-folders of an image folder (in the form the loss takes),
or `y` of the `(x, y)` elements a data function yields. The options and the files are checked
here, before TensorFlow loads; the run itself is `run.train_loaded`.
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
    """Train a copy of the model in `path` on `data` with the gradient monitor on.

    Args:
        path: a `.keras` or `.h5` model file (never written).
        data: data with labels (`data/label_stream.py`): a `.npz` with the model's inputs by
            name and `y` (or `y:NAME` per output), a folder of images in class sub-folders,
            or `FILE.py:function` / `module:function` yielding `(x, y)`.
        options: steps or epochs, batch size, learning rate, loss, optimizer.
        limit: read at most this many samples.
        distribute, cpu_replicas: train under `MirroredStrategy` (see `ProbeOptions`).
        imports, unsafe: as for every command.
        stall_timeout, on_stall: call `on_stall(message)` (from another thread) when no
            batch has come for this many seconds (`data/stall.py`); none by default.
        on_notice: called with what the run should say while it works (a source that does
            not say its size, under `--epochs`); the API never prints.

    Returns:
        The `FitReport`: every step's loss, the checkpoints, the findings.

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
