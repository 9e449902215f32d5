"""Progress bars on stderr: for runs over a data set (samples, samples per second and time
left), and for `check` over several files.

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
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Task

    from layergrad.core.probe_options import ProbeOptions

Progress = Callable[[int, "int | None"], None]
T = TypeVar("T")
TRACING = "tracing the step"  # what the bar says before the first batch is done


def data_progress(
    probe: ProbeOptions, quiet: bool
) -> contextlib.AbstractContextManager[Progress | None]:
    """`sample_progress` for a run with `--data` and without `--quiet`."""
    return sample_progress(probe.data_set is not None and not quiet)


@contextlib.contextmanager
def sample_progress(enabled: bool, console: Console | None = None) -> Iterator[Progress | None]:
    """Yield an `on_progress` callback drawing a bar (removed when the block ends), or None
    when not `enabled` or when stderr is not a terminal."""
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


def file_progress(paths: list[str], run: Callable[[Callable[[str], None] | None], T]) -> T:
    """Run with a progress bar on stderr when there are several files."""
    if len(paths) < 2:
        return run(None)
    from rich.console import Console
    from rich.markup import escape
    from rich.progress import Progress as Bar

    from layergrad.render.escape import visible

    with Bar(console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task("checking", total=len(paths))
        started = 0

        def on_file(path: str) -> None:
            nonlocal started
            shown = escape(visible(path))  # a file name is data, not rich markup
            progress.update(task, completed=started, description=f"checking {shown}")
            started += 1

        result = run(on_file)
        progress.update(task, completed=len(paths))
    return result
