"""The regression rules: two gradient profiles compared row by row, as a pure function.

A **regression** is a row that was `ok` and is now `none`, `zero` or `nonfinite`; a row that
is `ok` in both and newly flagged `dead`; or a mean |g| that moved by more than `tolerance`
decades (log10 of new over base) in either direction. Rows only in one scan are `added` or
`removed`: reported, not regressions. `compare` refuses profiles made with different probes,
whose differences would mean nothing.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence

from layergrad.core.errors import UsageError
from layergrad.core.results import ProbeMeta
from layergrad.core.vocab import Change, Finding, Status
from layergrad.files.gradient_profile import DiffReport, Profile, ProfileRow, RowDiff

DEFAULT_TOLERANCE = 2.0  # decades: a factor of 100 either way
BROKEN = (Status.NONE, Status.ZERO, Status.NONFINITE)
SAME_REL = 1e-6  # mean |g| this close is the same number (float32 rounding, not a change)


def compare(
    base: Profile, new: Profile, tolerance: float = DEFAULT_TOLERANCE, same_data: bool = True
) -> DiffReport:
    """Compare the reference scan `base` with the scan under test `new` row by row (matched by
    name): the new scan's rows in order, each removed row after the row before it in `base`.
    `tolerance` is the largest change of mean |g|, in decades, that is not a regression;
    `same_data` False compares scans over different data on purpose (the probe's source and
    the inputs' sample counts are then not compared). Raises UsageError for a tolerance that
    is not a positive number, or profiles made with another probe, target or kind of scan."""
    check_tolerance(tolerance)
    comparable(base, new, same_data)
    old = {r.name: r for r in base.rows}
    now = {r.name: r for r in new.rows}
    rows = tuple(
        compare_row(name, old.get(name), now.get(name), tolerance)
        for name in merged_order([r.name for r in base.rows], [r.name for r in new.rows])
    )
    return DiffReport(
        base=base.model,
        new=new.model,
        probe=new.probe,
        target=new.target,
        tolerance=float(tolerance),
        rows=rows,
        wrt=new.wrt,
        loss=new.loss,
    )


def check_tolerance(tolerance: float) -> None:
    """Raise UsageError unless `tolerance` is a positive, finite number of decades."""
    if not (isinstance(tolerance, (int, float)) and math.isfinite(tolerance) and tolerance > 0):
        raise UsageError(f"--tolerance must be a positive, finite number of decades: {tolerance!r}")


def compare_row(
    name: str, base: ProfileRow | None, new: ProfileRow | None, tolerance: float
) -> RowDiff:
    """One row under the rules: its change, decades, whether it is a regression, and why."""
    if base is None or new is None:
        change = Change.ADDED if base is None else Change.REMOVED
        why = "only in the new scan" if base is None else "only in the base scan"
        return RowDiff(name, change, base, new, None, False, why)
    b, n = base.magnitude, new.magnitude
    decades = None if b is None or n is None else n - b
    reasons: list[tuple[bool, str]] = []  # (is a regression, sentence)
    if base.status != new.status:
        cause = f" ({new.cause})" if new.cause and new.status in BROKEN else ""
        broke = base.status == Status.OK and new.status in BROKEN
        reasons.append((broke, f"was {base.status}, now {new.status}{cause}"))
    else:
        reasons += _flag_changes(base, new)
    same_number = _same_number(base, new)
    if decades is not None and not same_number:
        beyond = abs(decades) > tolerance
        reasons.append((beyond, _decades_sentence(decades, tolerance, beyond)))
    same = base.status == new.status and base.flags == new.flags and same_number
    regression = any(flag for flag, _ in reasons)
    reasons.sort(key=lambda reason: not reason[0])  # the regressions first
    why = "; ".join(text for _, text in reasons) or ("unchanged" if same else "changed")
    change = Change.SAME if same else Change.CHANGED
    return RowDiff(name, change, base, new, decades, regression, why)


def _flag_changes(base: ProfileRow, new: ProfileRow) -> list[tuple[bool, str]]:
    """Flags gained or lost by a row whose status did not change; a new `dead` on an ok row
    is a regression."""
    out = []
    for flag in new.flags:
        if flag not in base.flags:
            dead = flag == Finding.DEAD and base.status == Status.OK
            detail = ": most of its units now get exactly zero gradient" if dead else ""
            out.append((dead, f"newly flagged {flag}{detail}"))
    out += [(False, f"no longer flagged {f}") for f in base.flags if f not in new.flags]
    return out


def _same_number(base: ProfileRow, new: ProfileRow) -> bool:
    if base.mean_abs is None or new.mean_abs is None:
        return base.mean_abs is None and new.mean_abs is None
    return math.isclose(base.mean_abs, new.mean_abs, rel_tol=SAME_REL)


def _decades_sentence(decades: float, tolerance: float, beyond: bool) -> str:
    direction = "fell" if decades < 0 else "rose"
    size = abs(decades)
    text = f"{size:.1f}" if size >= 0.05 else f"{size:.1g}"
    if beyond and float(text) <= tolerance:  # "fell 2.0 decades (tolerance 2)" would puzzle
        text = f"{size:.3f}"
    bound = "tolerance" if beyond else "within tolerance"
    return f"mean |g| {direction} {text} decades ({bound} {tolerance:g})"


def merged_order(base: Sequence[str], new: Sequence[str]) -> list[str]:
    """The new names in order, each name only in `base` after the base name before it."""
    present = set(new)
    after: dict[str | None, list[str]] = {}
    anchor: str | None = None
    for name in base:
        if name in present:
            anchor = name
        else:
            after.setdefault(anchor, []).append(name)
    out = list(after.get(None, []))
    for name in new:
        out.append(name)
        out += after.get(name, [])
    return out


def comparable(base: Profile, new: Profile, same_data: bool = True) -> None:
    """Raise UsageError when the two profiles were not made the same way.

    Two scans compare only when they differentiate the same target with respect to the same
    kind of thing, on the same probe batch in the same mode; otherwise every row would differ
    for reasons that are not the model's.
    """
    p, q = base.probe, new.probe
    sources = (("probe batch", source_text(p), source_text(q)),) if same_data else ()
    probed = (
        *sources,
        ("batch size", p.batch_size, q.batch_size),
        ("reduction (--reduce)", p.reduce, q.reduce),
        ("mode", mode_text(p), mode_text(q)),
    )
    said = (
        (base.wrt != new.wrt, f"the base scan differentiates with respect to {base.wrt}, the "
         f"new one with respect to {new.wrt}; compare scans of the same kind"),
        (base.loss != new.loss, f"the base scan differentiates the loss {base.loss}, the new "
         f"one {new.loss}; scan both with the same --loss"),
        (base.target != new.target, f"the base scan's target is {_target_text(base.target)}, "
         f"the new one's {_target_text(new.target)}; scan both with the same --to"),
        *((a != b, f"the base scan was probed with {what} {a}, the new one with {b}; a "
           "comparison needs the same probe for both") for what, a, b in probed),
    )  # fmt: skip
    for differs, message in said:
        if differs:
            raise UsageError(message)
    shapes = {r.name: r.input_shape for r in base.rows if r.input_shape is not None}
    for row in new.rows:
        was, now = shapes.get(row.name), row.input_shape
        if (not same_data or p.samples is not None) and was is not None and now is not None:
            was, now = was[1:], now[1:]  # over data, axis 0 counts the samples
        if now is not None and was is not None and was != now:
            raise UsageError(
                f"model input {row.name!r} was probed with shape {was} in the base scan and "
                f"{row.input_shape} in the new one: the model's inputs changed, so the "
                "gradients do not compare; make a new base scan"
            )


def _target_text(target: str | None) -> str:
    return "the projection of the model's outputs" if target is None else f"--to {target}"


def source_text(p: ProbeMeta) -> str:
    if p.data_sha256 is not None:
        return f"--data with SHA-256 {p.data_sha256[:12]}... ({p.samples} samples)"
    if p.source == "random":
        return f"random (seed {p.seed})"
    return f"--input {os.path.normpath(p.source)}"


def mode_text(p: ProbeMeta) -> str:
    return "training" if p.training else "inference"
