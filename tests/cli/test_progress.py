"""Progress over --data: the total from the file's header from the start, and the tracing
phase named while nothing is done yet."""

from __future__ import annotations

import io

import numpy as np
from helpers import normal, sample
from rich.console import Console

from layergrad.cli.progress import sample_progress
from layergrad.commands.api import inspect_model, scan_model


def test_the_total_is_known_before_the_step_is_traced(tmp_path):
    np.save(tmp_path / "x.npy", normal(20, 5))
    runs = {
        "inspect": lambda on: inspect_model(
            sample("seed.keras"), "dense", ["dense_1"], on_progress=on, data=tmp_path / "x.npy",
            batch_size=8,
        ),
        "scan": lambda on: scan_model(
            sample("seed.keras"), on_progress=on, data=tmp_path / "x.npy", batch_size=8
        ),
    }  # fmt: skip
    for name, run in runs.items():
        calls: list[tuple[int, int | None]] = []
        run(lambda done, total, got=calls: got.append((done, total)))
        assert calls == [(0, 20), (8, 20), (16, 20), (20, 20)], name  # 20 rows, batches of 8


def last_frame(*updates: tuple[int, int | None]) -> str:
    """What the bar shows after `updates` (its last frame)."""
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, width=100, color_system=None)
    with sample_progress(True, console=console) as update:
        assert update is not None
        for done, total in updates:
            update(done, total)
    frames = [f for f in buffer.getvalue().split("\r") if "/" in f]
    return frames[-1]


def test_the_bar_names_the_tracing_phase_and_shows_the_total():
    shown = last_frame((0, 20000))
    assert "tracing the step" in shown and "0/20000" in shown
    later = last_frame((0, 20000), (640, 20000))
    assert "samples" in later and "tracing" not in later and "640/20000" in later
