"""Write a monitored run's record to the file `GradientMonitor(report=...)` names."""

from __future__ import annotations

import os

from layergrad.core.fit_results import FitReport


def write_report(report: FitReport, path: str | os.PathLike[str]) -> None:
    """`.json`: the `layergrad.fit/1` object; `.html`: the self-contained page."""
    from layergrad.render import fit

    text = os.fspath(path)
    body = fit.as_json(report) + "\n" if text.lower().endswith(".json") else fit.html(report)
    folder = os.path.dirname(text)
    if folder:
        os.makedirs(folder, exist_ok=True)
    with open(text, "w", encoding="utf-8") as handle:
        handle.write(body)
