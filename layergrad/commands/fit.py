"""`layergrad fit`: train a copy of a saved model in memory, with `GradientMonitor` on.

The file is read, audited and loaded in safe mode like every command; the loaded model is the
copy that trains (nothing is ever written back). It is compiled with the optimizer and loss
of its file (a fresh optimizer state, from the compiled config) or `--optimizer` / `--loss`,
and trained on `--data` for `--steps` or `--epochs`. The labels come with the data: a `.npz`
holding the inputs by name and `y` (one output) or `y:NAME` per output.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from layergrad.commands.session import load
from layergrad.core.errors import InputError
from layergrad.core.fit_results import FitReport
from layergrad.core.probe_options import PathLike, ProbeOptions
from layergrad.core.tf_types import Dataset, KerasModel, TensorTree

DEFAULT_STEPS = 300
SHUFFLE_BUFFER = 10_000  # samples held for shuffling: memory stays bounded


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
        for name in ("steps", "epochs", "batch_size", "every"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise InputError(f"--{name.replace('_', '-')} must be at least 1: {name}={value}")
        if self.learning_rate is not None and not self.learning_rate > 0:
            raise InputError(
                f"--learning-rate must be a positive number: learning_rate={self.learning_rate}"
            )


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
) -> FitReport:
    """Train a copy of the model in `path` on `data` with the gradient monitor on.

    Args:
        path: a `.keras` or `.h5` model file (never written).
        data: a `.npz` with the model's inputs by name and `y` (or `y:NAME` per output).
        options: steps or epochs, batch size, learning rate, loss, optimizer.
        limit: read at most this many samples.
        distribute, cpu_replicas: train under `MirroredStrategy` (see `ProbeOptions`).
        imports, unsafe: as for every command.

    Returns:
        The `FitReport`: every step's loss, the checkpoints, the findings.

    Raises:
        InputError: no `--data` (training on random labels proves nothing), labels missing,
            no loss or optimizer to train with.
    """
    options = options or FitOptions()
    if data is None:
        raise InputError(
            "layergrad fit needs --data with labels (a .npz with the inputs and `y`): "
            "training on random labels proves nothing"
        )
    probe = ProbeOptions(
        batch_size=options.batch_size,
        seed=options.seed,
        data=data,
        limit=limit,
        distribute=distribute,
        cpu_replicas=cpu_replicas,
    )
    loaded, _warnings, strategy = load(path, probe, imports=imports, unsafe=unsafe)
    model, info = loaded.model, loaded.info
    from layergrad.core.keras_backend import quiet_import

    _, keras = quiet_import()
    keras.utils.set_random_seed(options.seed)
    with strategy.scope() if strategy is not None else contextlib.nullcontext():
        spec = _compile(model, info.compile_config, options)
        dataset, samples, labels = _dataset(model, os.fspath(data), options, limit)
        batches = max(1, math.ceil(samples / options.batch_size))
        total = batches * options.epochs if options.epochs else options.steps or DEFAULT_STEPS
        every = options.every or max(1, total // 50)
        from layergrad.training.monitor import GradientMonitor
        from layergrad.training.rules import chance_loss

        chance = _prior_loss(spec, labels, model) or chance_loss(spec, _units(model))
        monitor = GradientMonitor(every=every, log_dir=options.log_dir, chance_loss=chance)
        if options.epochs is not None:
            model.fit(dataset, epochs=options.epochs, verbose=0, callbacks=[monitor])
        else:
            steps = options.steps or DEFAULT_STEPS
            model.fit(
                dataset.repeat(), epochs=1, steps_per_epoch=steps, verbose=0, callbacks=[monitor]
            )
    assert monitor.report is not None
    return replace(monitor.report, path=info.path, data=os.fspath(data))


def _compile(model: KerasModel, compiled: Mapping[str, object], options: FitOptions) -> str:
    """Compile with the file's (or the given) optimizer and loss; return the loss's name."""
    from layergrad.core.keras_backend import quiet_import
    from layergrad.engine.compiled_loss import compile_loss, find_loss

    _, keras = quiet_import()
    spec = find_loss(compiled, options.loss)
    if spec is None:
        raise InputError(
            "the model was saved without a loss (no model.compile); pass --loss NAME, e.g. "
            "--loss sparse_categorical_crossentropy"
        )
    raw = options.optimizer or compiled.get("optimizer")
    if raw is None:
        raise InputError(
            "the model was saved without an optimizer (no model.compile); pass --optimizer "
            "NAME, e.g. --optimizer adam"
        )
    try:
        optimizer = (
            keras.optimizers.get(raw) if isinstance(raw, str) else keras.optimizers.deserialize(raw)
        )
    except (ValueError, TypeError, KeyError) as exc:
        raise InputError(
            f"--optimizer {raw if isinstance(raw, str) else 'in the file'} is not an optimizer "
            f"Keras knows ({exc}); use a keras.optimizers name such as adam or sgd"
        ) from exc
    if options.learning_rate is not None:
        optimizer.learning_rate = options.learning_rate
    compile_loss(model, spec, optimizer=optimizer)
    return spec.name


def _dataset(
    model: KerasModel, path: str, options: FitOptions, limit: int | None
) -> tuple[Dataset, int, dict[str, np.ndarray]]:
    """(x, y) batches, shuffled within a bounded buffer; the number of samples; the labels."""
    from layergrad.core.keras_backend import quiet_import
    from layergrad.data.probe_input import input_specs
    from layergrad.data.sources import open_data

    tf, keras = quiet_import()
    if not path.lower().endswith(".npz"):
        raise InputError(
            f"--data {path}: layergrad fit needs labels, so --data must be a .npz with the "
            "inputs by name and `y` (one output) or `y:NAME` per output"
        )
    specs = input_specs(model)
    labels = _labels(path, list(getattr(model, "output_names", None) or []), limit)
    stream = open_data(path, specs, options.batch_size, limit)
    rows = len(next(iter(labels.values())))
    if stream.samples is not None and stream.samples != rows:
        raise InputError(
            f"--data {path}: {stream.samples} input rows but {rows} labels; give every array "
            "the same number of samples"
        )
    structure = getattr(model, "_inputs_struct", None)
    names = list(labels)
    outputs = [n.removeprefix("y:") for n in names]

    def pack(inputs: TensorTree, targets: TensorTree) -> tuple[TensorTree, TensorTree]:
        flat = list(inputs)
        if structure is not None and len(keras.tree.flatten(structure)) == len(flat):
            x = keras.tree.pack_sequence_as(structure, flat)
        else:
            x = flat[0] if len(flat) == 1 else tuple(flat)
        y = targets[0] if names == ["y"] else dict(zip(outputs, targets, strict=True))
        return x, y

    y = tf.data.Dataset.from_tensor_slices(tuple(labels[n] for n in names))
    x = stream.dataset.unbatch()
    dataset = tf.data.Dataset.zip((x, y))
    dataset = dataset.shuffle(min(rows, SHUFFLE_BUFFER), seed=options.seed)
    dataset = dataset.batch(options.batch_size).map(pack).prefetch(tf.data.AUTOTUNE)
    return dataset, rows, {("y" if n == "y" else n[2:]): labels[n] for n in names}


def _labels(path: str, outputs: list[str], limit: int | None) -> dict[str, np.ndarray]:
    """`y` (one output) or `y:NAME` for each output, read from the .npz."""
    with np.load(path, allow_pickle=False) as archive:
        keys = set(archive.files)
        if len(outputs) <= 1 and "y" in keys:
            wanted = ["y"]
        else:
            wanted = [f"y:{n}" for n in outputs]
            missing = [k for k in wanted if k not in keys]
            if missing or not wanted:
                raise InputError(
                    f"--data {path} has arrays {sorted(keys)}; layergrad fit needs the labels "
                    f"as `y` (one output) or `y:NAME` for each output ({', '.join(outputs)})"
                )
        return {k: np.asarray(archive[k][:limit]) for k in wanted}


def _prior_loss(spec: str, labels: dict[str, np.ndarray], model: KerasModel) -> float | None:
    """The cross-entropy of predicting the labels' own class frequencies (one output)."""
    name = spec.lower().replace("_", "")
    if len(labels) != 1 or "crossentropy" not in name:
        return None
    (y,) = labels.values()
    if "sparse" in name:
        units = _units(model)
        counts = np.bincount(y.astype(np.int64).reshape(-1), minlength=units[0] if units else 0)
        p = counts / max(counts.sum(), 1)
    elif "binary" in name:
        q = float(np.mean(y))
        p = np.array([q, 1 - q])
    else:  # one-hot (or soft) labels
        p = y.reshape(-1, y.shape[-1]).mean(axis=0)
    p = p[p > 0]
    entropy = float(-(p * np.log(p)).sum())
    if "binary" in name and y.ndim > 1 and y.shape[-1] > 1:
        return None  # several independent binary outputs: no single prior
    return entropy if entropy > 0 else None


def _units(model: KerasModel) -> list[int]:
    try:
        return [int(t.shape[-1]) if len(t.shape) else 1 for t in model.outputs]
    except (AttributeError, ValueError, TypeError):
        return []
