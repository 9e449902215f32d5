"""The public API: what `import layergrad` offers, without importing TensorFlow."""

from __future__ import annotations

import subprocess
import sys

import layergrad

PUBLIC = {
    "inspect_model", "scan_model", "scan_weights", "check_files", "diff_models", "ProbeOptions",
    "LayergradError", "LoadError", "UnsafeModelError", "LayerNotFound", "InputError",
    "OutputError", "UsageError",
    "Status", "Flag", "Finding", "CauseCode", "Change", "Wrt", "OutputFormat", "Measure",
    "JacobianMethod", "GradientMonitor", "fix_model", "FixOptions",
}  # fmt: skip


def test_the_public_names_are_pinned():
    assert set(layergrad.__all__) - {"__version__"} == PUBLIC
    for name in PUBLIC:
        assert getattr(layergrad, name) is not None, name


def test_importing_the_api_does_not_import_tensorflow():
    code = (
        "import sys\nfrom layergrad import inspect_model, scan_model, ProbeOptions, Status\n"
        "from layergrad import fix_model, FixOptions\n"
        "import layergrad.cli\n"
        "print(sorted(m for m in ('tensorflow', 'keras') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_an_unknown_name_is_an_attribute_error():
    try:
        layergrad.no_such_function  # noqa: B018
    except AttributeError as exc:
        assert "no_such_function" in str(exc)
    else:
        raise AssertionError("expected AttributeError")


def test_errors_are_distinct_kinds_all_layergrad_errors():
    kinds = [layergrad.LoadError, layergrad.LayerNotFound, layergrad.InputError,
             layergrad.OutputError, layergrad.UsageError]  # fmt: skip
    for kind in kinds:
        assert issubclass(kind, layergrad.LayergradError)
    assert not issubclass(layergrad.UsageError, layergrad.InputError)
    assert issubclass(layergrad.UnsafeModelError, layergrad.LoadError)


def test_a_report_shows_as_html_in_a_notebook():
    from helpers import sample

    report = layergrad.inspect_model(sample("seed.keras"), "dense", ["dense_1"])
    page = report._repr_html_()
    assert page.startswith("<iframe") and 'sandbox="allow-scripts"' in page
    assert "&lt;!DOCTYPE html&gt;" in page  # the whole page, escaped into srcdoc
    assert "dense_1" in page
