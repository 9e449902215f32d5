"""What a report over a data set (`--data`) adds: dead units, per-sample L2, the first
non-finite batch. Shared by the inspect and scan renderers."""

from __future__ import annotations

from rich.text import Text

from layergrad.core.results import DataStats
from layergrad.render.common import number

SHOWN_UNITS = 12


def percentile_text(value: float | None) -> str:
    """A percentile, or why there is none (a report merged from shards)."""
    return "n/a (shards do not combine)" if value is None else number(value)


def data_lines(data: DataStats | None, source: str, where: str) -> list[Text]:
    """Text lines for a result over a data set (nothing without one)."""
    if data is None:
        return []
    lines = []
    s = data.per_sample_l2
    if s is not None:
        lines.append(
            Text(
                f"{where}per-sample L2 over {s.count:,} samples: mean {number(s.mean)}, std "
                f"{number(s.std)}, min {number(s.min)}, p50 {percentile_text(s.p50)}, p95 "
                f"{percentile_text(s.p95)}, max {number(s.max)}"
            )
        )
    if data.dead_units:
        shown = ", ".join(map(str, data.dead_units[:SHOWN_UNITS]))
        more = ", ..." if len(data.dead_units) > SHOWN_UNITS else ""
        lines.append(
            Text(
                f"{where}{len(data.dead_units)} dead units of {source} (zero gradient for every "
                f"sample): {shown}{more}",
                style="yellow",
            )
        )
    if data.first_nonfinite_batch is not None:
        lines.append(Text(f"{where}first non-finite value in batch {data.first_nonfinite_batch}"))
    return lines
