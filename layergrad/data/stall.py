"""A watch on a data source that stops giving batches: no batch for `timeout` seconds and
`on_stall` is called (from a watching thread) with one line that says so.

A reader blocked inside the user's code (a `time.sleep`, a socket that never answers)
cannot be interrupted from Python; the command line's `on_stall` prints the line and ends
the process with exit code 2 (`--stall-timeout`). The API runs no watch unless asked.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator

DEFAULT_STALL_SECONDS = 600.0  # `--stall-timeout`: ten minutes without a batch


class StallWatch:
    """Call `on_stall(message)` once when `beat()` has not been called for `timeout` s."""

    def __init__(self, timeout: float, on_stall: Callable[[str], None], source: str) -> None:
        self.timeout, self.on_stall, self.source = float(timeout), on_stall, source
        self.batches = 0
        self._last = time.monotonic()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="layergrad-stall", daemon=True)

    def beat(self, batches: int = 1) -> None:
        """A batch arrived."""
        self.batches += batches
        self._last = time.monotonic()

    def _watch(self) -> None:
        tick = max(0.05, min(1.0, self.timeout / 10))
        while not self._done.wait(tick):
            idle = time.monotonic() - self._last
            if idle >= self.timeout:
                self.on_stall(
                    f"--data {self.source}: no batch for {idle:.0f} s after {self.batches:,} "
                    f"batches (--stall-timeout {self.timeout:g}); the source is stalled or "
                    "blocked; fix it, or raise --stall-timeout for a slow source"
                )
                return


@contextlib.contextmanager
def stall_watch(
    timeout: float | None, on_stall: Callable[[str], None] | None, source: str
) -> Iterator[StallWatch | None]:
    """A running `StallWatch` for the block, or None without a timeout (or 0) or handler."""
    if not timeout or on_stall is None:
        yield None
        return
    watch = StallWatch(timeout, on_stall, source)
    watch._thread.start()
    try:
        yield watch
    finally:
        watch._done.set()
