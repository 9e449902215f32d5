"""`check --baseline`: judge a model file's scan against a committed `layergrad scan --json`.

A baseline is matched to the file it was made from, its probe (seed, batch size, reduction,
mode) is reused for the file's scan, and the scan is compared with it under the rules of
`diff`. A baseline that cannot be reproduced here (made with `--to`, with an `--input` batch
not given now, or of another kind of scan) is refused before any model is loaded.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from layergrad.diff import DiffReport, compare
from layergrad.errors import InputError
from layergrad.pipeline import ProbeOptions
from layergrad.profile import ACTIVATIONS, Profile, load_profile, profile_of, recorded_probe
from layergrad.results import ScanReport
from layergrad.vocab import Change, Finding

LISTED = 4  # regressions named in a check message; the rest are counted


@dataclass(frozen=True)
class Baseline:
    """A committed scan JSON (`path`) and the profile read from it."""

    path: str
    profile: Profile


def load_baselines(paths: Sequence[str | os.PathLike[str]]) -> tuple[Baseline, ...]:
    """Read each baseline file (see `profile.load_profile`); InputError names a bad one."""
    return tuple(Baseline(os.fspath(p), load_profile(p, f"--baseline {p}")) for p in paths)


def match_baselines(
    files: Sequence[str], baselines: Sequence[Baseline], input_file: str | None = None
) -> dict[str, Baseline]:
    """Which baseline applies to which model file, each checked for a reproducible probe.

    One file and one baseline always match. Otherwise each baseline applies to the checked
    file at the path recorded in it (`model.path`, as it was given to `scan`); a baseline for
    no checked file, or two for one file, is an error.

    Raises:
        InputError: a baseline that matches no file, or whose probe cannot be reused here.
    """
    for baseline in baselines:
        probe_options(baseline, input_file)  # refuse a foreign probe before loading anything
    if len(files) == 1 and len(baselines) == 1:
        return {files[0]: baselines[0]}
    matched: dict[str, Baseline] = {}
    for baseline in baselines:
        recorded = baseline.profile.model.path
        found = [f for f in files if _same_path(f, recorded)]
        if not found:
            shown = ", ".join(files[:3]) + (", ..." if len(files) > 3 else "")
            raise InputError(
                f"--baseline {baseline.path} was made from {recorded}, which is not among the "
                f"files checked ({shown}); check that file, or make the baseline from the path "
                "you check"
            )
        for f in found:
            if f in matched:
                raise InputError(
                    f"--baseline {matched[f].path} and {baseline.path} are both for {f}; give one"
                )
            matched[f] = baseline
    return matched


def _same_path(a: str, b: str) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)


def probe_options(baseline: Baseline, input_file: str | None = None) -> ProbeOptions:
    """The probe the baseline was made with, for this file's scan.

    `input_file` is check's `--input`: a baseline probed with an `--input` batch needs the
    same file given again; a baseline probed with a random batch needs none.

    Raises:
        InputError: the baseline's probe cannot be reproduced by `check`.
    """
    profile, where = baseline.profile, f"--baseline {baseline.path}"
    remake = "make the baseline with `layergrad scan MODEL --json > baseline.json`"
    if profile.wrt != ACTIVATIONS:
        raise InputError(
            f"{where} differentiates with respect to {profile.wrt}; check compares the "
            f"gradient with respect to every layer's output; {remake}"
        )
    if profile.target is not None:
        raise InputError(
            f"{where} was made with --to {profile.target}; check scans the projection of the "
            f"model's outputs; {remake} (without --to)"
        )
    return recorded_probe(profile, input_file, where)


def judge(
    report: ScanReport, baseline: Baseline, tolerance: float
) -> tuple[str, tuple[Finding, ...]]:
    """The `baseline` check of one file: its message and findings (`regression` or none).

    Raises:
        InputError: the scan was not made with the baseline's probe (see `diff.comparable`).
    """
    diff = compare(baseline.profile, profile_of(report), tolerance)
    return summary(diff, baseline.path), (Finding.REGRESSION,) if diff.regressions else ()


def summary(diff: DiffReport, against: str) -> str:
    """One line: the regressions with why (the first few), or what was compared."""
    bad = diff.regressions
    if bad:
        named = "; ".join(f"{r.name}: {r.why}" for r in bad[:LISTED])
        more = f"; and {len(bad) - LISTED} more" if len(bad) > LISTED else ""
        plural = "s" if len(bad) > 1 else ""
        return f"{len(bad)} regression{plural} against {against}: {named}{more}"
    compared = len(diff.rows) - diff.count(Change.ADDED) - diff.count(Change.REMOVED)
    parts = [f"no regression against {against}: {compared} layers compared"]
    changes = (Change.CHANGED, Change.ADDED, Change.REMOVED)
    parts += [f"{diff.count(c)} {c}" for c in changes if diff.count(c)]
    return ", ".join(parts)
