"""The command line: parse options, call one command function, render, choose the exit code.

May import commands (lazily, inside command bodies) and render; no logic of its own."""

from layergrad.cli.app import main

__all__ = ["main", "run"]


def run() -> None:
    """The console script: stop cleanly on SIGINT / SIGTERM (`running.install`), then run."""
    from layergrad.cli import running

    running.install()
    main(prog_name="layergrad")
