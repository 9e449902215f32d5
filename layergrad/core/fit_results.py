"""What a monitored training run reports: checkpoints, per-layer and per-variable rows, findings.

Plain frozen dataclasses, no TensorFlow. Steps are counted from 1 (the first step of the run
is step 1), batches from 0 within their epoch as Keras counts them. A value that was NaN or
Inf is kept as `math.nan` / `math.inf` here and written as null in JSON.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

from layergrad.core.display import NotebookDisplay
from layergrad.core.results import Reason
from layergrad.core.vocab import Finding, Severity

SCHEMA = "layergrad.fit/1"


@dataclass(frozen=True)
class VariableStats:
    """d loss / d one trainable variable at one checkpoint.

    `grad_l2` is the L2 norm of the gradient's finite values (None: no gradient reached it),
    `nonfinite` how many values were NaN or Inf, `dead_fraction` the share of its last-axis
    units whose gradient is exactly zero for the whole batch.
    """

    variable: str
    layer: str
    shape: tuple[int, ...]
    grad_l2: float | None
    weight_l2: float
    nonfinite: int
    dead_fraction: float | None


@dataclass(frozen=True)
class LayerStats:
    """One layer at one checkpoint (its trainable variables together).

    `update_ratio` is learning rate x |grad| / |weights|: the share by which one plain
    gradient step moves the layer's weights. `dead_fraction` is the share of the units (last
    axis) of the layer's output that are exactly 0 for every sample of the batch (under a
    `tf.distribute` strategy: of the first replica's share). `nonfinite_activation` counts
    NaN/Inf in the layer's outputs, `nonfinite_gradient` in its variables' gradients.
    `constant_fraction` is the share of those units whose value is the same for every sample
    of the batch (None: not measured, or a batch of one sample). `nonfinite_weight` counts
    NaN/Inf in its weights at the step's start (measured with the outputs: at a checkpoint,
    and at the fit's first NaN/Inf loss): the update of the step before left them.
    """

    layer: str
    grad_l2: float | None
    weight_l2: float | None
    update_ratio: float | None
    dead_fraction: float | None
    nonfinite_gradient: int
    nonfinite_activation: int
    constant_fraction: float | None = None
    nonfinite_weight: int = 0


@dataclass(frozen=True)
class Checkpoint:
    """Every reduction of one step's batch: `step` from 1, `epoch` and `batch` from 0."""

    step: int
    epoch: int
    batch: int
    loss: float | None
    learning_rate: float | None
    layers: tuple[LayerStats, ...]
    variables: tuple[VariableStats, ...]
    # per model input whose batch held NaN/Inf: (input name, NaN/Inf values, first row)
    nonfinite_inputs: tuple[tuple[str, int, int], ...] = ()


@dataclass(frozen=True, repr=False)
class FitReport(NotebookDisplay):
    """A whole monitored run: the loss of every step, the checkpoints, the findings.

    `losses[i]` is the loss of step i + 1 (None when the step did not report one).
    `stopped` says why the run ended early ("nonfinite"), or None.
    """

    model: str
    model_class: str
    every: int
    steps: int
    epochs: int
    loss_name: str
    optimizer: str
    learning_rate: float | None
    losses: tuple[float | None, ...]
    checkpoints: tuple[Checkpoint, ...]
    findings: tuple[Reason, ...]
    stopped: str | None = None
    path: str | None = None  # the model file, for `layergrad fit`
    data: str | None = None  # the --data source, for `layergrad fit`
    notes: tuple[str, ...] = field(default=())

    def failed(self, fail_on: Collection[str]) -> bool:
        """Whether the run fails under `--fail-on`: it was refused before its first step, or
        it found one of `fail_on`; a label finding whose rule only warns never fails it."""
        return self.stopped == Finding.TARGET_MISMATCH.value or any(
            f.code in fail_on
            and not (f.code is Finding.TARGET_MISMATCH and f.severity is Severity.WARN)
            for f in self.findings
        )

    @property
    def layer_names(self) -> tuple[str, ...]:
        """Every layer reported at some checkpoint, in forward order."""
        return tuple(dict.fromkeys(row.layer for c in self.checkpoints for row in c.layers))
