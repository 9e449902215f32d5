"""Shared helper for the benchmark scripts: time one command as a fresh process."""

from __future__ import annotations

import subprocess
import time


def timed(cmd: list[str]) -> float:
    """Wall-clock seconds of one run of `cmd`, its output discarded."""
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start
