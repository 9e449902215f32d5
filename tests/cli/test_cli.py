"""The command line, through click's CliRunner: rendering, JSON schema, exit codes, errors."""

from __future__ import annotations

import ast
import json

import numpy as np
import pytest
from click.testing import CliRunner
from helpers import (
    fresh_python,
    load_sample,
    manual_gradient,
    normal,
    sample,
    scan_json,
    scan_row,
    seed_inspect,
)

from layergrad.cli.app import main


def run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_table_shows_layers_shapes_status_and_stats():
    result = run(*seed_inspect())
    assert result.exit_code == 0, result.output
    out = result.output
    for text in ("dense_1", "(8, 8)", "(8, 4)", "ok", "L2", "mean |g|", "max |g|", "zeros",
                 "non-finite", "most sensitive units of dense"):  # fmt: skip
        assert text in out
    assert "\x1b[" not in out  # no colour codes when stdout is not a terminal


def test_json_follows_the_documented_schema(write_input):
    x = normal(8, 5)
    result = run(*seed_inspect("--json", "--input", write_input(x)))
    assert result.exit_code == 0
    doc = json.loads(result.output)
    assert set(doc) == {"schema", "model", "probe", "results"}
    assert doc["schema"] == "layergrad.inspect/1"
    assert doc["model"] == {
        "path": sample("seed.keras"), "format": "keras", "class": "Sequential", "name": "sequential",
    }  # fmt: skip
    assert doc["probe"] == {
        "source": write_input(x), "seed": None, "batch_size": 8, "training": False, "reduce": "sum",
    }  # fmt: skip
    (res,) = doc["results"]
    assert set(res) == {"from", "to", "status", "gradient", "causes"}
    assert res["from"] == {"layer": "dense", "shape": [8, 8], "dtype": "float32"}
    assert res["to"] == {"layer": "dense_1", "shape": [8, 4], "dtype": "float32"}
    assert res["status"] == "ok" and res["causes"] == []
    g = res["gradient"]
    assert set(g) == {"shape", "l2", "mean_abs", "max_abs", "zero_fraction", "nonfinite"}
    m = load_sample("seed.keras")
    expected = manual_gradient(m.get_layer("dense"), m.get_layer("dense_1"), x)
    assert g["l2"] == pytest.approx(float(np.linalg.norm(expected)), rel=1e-5)
    assert g["max_abs"] == pytest.approx(float(np.abs(expected).max()), rel=1e-5)
    assert g["mean_abs"] == pytest.approx(float(np.abs(expected).mean()), rel=1e-5)


def test_json_for_a_none_result_has_null_gradient_and_causes():
    result = run("inspect", sample("residual.keras"), "--from", "side", "--to", "head", "--json")
    res = json.loads(result.output)["results"][0]
    assert res["status"] == "none" and res["gradient"] is None
    cause = res["causes"][0]
    assert set(cause) == {"code", "layer", "message", "hint", "facts", "severity"}
    assert cause["code"] == "not_downstream"
    # residual.keras: 'side' branches off and never reaches 'head' (sample_models/README.md)
    assert (cause["layer"], cause["facts"]) == ("head", {"source": "side"})


def test_fail_on_sets_exit_code_1():
    args = ["inspect", sample("embedding.keras"), "--from", "ids", "--to", "head"]
    assert run(*args).exit_code == 0
    failed = run(*args, "--fail-on", "none,nonfinite")
    assert failed.exit_code == 1
    assert "integer_path" in failed.output
    assert run(*args, "--fail-on", "zero").exit_code == 0


def test_save_gradient_npy_and_npz(tmp_path, write_input):
    x = normal(8, 5)
    m = load_sample("seed.keras")
    expected = manual_gradient(m.get_layer("dense"), m.get_layer("dense_1"), x)
    npy = tmp_path / "g.npy"
    args = ["inspect", sample("seed.keras"), "--from", "dense", "--input", write_input(x)]
    assert run(*args, "--to", "dense_1", "--save-gradient", str(npy)).exit_code == 0
    np.testing.assert_allclose(np.load(npy), expected, rtol=1e-5, atol=1e-6)
    npz = tmp_path / "g.npz"
    assert (
        run(*args, "--to", "dense_1", "--to", "dense_2", "--save-gradient", str(npz)).exit_code == 0
    )
    with np.load(npz) as data:
        assert sorted(data.files) == ["dense_1", "dense_2"]
        np.testing.assert_allclose(data["dense_1"], expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--from", "dens", "--to", "dense_1"], "did you mean 'dense'"),
        (["--from", "dense", "--to", "nope"], "no layer named 'nope'"),
        (["--from", "dense", "--to", "dense_1@3"], "call 3"),
        (["--from", "7", "--to", "dense_1"], "out of range"),
        (["--from", "dense", "--to", "dense_1", "--save-gradient", "g.txt"], ".npy or .npz"),
    ],
)
def test_usage_errors_exit_2_with_one_line(args, message):
    result = CliRunner().invoke(main, ["inspect", sample("seed.keras"), *args])
    assert result.exit_code == 2
    assert message in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("args", "says", "help_of"),
    [
        (["inspect", "SEED", "--from", "dense", "--to", "dense_1", "--bogus"],
         "No such option '--bogus'", "layergrad inspect"),
        (["inspec"], "No such command 'inspec'. Did you mean 'inspect'?", "layergrad"),
        (["scan"], "Missing argument 'MODEL'", "layergrad scan"),
        (["inspect", "SEED", "--from", "dense", "--to", "dense_1", "--reduce", "max"],
         "Invalid value for '--reduce': 'max' is not one of", "layergrad inspect"),
        (["scan", "SEED", "--loss", "mse"], "--loss needs --wrt weights", "layergrad scan"),
        (["inspect", "SEED", "--from", "dense", "--to", "dense_1", "--json", "--format", "html"],
         "--json is --format json, not --format html: give one of them", "layergrad inspect"),
    ],
)  # fmt: skip
def test_click_usage_errors_are_one_error_line_naming_the_help(args, says, help_of):
    """An unknown option or command, a missing argument, a value not among the choices and a
    usage error a command raises: one `error:` line, as every other error, exit code 2."""
    args = [sample("seed.keras") if a == "SEED" else a for a in args]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: "), result.stderr
    assert says in result.stderr and f"(see '{help_of} --help')" in result.stderr, result.stderr
    assert result.stdout == ""


def test_layergrad_alone_shows_its_help():
    result = CliRunner().invoke(main, [])
    assert result.exit_code == 2 and "Usage: layergrad [OPTIONS] COMMAND" in result.output
    assert "inspect" in result.output and "error:" not in result.output


def test_fix_refuses_an_empty_output_before_any_work(tmp_path, monkeypatch):
    """An empty --output is no file name: refused, not read as "the default"."""
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["fix", sample("seed.keras"), "--output", ""])
    assert result.exit_code == 2 and result.stderr.startswith("error: --output is empty")
    assert not list(tmp_path.iterdir())  # no copy written anywhere


def test_bad_input_shape_exits_2(write_input):
    result = CliRunner().invoke(main, seed_inspect("--input", write_input(normal(8, 7))))
    assert result.exit_code == 2
    assert "shape (8, 7)" in result.output and "expected (batch, 5)" in result.output


def test_npz_missing_an_input_exits_2(write_input):
    result = CliRunner().invoke(
        main,
        ["inspect", sample("two_input.keras"), "--from", "da", "--to", "head",
         "--input", write_input(a=normal(8, 4))],
    )  # fmt: skip
    assert result.exit_code == 2 and "missing: b" in result.output


def test_missing_model_file_exits_2(tmp_path):
    result = CliRunner().invoke(
        main, ["inspect", str(tmp_path / "nope.keras"), "--from", "a", "--to", "b"]
    )
    assert result.exit_code == 2 and "Traceback" not in result.output


def test_help_lists_every_option_with_examples():
    out = run("inspect", "--help").output
    for option in ("--from", "--to", "--input", "--batch-size", "--seed", "--reduce", "--training",
                   "--import", "--unsafe", "--json", "--save-gradient", "--fail-on", "--debug"):  # fmt: skip
        assert option in out
    assert "Example" in out


def test_the_baseline_recipe_in_check_help_works_on_a_compiled_model(tmp_path):
    # Most saved models are compiled: the help's two lines, run as written, must pass.
    import keras

    x = keras.Input((4,))
    model = keras.Model(x, keras.layers.Dense(2)(keras.layers.Dense(3, activation="tanh")(x)))
    model.compile(optimizer="sgd", loss="mse")
    model.save(tmp_path / "model.keras")
    lines = [
        line.strip().split("#")[0].split() for line in run("check", "--help").output.split("\n")
    ]
    made = next(w for w in lines if w[:2] == ["layergrad", "scan"] and "baseline.json" in w)
    checked = next(w for w in lines if w[:2] == ["layergrad", "check"] and "baseline.json" in w)
    path = {"model.keras": str(tmp_path / "model.keras")}
    scanned = run(*[path.get(w, w) for w in made[1 : made.index(">")]])
    assert scanned.exit_code == 0, scanned.output
    (tmp_path / "baseline.json").write_text(scanned.output, encoding="utf-8")
    path["baseline.json"] = str(tmp_path / "baseline.json")
    result = run(*[path.get(w, w) for w in checked[1:]])
    assert result.exit_code == 0, result.output


def test_help_does_not_import_tensorflow():
    code = (
        "import sys\nfrom click.testing import CliRunner\nfrom layergrad.cli import main\n"
        "r = CliRunner().invoke(main, ['inspect', '--help'])\nassert r.exit_code == 0\n"
        "print('tensorflow' in sys.modules)"
    )
    assert fresh_python("-c", code).strip() == "False"


def test_python_dash_m_runs_the_cli():
    assert "layergrad" in fresh_python("-m", "layergrad", "--version")


def test_ids_outside_the_vocabulary_exit_2_with_the_op_message(write_input):
    ids = np.full((2, 6), 99, dtype="int32")  # embedding.keras has input_dim=20
    result = CliRunner().invoke(
        main,
        ["inspect", sample("embedding.keras"), "--from", "embedding", "--to", "head",
         "--input", write_input(ids)],
    )  # fmt: skip
    assert result.exit_code == 2
    assert "is not in [0, 20)" in result.output and "Traceback" not in result.output


def test_an_index_on_an_input_layer_means_that_input():
    by_index = json.loads(
        run("inspect", sample("residual.keras"), "--from", "0", "--to", "head", "--json").output
    )
    by_name = json.loads(
        run("inspect", sample("residual.keras"), "--from", "x", "--to", "head", "--json").output
    )
    assert by_index["results"] == by_name["results"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--from", "dense@3", "--to", "dense_1"], "calls it 1 time; use dense"),
        (["--from", "input@2", "--to", "dense_1"], "is a model input"),
    ],
)
def test_call_index_errors_name_the_calls_that_exist(args, message):
    result = CliRunner().invoke(main, ["inspect", sample("seed.keras"), *args])
    assert result.exit_code == 2 and message in result.output


def test_unwritable_save_gradient_is_refused_before_the_work(tmp_path):
    (tmp_path / "a_file").write_text("not a folder")
    target = tmp_path / "a_file" / "g.npy"  # its folder cannot be created
    result = CliRunner().invoke(main, seed_inspect("--save-gradient", str(target)))
    assert result.exit_code == 2
    assert "dense_1" not in result.stdout and "is not a folder" in result.stderr


def test_scan_layers_glob_that_matches_nothing_exits_2():
    result = CliRunner().invoke(main, ["scan", sample("seed.keras"), "--layers", "zzz*"])
    assert result.exit_code == 2 and "matches no layer" in result.output


def _in_subprocess(args: list[str], env: dict[str, str] | None = None) -> list[str]:
    """Run the CLI in a fresh interpreter; return [exit code, TF imported?, stderr's last line]."""
    code = (
        "import sys\nfrom click.testing import CliRunner\nfrom layergrad.cli import main\n"
        f"r = CliRunner().invoke(main, {args!r})\n"
        "print(r.exit_code, 'tensorflow' in sys.modules)\n"
        "print(r.output.strip().splitlines()[-1])"
    )
    import os

    out = fresh_python("-c", code, env={**os.environ, **(env or {})})
    first, last = out.strip().splitlines()[:2]
    return [*first.split(), last]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["inspect", "{seed}", "--from", "dens", "--to", "dense_1"], "did you mean 'dense'"),
        (["inspect", "{seed}", "--from", "dense", "--to", "7"], "layer index 7 is out of range"),
        (["scan", "{seed}", "--to", "head"], "no layer named 'head'"),
        (["scan", "{seed}", "--layers", "conv*"], "--layers conv* matches no layer"),
    ],
)
def test_a_mistyped_layer_fails_before_tensorflow_loads(args, message):
    args = [a.format(seed=sample("seed.keras")) for a in args]
    code, tf_loaded, last = _in_subprocess(args)
    assert (code, tf_loaded) == ("2", "False")
    assert message in last


def test_keras_backend_from_the_environment_is_overridden():
    args = ["inspect", sample("seed.keras"), "--from", "dense", "--to", "dense_1", "--json"]
    code, tf_loaded, last = _in_subprocess(args, env={"KERAS_BACKEND": "jax"})
    assert (code, tf_loaded, last) == ("0", "True", "}")


def test_each_warning_names_its_result(softmax_head):
    result = run("inspect", softmax_head, "--from", "h", "--to", "probs", "--to", "h")
    pieces = result.output.split("warning:")[1:]
    assert pieces and all(p.startswith(" d probs / d h: ") for p in pieces)
    assert any("probs ends in softmax" in p for p in pieces)


@pytest.mark.parametrize("command", ["check", "inspect", "layers"])
def test_an_import_that_cannot_be_imported_is_a_usage_error_before_tensorflow(command, tmp_path):
    """`--import mylayers` for ./mylayers.py (the installed script has no working directory on
    its path) and a missing path: exit 2 and one reason, before TensorFlow is imported."""
    import os
    import shutil

    shutil.copy(sample("custom_layers.py"), tmp_path / "mylayers.py")
    model = sample("seed.keras")
    cases = [
        ("mylayers", "pass --import mylayers.py"),
        (str(tmp_path / "gone.py"), "no such file"),
        ("no_such_module_here", "no module named 'no_such_module_here'"),
        ("not-a-name", "neither a module name nor a path"),
        (str(tmp_path / "pipe.py"), "is a FIFO"),
    ]
    os.mkfifo(tmp_path / "pipe.py")
    if command == "layers":  # it imports nothing: only paths and names are checked
        cases = [cases[1], cases[3], cases[4]]
    for spec, said in cases:
        code = (
            "import sys\nfrom click.testing import CliRunner\nfrom layergrad.cli import main\n"
            f"r = CliRunner().invoke(main, {[command, model, '--import', spec]!r})\n"
            "print(r.exit_code, 'tensorflow' in sys.modules)\nprint(repr(r.output))"
        )
        out = fresh_python("-c", code, cwd=tmp_path, env={**os.environ, "PYTHONSAFEPATH": "1"})
        first, output = out.strip().splitlines()[:2]
        assert first == "2 False", (spec, out)
        assert said in output and "Traceback" not in output, (spec, output)
    # the API says the same (a usage error, not an unreadable file)
    from layergrad.core.errors import UsageError
    from layergrad.engine.loader import import_modules

    with pytest.raises(UsageError, match="no such file"):
        import_modules([str(tmp_path / "gone.py")])


@pytest.mark.parametrize("command", ["fix", "fit"])
def test_fix_and_fit_refuse_a_file_that_is_not_a_model_before_tensorflow(command, tmp_path):
    """A file that is no model (and, for fix, a folder) is refused in one line, exit 2, before
    TensorFlow is imported: as check reads a file before loading it."""
    corrupt = tmp_path / "not_a_model.keras"
    corrupt.write_bytes(b"garbage, not a zip archive")
    data = tmp_path / "train.npz"
    np.savez(data, x=np.zeros((4, 3), "float32"), y=np.zeros((4,), "int64"))
    for model, said in ((corrupt, "neither a zip (.keras) nor an HDF5 (.h5) file"),
                        (tmp_path, "is a directory")):  # fmt: skip
        code = (
            "import sys\nfrom click.testing import CliRunner\nfrom layergrad.cli import main\n"
            f"r = CliRunner().invoke(main, {[command, str(model), '--data', str(data)]!r})\n"
            "print(r.exit_code, 'tensorflow' in sys.modules)\nprint(repr(r.output))"
        )
        first, output = fresh_python("-c", code).strip().splitlines()[:2]
        lines = ast.literal_eval(output).strip().splitlines()
        assert first == "2 False", (model, output)
        assert len(lines) == 1 and lines[0].startswith("error: ") and said in lines[0], lines


def test_diff_reads_scan_jsons_before_tensorflow_and_two_never_load_it(tmp_path):
    a = scan_json(tmp_path / "a.json", [scan_row("dense", 0.5)])
    b = scan_json(tmp_path / "b.json", [scan_row("dense", 5e-4)])
    code, tf_loaded, _ = _in_subprocess(["diff", str(a), str(b)])
    assert (code, tf_loaded) == ("1", "False")  # three decades down: a regression
    (tmp_path / "bad.json").write_text("{")
    code, tf_loaded, last = _in_subprocess(
        ["diff", str(tmp_path / "bad.json"), sample("seed.keras")]
    )
    assert (code, tf_loaded) == ("2", "False") and "bad.json" in last
