"""The frozen result objects that flow from the probe to the reporters (no TensorFlow)."""

from __future__ import annotations

import shlex
import string
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from layergrad.core.display import NotebookDisplay
from layergrad.core.vocab import Finding, JacobianMethod, Reduce, Severity, Status


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

    count, mean, std, min and max are exact; p50 and p95 are within 1.2% (a log histogram),
    and None in a report merged from shards (percentiles do not combine).
    """

    count: int
    mean: float
    std: float
    min: float
    p50: float | None
    p95: float | None
    max: float


@dataclass(frozen=True)
class DataStats:
    """What a gradient computed over a whole data set (`--data`) adds to its statistics."""

    dead_units: tuple[int, ...]  # units of the last axis with exactly zero gradient everywhere
    per_sample_l2: SampleStats | None
    first_nonfinite_batch: int | None  # 0-based index of the first batch with NaN/Inf


# A value a rule read: a name, a count, a share, a switch (None: not known)
Fact = str | int | float | bool | None


class _Words(string.Formatter):
    """`str.format` with `!q`: the value quoted for a shell command line."""

    def convert_field(self, value: object, conversion: str | None) -> object:
        if conversion == "q":
            return shlex.quote(str(value))
        return super().convert_field(value, conversion)


_WORDS = _Words()


def say(template: str, facts: Mapping[str, object]) -> str:
    """A finding's message or hint template said from its facts (`{layer!r}`, `{share:.0%}`;
    `!q` quotes a name for the shell)."""
    return _WORDS.format(template, **facts)


def reads(*templates: str) -> tuple[str, ...]:
    """The facts templates read, in order of first use."""
    fields = (f for text in templates for _, f, _, _ in _WORDS.parse(text) if f)
    return tuple(dict.fromkeys(fields))


@dataclass(frozen=True)
class ConfigChange:
    """The repair `fix` applies for a rule. `kind`: `loss` (the head's loss becomes `loss`
    with `from_logits`), `activation` (the head's activation becomes `activation`, its units
    `units` and its loss `loss` when given), `flatten` (a Flatten before the head),
    `remove_before` (the activation of the layer before a softmax layer goes), `move_dropout`
    (a Dropout after the logits moves before the last weight layer), `relu_hidden`
    (activation='relu' on the hidden weight layers)."""

    kind: str
    why: str
    activation: str | None = None
    loss: str | None = None
    from_logits: bool = False
    units: int | None = None


@dataclass(frozen=True)
class Reason:
    """One finding of one rule, as every command keeps it: an `inspect` / `scan` cause, a
    `check`'s reason, a finding of `fit` and the callback, what `fix` leaves unrepaired.

    `code` says what was found (a `Finding`), `layer` where (a layer reference, or None),
    `message` what was seen and `hint` what to do, both rendered from `facts` (the typed values
    the rule read, as (name, value) pairs; empty when the rule keeps none); `severity` whether
    it fails a file; `repair` the config edit `fix` applies, when the rule has one. `op` is the
    operation a cause points at, `output` and `loss` what a head rule judged, `rule` the name
    of the rule that found it, `step` the training step it was seen at (fit, the callback).
    `str()` joins message and hint as a check says them: `MESSAGE. Fix: HINT`.
    """

    code: Finding
    message: str
    hint: str = ""
    layer: str | None = None
    output: str = ""
    loss: str = ""
    rule: str = ""
    severity: Severity = Severity.FAIL
    step: int | None = None
    facts: tuple[tuple[str, Fact], ...] = ()
    repair: ConfigChange | None = None
    op: str | None = None

    def __str__(self) -> str:
        return f"{self.message}. Fix: {self.hint}" if self.hint else self.message

    def fact(self, name: str) -> Fact:
        """The value of the fact `name` (None when the rule did not read it)."""
        return dict(self.facts).get(name)


@dataclass(frozen=True)
class Histogram:
    """Counts of a non-negative per-sample quantity in log bins of equal width.

    `edges` has one more entry than `counts`; the bins lie on one grid of `bins_per_decade`
    bins per decade anchored at powers of ten, so histograms of different runs add bin by
    bin. `zeros` counts the values that are exactly 0 (or below 1e-30).
    """

    edges: tuple[float, ...]
    counts: tuple[int, ...]
    zeros: int = 0
    bins_per_decade: int = 10


@dataclass(frozen=True)
class RankedSample:
    """One sample of a data set (its index, from 0 in data order) and its value."""

    sample: int
    value: float
    rel_stderr: float | None = None  # of an estimated value


@dataclass(frozen=True)
class NormDistribution(SampleStats):
    """A per-sample norm over every sample of a data set (`--data`), in fixed memory.

    The statistics of `SampleStats`, with the histogram they come from; `top` holds the
    largest values, largest first (ties by sample index). `mean_rel_stderr` is the relative
    standard error of `mean` when the values are estimates (None when exact).
    """

    histogram: Histogram
    top: tuple[RankedSample, ...] = ()
    mean_rel_stderr: float | None = None


@dataclass(frozen=True)
class FrobeniusNorms:
    """||J_i||_F for each sample i of the probe batch, exact or estimated.

    `sample_rel_stderr[i]` is the relative standard error of the estimate of sample i (from
    the spread of its K random projections); `rel_stderr` is the largest of them. Both are
    empty / None when the norms are exact.
    """

    per_sample: tuple[float, ...]
    mean: float
    max: float
    rel_stderr: float | None = None
    sample_rel_stderr: tuple[float, ...] = ()
    # with --data: the distribution over every sample (`per_sample` is then empty)
    distribution: NormDistribution | None = None


@dataclass(frozen=True)
class SpectralNorms:
    """||J_i||_2 (largest singular value) for each sample: exact, or estimated.

    The estimate is a lower bound of ||J_i||_2; `iterations` is its number of Lanczos steps
    (None when exact), and `converged` is False when some sample's estimate had not settled
    in them (its residual bound above `engine.linear_map.SETTLED` of its value).
    """

    per_sample: tuple[float, ...]
    mean: float
    max: float
    iterations: int | None = None
    converged: bool = True
    distribution: NormDistribution | None = None  # with --data (`per_sample` is then empty)


@dataclass(frozen=True)
class JacobianStats:
    """Norms of the per-sample Jacobians J_i = d to[i] / d from[i] (batch axis removed).

    `unit_sensitivity[u]` is the norm of J_i's columns for unit u of `from`'s last axis,
    root-mean-square over samples. `batch_independent` is False when to[i] also depends on
    other samples' from[j]; the norms are then those of the diagonal blocks.
    """

    method: JacobianMethod
    probes: int | None  # K random projections (estimate), None when exact
    batch_independent: bool
    frobenius: FrobeniusNorms
    spectral: SpectralNorms | None  # None when it cannot be computed (see the warnings)
    unit_sensitivity: tuple[float, ...]


@dataclass(frozen=True)
class ScanJacobian:
    """The per-sample Frobenius norm of d target[i] / d this layer's output[i] (scan rows)."""

    frobenius: FrobeniusNorms


@dataclass(frozen=True)
class Result:
    """The gradient of one `--to` activation with respect to the `--from` activation."""

    source: Endpoint
    target: Endpoint
    status: Status
    gradient: GradientStats | None
    causes: tuple[Reason, ...] = ()
    warnings: tuple[str, ...] = ()
    array: np.ndarray | None = field(default=None, repr=False, compare=False)
    jacobian: JacobianStats | None = None  # with --measure jacobian
    data: DataStats | None = None  # with --data


@dataclass(frozen=True)
class ModelMeta:
    """Which model file was probed."""

    path: str
    format: str
    class_name: str
    name: str
    warnings: tuple[str, ...] = ()  # audit findings accepted with --unsafe (stderr, not JSON)


@dataclass(frozen=True)
class ProbeMeta:
    """How the probe batch was made and how the model was run."""

    source: str
    seed: int | None
    batch_size: int
    training: bool
    reduce: Reduce
    samples: int | None = None  # only with --data: samples seen
    replicas: int | None = None  # only with --data: devices the step ran on
    data_sha256: str | None = None  # only with --data: what identifies it (`data/fingerprint`)
    shards: int | None = None  # only in a report merged from shards (`layergrad merge`)
    first_sample: int | None = None  # only with --first-sample N > 0: the data's first index
    # only when a random probe follows the model's own preprocessing: what it drew
    drawn: str | None = None


@dataclass(frozen=True, repr=False)
class InspectReport(NotebookDisplay):
    """Everything `layergrad inspect` found: one result per `--to` reference."""

    model: ModelMeta
    probe: ProbeMeta
    results: tuple[Result, ...]


@dataclass(frozen=True)
class ConstantOutput:
    """A model output that is the same for every sample, and where it stopped varying."""

    output: str  # the output's layer reference
    layer: str  # the first layer (execution order) whose output is constant, on its path
    reason: str  # softmax_one_unit, saturated, dead, zero_weights, or constant


@dataclass(frozen=True)
class InputRange:
    """An input far from unit scale that pins the first ReLU / sigmoid / tanh layer it feeds."""

    input: str
    mean_abs: float  # mean |x| of the input over the batch
    layer: str
    kind: str  # relu, sigmoid, tanh or softmax; pixels or units (raw values, no saturation)
    pinned: float  # share of that layer's units dead (ReLU) or saturated; pixels: the largest
    # value; units: the largest root mean square of a feature


@dataclass(frozen=True)
class ScanRow:
    """One layer call in a gradient-flow scan: d target / d this activation."""

    layer: str
    class_name: str
    shape: tuple[int, ...]
    dtype: str
    status: Status  # Status.INTEGER for an integer-valued activation
    gradient: GradientStats | None
    flags: tuple[Finding, ...] = ()
    causes: tuple[Reason, ...] = ()
    jacobian: ScanJacobian | None = None  # with --measure jacobian
    data: DataStats | None = None  # with --data


@dataclass(frozen=True, repr=False)
class ScanReport(NotebookDisplay):
    """Gradient of one target with respect to every layer's output, in execution order."""

    model: ModelMeta
    probe: ProbeMeta
    target: str | None  # a layer reference; None for the model's outputs
    rows: tuple[ScanRow, ...]
    notes: tuple[str, ...] = ()
    first_nonfinite: str | None = None  # the first layer whose forward activation is NaN/Inf
    constant: tuple[ConstantOutput, ...] = ()  # outputs the same for every sample
    input_range: InputRange | None = None  # unscaled inputs pinning the first activation


@dataclass(frozen=True)
class CheckItem:
    """One named check of one model file.

    `warnings` are the `findings` that do not fail the file (not named by `--fail-on`, or
    found only by rules that warn); `reasons` say why, finding by finding, where the check
    has its findings apart (the loss, the targets, the forward pass).
    """

    name: str
    passed: bool
    message: str
    findings: tuple[Finding, ...] = ()
    warnings: tuple[Finding, ...] = ()
    reasons: tuple[Reason, ...] = ()

    @property
    def failures(self) -> tuple[Finding, ...]:
        """The findings that fail the file."""
        return tuple(f for f in self.findings if f not in self.warnings)


@dataclass(frozen=True)
class FileVerdict:
    """All checks of one model file; `passed` is False when a check failed."""

    path: str
    passed: bool
    checks: tuple[CheckItem, ...]

    @property
    def failures(self) -> tuple[Finding, ...]:
        """Every finding that fails the file, once each, in check order."""
        return tuple(dict.fromkeys(f for c in self.checks for f in c.failures))

    @property
    def warnings(self) -> tuple[Finding, ...]:
        """Every finding reported as a warning (the file may still pass), in check order."""
        return tuple(f for c in self.checks for f in c.warnings)

    @property
    def verdict(self) -> str:
        """`PASS`, `PASS, 1 warning`, `FAIL`, `FAIL, 2 warnings`: what the file gets."""
        return ("PASS" if self.passed else "FAIL") + warned(len(self.warnings))


@dataclass(frozen=True)
class CheckReport:
    """What `check` reports: every file's verdict, in the order the files were checked."""

    files: tuple[FileVerdict, ...]

    @property
    def passed(self) -> bool:
        """True when no file failed."""
        return all(v.passed for v in self.files)

    @property
    def summary(self) -> str:
        """`3 passed, 1 failed`, with `, 2 warnings` when findings did not fail a file."""
        failed = sum(1 for v in self.files if not v.passed)
        said = warned(sum(len(v.warnings) for v in self.files))
        return f"{len(self.files) - failed} passed, {failed} failed{said}"


def warned(count: int) -> str:
    """`, 2 warnings` (nothing for none): what a verdict adds for findings that only warn."""
    return f", {count} warning{'s' if count != 1 else ''}" if count else ""


@dataclass(frozen=True)
class LossMeta:
    """Which loss a weights scan differentiates: `source` "compiled" or "option", `labels`
    "data" or "random"."""

    name: str
    source: str
    labels: str


@dataclass(frozen=True)
class VariableRow:
    """d loss / d one trainable variable (`variable` is `layer/name`, e.g. `dense/kernel`).

    `update_ratio` is ||g|| / ||w||: how far one plain gradient step of size 1 would move the
    variable, relative to its size (None when there is no gradient or the variable is zero).
    """

    variable: str
    layer: str
    name: str
    shape: tuple[int, ...]
    dtype: str
    status: Status
    gradient: GradientStats | None
    update_ratio: float | None
    flags: tuple[Finding, ...] = ()
    causes: tuple[Reason, ...] = ()


@dataclass(frozen=True)
class GradientNoise:
    """One layer's training gradient over the batches of a data set (`scan --wrt weights
    --data`), its trainable variables taken together.

    `signal` is ||mean g||^2 (the full-data gradient's squared norm), `variance` the
    sample-weighted variance of the batch gradients around it (summed over entries; None
    with one batch), `snr` their ratio (None when the variance is None or 0).
    """

    layer: str
    signal: float
    variance: float | None
    snr: float | None
    batches: int


@dataclass(frozen=True, repr=False)
class WeightScanReport(NotebookDisplay):
    """`scan --wrt weights`: the loss's gradient for every trainable variable."""

    model: ModelMeta
    probe: ProbeMeta
    loss: LossMeta
    frozen: int  # weights of frozen layers (`weights.frozen_variables`), counted, not listed
    variables: tuple[VariableRow, ...]
    notes: tuple[str, ...] = ()
    noise: tuple[GradientNoise, ...] = ()  # with --data: per layer, the gradient's SNR
    # (layer reference, share of its units) for ReLU layers whose units are mostly zero for
    # every sample of the batch
    dead_layers: tuple[tuple[str, float], ...] = ()
    # d loss / d every layer's output, from the same pass (check's gradient check reads it)
    activations: ScanReport | None = field(default=None, repr=False, compare=False)
