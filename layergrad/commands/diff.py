"""`layergrad diff`: scan two model files (or scan JSONs) the same way and compare them.

The rules of a regression are in `diagnose/regressions.py`; this runs the scans.

    >>> from layergrad.commands.diff import diff_models
    >>> report = diff_models("sample_models/seed.keras", "sample_models/seed.h5")
    >>> [row.change for row in report.rows]
    [<Change.SAME: 'same'>, <Change.SAME: 'same'>, <Change.SAME: 'same'>, <Change.SAME: 'same'>]
    >>> report.regressions
    ()
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from layergrad.core.errors import UsageError
from layergrad.core.probe_options import ProbeOptions
from layergrad.core.vocab import Wrt
from layergrad.diagnose.regressions import (
    DEFAULT_TOLERANCE,
    DiffReport,
    check_tolerance,
    compare,
    mode_text,
    source_text,
)
from layergrad.files.gradient_profile import Profile, recorded_probe
from layergrad.files.report_json import load_profile, profile_of

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
    from layergrad.commands.session import open_session

    check_tolerance(tolerance)  # before two scans, not after
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
        open_session(path, probe, refs=refs, imports=imports, unsafe=unsafe)
        for path, read in zip(paths, profiles, strict=True)
        if read is None
    ]
    if len(sessions) == 2 and probe.input_file is None:
        same_random_batch(*sessions)
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
