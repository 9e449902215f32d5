"""Stopping on SIGINT (Ctrl-C) and SIGTERM (how schedulers cancel a job), at any point.

The console script installs this before a command runs (`run`). Each signal raises
`Stopped` (a `KeyboardInterrupt`) in the main thread, which `running.handle_errors` turns
into one `error:` line and exit code 128 + the signal's number (130 for SIGINT, 143 for
SIGTERM): never 0 (a pass) nor 1 (findings). When the main thread is blocked inside
TensorFlow and cannot raise (waiting for a worker that never comes), a watching thread,
woken by the signal itself, ends the process the same way after GRACE_SECONDS.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import sys
import threading
from types import FrameType

GRACE_SECONDS = 5.0
SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Stopped(KeyboardInterrupt):
    """The run was stopped by a signal (`signum`)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def _raise(signum: int, frame: FrameType | None) -> None:
    raise Stopped(signum)


def install() -> None:
    """Raise `Stopped` on SIGINT and SIGTERM, with the watching thread; main thread only."""
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in SIGNALS:
        signal.signal(signum, _raise)
    reader, writer = socket.socketpair()
    writer.setblocking(False)
    with contextlib.suppress(ValueError):
        signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
        threading.Thread(target=_watch, args=(reader, writer), daemon=True).start()


def _watch(reader: socket.socket, writer: socket.socket) -> None:
    """Woken by a signal's byte; end the process if the main thread has not by GRACE."""
    while True:
        try:
            data = reader.recv(16)
        except OSError:
            return
        numbers = [b for b in data if b in SIGNALS]
        if not numbers:
            continue
        stopped = threading.Event()
        if not stopped.wait(GRACE_SECONDS):
            name = signal.Signals(numbers[0]).name
            sys.stderr.write(f"error: stopped by {name}; nothing was written\n")
            sys.stderr.flush()
            import posix

            posix._exit(128 + numbers[0])  # not os._exit: user code's guard may hold it
