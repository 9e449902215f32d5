"""stdout carries exactly one report: what libraries and data functions print goes to stderr."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner
from helpers import normal, sample

from layergrad.cli.app import main

# A data function that talks, from Python and from C (a write to file descriptor 1, as
# TensorFlow's and other native libraries' prints do).
CHATTY = """
import os
import numpy as np

HERE = __file__.rsplit("/", 1)[0]


def batches():
    print("Found 20 files.")
    os.write(1, b"a C library says hello\\n")
    x = np.load(HERE + "/x.npy")
    return [x[i : i + 8] for i in range(0, len(x), 8)]
"""


@pytest.fixture
def chatty(tmp_path):
    np.save(tmp_path / "x.npy", normal(20, 5, seed=3))
    (tmp_path / "chatty.py").write_text(CHATTY)
    return f"{tmp_path / 'chatty.py'}:batches"


def strict_json(text: str):
    def refuse(name: str):
        raise ValueError(f"{name} is not JSON")

    return json.loads(text, parse_constant=refuse)


INSPECT = ["inspect", sample("seed.keras"), "--from", "dense", "--to", "dense_1"]


def test_json_report_parses_although_the_data_function_prints(chatty):
    out = CliRunner().invoke(main, [*INSPECT, "--data", chatty, "--json"])
    assert out.exit_code == 0, out.output
    doc = strict_json(out.stdout)
    assert doc["schema"] == "layergrad.inspect/1" and doc["probe"]["samples"] == 20
    assert "Found 20 files." in out.stderr


def test_html_report_starts_with_its_doctype_although_the_data_function_prints(chatty):
    out = CliRunner().invoke(main, [*INSPECT, "--data", chatty, "--format", "html"])
    assert out.exit_code == 0, out.output
    assert out.stdout.startswith("<!DOCTYPE html>")
    assert "Found 20 files." in out.stderr


def test_c_level_prints_go_to_stderr_in_a_real_process(chatty):
    out = subprocess.run(
        [sys.executable, "-m", "layergrad", *INSPECT, "--data", chatty, "--json", "--quiet"],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    doc = strict_json(out.stdout)
    assert doc["results"][0]["to"]["layer"] == "dense_1"
    assert "Found 20 files." in out.stderr and "a C library says hello" in out.stderr


@pytest.mark.parametrize("name", sorted(main.commands))
def test_every_command_runs_inside_the_stdout_redirect(name):
    """The redirect lives in `handle_errors`: every command must be wrapped by it."""
    func, layers = main.commands[name].callback, 0
    while func is not None and not getattr(func, "report_stdout", False) and layers < 20:
        func, layers = getattr(func, "__wrapped__", None), layers + 1
    assert func is not None and func.report_stdout, f"{name} does not use handle_errors"
