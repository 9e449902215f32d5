"""What the labels of one output hold (range, width, integers, one-hot rows, classes),
accumulated batch by batch over a data set: the facts the label rules (`target_fit`), the head
rules and `fix` read. NumPy only, no TensorFlow."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

MAX_CLASSES = 1024  # distinct integer values remembered; more is a regression target


@dataclass
class LabelSummary:
    """What the labels of one output hold: range, width, integers, one-hot rows, classes."""

    count: int = 0
    low: float = np.inf
    high: float = -np.inf
    width: int = 1  # the last axis of one sample's label (1 for a scalar label)
    integers: bool = True  # every value is a whole number
    one_hot: bool = True  # every row is 0/1 with exactly one 1 (and width > 1)
    finite: bool = True
    values: set[float] = field(default_factory=set)  # distinct values, up to MAX_CLASSES + 1
    nonfinite: int = 0  # NaN/Inf label values
    text: str = ""  # the dtype of labels that are not numbers (strings, objects)
    shape: tuple[int, ...] = ()  # one sample's label shape (the last batch's)
    output_rank: int | None = None  # the output's rank without the batch axis, when known

    def add(self, labels: np.ndarray, output_rank: int | None = None) -> None:
        """Take in one batch of labels (batch axis first)."""
        y = np.asarray(labels)
        self.output_rank = output_rank if output_rank is not None else self.output_rank
        if y.size and y.dtype.kind not in "biuf":
            self.text = self.text or str(y.dtype)
            self.count += int(y.shape[0]) if y.ndim else 1
            return
        if y.size == 0:
            return
        y = y.astype(np.float64)
        sample = y.shape[1:]
        self.shape = tuple(int(d) for d in sample)
        rank = output_rank if output_rank is not None else len(sample)
        self.width = int(sample[-1]) if sample and len(sample) >= rank and rank else 1
        finite = y[np.isfinite(y)]
        self.finite &= finite.size == y.size
        self.nonfinite += int(y.size - finite.size)
        self.count += int(y.shape[0])
        if not finite.size:
            return
        self.low = min(self.low, float(finite.min()))
        self.high = max(self.high, float(finite.max()))
        self.integers &= bool(np.all(finite == np.round(finite)))
        rows = y.reshape(-1, self.width) if self.width > 1 else None
        self.one_hot &= bool(
            rows is not None and np.all((rows == 0) | (rows == 1)) and np.all(rows.sum(axis=1) == 1)
        )
        if len(self.values) <= MAX_CLASSES:
            self.values.update(np.unique(finite)[: MAX_CLASSES + 1].tolist())

    @property
    def classes(self) -> int | None:
        """Distinct class ids of integer labels (the width of one-hot rows); None otherwise."""
        if self.one_hot:
            return self.width
        if self.integers and len(self.values) <= MAX_CLASSES:
            return len(self.values)
        return None

    def describe(self) -> str:
        """What the labels hold, in words."""
        if not self.count:
            return "no labels"
        if self.text:
            return f"not numbers (dtype {self.text})"
        if self.one_hot:
            return f"one-hot rows of width {self.width}"
        span = f"{self.low:g} to {self.high:g}"  # 0.5, 1e+06, inf
        if self.integers and self.classes is not None and self.width == 1:
            return f"integer class ids {span} ({self.classes} distinct)"
        kind = "integer" if self.integers else "real"
        width = f", width {self.width}" if self.width > 1 else ""
        bad = f", {self.nonfinite:,} NaN/Inf" if self.nonfinite else ""
        return f"{kind} values {span}{width}{bad}"
