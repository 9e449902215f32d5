"""The files `GradientMonitor(report=..., log_dir=...)` writes, under the CLI's output rules.

Both are checked when the callback is made and again at `on_train_begin`, before any step,
by the rules of `files/outputs.py`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from layergrad.core.errors import OutputError
from layergrad.core.fit_results import FitReport

REPORT_SUFFIXES = (".json", ".html")


def check_report_path(path: str | os.PathLike[str], option: str = "report") -> str:
    """The report's path, refused where writing it could destroy a file (`OutputError`), or
    named neither `.json` nor `.html` (`ValueError`)."""
    from layergrad.files.outputs import check_target

    text = os.fspath(path)
    if not text.lower().endswith(REPORT_SUFFIXES):
        raise ValueError(f"{option} must end in .json or .html: {option}={text!r}")
    check_target(text, option, "fit")
    return text


def check_log_dir(
    path: str | os.PathLike[str],
    option: str = "log_dir",
    inputs: Iterable[str | os.PathLike[str] | None] = (),
) -> str:
    """The TensorBoard folder, refused (`OutputError`) when it is not a writable folder (or
    is one of `inputs`, or inside one) or TensorBoard, which writes it, is not installed."""
    from layergrad.files.audit import installed
    from layergrad.files.outputs import check_target

    text = os.fspath(path)
    check_target(text, option, "folder", inputs)
    if not installed("tensorboard"):
        raise OutputError(
            f"{option} writes TensorBoard summaries, and the tensorboard package is not "
            "installed; install it with: pip install tensorboard"
        )
    return text


def write_report(report: FitReport, path: str | os.PathLike[str], option: str = "report") -> None:
    """`.json`: the `layergrad.fit/1` object; `.html`: the self-contained page. Checked again,
    then written atomically (`outputs.write_file`)."""
    from layergrad.files.outputs import write_file
    from layergrad.render import as_json, fit

    text = os.fspath(path)
    body = as_json(report) + "\n" if text.lower().endswith(".json") else fit.html(report)
    write_file(text, option, "fit", body.encode("utf-8"))
