"""A comparison of two gradient profiles, as data: one `RowDiff` per row name and the
`DiffReport` that holds them (`diff`, `check --baseline`). The rules that make it are in
`diagnose/regressions.py`; `report_json` writes it as `layergrad.diff/1`.
"""

from __future__ import annotations

from dataclasses import dataclass

from layergrad.core.display import NotebookDisplay
from layergrad.core.results import ModelMeta, ProbeMeta
from layergrad.core.vocab import Change, Wrt
from layergrad.files.gradient_profile import ProfileRow


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
    wrt: str = Wrt.ACTIVATIONS.value  # rows are layer outputs, or trainable variables
    loss: str | None = None  # the loss differentiated, with wrt "weights"

    @property
    def regressions(self) -> tuple[RowDiff, ...]:
        """The rows that are regressions, in order."""
        return tuple(r for r in self.rows if r.regression)

    def count(self, change: Change) -> int:
        """How many rows have this change."""
        return sum(1 for r in self.rows if r.change == change)

    @property
    def compared(self) -> int:
        """How many rows are in both scans."""
        return len(self.rows) - self.count(Change.ADDED) - self.count(Change.REMOVED)
