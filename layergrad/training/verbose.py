"""What `GradientMonitor(verbose=1)` prints on stderr, as Keras's own callbacks do with
`verbose=1` (and, as theirs, nothing by default): one line per new finding while training
runs, and a summary when it ends.

While training runs, only the findings a part of the run can show are said (a NaN/Inf, a
loss that grows, units that die, a layer whose gradient vanishes, explodes or stalls, a head
whose predictions are constant); the findings about the shape of the whole loss curve wait
for its end, where every finding of the report not said yet gets its line before the
summary. A finding said while training that the whole run does not bear out is named in the
summary, so the last word is the report's.
"""

from __future__ import annotations

import numbers
import sys
from collections.abc import Sequence

from layergrad.core.fit_results import FitReport
from layergrad.core.results import Reason
from layergrad.core.vocab import Finding

PREFIX = "GradientMonitor:"

# the findings a part of the run can show (said as soon as they are found)
EARLY = (
    Finding.NONFINITE,
    Finding.DIVERGING,
    Finding.DYING_UNITS,
    Finding.VANISHING,
    Finding.EXPLODING,
    Finding.STALLED_LAYER,
    Finding.CONSTANT_PREDICTIONS,
)


def verbosity(verbose: object) -> int:
    """`verbose` as Keras takes it: 0 (silent) or a positive whole number (talk)."""
    if isinstance(verbose, numbers.Integral) and int(verbose) >= 0:
        return int(verbose)
    raise ValueError(f"verbose must be 0 (silent) or 1 (one line per finding): verbose={verbose!r}")


def early_findings(found: Sequence[Reason]) -> list[Reason]:
    """The findings of a part of the run that are said before it ends."""
    return [f for f in found if f.code in EARLY]


def same_finding(a: Reason, b: Reason) -> bool:
    """One problem: the same finding in the same layer (its step and numbers may move)."""
    return a.code == b.code and a.layer == b.layer


def finding_line(finding: Reason) -> str:
    """`GradientMonitor: step 40: dying_units at dense_1: ...`"""
    where = f" at {finding.layer}" if finding.layer else ""
    return f"{PREFIX} step {finding.step}: {finding.code}{where}: {finding.message}"


def summary_line(report: FitReport, said: Sequence[Reason]) -> str:
    """The run in one line: its length and its findings (those of the report), and any
    finding said while training that the whole run does not bear out."""
    steps = f"{report.steps} step{'s' if report.steps != 1 else ''}"
    epochs = f"{report.epochs} epoch{'s' if report.epochs != 1 else ''}"
    found = report.findings
    if found:
        names = ", ".join(_name(f) for f in found)
        text = f"{PREFIX} {steps} in {epochs}, {len(found)} finding{'s' * (len(found) > 1)}: "
        text += names
    else:
        text = f"{PREFIX} {steps} in {epochs}, no finding"
    gone = [s for s in said if not any(same_finding(s, f) for f in found)]
    if gone:
        text += "; said during training, not borne out by the whole run: " + ", ".join(
            _name(f) for f in gone
        )
    if report.stopped:
        text += f"; training stopped early on {report.stopped}"
    return text


def say(text: str) -> None:
    """Print one line on stderr (stdout is the user's)."""
    print(text, file=sys.stderr, flush=True)


def _name(finding: Reason) -> str:
    return f"{finding.code} at {finding.layer}" if finding.layer else str(finding.code)
