"""Renderers: every command renders every format; tables never cut names or numbers; names read
from a model file never become markup."""

from __future__ import annotations

import pytest
from helpers import keras

from layergrad.commands.api import inspect_model, scan_model, scan_weights_model
from layergrad.commands.check.check_files import check_files
from layergrad.core.vocab import OutputFormat, Status
from layergrad.files.layer_listing import list_layers
from layergrad.render import REPORTS, render

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
def long_names_changed(long_names, tmp_path_factory):
    """The same model with the last kernel times 1e-3: every row before it changes."""
    model = keras.saving.load_model(long_names)
    out = model.get_layer(LONG + "_out")
    kernel, bias = out.get_weights()
    out.set_weights([kernel * 1e-3, bias])
    path = tmp_path_factory.mktemp("long") / "long_changed.keras"
    model.save(path)
    return str(path)


@pytest.fixture(scope="module")
def reports(long_names, long_names_changed, tmp_path_factory):
    from layergrad.commands.diff import diff_models

    return {
        "diff": diff_models(long_names, long_names_changed),
        "inspect": inspect_model(long_names, LONG, [LONG + "_out"]),
        "scan": scan_model(long_names),
        "check": check_files([long_names]),
        "layers": list_layers(long_names),
        "weights": scan_weights_model(long_names, loss="mse"),
        "fit": _fit_report(long_names),
        "fix": _fix_report(tmp_path_factory),
    }


def _fix_report(tmp_path_factory):
    """A one-unit softmax head (always 1.0) under binary cross-entropy, repaired."""
    from layergrad import FixOptions, fix_model

    folder = tmp_path_factory.mktemp("fix")
    x = keras.Input((3,), name="x")
    h = keras.layers.Dense(4, activation="relu", name=LONG)(x)
    out = keras.layers.Dense(1, activation="softmax", name=LONG + "_out")(h)
    model = keras.Model(x, out, name="long")
    model.compile(optimizer="adam", loss="binary_crossentropy")
    model.save(folder / "long.keras")
    options = FixOptions(output=str(folder / "long.fixed.keras"))
    return fix_model(folder / "long.keras", options=options)


def _fit_report(path):
    import numpy as np

    from layergrad import GradientMonitor

    model = keras.saving.load_model(path)
    model.compile(optimizer="sgd", loss="mse")
    monitor = GradientMonitor(every=1)
    x = np.ones((8, 3), "float32")
    model.fit(x, np.zeros((8, 2)), batch_size=4, epochs=1, verbose=0, callbacks=[monitor])
    return monitor.report


@pytest.mark.parametrize("command", REPORTS)
@pytest.mark.parametrize("fmt", list(OutputFormat))
def test_every_command_renders_every_format(reports, command, fmt, long_names):
    text = render(command, fmt, reports[command], width=None)
    assert (long_names if command == "check" else LONG) in text


@pytest.mark.parametrize("command", ["inspect", "scan", "layers", "check", "diff"])
@pytest.mark.parametrize("width", [50, 80, 100])
def test_tables_never_cut_anything(reports, command, width, long_names):
    text = render(command, OutputFormat.TABLE, reports[command], width=width)
    assert "…" not in text and "..." not in text
    wide = [line for line in text.splitlines() if len(line.rstrip()) > width]
    if command == "check":  # a file name is never broken: the page widens to the table's width
        assert any(long_names in line for line in text.splitlines())
        table = max(len(line.rstrip()) for line in text.splitlines() if "━━━" in line)
        assert all(len(line.rstrip()) <= table for line in wide), wide
    else:
        assert not wide


@pytest.mark.parametrize(
    ("command", "width"),
    [
        ("scan", 80),
        ("scan", 100),
        ("layers", 100),
        ("inspect", 140),
        ("inspect", None),
        ("diff", 100),
    ],
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


MARKUP = ("[bold red]loud[/bold red]", "a[/b]", "[link=http://x]y[/link]")


def test_names_that_look_like_rich_markup_print_as_they_are():
    from layergrad.core.results import (
        Endpoint,
        GradientStats,
        InspectReport,
        ModelMeta,
        ProbeMeta,
        Result,
        ScanReport,
        ScanRow,
    )  # fmt: skip

    meta, probe = (
        ModelMeta("[i]m[/i].keras", "keras", "Functional", "[b]m"),
        ProbeMeta("random", 0, 8, False, "sum"),
    )
    stats = GradientStats((8, 2), 1.0, 0.5, 0.9, 0.0, 0, ((0, 0.5), (1, 0.25)))
    rows = tuple(ScanRow(n, "[u]Dense", (8, 2), "float32", Status.OK, stats) for n in MARKUP)
    scan_text = render("scan", OutputFormat.TABLE, ScanReport(meta, probe, None, rows), width=None)
    result = Result(Endpoint(MARKUP[0], (8, 2), "float32"), Endpoint(MARKUP[1], (8, 2), "float32"),
                    Status.OK, stats)  # fmt: skip
    inspect_text = render(
        "inspect", OutputFormat.TABLE, InspectReport(meta, probe, (result,)), width=None
    )
    for text in (scan_text, inspect_text):
        assert "[i]m[/i].keras" in text
    for name in MARKUP:
        assert name in scan_text
    assert MARKUP[0] in inspect_text and f"→ {MARKUP[1]}" in inspect_text


def test_a_scan_says_its_target_even_when_the_name_is_empty(reports):
    """A report read back from JSON may name an empty target: that is a target, not the
    projection of the outputs, which only a missing target (None) means."""
    from dataclasses import replace

    scan = reports["scan"]
    assert scan.target is None
    assert "d sum(outputs · R) / d each layer" in render("scan", OutputFormat.MARKDOWN, scan)
    assert "d sum() / d each layer" in render(
        "scan", OutputFormat.MARKDOWN, replace(scan, target="")
    )
