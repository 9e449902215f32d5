"""The labels that come with the data, summarised: per output (`target_fit.LabelSummary`),
and as the class prior a classifier's chance loss is the entropy of (`ClassPrior`).

`y` (one output) or `y:NAME` (one per output) in an `--input` `.npz` (`summarise_arrays`), or
the batches of labels `label_stream.Labelled.label_batches` reads from any `--data` source
(`summarise_batches`); both add up a batch at a time, so memory does not grow with the data.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from layergrad.model.target_fit import LabelSummary


def label_keys(names: Sequence[str], keys: Sequence[str]) -> dict[str, str]:
    """{output name: array key} for the label arrays among `keys` (`y`, or `y:NAME`)."""
    if len(names) == 1 and "y" in keys:
        return {names[0]: "y"}
    return {n: f"y:{n}" for n in names if f"y:{n}" in keys}


def summarise_arrays(
    arrays: Mapping[str, np.ndarray], names: Sequence[str], ranks: Mapping[str, int]
) -> dict[str, LabelSummary]:
    """Summaries of labels held in memory (the `--input` batch)."""
    return summarise_batches([arrays], names, ranks)


def summarise_batches(
    batches: Iterable[Mapping[str, np.ndarray]], names: Sequence[str], ranks: Mapping[str, int]
) -> dict[str, LabelSummary]:
    """Summaries of the labels of every batch (each keyed `y` or `y:NAME`), per output name."""
    out: dict[str, LabelSummary] = {}
    for batch in batches:
        for name, key in label_keys(names, list(batch)).items():
            out.setdefault(name, LabelSummary()).add(batch[key], ranks.get(name))
    return out


class ClassPrior:
    """The class frequencies of one output's labels, batch by batch, for the chance loss of a
    cross-entropy `loss`: class ids (sparse), 0/1 targets (binary) or one-hot rows."""

    def __init__(self, loss: str, units: int = 0) -> None:
        name = loss.lower().replace("_", "")
        self.kind = (
            "" if "crossentropy" not in name
            else "sparse" if "sparse" in name
            else "binary" if "binary" in name
            else "rows"
        )  # fmt: skip
        size = {"sparse": units, "binary": 2}.get(self.kind, 0)
        self.counts = np.zeros(size, np.float64)
        self.seen = 0
        self.bad = False  # labels with no single prior (negative ids, several binary outputs)

    def add(self, y: np.ndarray) -> None:
        """Take in one batch of labels."""
        y = np.asarray(y)
        if not self.kind or self.bad or not y.size:
            return
        if self.kind == "sparse":
            ids = y.astype(np.int64).reshape(-1)
            if ids.min() < 0:
                self.bad = True
                return
            found = np.bincount(ids, minlength=len(self.counts)).astype(np.float64)
            found[: len(self.counts)] += self.counts
            self.counts = found
        elif self.kind == "binary":
            if y.ndim > 1 and y.shape[-1] > 1:
                self.bad = True
                return
            self.counts += [float(np.sum(y)), float(y.size - np.sum(y))]
        else:
            rows = y.reshape(-1, y.shape[-1]).astype(np.float64)
            self.counts = rows.sum(axis=0) + (self.counts if len(self.counts) else 0)
        self.seen += int(y.shape[0]) if y.ndim else 1

    def entropy(self) -> float | None:
        """The cross-entropy of predicting the labels' own class frequencies (None: no prior
        or a prior of one class)."""
        if not self.kind or self.bad or not self.counts.sum():
            return None
        p = self.counts / self.counts.sum()
        p = p[p > 0]
        entropy = float(-(p * np.log(p)).sum())
        return entropy if entropy > 0 else None
