"""What `GradientMonitor` says, and how it reads its arguments: the notes of a run it could not
watch in full (a model Keras built at its first step, a custom `train_step` whose loss or
gradients it cannot see), Keras's logged loss, `every` and `verbose`; and, with `verbose=1`
(as Keras's own callbacks, nothing by default), one line on stderr per new finding while
training runs and a summary when it ends.

While training runs, only the findings a part of the run can show (`EARLY`) are said; those
about the shape of the whole loss curve wait for its end, where every finding of the report
not said yet gets its line before the summary. A finding said while training that the whole
run does not bear out is named in the summary, so the last word is the report's.
"""

from __future__ import annotations

import math
import numbers
import sys
from collections.abc import Sequence

from layergrad.core.fit_results import FitReport
from layergrad.core.results import Reason
from layergrad.core.vocab import Finding

PREFIX = "GradientMonitor:"


def built_note(unmonitored: int) -> str:
    """What the report says when Keras's own first execution (`unmonitored` steps) built
    the model."""
    steps = "step 1" if unmonitored == 1 else f"steps 1-{unmonitored}"
    return (
        "Keras built the model during its first training step (a subclassed model, or a "
        f"Sequential without an Input): {steps} ran unmonitored, with Keras's logged loss; "
        f"the monitor starts at step {unmonitored + 1}"
    )


def blind_note(model: object, sees_gradients: bool | None) -> str:
    """Why the record of a custom train_step is partial."""
    name = type(model).__name__
    if not sees_gradients:
        return (
            f"loss-only: the train_step of {name} applies its gradients where the monitor "
            "cannot see them (not through model.optimizer's apply or apply_gradients); only "
            "the loss Keras logs was recorded, no gradient, no checkpoint"
        )
    return (
        f"the train_step of {name} computes its loss without model.compute_loss: the loss "
        "of each step is the one Keras logs (with steps_per_execution > 1, only the last "
        "step of each execution has one)"
    )


def loss_only_nonfinite(step: int, epoch: int, batch: int) -> Reason:
    """The first NaN/Inf loss of a run whose gradients the monitor cannot see (`step` from 0)."""
    message = (
        f"step {step + 1} (epoch {epoch}, batch {batch}): the loss is NaN/Inf; the monitor "
        "cannot see this train_step's gradients, so it cannot name the layer"
    )
    return Reason(Finding.NONFINITE, message, step=step + 1)


def logged_loss(logs: dict[str, object] | None) -> float | None:
    """The loss in Keras's logs after an execution, if it has one."""
    value = (logs or {}).get("loss")
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def whole_steps(every: object, name: str = "every") -> int:
    """`every` (or the argument `name`) as a whole number of steps, at least 1 (never
    rounded)."""
    ok = isinstance(every, numbers.Integral) and not isinstance(every, bool)
    ok = ok or (isinstance(every, float) and every.is_integer())
    if not ok or int(every) < 1:  # type: ignore[call-overload]
        raise ValueError(f"{name} must be at least 1, a whole number of steps: {name}={every!r}")
    return int(every)  # type: ignore[call-overload]


# the findings a part of the run can show (said as soon as they are found)
EARLY = (
    Finding.NONFINITE,
    Finding.DIVERGING,
    Finding.DEAD,
    Finding.DYING_UNITS,
    Finding.VANISHING,
    Finding.EXPLODING,
    Finding.STALLED_LAYER,
    Finding.CONSTANT_PREDICTIONS,
)


def positive_loss(value: object) -> float:
    """`chance_loss` as a positive finite number (a loss the run can be measured against)."""
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
    if not ok or not math.isfinite(float(value)) or float(value) <= 0:  # type: ignore[arg-type]
        raise ValueError(
            f"chance_loss must be a positive finite number (the trivial loss), or None: "
            f"chance_loss={value!r}"
        )
    return float(value)  # type: ignore[arg-type]


def verbosity(verbose: object) -> int:
    """`verbose` as Keras takes it: 0 (silent) or a positive whole number (talk)."""
    if isinstance(verbose, numbers.Integral) and int(verbose) >= 0:
        return int(verbose)
    raise ValueError(f"verbose must be 0 (silent) or 1 (one line per finding): verbose={verbose!r}")


def same_finding(a: Reason, b: Reason) -> bool:
    """One problem: the same finding in the same layer (its step and numbers may move)."""
    return a.code == b.code and a.layer == b.layer


def finding_line(finding: Reason) -> str:
    """`GradientMonitor: step 40: dying_units at dense_1: ...`"""
    return f"{PREFIX} step {finding.step}: {_name(finding)}: {finding.message}"


def summary_line(report: FitReport, said: Sequence[Reason]) -> str:
    """The run in one line: its length and its findings (those of the report), and any
    finding said while training that the whole run does not bear out."""
    found = report.findings
    text = f"{PREFIX} {_count(report.steps, 'step')} in {_count(report.epochs, 'epoch')}, "
    if found:
        text += f"{_count(len(found), 'finding')}: " + ", ".join(_name(f) for f in found)
    else:
        text += "no finding"
    if gone := [_name(s) for s in said if not any(same_finding(s, f) for f in found)]:
        text += "; said during training, not borne out by the whole run: " + ", ".join(gone)
    if report.stopped:
        text += f"; training stopped early on {report.stopped}"
    return text


def say(text: str) -> None:
    """Print one line on stderr (stdout is the user's)."""
    print(text, file=sys.stderr, flush=True)


def _name(finding: Reason) -> str:
    return f"{finding.code} at {finding.layer}" if finding.layer else str(finding.code)


def _count(n: int, word: str) -> str:
    return f"{n} {word}{'s' if n != 1 else ''}"
