"""What `layergrad fix` reports: each repair, its code line, its verdict and the evidence.

Plain frozen dataclasses, no TensorFlow. A `Run` is one model trained on the data (the
original, one repair alone, or every repair together); without `--data` there is none and
every verdict is `not run`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from layergrad.core.display import NotebookDisplay
from layergrad.core.results import Reason
from layergrad.core.vocab import DEFAULT_FAIL_ON, DEFAULT_FIT_FAIL_ON, Word

SCHEMA = "layergrad.fix/1"
FAILING = frozenset(str(f) for f in (*DEFAULT_FAIL_ON, *DEFAULT_FIT_FAIL_ON))


class Verdict(Word):
    """Whether a repair was shown to work."""

    VERIFIED = "verified"  # the finding is gone and the loss falls clearly below the original's
    NOT_VERIFIED = "not verified"  # trained, but one of the two did not happen (`why` says)
    NOT_RUN = "not run"  # no --data: nothing was trained


class _Scored:
    """A trained loss `final` and the `trivial` loss of the same labels."""

    final: float | None
    trivial: float | None

    @property
    def relative(self) -> float | None:
        """`final` over `trivial` (a loss of a different kind compares this way)."""
        if self.final is None or not self.trivial:
            return None
        return self.final / self.trivial


@dataclass(frozen=True)
class OutputLoss(_Scored):
    """One output's loss of a trained model with several outputs: the loss of its predictions
    on the scored batches and its trivial loss on the same labels (None: it has none)."""

    name: str  # the output, as Keras names it (`output_names`)
    loss_name: str
    final: float | None
    trivial: float | None = None
    baseline: float | None = None  # the original's trained output, scored by this loss


@dataclass(frozen=True)
class Run(_Scored):
    """One model trained on the data for the same steps from the same weights (`error`: why
    it could not be trained, then `losses` is empty).

    `baseline` (a repaired copy's run) is the like-for-like loss to beat: the trained
    original's predictions scored on the same batches by this run's loss (None when the
    original could not be trained or its outputs cannot take this loss).
    """

    loss_name: str
    losses: tuple[float | None, ...] = ()  # losses[i]: the loss of step i + 1
    trivial: float | None = None  # of predicting the class prior (None: none, a regression)
    final: float | None = None  # its predictions' on the held-back batches, else trained_loss
    findings: tuple[str, ...] = ()  # every finding of check and training on this model
    error: str | None = None
    outputs: tuple[OutputLoss, ...] = ()  # each output's, when the model has several
    baseline: float | None = None
    accuracy: float | None = None  # a classifier's, on the scored batches
    prior_accuracy: float | None = None  # always answering their most frequent class
    trained_loss: float | None = None  # the last tenth of the training losses, as `fit` has them


@dataclass(frozen=True)
class Repair:
    """One mechanical repair of one finding: what changes, as the user writes it, and whether
    it was shown to work.

    `code` holds one line per change, `before -> after` in the model's own terms. `verdict`
    is `not run` without data; `why` says why a repair is not verified (or was not applied);
    `repaired` is the run of this repair alone (None without data).
    """

    finding: str
    layer: str | None
    change: str
    code: tuple[str, ...]
    verdict: Verdict = Verdict.NOT_RUN
    why: str = ""
    repaired: Run | None = None
    gone: tuple[str, ...] = ()  # findings of the original that the copy with it alone lost
    applied: bool = True  # False: the config edit could not be made on this model


@dataclass(frozen=True)
class FixReport(NotebookDisplay):
    """Every repair of one model file, the repaired copy and the evidence.

    `before` are the findings of the original (check, and training with data), `after` those
    of the copy with every repair together (read back from `output` through the same audit),
    `original` / `together` the two training runs (None without data). `output` is the copy's
    path, None when no copy was written (`notes` say why); `replaced`, whether it replaced a
    copy an earlier run wrote (not in the JSON: what the line on stderr says).
    """

    path: str
    model_class: str
    repairs: tuple[Repair, ...]
    unrepaired: tuple[Reason, ...]
    before: tuple[str, ...]
    after: tuple[str, ...]
    output: str | None
    data: str | None = None
    steps: int | None = None
    original: Run | None = None
    together: Run | None = None
    notes: tuple[str, ...] = field(default=())
    replaced: bool = False

    @property
    def unwritten(self) -> str | None:
        """Why no copy was written, when a repair was planned and none was (None else)."""
        if self.output is not None or not self.repairs:
            return None
        return next((n for n in self.notes if n.startswith("no copy written")), None)

    @property
    def failing(self) -> tuple[str, ...]:
        """The original's findings that fail a file or a run by default."""
        return tuple(f for f in self.before if f in FAILING)

    @property
    def gone(self) -> tuple[str, ...]:
        """The original's findings the repaired copy no longer has."""
        return tuple(f for f in self.before if f not in self.after)

    @property
    def remaining(self) -> tuple[str, ...]:
        """The original's findings the repaired copy still has."""
        return tuple(f for f in self.before if f in self.after)

    @property
    def ok(self) -> bool:
        """Every failing finding has a verified repair (exit 0); nothing to fix is ok too."""
        verified = [r for r in self.repairs if r.verdict == Verdict.VERIFIED]
        return all(any(r.finding == f or f in r.gone for r in verified) for f in self.failing)
