"""The words layergrad reports with, each defined once: statuses, finding codes, formats.

Click choices, renderers, the README's tables and the tests all derive from these. Each is a
`str` enum, so a member compares equal to its word (`Status.OK == "ok"`) and is written as the
word in JSON and in text.
"""

from __future__ import annotations

from enum import Enum


class Word(str, Enum):
    """A `str` enum whose text is its value (Python 3.10 has no `enum.StrEnum`)."""

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return self.value.__format__(spec)

    @classmethod
    def words(cls) -> tuple[str, ...]:
        """Every value, in definition order."""
        return tuple(member.value for member in cls)


class Status(Word):
    """What one gradient is."""

    OK = "ok"  # finite, at least one non-zero value
    NONE = "none"  # the tape returned None: no differentiable path
    ZERO = "zero"  # every value exactly 0
    NONFINITE = "nonfinite"  # at least one NaN or Inf
    INTEGER = "integer"  # a scan row whose activation is integer-valued: not differentiable
    STRING = "string"  # a scan row whose activation holds text (a string input): neither


# The statuses of scan rows that have no gradient by their dtype (not failures).
NOT_DIFFERENTIABLE = (Status.INTEGER, Status.STRING)


# The statuses `inspect --fail-on` accepts: every status that is not a healthy gradient.
FAILING_STATUSES = (Status.NONE, Status.ZERO, Status.NONFINITE)


class Finding(Word):
    """Every code a finding record carries (`core/results.Reason.code`), in one vocabulary:
    what a `check` finds (`--fail-on` picks which of them fail a file), what flags a `scan` row,
    why a gradient is None, zero or non-finite (an `inspect` / `scan` cause), what training
    shows (`layergrad fit`, `GradientMonitor`). The tuples below name each command's subset."""

    UNREADABLE = "unreadable"
    UNSAFE = "unsafe"
    ERROR = "error"
    BLOCKED = "blocked"  # the gradient is None
    NONFINITE = "nonfinite"  # NaN / Inf in the gradient
    DEAD = "dead"  # most units get exactly zero gradient for the whole batch
    VANISHING = "vanishing"  # mean |g| far below the target end's
    EXPLODING = "exploding"  # mean |g| far above the target end's
    NO_GRADIENT = "no_gradient"  # a trainable variable gets no gradient from the loss
    CONSTANT_OUTPUT = "constant_output"  # an output is the same for every sample
    LOSS_MISMATCH = "loss_mismatch"  # the compiled loss does not fit the output
    LINEAR_STACK = "linear_stack"  # weight layers with no non-linearity between them
    TARGET_MISMATCH = "target_mismatch"  # the labels given cannot be produced by the output
    INPUT_RANGE = "input_range"  # unscaled inputs pin the first activation (with data)
    REGRESSION = "regression"  # gradient flow got worse than the --baseline scan
    # found while training (`layergrad fit`, `GradientMonitor`); rules in docs/training.md
    DIVERGING = "diverging"  # the loss grows while update ratios explode
    NOT_LEARNING = "not_learning"  # the loss does not move, update ratios stay tiny
    DYING_UNITS = "dying_units"  # a layer's dead-unit fraction grows past a threshold
    STALLED_LAYER = "stalled_layer"  # one layer's update ratio decades below the others'
    PLATEAU_AT_CHANCE = "plateau_at_chance"  # the loss settles at the trivial (prior's) loss
    CONSTANT_PREDICTIONS = "constant_predictions"  # the head's output ignores the batch
    OSCILLATING = "oscillating"  # the loss swings without a trend
    SLOW_CONVERGENCE = "slow_convergence"  # the loss falls too slowly to learn in the run
    # why a gradient is None, zero or non-finite (`diagnose/causes.CAUSES`)
    NOT_DOWNSTREAM = "not_downstream"
    INTEGER_PATH = "integer_path"
    NON_DIFFERENTIABLE_OP = "non_differentiable_op"
    STOP_GRADIENT = "stop_gradient"
    DEAD_RELU = "dead_relu"
    SATURATED = "saturated"
    NONFINITE_FORWARD = "nonfinite_forward"
    NONFINITE_BACKWARD = "nonfinite_backward"
    TRAINING_MODE = "training_mode"
    FLOAT16_UNDERFLOW = "float16_underflow"
    UNUSED_INPUT = "unused_input"
    UNKNOWN = "unknown"


_ALL = tuple(Finding)  # every code, in the order above: a subset in that order is a slice


def _span(first: Finding, last: Finding) -> tuple[Finding, ...]:
    return _ALL[_ALL.index(first) : _ALL.index(last) + 1]


# The former names of the vocabulary's subsets, kept importable: one enum, `Finding`.
Flag = Finding
CauseCode = Finding

# What a `scan` row can be flagged with (`scan --fail-on`).
SCAN_FLAGS = _span(Finding.BLOCKED, Finding.EXPLODING)

# What a `check` can find in a file (`check --fail-on`), in the order `--help` lists them.
CHECK_FINDINGS = _span(Finding.UNREADABLE, Finding.SLOW_CONVERGENCE)

# Why a gradient is None, zero or non-finite: the codes of `inspect` / `scan` causes.
CAUSE_CODES = (*_span(Finding.NOT_DOWNSTREAM, Finding.UNUSED_INPUT), Finding.CONSTANT_OUTPUT,
               Finding.INPUT_RANGE, Finding.LOSS_MISMATCH, Finding.TARGET_MISMATCH,
               Finding.UNKNOWN)  # fmt: skip


class Severity(Word):
    """What a rule's finding does to a file: fail it (its evidence shows that flagged models do
    not train and repaired ones do), or warn (the model may still train)."""

    FAIL = "fail"
    WARN = "warn"


# A file that cannot be checked never passes, whatever `--fail-on` names.
ALWAYS_FAIL = frozenset({Finding.UNREADABLE, Finding.UNSAFE, Finding.ERROR})
DEFAULT_FAIL_ON = (Finding.UNREADABLE, Finding.UNSAFE, Finding.ERROR, Finding.NONFINITE,
                   Finding.BLOCKED, Finding.NO_GRADIENT, Finding.CONSTANT_OUTPUT,
                   Finding.LOSS_MISMATCH, Finding.TARGET_MISMATCH, Finding.REGRESSION)  # fmt: skip


# What `layergrad fit` can find; `nonfinite` and `dead`, and `target_mismatch` and
# `input_range` (before the first step), are shared with `check`.
TRAINING_FINDINGS = (Finding.NONFINITE, *_span(Finding.DIVERGING, Finding.SLOW_CONVERGENCE),
                     Finding.VANISHING, Finding.EXPLODING, Finding.DEAD, Finding.TARGET_MISMATCH,
                     Finding.INPUT_RANGE)  # fmt: skip
# The training findings that say the run learns nothing (the others warn).
DEFAULT_FIT_FAIL_ON = (Finding.NONFINITE, Finding.DIVERGING, Finding.NOT_LEARNING,
                       Finding.PLATEAU_AT_CHANCE, Finding.CONSTANT_PREDICTIONS,
                       Finding.TARGET_MISMATCH)  # fmt: skip


class Change(Word):
    """How one row of a `diff` differs between the base and the new scan."""

    SAME = "same"  # same status and flags, mean |g| equal up to rounding
    CHANGED = "changed"
    ADDED = "added"  # only in the new scan
    REMOVED = "removed"  # only in the base scan


class Wrt(Word):
    """What `scan` differentiates with respect to."""

    ACTIVATIONS = "activations"  # every layer's output
    WEIGHTS = "weights"  # every trainable variable, from the training loss


class OutputFormat(Word):
    """How a command renders its report on stdout."""

    TABLE = "table"  # for people
    JSON = "json"  # for programs
    MARKDOWN = "markdown"  # for pull-request comments
    HTML = "html"  # one self-contained page, for CI artifacts


class Measure(Word):
    """What `inspect` and `scan` measure between two activations (`--measure`)."""

    GRADIENT = "gradient"  # d reduce(to) / d from: one gradient of a sum
    JACOBIAN = "jacobian"  # also the norms of the per-sample Jacobians d to[i] / d from[i]


class Reduce(Word):
    """How the target activation becomes one scalar (`--reduce`)."""

    SUM = "sum"
    MEAN = "mean"


class Distribute(Word):
    """How `--data` runs over several devices (`--distribute`)."""

    MIRRORED = "mirrored"  # every visible GPU of this machine
    MULTI_WORKER = "multi-worker"  # every worker of the cluster in TF_CONFIG, each its shard


class JacobianMethod(Word):
    """How the Jacobian norms were obtained."""

    EXACT = "exact"  # every entry of every J_i
    ESTIMATE = "estimate"  # random projections (Frobenius), Lanczos steps (spectral: a lower bound)


# Letters whose spoken name starts with a vowel sound: an acronym said letter by letter (LSTM).
_VOWEL_LETTERS = frozenset("AEFHILMNORSX")


def with_article(word: str) -> str:
    """`word` after "a" or "an", by its sound: "an LSTM", "an RNN", "an Embedding", "an elu",
    "an 8-D", but "a Dense", "a ReLU", "a GRU", "a unit". An acronym with no vowel is said
    letter by letter; one with a vowel (GELU, SELU) and any other word by its first letter."""
    head = word.lstrip("'\"`")
    caps = len(head) - len(head.lstrip("ABCDEFGHIJKLMNOPQRSTUVWXYZ"))
    if caps >= 2 and not any(c in "AEIOU" for c in head[:caps]):
        vowel = head[0] in _VOWEL_LETTERS  # LSTM, RNN, MLP, CNN, PReLU
    elif head[:1].isdigit():
        digits = head[: len(head) - len(head.lstrip("0123456789"))]
        vowel = digits.startswith("8") or (len(digits) in (2, 5) and digits[:2] in ("11", "18"))
    else:
        low = head.lower()
        vowel = low[:1] in ("a", "e", "i", "o", "u") and not low.startswith(("uni", "use", "usu"))
    return f"{'an' if vowel else 'a'} {word}"
