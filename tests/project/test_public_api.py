"""The public API: what `import layergrad` offers, without importing TensorFlow."""

from __future__ import annotations

import sys

from helpers import fresh_python

import layergrad

PUBLIC = {
    "inspect_model", "scan_model", "scan_weights", "check_files", "diff_models", "ProbeOptions",
    "LayergradError", "LoadError", "UnsafeModelError", "LayerNotFound", "InputError",
    "OutputError", "UsageError", "DataError",
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
    assert fresh_python("-c", code).strip() == "[]"


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
    # values no model takes: bad input, and a command that cannot work (exit 2 in `check` too)
    assert issubclass(layergrad.DataError, layergrad.InputError)
    assert issubclass(layergrad.DataError, layergrad.UsageError)


def test_a_report_shows_as_html_in_a_notebook():
    from helpers import sample

    report = layergrad.inspect_model(sample("seed.keras"), "dense", ["dense_1"])
    page = report._repr_html_()
    assert page.startswith("<iframe") and 'sandbox="allow-scripts"' in page
    assert "&lt;!DOCTYPE html&gt;" in page  # the whole page, escaped into srcdoc
    assert "dense_1" in page


def test_print_shows_the_first_lines_of_the_table_not_the_dataclass():
    from helpers import sample

    report = layergrad.scan_model(sample("residual.keras"))
    text = str(report)
    lines = text.splitlines()
    assert lines[0].startswith(f"{sample('residual.keras')}  Functional"), text
    assert lines[1].startswith("probe: random (seed 0)"), text
    assert "ScanRow(" not in text and "GradientStats(" not in text and "\x1b[" not in text
    assert 3 <= len(lines) <= 13 and len(text) < 2000, text
    assert repr(report) == text
    # every row but those past the first lines, in table order
    shown = [r.layer for r in report.rows if any(line.split()[:1] == [r.layer] for line in lines)]
    assert shown == [r.layer for r in report.rows][: len(shown)] and shown
    inspect = layergrad.inspect_model(sample("seed.keras"), "dense", ["dense_1"])
    assert "dense_1" in str(inspect) and "Result(" not in repr(inspect)


def test_check_files_records_a_warning_instead_of_letting_it_through(tmp_path, recwarn):
    """A layer that warns while it is built (as Keras does on odd files): check_files, an API
    that never prints, records the warning in the verdict instead of raising it in the
    caller's script."""
    import importlib.util

    module = tmp_path / "lg_warning_layer.py"
    module.write_text(
        "import warnings\nimport keras\n\n\n"
        '@keras.saving.register_keras_serializable(package="lg_warning_tests")\n'
        "class Noisy(keras.layers.Dense):\n"
        "    def build(self, input_shape):\n"
        '        warnings.warn("Noisy was built from a config it does not know", UserWarning)\n'
        "        super().build(input_shape)\n"
    )
    spec = importlib.util.spec_from_file_location(module.stem, module)
    loaded = importlib.util.module_from_spec(spec)
    sys.modules[module.stem] = loaded
    spec.loader.exec_module(loaded)
    from helpers import keras

    x = keras.Input((3,), name="x")
    keras.Model(x, loaded.Noisy(2, name="noisy")(x)).save(tmp_path / "noisy.keras")
    recwarn.clear()
    from layergrad.commands.check.check_files import CheckOptions

    options = CheckOptions(imports=(str(module),))
    (verdict,) = layergrad.check_files([str(tmp_path / "noisy.keras")], options)
    assert not [w for w in recwarn if "Noisy was built" in str(w.message)], list(recwarn)
    assert any("Noisy was built from a config" in c.message for c in verdict.checks), verdict
