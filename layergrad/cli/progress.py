"""A progress bar for runs over a data set: samples, samples per second and time left.

Drawn on stderr, and only when stderr is a terminal: piped or redirected output stays clean,
and the report on stdout is unaffected. The API reports progress through a callback
`on_progress(done, total)`, first with `done=0` before the step is traced (the total is known
then for a `.npy`, `.npz` or image folder); this module turns that into a rich progress bar
that names the tracing phase and shows the total from the start.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Task

Progress = Callable[[int, "int | None"], None]
TRACING = "tracing the step"  # what the bar says before the first batch is done


@contextlib.contextmanager
def sample_progress(enabled: bool, console: Console | None = None) -> Iterator[Progress | None]:
    """Yield an `on_progress` callback drawing a bar, or None when not `enabled` or when
    stderr is not a terminal. The bar is removed when the block ends.

    Example (not run)::

        with sample_progress(True) as on_progress:
            report = inspect_model(..., data="x.npy", on_progress=on_progress)
    """
    if not enabled or (console is None and not sys.stderr.isatty()):
        yield None
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        ProgressColumn,
        TextColumn,
        TimeRemainingColumn,
    )
    from rich.progress import Progress as Bar
    from rich.text import Text

    class Rate(ProgressColumn):
        def render(self, task: Task) -> Text:
            return Text(f"{task.speed:,.0f} samples/s" if task.speed else "", style="cyan")

    bar = Bar(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        Rate(),
        TimeRemainingColumn(),
        console=console or Console(stderr=True),
        transient=True,
    )
    with bar:
        task = bar.add_task(TRACING, total=None)

        def update(done: int, total: int | None) -> None:
            # nothing done yet: the step is being traced (most of a short run's time)
            phase = TRACING if done == 0 else "samples"
            bar.update(task, completed=done, total=total, description=phase)

        yield update
