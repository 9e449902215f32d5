"""The frozen result objects that flow from the probe to the reporters (no TensorFlow)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

STATUSES = ("ok", "none", "zero", "nonfinite")

CAUSE_CODES = (
    "not_downstream",
    "integer_path",
    "non_differentiable_op",
    "stop_gradient",
    "dead_relu",
    "saturated",
    "nonfinite_forward",
    "nonfinite_backward",
    "training_mode",
    "float16_underflow",
    "unknown",
)


@dataclass(frozen=True)
class Endpoint:
    """One end of a gradient: the layer reference and its activation's shape and dtype."""

    layer: str
    shape: tuple[int, ...]
    dtype: str


@dataclass(frozen=True)
class GradientStats:
    """Summary numbers of one gradient array; finite values only (see `nonfinite`)."""

    shape: tuple[int, ...]
    l2: float
    mean_abs: float
    max_abs: float
    zero_fraction: float
    nonfinite: int
    top_units: tuple[tuple[int, float], ...] = ()  # (unit on last axis, mean |g|), largest first


@dataclass(frozen=True)
class SampleStats:
    """The distribution of a per-sample quantity over every sample seen.

    count, mean, std, min and max are exact; p50 and p95 are within 1.2% (a log histogram).
    """

    count: int
    mean: float
    std: float
    min: float
    p50: float
    p95: float
    max: float


@dataclass(frozen=True)
class DataStats:
    """What a gradient computed over a whole data set (`--data`) adds to its statistics."""

    dead_units: tuple[int, ...]  # units of the last axis with exactly zero gradient everywhere
    per_sample_l2: SampleStats | None
    first_nonfinite_batch: int | None  # 0-based index of the first batch with NaN/Inf


@dataclass(frozen=True)
class Cause:
    """A likely reason for a none / zero / non-finite gradient, with evidence and a fix."""

    code: str
    layer: str | None
    message: str
    hint: str
    op: str | None = None


@dataclass(frozen=True)
class Result:
    """The gradient of one `--to` activation with respect to the `--from` activation."""

    source: Endpoint
    target: Endpoint
    status: str
    gradient: GradientStats | None
    causes: tuple[Cause, ...] = ()
    warnings: tuple[str, ...] = ()
    array: np.ndarray | None = field(default=None, repr=False, compare=False)
    data: DataStats | None = None  # only with --data


@dataclass(frozen=True)
class ModelMeta:
    """Which model file was probed."""

    path: str
    format: str
    class_name: str
    name: str


@dataclass(frozen=True)
class ProbeMeta:
    """How the probe batch was made and how the model was run."""

    source: str
    seed: int | None
    batch_size: int
    training: bool
    reduce: str
    samples: int | None = None  # only with --data: samples seen
    replicas: int | None = None  # only with --data: devices the step ran on


@dataclass(frozen=True)
class InspectReport:
    """Everything `layergrad inspect` found: one result per `--to` reference."""

    model: ModelMeta
    probe: ProbeMeta
    results: tuple[Result, ...]


@dataclass(frozen=True)
class ScanRow:
    """One layer call in a gradient-flow scan: d target / d this activation."""

    layer: str
    class_name: str
    shape: tuple[int, ...]
    dtype: str
    status: str  # ok / none / zero / nonfinite, or "integer" for integer-valued activations
    gradient: GradientStats | None
    flags: tuple[str, ...] = ()  # blocked, vanishing, exploding, dead, nonfinite
    causes: tuple[Cause, ...] = ()
    data: DataStats | None = None  # only with --data


@dataclass(frozen=True)
class ScanReport:
    """Gradient of one target with respect to every layer's output, in execution order."""

    model: ModelMeta
    probe: ProbeMeta
    target: str | None  # a layer reference; None for the sum of the model's outputs
    rows: tuple[ScanRow, ...]
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class CheckItem:
    """One named check of one model file."""

    name: str
    passed: bool
    message: str
    findings: tuple[str, ...] = ()  # finding kinds seen: unreadable, unsafe, nonfinite, blocked...


@dataclass(frozen=True)
class FileVerdict:
    """All checks of one model file; `passed` is False when a check failed."""

    path: str
    passed: bool
    checks: tuple[CheckItem, ...]
