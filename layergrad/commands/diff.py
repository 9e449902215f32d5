"""The regression gates: `layergrad diff` scans two model files (or scan JSONs) the same way
and compares them; `check --baseline` judges a model file's scan against a committed
`layergrad scan --json`. The rules of a regression are in `diagnose/regressions.py`; this runs
the scans.

    >>> from layergrad.commands.diff import diff_models
    >>> report = diff_models("sample_models/seed.keras", "sample_models/seed.h5")
    >>> [row.change for row in report.rows]
    [<Change.SAME: 'same'>, <Change.SAME: 'same'>, <Change.SAME: 'same'>, <Change.SAME: 'same'>]
    >>> report.regressions
    ()

A baseline is matched to the file it was made from, its probe (seed, batch size, reduction,
mode) is reused for the file's scan, and the scan is compared with it under the rules of
`diff`. The baseline must be of the scan `check` runs anyway (so there is one scan, not two):
`scan --wrt weights` (d loss / d every trainable variable) for a file with a loss (compiled,
or `--loss`), plain `scan` (the projection of the outputs) for a file without. A baseline that
cannot be reproduced (made with `--to`, with an `--input` batch not given now, of the other
kind) is refused before the model is loaded.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from layergrad.core.errors import UsageError
from layergrad.core.probe_options import PathLike, ProbeOptions
from layergrad.core.results import ScanReport, WeightScanReport
from layergrad.core.vocab import Change, Finding, Wrt
from layergrad.diagnose.regressions import (
    DEFAULT_TOLERANCE,
    DiffReport,
    check_tolerance,
    compare,
    mode_text,
    source_text,
)
from layergrad.files.gradient_profile import ACTIVATIONS, ROW_KEYS, Profile, recorded_probe
from layergrad.files.report_json import load_profile, profile_of
from layergrad.model.loss_forms import find_loss

if TYPE_CHECKING:
    from layergrad.commands.session import Session


def diff_models(
    base_path: str | os.PathLike[str],
    new_path: str | os.PathLike[str],
    *,
    target: str | None = None,
    wrt: str = Wrt.ACTIVATIONS.value,
    loss: str | None = None,
    tolerance: float = DEFAULT_TOLERANCE,
    imports: Sequence[str] = (),
    unsafe: bool = False,
    options: ProbeOptions | None = None,
) -> DiffReport:
    """Scan two model files with the same probe and compare them (two scans, no more).

    Either side may instead be a `layergrad scan --json` file: it is read, not scanned, and
    the model on the other side is scanned with the probe, target, `wrt` and loss recorded in
    it.

    Args:
        base_path, new_path: `.keras` / `.h5` model files (or scan `.json` files), the
            reference and the one under test.
        target: a layer reference both models have; None for the seeded projection of the
            outputs (as in `scan`), or the target recorded in a scan JSON.
        wrt: "activations" (every layer's output) or "weights" (d loss / d every trainable
            variable, as `scan --wrt weights`).
        loss: with wrt "weights", a `keras.losses` name instead of the compiled loss.
        tolerance: the largest change of mean |g|, in decades, that is not a regression.
        imports, unsafe: as for `scan_model`.
        options: the probe for both models (default: `ProbeOptions()`, or the one recorded in
            a scan JSON, whose `input_file` must then be given again if it had one).

    Raises:
        LoadError, LayerNotFound, UsageError: user errors, including two models whose inputs
            differ when no `--input` batch is given, and options that contradict a scan JSON.
    """
    from layergrad.commands.session import open_source

    check_tolerance(tolerance)  # before two scans, not after
    given = loss
    paths = [os.fspath(base_path), os.fspath(new_path)]
    profiles = [_read_scan(p) if p.endswith(".json") else None for p in paths]
    probe = options or ProbeOptions()
    recorded = next(((p, f) for p, f in zip(paths, profiles, strict=True) if f), None)
    if recorded is not None:
        json_path, profile = recorded
        if any(f is None for f in profiles):  # a model to scan the way the JSON was made
            probe = _recorded_probe(profile, probe, json_path)
        target = profile.target if target is None else target
        wrt, loss = profile.wrt, loss or profile.loss
    if wrt not in (Wrt.ACTIVATIONS, Wrt.WEIGHTS):
        raise UsageError(f"--wrt must be activations or weights: {wrt!r}")
    if wrt == Wrt.WEIGHTS and target is not None:
        raise UsageError("--to chooses a layer output; drop it with --wrt weights")
    if wrt != Wrt.WEIGHTS and loss is not None:
        raise UsageError("--loss needs --wrt weights")
    refs = [target] if target is not None else []
    sessions = [
        open_source(path, probe, refs=refs, imports=imports, unsafe=unsafe)
        for path, read in zip(paths, profiles, strict=True)
        if read is None
    ]
    if len(sessions) == 2 and probe.input_file is None:
        same_random_batch(*sessions)
    if recorded is not None and given is None and profile.loss_source == "compiled":
        # the JSON's loss was compiled in its file, with arguments its name does not carry
        # (from_logits, a loss per output): a model compiled with the loss of that name is
        # scanned with its own compiled loss; another, by that name (as `--loss NAME`)
        compiled = [find_loss(s.info.compile_config, None) for s in sessions]
        if all(c is not None and c.name == profile.loss for c in compiled):
            loss = None
    scanned = (_scanned(s, wrt, target, loss) for s in sessions)
    base, new = (read if read is not None else next(scanned) for read in profiles)
    return compare(base, new, tolerance)


def _scanned(session: Session, wrt: str, target: str | None, loss: str | None) -> Profile:
    """The profile of one model's scan (activations or weights) made as the other side's."""
    from layergrad.commands.scan import scan_session  # TensorFlow: two JSONs never load it
    from layergrad.commands.weight_scan import scan_weights

    if wrt == Wrt.WEIGHTS:
        return profile_of(scan_weights(session, loss, layers=False))
    return profile_of(scan_session(session, target))


def _read_scan(path: str) -> Profile:
    """A scan JSON as one side of the comparison, named by its own file (the model it was
    made from is in its class and name; its path may not even exist here)."""
    profile = load_profile(path)
    return replace(profile, model=replace(profile.model, path=path))


def _recorded_probe(profile: Profile, given: ProbeOptions, path: str) -> ProbeOptions:
    """The probe recorded in a scan JSON; options given that contradict it are an error."""
    input_file = None if given.input_file is None else os.fspath(given.input_file)
    probe = recorded_probe(profile, input_file, path)
    if given not in (ProbeOptions(input_file=given.input_file), probe):
        raise UsageError(
            f"{path} records the probe it was made with ({source_text(profile.probe)}, batch "
            f"{profile.probe.batch_size}, {mode_text(profile.probe)}, reduce "
            f"{profile.probe.reduce}); the model is scanned with it, so leave out --seed, "
            "--batch-size, --reduce and --training, or give the same values"
        )
    return probe


def same_random_batch(base: Session, new: Session) -> None:
    """Raise UsageError unless two sessions' random probe batches are identical.

    The same seed draws the same batch only from the same input specs (shapes, dtypes, integer
    id ranges); two models that take different inputs need one batch given with `--input`.
    """
    import numpy as np

    a, b = base.batch.arrays, new.batch.arrays
    if len(a) == len(b) and all(
        x.shape == y.shape and x.dtype == y.dtype and np.array_equal(x, y)
        for x, y in zip(a, b, strict=True)
    ):
        return
    raise UsageError(
        f"the two models take different inputs (base: {_inputs_text(base)}; new: "
        f"{_inputs_text(new)}), so the same --seed cannot give them the same random probe "
        "batch; pass one batch for both with --input FILE.npy (.npz keyed by input name)"
    )


def _inputs_text(session: Session) -> str:
    from layergrad.data.input_kinds import integer_ranges
    from layergrad.data.probe_input import DEFAULT_INT_HIGH

    ranges = integer_ranges(session.model)
    parts = []
    for name, array in zip(session.batch.names, session.batch.arrays, strict=True):
        dims = ", ".join(["batch", *(str(d) for d in array.shape[1:])])
        ids = ""
        if array.dtype.kind in "iu":
            ids = f" ids in [0, {ranges.get(name, DEFAULT_INT_HIGH)})"
        parts.append(f"{name} ({dims}) {array.dtype}{ids}")
    return ", ".join(parts)


LISTED = 4  # regressions named in a check message; the rest are counted
MIN_SHARED = 0.5  # of a baseline's layers that must be in the model it is checked against


@dataclass(frozen=True)
class Baseline:
    """A committed scan JSON (`path`) and the profile read from it."""

    path: str
    profile: Profile


def load_baselines(paths: Sequence[str | os.PathLike[str]]) -> tuple[Baseline, ...]:
    """Read each baseline file (see `report_json.load_profile`); UsageError names a bad one."""
    return tuple(Baseline(os.fspath(p), load_profile(p, f"--baseline {p}")) for p in paths)


def match_baselines(
    files: Sequence[str],
    baselines: Sequence[Baseline],
    input_file: PathLike | None = None,
    data: bool = False,
) -> dict[str, Baseline]:
    """Which baseline applies to which model file, each checked for a reproducible probe.

    One file and one baseline always match. Otherwise each baseline applies to the checked
    file at the path recorded in it (`model.path`, as it was given to `scan`); a baseline for
    no checked file, or two for one file, is an error.

    Raises:
        UsageError: a baseline that matches no file, or whose probe cannot be reused here.
    """
    for baseline in baselines:
        probe_options(baseline, input_file, data)  # refuse a foreign probe before loading
    if len(files) == 1 and len(baselines) == 1:
        return {files[0]: baselines[0]}
    matched: dict[str, Baseline] = {}
    for baseline in baselines:
        recorded = baseline.profile.model.path
        found = [f for f in files if os.path.realpath(f) == os.path.realpath(recorded)]
        if not found:
            shown = ", ".join(files[:3]) + (", ..." if len(files) > 3 else "")
            raise UsageError(
                f"--baseline {baseline.path} was made from {recorded}, which is not among the "
                f"files checked ({shown}); check that file, or make the baseline from the path "
                "you check"
            )
        for f in found:
            if f in matched:
                raise UsageError(
                    f"--baseline {matched[f].path} and {baseline.path} are both for {f}; give one"
                )
            matched[f] = baseline
    return matched


def probe_options(
    baseline: Baseline, input_file: PathLike | None = None, data: bool = False
) -> ProbeOptions:
    """The probe the baseline was made with, for this file's scan.

    `input_file` is check's `--input`: a baseline probed with an `--input` batch needs the
    same file given again; a baseline probed with a random batch needs none.

    Raises:
        UsageError: the baseline's probe cannot be reproduced by `check`.
    """
    profile, where = baseline.profile, f"--baseline {baseline.path}"
    remake = "make the baseline with `layergrad scan MODEL --json > baseline.json`"
    if profile.target is not None:
        raise UsageError(
            f"{where} was made with --to {profile.target}; check scans the projection of the "
            f"model's outputs; {remake} (without --to)"
        )
    given = None if input_file is None else os.fspath(input_file)
    return recorded_probe(profile, given, where, data)


def same_data(
    baseline: Baseline, source: str, sha256: str, samples: int | None, allow: bool
) -> bool:
    """Whether `--data source` (its content hash, and samples once known) is the data the
    baseline was made over.

    Raises:
        UsageError: it is other data (another hash, another sample count, or a baseline made
            on one probe batch) and `allow` (`--allow-other-data`) is False.
    """
    probe, where = baseline.profile.probe, f"--baseline {baseline.path}"
    if probe.data_sha256 is None and probe.shards:
        why = (
            f"was merged from {probe.shards} shards (layergrad merge), which carry no content "
            "hash of one data file"
        )
    elif probe.data_sha256 is None:
        made = "a random probe batch" if probe.source == "random" else f"--input {probe.source}"
        why = f"was made on {made}, not over --data"
    elif probe.data_sha256 != sha256:
        why = f"was made over --data {probe.source}, whose content differs from --data {source}"
    elif samples is not None and probe.samples is not None and samples != probe.samples:
        why = f"was made over {probe.samples:,} samples of the data, not {samples:,}"
    else:
        return True
    if allow:
        return False
    wrt = " --wrt weights" if baseline.profile.wrt == Wrt.WEIGHTS else ""
    raise UsageError(
        f"{where} {why}: the gradients would differ for the data's sake, not the model's; "
        f"make the baseline with `layergrad scan MODEL{wrt} --data {source} --json`, or pass "
        "--allow-other-data to compare anyway"
    )


def baseline_probe(
    baseline: Baseline, probe: ProbeOptions, sha: str, allow: bool
) -> tuple[ProbeOptions, bool]:
    """The probe of a file's scan against `baseline` (that `fits` it), from check's `probe`
    (`sha`: its --data's content hash), and whether that is other data, `allow`ed (else a
    UsageError, `same_data`)."""
    data = probe.data_set
    recorded = probe_options(baseline, probe.input_file, data is not None)
    other = data is not None and not same_data(baseline, os.fspath(data.path), sha, None, allow)
    if data is None:
        return replace(recorded, max_memory=probe.max_memory), other
    probe = replace(
        probe, batch_size=recorded.batch_size, seed=recorded.seed, reduce=recorded.reduce,
        training=recorded.training,
    )  # fmt: skip
    return probe, other


def fits(baseline: Baseline, has_loss: bool, path: str) -> None:
    """Raise UsageError unless the baseline is of the scan check runs on this file.

    A file with a loss is checked by d loss / d every trainable variable (`scan --wrt
    weights`); a file without one by the projection of its outputs (plain `scan`).
    """
    wrt, where = baseline.profile.wrt, f"--baseline {baseline.path}"
    if has_loss and wrt == ACTIVATIONS:
        raise UsageError(
            f"{path} has a loss (compiled in the file, or --loss), so check differentiates the "
            f"loss, but {where} is a scan of the outputs' projection; make the baseline with "
            "`layergrad scan MODEL --wrt weights --json > baseline.json`"
        )
    if not has_loss and wrt != ACTIVATIONS:
        raise UsageError(
            f"{where} differentiates a loss ({baseline.profile.loss}), but {path} has none "
            "compiled; pass the same --loss, or make the baseline with "
            "`layergrad scan MODEL --json > baseline.json`"
        )


def judge(
    report: ScanReport,
    weights: WeightScanReport | None,
    baseline: Baseline,
    tolerance: float,
    other_data: bool = False,
) -> tuple[str, tuple[Finding, ...]]:
    """The `baseline` check of one file: its message and findings (`regression` or none).

    Of check's activation scan `report` and its scan of the trainable variables `weights`
    (None without a loss), the one of the baseline's kind is compared; with `other_data`
    (`--allow-other-data`) the probe's source and the inputs' sample counts are not.

    Raises:
        UsageError: the scan was not made with the baseline's probe (see `diff.comparable`).
    """
    scanned = weights if baseline.profile.wrt != ACTIVATIONS else report
    if scanned is None:  # `fits` refuses this before the scan; say so rather than pass
        raise UsageError(f"--baseline {baseline.path}: check found no loss to compare with")
    diff = compare(baseline.profile, profile_of(scanned), tolerance, same_data=not other_data)
    _same_model(diff, baseline.path, report.model.path)
    against = baseline.path + (" (over other data)" if other_data else "")
    return summary(diff, against), (Finding.REGRESSION,) if diff.regressions else ()


def _same_model(diff: DiffReport, against: str, path: str) -> None:
    """Raise UsageError when the baseline is of another model: fewer than MIN_SHARED of its
    layers (variables with --wrt weights) are in the file scanned now.

    A model may grow (added layers are reported, not judged), and some layers may go, but a
    baseline most of whose layers are gone compares nothing; passing it would hide every
    regression.
    """
    shared, total = diff.compared, diff.compared + diff.count(Change.REMOVED)
    if total and shared < MIN_SHARED * total:
        raise UsageError(
            f"--baseline {against} is the baseline of another model: {path} has {shared} of "
            f"the baseline's {total} {ROW_KEYS[diff.wrt][0]} (at least {MIN_SHARED:.0%} must "
            "match by name); "
            f"make the baseline from this file with `layergrad scan {path} --json`."
        )


def summary(diff: DiffReport, against: str) -> str:
    """One line: the regressions with why (the first few), or what was compared."""
    bad = diff.regressions
    if bad:
        named = "; ".join(f"{r.name}: {r.why}" for r in bad[:LISTED])
        more = f"; and {len(bad) - LISTED} more" if len(bad) > LISTED else ""
        plural = "s" if len(bad) > 1 else ""
        return f"{len(bad)} regression{plural} against {against}: {named}{more}"
    compared = f"no regression against {against}: {diff.compared} {ROW_KEYS[diff.wrt][0]} compared"
    return ", ".join([compared, *diff.changes])
