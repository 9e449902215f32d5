"""Running a command: its errors as one line and exit code 2, exit code 1 when it returns that
it failed, stdout holding only the report, and printing the report (or its chart).

Stopping on SIGINT (Ctrl-C) and SIGTERM (how schedulers cancel a job), at any point: the
console script installs the handlers (`install`) before a command runs. Each signal raises
`Stopped` (a `KeyboardInterrupt`) in the main thread, which `handle_errors` turns into one
`error:` line and exit code 128 + the signal's number (130 for SIGINT, 143 for SIGTERM): never
0 (a pass) nor 1 (findings). When the main thread is blocked inside TensorFlow and cannot raise
(waiting for a worker that never comes), a watching thread, woken by the signal itself, ends
the process the same way after GRACE_SECONDS.

Nothing here imports TensorFlow (or numpy) at import time, so `layergrad --help` is instant.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import socket
import sys
import threading
import traceback
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from types import FrameType
from typing import TYPE_CHECKING, NoReturn, TextIO

import click

from layergrad.core.errors import LayergradError, describe, one_line
from layergrad.core.vocab import OutputFormat

if TYPE_CHECKING:
    from layergrad.core.probe_options import ProbeOptions
    from layergrad.core.results import InspectReport, ScanReport, WeightScanReport


class OneLineErrors(click.Group):
    """The `layergrad` group: click's own errors (an unknown option or command, a missing
    argument, a bad value) as one `error:` line naming the help to read, exit code 2, as
    every other error of a command; click prints them as usage, hint and error otherwise."""

    def main(  # type: ignore[override]  # (click types it by overloads on standalone_mode)
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: object,
    ) -> object:
        if not standalone_mode:  # a caller that handles click's exceptions itself
            return super().main(args, prog_name, complete_var, False, **extra)
        try:
            code = super().main(args, prog_name, complete_var, False, **extra)
        except click.exceptions.NoArgsIsHelpError as exc:  # `layergrad` alone: its help
            exc.show()
            sys.exit(exc.exit_code)
        except click.UsageError as exc:
            path = exc.ctx.command_path if exc.ctx is not None else self.name
            line = _line("error", exc.format_message().removesuffix("."))
            click.echo(f"{line} (see '{path} --help')", err=True)
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            click.echo(_line("error", exc.format_message()), err=True)
            sys.exit(exc.exit_code)
        except click.Abort:
            click.echo("Aborted!", err=True)
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)  # (--help and --version: 0)


def handle_errors(func: Callable[..., bool | None]) -> Callable[..., None]:
    """Run a command: exit code 1 when it returns True (a result matched --fail-on, a file
    failed), its errors as one line on stderr and exit code 2 (a traceback with `debug`, the
    `--debug` flag, which the command does not receive)."""

    @functools.wraps(func)
    def wrapper(*args: object, **kwargs: object) -> None:
        debug = bool(kwargs.pop("debug", False))
        try:
            with warnings.catch_warnings(), report_stdout():
                if not debug:
                    warnings.simplefilter("ignore")
                failed = func(*args, **kwargs)
        except click.ClickException:
            raise
        except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM: not a finding (1), not a pass
            code = int(getattr(exc, "exit_code", INTERRUPTED))
            click.echo(_stopped(code), err=True)
            sys.exit(code)
        except LayergradError as exc:
            usage_error(str(exc), debug)
        except Exception as exc:  # an unexpected failure still gets one readable line
            usage_error(describe(exc), debug, kind=f"error: unexpected {type(exc).__name__}",
                        then=" (run again with --debug for the traceback)")  # fmt: skip
        if failed:
            sys.exit(1)

    wrapper.report_stdout = True  # type: ignore[attr-defined]  # tests find it on every command
    return wrapper


INTERRUPTED = 130  # the exit code of a run stopped by Ctrl-C (SIGINT), as shells use


def _stopped(code: int) -> str:
    """The one line of a run stopped by the signal of exit code `code` (128 + its number)."""
    try:
        name = signal.Signals(code - 128).name
    except ValueError:
        name = "an interrupt"
    return f"error: stopped by {name}; nothing was written"


GRACE_SECONDS = 5.0
SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Stopped(KeyboardInterrupt):
    """The run was stopped by a signal: its `exit_code` is 128 + the signal's number."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.exit_code = 128 + signum


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
        if numbers and not threading.Event().wait(GRACE_SECONDS):
            hard_exit(128 + numbers[0], _stopped(128 + numbers[0]))


def note(message: str) -> None:
    """What a command says while it works: one `note:` line on stderr."""
    click.echo(_line("note", message), err=True)


def _line(kind: str, message: str) -> str:
    """`kind: message` on one line, every name in it shown as on stdout (`escape.visible`)."""
    from layergrad.render.escape import visible

    return f"{kind}: {one_line(visible(message))}"


def said(message: str) -> None:
    """What a command did (a file written), one line on stderr, with every name in it shown
    as on stdout: a file or layer name holding escape sequences cannot set the window title,
    clear the screen or forge a line (`escape.visible`)."""
    from layergrad.render.escape import visible

    click.echo(visible(message), err=True)


def abort_now(message: str) -> NoReturn:
    """End the process at once with one `error:` line and exit code 2, from any thread
    (a stalled data source blocks the main thread in code that cannot be interrupted)."""
    hard_exit(2, _line("error", message))


def hard_exit(code: int, line: str) -> NoReturn:
    """End the process now, after `line` on stderr: the operating system's `_exit`, which a
    data function's guard (`data/user_code.py` turns `os._exit` into an exception while user
    code runs) cannot catch."""
    import posix

    sys.stderr.write(line + "\n")
    sys.stderr.flush()
    posix._exit(code)


_REPORT_STREAMS: list[TextIO] = []  # where `emit` writes: the real stdout of each command


@contextlib.contextmanager
def report_stdout() -> Iterator[None]:
    """While a command runs, send whatever anything prints to stdout to stderr instead.

    Keras (`Found 40 files.`), TensorFlow and a user's data function print while the tool
    works; stdout must hold exactly one report. `sys.stdout` points at stderr for the duration,
    and so does file descriptor 1 when stdout is a real file (C code writes to it directly);
    `emit` writes the report to the real stdout, kept aside.
    """
    real = sys.stdout
    try:
        descriptor = real.fileno()
    except (AttributeError, OSError, ValueError):  # click's test runner: an in-memory stream
        descriptor = -1
    kept = -1
    report: TextIO = real
    if descriptor == 1:
        real.flush()
        kept = os.dup(1)
        os.dup2(2, 1)
        report = open(  # noqa: SIM115  (closed below, after the command)
            kept, "w", encoding=real.encoding, errors=real.errors, closefd=False
        )
    _REPORT_STREAMS.append(report)
    sys.stdout = sys.stderr
    try:
        yield
    finally:
        sys.stdout = real
        _REPORT_STREAMS.pop()
        if kept >= 0:
            report.close()
            real.flush()
            os.dup2(kept, 1)
            os.close(kept)


def usage_error(
    message: str, debug: bool = False, *, kind: str = "error", then: str = ""
) -> NoReturn:
    """One line on stderr, `kind: message` then `then` (a traceback too with --debug), exit
    code 2."""
    if debug:
        traceback.print_exc()
    click.echo(_line(kind, message) + then, err=True)
    sys.exit(2)


def protected_reads(
    model: str, probe: ProbeOptions, imports: Sequence[str], plot_file: str | None, force: bool
) -> list[str]:
    """The files the run reads, which no output may replace; `--plot FILE` checked against
    them before any work."""
    from layergrad.files import outputs
    from layergrad.render import chart_files

    data = outputs.data_inputs(probe.data_path)
    reads = outputs.protected_inputs(model, probe.input_file, imports, data)
    if plot_file:
        chart_files.check_plot_path(plot_file, reads, force=force)
    return reads


def write_plot(
    report: InspectReport | ScanReport | WeightScanReport,
    path: str,
    protected: Sequence[str | os.PathLike[str] | None] = (),
    force: bool = False,
) -> None:
    """Save the report's chart (never over a `protected` file) and say so on stderr."""
    from layergrad.render import chart_files, plot

    written = chart_files.save_figure(plot.report_figure(report), path, protected, force=force)
    kind = "unit-sensitivity" if hasattr(report, "results") else "gradient-flow"
    said(f"wrote {kind} chart to {path} ({written})")


def emit(
    command: str, fmt: OutputFormat, value: object, accepted: Iterable[str] = (), **options: object
) -> None:
    """Print a report on stdout in the chosen format; the audit findings accepted with
    --unsafe go to stderr first. `options` go to the renderer (`show_all` for `diff`)."""
    from layergrad.render import render
    from layergrad.render.escape import visible

    for line in accepted:
        click.echo(f"warning: {visible(line)}; accepted because of --unsafe", err=True)
    stream = _REPORT_STREAMS[-1] if _REPORT_STREAMS else sys.stdout  # the real stdout
    color, width = _terminal(stream)
    text = render(command, fmt, value, color=color, width=width, **options)
    click.echo(text, file=stream, nl=fmt == OutputFormat.JSON)
    stream.flush()


def _terminal(stream: TextIO) -> tuple[bool, int | None]:
    """(use colour, width) for stdout; width None (as wide as needed) when it is not a terminal."""
    columns = os.environ.get("COLUMNS", "")
    width = int(columns) if columns.isdigit() else None
    if not stream.isatty():
        return False, width
    if width is None:
        try:
            width = os.get_terminal_size(stream.fileno()).columns
        except (AttributeError, OSError, ValueError):
            width = shutil.get_terminal_size((100, 24)).columns
    return "NO_COLOR" not in os.environ, width
