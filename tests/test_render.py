"""Renderers: every command renders every format; tables never cut names or numbers; names read
from a model file never become markup."""

from __future__ import annotations

import pytest
from conftest import keras

from layergrad.api import inspect_model, scan_model
from layergrad.check import check_files
from layergrad.listing import list_layers
from layergrad.render import REPORTS, render
from layergrad.vocab import OutputFormat

LONG = "block_16_expand_relu_with_a_name_longer_than_any_column"


@pytest.fixture(scope="module")
def long_names(tmp_path_factory):
    """x -> Dense LONG -> Dense LONG + '_out'; names longer than a 100-column table allows."""
    x = keras.Input((3,), name="x")
    h = keras.layers.Dense(4, name=LONG)(x)
    out = keras.layers.Dense(2, name=LONG + "_out")(h)
    path = tmp_path_factory.mktemp("long") / "long.keras"
    keras.Model(x, out, name="long").save(path)
    return str(path)


@pytest.fixture(scope="module")
def reports(long_names):
    return {
        "inspect": inspect_model(long_names, LONG, [LONG + "_out"]),
        "scan": scan_model(long_names),
        "check": check_files([long_names]),
        "layers": list_layers(long_names),
    }


@pytest.mark.parametrize("command", [r for r in REPORTS if r != "weights"])
@pytest.mark.parametrize("fmt", list(OutputFormat))
def test_every_command_renders_every_format(reports, command, fmt, long_names):
    text = render(command, fmt, reports[command], width=None)
    assert (long_names if command == "check" else LONG) in text


@pytest.mark.parametrize("command", ["inspect", "scan", "layers", "check"])
@pytest.mark.parametrize("width", [50, 80, 100])
def test_tables_never_cut_anything(reports, command, width):
    text = render(command, OutputFormat.TABLE, reports[command], width=width)
    assert "…" not in text and "..." not in text
    assert max(len(line.rstrip()) for line in text.splitlines()) <= width


@pytest.mark.parametrize(
    ("command", "width"),
    [("scan", 80), ("scan", 100), ("layers", 100), ("inspect", 140), ("inspect", None)],
)
def test_names_stay_whole_when_dropping_columns_makes_room(reports, command, width):
    text = render(command, OutputFormat.TABLE, reports[command], width=width)
    assert any(LONG in line for line in text.splitlines())


def test_piped_output_keeps_every_column(reports):
    text = render("scan", OutputFormat.TABLE, reports["scan"], width=None)
    header = next(ln for ln in text.splitlines() if "status" in ln)
    for column in ("layer", "class", "shape", "L2", "mean |g|", "zeros", "log10 mean |g|", "flags"):
        assert column in header
    assert any(LONG in line for line in text.splitlines())  # one line: nothing wrapped


def test_narrow_tables_drop_columns_before_wrapping_names(reports):
    text = render("scan", OutputFormat.TABLE, reports["scan"], width=len(LONG) + 40)
    assert any(LONG in line for line in text.splitlines())  # the name stayed on one line
    header = next(ln for ln in text.splitlines() if "status" in ln)
    assert "mean |g|" in header and "L2" not in header


def test_markdown_escapes_names_read_from_the_file():
    from layergrad.render.common import md_code, md_text

    assert md_text("<img src=x onerror=alert(1)>") == "\\<img src=x onerror=alert(1)\\>"
    assert md_text("**bold** [link](x)") == "\\*\\*bold\\*\\* \\[link\\](x)"
    assert md_code("a`b") == "``a`b``"
