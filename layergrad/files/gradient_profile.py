"""A gradient profile: a scan reduced to what a comparison needs, from a report or its JSON,
and a comparison of two profiles as data (`RowDiff`, `DiffReport`).

`diff` compares two profiles row by row, matched by name (the rules are in
`diagnose/regressions.py`; `report_json` writes the comparison as `layergrad.diff/1`). A
profile is read from a scan's JSON document, a committed `layergrad scan --json` file or a
report just made (`report_json.py`: `load_profile`, `profile_of`); `recorded_probe`
reproduces its probe. A row only needs a name, a status, a mean |g| and flags, so any kind of
scan row fits.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from layergrad.core.display import NotebookDisplay
from layergrad.core.errors import InputError
from layergrad.core.probe_options import ProbeOptions
from layergrad.core.results import ModelMeta, ProbeMeta
from layergrad.core.vocab import Change, Status, Wrt

ACTIVATIONS = Wrt.ACTIVATIONS.value
# Where each kind of scan keeps its rows in JSON, and the member that names a row.
ROW_KEYS = {ACTIVATIONS: ("layers", "layer"), Wrt.WEIGHTS.value: ("variables", "variable")}


@dataclass(frozen=True)
class ProfileRow:
    """What a comparison needs of one scan row.

    `mean_abs` is None when the row has no gradient or a mean |g| that was not finite (`null`
    in a scan JSON); `cause` names the most likely cause of a
    none / zero / non-finite status (`code at layer`); `input_shape` is set on a model input's
    row: the shape of the probe batch it was fed.
    """

    name: str
    status: Status
    mean_abs: float | None
    flags: tuple[str, ...] = ()
    cause: str | None = None
    input_shape: tuple[int, ...] | None = None

    @property
    def magnitude(self) -> float | None:
        """log10 of mean |g| for an `ok` row with a positive, finite mean |g|, else None."""
        m = self.mean_abs
        if self.status != Status.OK or m is None or not (math.isfinite(m) and m > 0):
            return None
        return math.log10(m)


@dataclass(frozen=True)
class Profile:
    """One scan as a comparison sees it: the model, the probe, the target and named rows.

    `wrt` is what the rows differentiate with respect to: "activations" (rows named by layer
    reference, target a layer or None for the projection of the outputs) or "weights" (rows
    named `layer/variable`, target the loss named by `loss`). `loss_source` says where that
    loss came from: "compiled" (the file's own, with arguments its name does not say, such
    as `from_logits`) or "option" (`--loss NAME`); None when the document does not say.
    """

    model: ModelMeta
    probe: ProbeMeta
    target: str | None
    rows: tuple[ProfileRow, ...]
    wrt: str = ACTIVATIONS
    loss: str | None = None
    loss_source: str | None = None


@dataclass(frozen=True)
class RowDiff:
    """One row of a comparison, matched by name.

    `base` / `new` is None for an added / removed row. `decades` is log10(new / base mean |g|),
    None unless both sides are `ok` with a positive mean |g|. `why` is a sentence.
    """

    name: str
    change: Change
    base: ProfileRow | None
    new: ProfileRow | None
    decades: float | None
    regression: bool
    why: str


@dataclass(frozen=True, repr=False)
class DiffReport(NotebookDisplay):
    """A comparison of two scans made with the same probe, rows in the new scan's order."""

    base: ModelMeta
    new: ModelMeta
    probe: ProbeMeta
    target: str | None
    tolerance: float
    rows: tuple[RowDiff, ...]
    wrt: str = ACTIVATIONS  # rows are layer outputs, or trainable variables
    loss: str | None = None  # the loss differentiated, with wrt "weights"

    @property
    def regressions(self) -> tuple[RowDiff, ...]:
        """The rows that are regressions, in order."""
        return tuple(r for r in self.rows if r.regression)

    def count(self, change: Change) -> int:
        """How many rows have this change."""
        return sum(1 for r in self.rows if r.change == change)

    @property
    def changes(self) -> list[str]:
        """`3 changed`, `1 added`: how many rows changed, were added or removed (not zero)."""
        kinds = (Change.CHANGED, Change.ADDED, Change.REMOVED)
        return [f"{self.count(c)} {c}" for c in kinds if self.count(c)]

    @property
    def compared(self) -> int:
        """How many rows are in both scans."""
        return len(self.rows) - self.count(Change.ADDED) - self.count(Change.REMOVED)


def recorded_probe(
    profile: Profile, input_file: str | None, where: str, data: bool = False
) -> ProbeOptions:
    """The probe options that reproduce the probe recorded in `profile`.

    `input_file` is the `--input` given now: a profile probed with an `--input` batch needs
    the same file again (the JSON records its path, not its contents); a profile probed with a
    random batch needs none. With `data` (`--data` is given now) only the batch size, seed,
    reduction and mode are taken: which data it was is judged by `baseline.same_data`. A
    profile made over `--data` needs `--data` again. `where` names the profile in errors.

    Raises:
        InputError: the recorded probe cannot be reproduced with this `input_file`.
    """
    probe = profile.probe
    recorded = ProbeOptions(
        input_file=input_file,
        batch_size=probe.batch_size,
        seed=probe.seed if probe.seed is not None else 0,
        reduce=probe.reduce,
        training=probe.training,
    )
    if data:
        return recorded
    over = (
        f"{where} was made over --data {probe.source} ({probe.samples} samples), so it compares "
        f"only with a run over the same data: "
    )
    rescan = f"diff it with `layergrad scan MODEL --data {probe.source} --json`"
    if probe.data_sha256 is not None:
        raise InputError(f"{over}`check --data {probe.source}`, or {rescan}")
    if probe.samples is not None and probe.shards:  # merged: its source is several files
        shards = probe.source.split(" + ")
        scans = " and ".join(
            f"`layergrad scan MODEL --data {shard}"
            f"{f' --first-sample N{i}' if i else ''} --json > new{i}.json`"
            for i, shard in enumerate(shards[:2])
        ) + (" (and so on for each shard)" if len(shards) > 2 else "")
        news = " ".join(f"new{i}.json" for i in range(min(len(shards), 2)))
        raise InputError(
            f"{where} was merged from {probe.shards} shards of --data ({probe.source}), so it "
            f"compares only with a merge over the same shards: {scans} (N1: the samples of the "
            "shards before it; with the options of the shards' scans), "
            f"`layergrad merge {news}{' ...' if len(shards) > 2 else ''} --json > new.json`, "
            f"then `layergrad diff {where.split()[-1]} new.json`"
        )
    if probe.samples is not None:  # over --data without one file's hash (a data function)
        raise InputError(over + rescan)
    if probe.source == "random" and input_file is not None:
        raise InputError(
            f"{where} was probed with a random batch (seed {probe.seed}), but --input "
            f"{input_file} is given; drop --input, or make the scan again with --input {input_file}"
        )
    if probe.source != "random":
        if input_file is None:
            raise InputError(
                f"{where} was probed with --input {probe.source}; pass the same batch: "
                f"--input {probe.source}"
            )
        if os.path.normpath(input_file) != os.path.normpath(probe.source):
            raise InputError(
                f"{where} was probed with --input {probe.source}, not {input_file}; pass the "
                "same file, or make the scan again with this one"
            )
    return recorded
