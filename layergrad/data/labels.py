"""The labels that come with the data, summarised: per output (`target_fit.LabelSummary`),
and as the class prior a classifier's chance loss is the entropy of (`ClassPrior`).

`y` (one output) or `y:NAME` (one per output) in an `--input` `.npz` (`summarise_arrays`), or
the batches of labels `label_stream.Labelled.label_batches` reads from any `--data` source
(`summarise_batches`); both add up a batch at a time, so memory does not grow with the data.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from layergrad.model.target_fit import MAX_CLASSES, LabelSummary


@dataclass(frozen=True)
class LabelRequest:
    """The labels a model takes: per output (in output order) its name, the kind of labels
    its loss reads (`engine.compiled_loss.label_kind`: ids, one_hot, bits, positive,
    normal), its loss's name and the units of its last axis (None: unknown)."""

    outputs: tuple[str, ...]
    kinds: tuple[str, ...] = ()
    losses: tuple[str, ...] = ()
    units: tuple[int | None, ...] = ()
    # a model whose outputs are a dict keyed apart from its layers: each output's key
    output_keys: tuple[str, ...] = ()

    def keys(self) -> tuple[str, ...]:
        """How the labels are keyed: `y` for one output, `y:NAME` for each of several."""
        return ("y",) if len(self.outputs) <= 1 else tuple(f"y:{n}" for n in self.outputs)


def label_keys(names: Sequence[str], keys: Sequence[str]) -> dict[str, str]:
    """{output name: array key} for the label arrays among `keys` (`y`, or `y:NAME`)."""
    if len(names) == 1 and "y" in keys:
        return {names[0]: "y"}
    return {n: f"y:{n}" for n in names if f"y:{n}" in keys}


def by_output_name(
    labels: Mapping[str, np.ndarray], names: Sequence[str], keys: Sequence[str] | None
) -> dict[str, np.ndarray]:
    """`labels` with each `y:KEY` of an output of a dict keyed apart from its layer (`keys`,
    the dict keys in output order) renamed `y:NAME` after the output's name, as the rest of
    layergrad reads them; a `y:NAME` given as well wins."""
    out = dict(labels)
    for name, key in zip(names, keys or (), strict=False):
        if f"y:{name}" not in out and f"y:{key}" in out:
            out[f"y:{name}"] = out.pop(f"y:{key}")
    return out


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
        self.units = units
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
            flat = y.reshape(-1)
            if y.dtype.kind not in "biuf" or not np.all(np.isfinite(flat)):
                self.bad = True
                return
            ids = flat.astype(np.int64)
            size = self.units or MAX_CLASSES
            if ids.min() < 0 or ids.max() >= size or np.any(ids != flat):
                self.bad = True  # (not class ids of this output: `target_fit` says so)
                return
            # counted within the units only: one huge id must not allocate its size
            found = np.bincount(ids, minlength=len(self.counts)).astype(np.float64)
            found[: len(self.counts)] += self.counts
            self.counts = found
        elif y.dtype.kind not in "biuf":
            self.bad = True
            return
        elif self.kind == "binary":
            if (y.ndim > 1 and y.shape[-1] > 1) or not np.all(np.isfinite(y)):
                self.bad = True
                return
            self.counts += [float(np.sum(y)), float(y.size - np.sum(y))]
        else:  # one-hot (or soft) rows, one per sample, as wide as the units
            width = len(self.counts) or self.units
            if y.ndim < 2 or (width and y.shape[-1] != width) or not np.all(np.isfinite(y)):
                self.bad = True  # (not rows of this output: `target_fit` says so)
                return
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


class TrivialLoss:
    """The loss of a model that ignores its inputs and predicts the labels' prior, batch by
    batch: the class frequencies' cross-entropy (`ClassPrior`), the targets' variance for
    squared error (predicting their mean), their mean absolute deviation from the median
    for absolute error (predicting the median; from the first `SAMPLE_VALUES` values)."""

    SAMPLE_VALUES = 1_000_000

    def __init__(self, loss: str, units: int = 0) -> None:
        key = loss.lower().replace("_", "").replace(" ", "")
        self.prior = ClassPrior(loss, units)
        self.kind = (
            "squared" if key in ("mse", "meansquarederror")
            else "absolute" if key in ("mae", "meanabsoluteerror")
            else ""
        )  # fmt: skip
        self.total: np.ndarray | None = None  # per column, float64
        self.squares: np.ndarray | None = None
        self.rows = 0
        self.kept: list[np.ndarray] = []
        self.kept_values = 0
        self.bad = False

    @property
    def known(self) -> bool:
        """Whether the loss has a trivial value here (a cross-entropy, mse or mae)."""
        return bool(self.prior.kind or self.kind)

    def add(self, y: np.ndarray) -> None:
        """Take in one batch of labels."""
        y = np.asarray(y)
        if self.prior.kind:
            self.prior.add(y)
            return
        if not self.kind or self.bad or not y.size:
            return
        if y.dtype.kind not in "biuf" or y.ndim == 0:
            self.bad = True
            return
        rows = y.reshape(len(y), -1).astype(np.float64)
        if not np.all(np.isfinite(rows)):
            self.bad = True
            return
        if self.total is not None and self.total.shape != rows.shape[1:]:
            self.bad = True
            return
        if self.kind == "squared":
            self.total = rows.sum(axis=0) + (0 if self.total is None else self.total)
            self.squares = (rows * rows).sum(axis=0) + (0 if self.squares is None else self.squares)
        elif self.kept_values < self.SAMPLE_VALUES:
            self.kept.append(rows)
            self.kept_values += rows.size
            self.total = np.zeros(rows.shape[1:])
        self.rows += len(rows)

    def value(self) -> float | None:
        """The trivial loss (None: unknown, or 0: the labels never vary)."""
        if self.prior.kind:
            return self.prior.entropy()
        if self.bad or not self.rows:
            return None
        if self.kind == "squared" and self.total is not None and self.squares is not None:
            mean = self.total / self.rows
            variance = np.maximum(self.squares / self.rows - mean * mean, 0.0)
            found = float(np.mean(variance))
        elif self.kept:
            held = np.concatenate(self.kept)
            found = float(np.mean(np.abs(held - np.median(held, axis=0))))
        else:
            return None
        return found if found > 0 else None
