"""The packed summaries of the per-batch step, layer by layer: where each layer's share is
(`Layout`, known once the step is traced) and reading it back from the totals (`Unpack`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from layergrad.data.stats.aggregates import ForwardTotals, GradientTotals, first_batch
from layergrad.engine.capture import Record


@dataclass
class Layout:
    """Where each layer's share is in the packed summaries (known once traced)."""

    records: list[Record] = field(default_factory=list)
    grads: list[tuple[int, str]] = field(default_factory=list)  # (target, output name)
    forward: list[str] = field(default_factory=list)
    open_dims: list[str] = field(default_factory=list)


class Unpack:
    """One layer's share of the packed totals."""

    def __init__(self, layout: Layout, totals: dict[str, np.ndarray], scale: float) -> None:
        self.totals, self.scale = totals, scale
        self.grads = {entry: p for p, entry in enumerate(layout.grads)}
        self.fwd = {name: q for q, name in enumerate(layout.forward)}
        widths = [int(w) for w in totals.get("usizes", [])]
        self.offsets = np.concatenate([[0], np.cumsum([2 * w for w in widths])]).astype(int)
        self.widths = widths
        self.open: dict[str, slice] = {}  # where each output's sizes after the batch axis are
        start = 0
        for name in layout.open_dims:
            r, i = (int(part) for part in name.split("."))
            output = layout.records[r].outputs[i]
            count = len(output.shape) - 1 if output is not None else 0
            self.open[name] = slice(start, start + count)
            start += count

    def gradient(self, t: int, name: str) -> GradientTotals | None:
        p = self.grads.get((t, name))
        if p is None:
            return None
        tot, w = self.totals, self.widths[p]
        dist = None
        if "dist" in tot:
            dist = np.concatenate([tot["dist"][p], [tot["dmin"][p], tot["dmax"][p]]])
        return GradientTotals(
            fields=tot["grad"][p],
            max_abs=float(tot["gmax"][p]),
            units=tot["units"][self.offsets[p] : self.offsets[p] + 2 * w].reshape(2, w),
            first_nonfinite=first_batch(float(tot["grad/first"][p])),
            dist=dist,
            hist=tot["hist"][p] if "hist" in tot else None,
            scale=self.scale,
        )

    def forward(self, name: str) -> ForwardTotals | None:
        q = self.fwd.get(name)
        if q is None:
            return None
        return ForwardTotals.from_totals(self.totals["fwd"][q], float(self.totals["fwd/first"][q]))

    def dims(self, name: str) -> list[int]:
        """The largest sizes seen after the batch axis of output `name`, when the model
        leaves some of them open ([] when every size is known)."""
        where = self.open.get(name)
        return [] if where is None else [int(d) for d in self.totals["dims"][where]]
