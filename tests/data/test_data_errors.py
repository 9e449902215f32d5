"""Bad `--data` gets one clear line and exit code 2: which batch, which input, what to do."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner
from helpers import normal, sample

from layergrad.cli.app import main

BAD_MODULE = """
import json

import numpy as np


def raises():
    raise ValueError("no such table")


def number():
    return 42


def third_batch_is_wrong():
    for i in range(4):
        yield np.zeros((8, 7 if i == 2 else 5), "float32")


def strings():
    yield np.array([["a"] * 5] * 4)


def mismatched():
    yield {"a": np.zeros((4, 4), "float32"), "b": np.zeros((3, 3), "float32")}


def breaks_midway():
    yield np.zeros((8, 5), "float32")
    raise OSError("the share went away")


def too_few():
    yield (np.zeros((4, 4), "float32"),)


def samples():
    yield np.zeros(5, "float32")
    yield np.zeros(7, "float32")
"""


def inspect(model: str, data: str, *more: str, frm: str = "dense", to: str = "dense_1"):
    args = ["inspect", sample(model), "--from", frm, "--to", to, "--data", data, *more]
    return CliRunner().invoke(main, args, catch_exceptions=False)


def error_of(result) -> str:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


@pytest.fixture
def bad(tmp_path, monkeypatch):
    (tmp_path / "bad.py").write_text(BAD_MODULE)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_npy_of_the_wrong_shape_names_the_input_and_the_shape(tmp_path):
    np.save(tmp_path / "x.npy", normal(10, 7))
    line = error_of(inspect("seed.keras", str(tmp_path / "x.npy")))
    assert "array for input 'input' has shape (10, 7), expected (batch, 5)" in line


def test_a_sample_of_the_wrong_shape_is_named_by_the_shape_the_function_yielded(bad):
    # a sample (no batch axis) gets a batch axis of 1; a wrong one was said as (1, 7), an
    # array the function never made
    line = error_of(inspect("seed.keras", "bad:samples"))
    said = "--data bad:samples: batch 1: array for input 'input' has shape (7,), expected "
    assert said + "(batch, 5), or (5,) for one sample" in line and "(1, 7)" not in line


def test_npz_of_the_wrong_shape_names_the_array_by_its_key_in_the_file(tmp_path):
    # saved as `x`, as the README says a single-input model's array may be: the message names
    # the array the file holds, not the model's input name as if it were a key of the file
    np.savez(tmp_path / "d.npz", x=normal(10, 7))
    line = error_of(inspect("seed.keras", str(tmp_path / "d.npz")))
    assert "d.npz array 'x': array for input 'input' has shape (10, 7)" in line


def test_npy_of_strings_names_the_dtype(tmp_path):
    np.save(tmp_path / "x.npy", np.array([["a"] * 5] * 3))
    line = error_of(inspect("seed.keras", str(tmp_path / "x.npy")))
    assert "dtype <U1, but the model expects float32" in line


def test_a_bad_batch_from_a_function_names_its_index_and_input(bad):
    line = error_of(inspect("seed.keras", "bad:third_batch_is_wrong", "--batch-size", "8"))
    assert (
        "--data bad:third_batch_is_wrong: batch 2: array for input 'input' has shape (8, 7)" in line
    )


def test_strings_from_a_function(bad):
    line = error_of(inspect("seed.keras", "bad:strings"))
    assert "batch 0: array for input 'input' has dtype <U1" in line


def test_a_function_that_raises(bad):
    line = error_of(inspect("seed.keras", "bad.py:raises"))
    assert line == "error: --data bad.py:raises: the function raised ValueError: no such table."


def test_a_function_that_does_not_return_batches(bad):
    line = error_of(inspect("seed.keras", "bad:number"))
    assert "the function returned int, not batches; return a tf.data.Dataset or an iterable" in line


def test_batches_that_raise_midway(bad):
    line = error_of(inspect("seed.keras", "bad:breaks_midway", "--batch-size", "8"))
    assert "batch 1: the batches raised OSError: the share went away" in line


def test_a_missing_function_and_a_missing_module(bad):
    assert "bad has no function 'nope'; it defines" in error_of(inspect("seed.keras", "bad:nope"))
    line = error_of(inspect("seed.keras", "nosuchmodule:make"))
    assert "no module named 'nosuchmodule'" in line


def test_mismatched_batch_sizes_across_inputs(bad, tmp_path):
    line = error_of(inspect("two_input.keras", "bad:mismatched", frm="da", to="head"))
    assert "batch 0: the inputs have different batch sizes (a: 4, b: 3)" in line
    np.savez(tmp_path / "d.npz", a=normal(10, 4), b=normal(8, 3))
    line = error_of(inspect("two_input.keras", str(tmp_path / "d.npz"), frm="da", to="head"))
    assert "the inputs have different numbers of rows (a: 10, b: 8)" in line
    # labels of two outputs, one row short: said of the labels, not the inputs
    y = {"y:probs": np.zeros(10, "int64"), "y:value": np.zeros((9, 1), "float32")}
    np.savez(tmp_path / "xy.npz", x=normal(10, 6), **y)
    args = ["scan", sample("train_two_outputs.keras"), "--wrt", "weights", "--data",
            str(tmp_path / "xy.npz")]  # fmt: skip
    line = error_of(CliRunner().invoke(main, args, catch_exceptions=False))
    assert "the labels have different numbers of rows (y:probs: 10, y:value: 9)" in line


def test_a_tuple_with_too_few_arrays_for_two_inputs(bad):
    line = error_of(inspect("two_input.keras", "bad:too_few", frm="da", to="head"))
    assert "batch 0 holds 1 values but the model has 2 inputs (a, b)" in line


def test_npz_without_an_input(tmp_path):
    np.savez(tmp_path / "d.npz", a=normal(10, 4), y=np.zeros(10))
    line = error_of(inspect("two_input.keras", str(tmp_path / "d.npz"), frm="da", to="head"))
    assert "missing: b" in line


def test_a_folder_without_images(tmp_path):
    (tmp_path / "images" / "cats").mkdir(parents=True)
    (tmp_path / "images" / "cats" / "notes.txt").write_text("not an image")
    line = error_of(inspect("seed.keras", str(tmp_path / "images")))
    assert "is a folder of images, which needs a model with one image input" in line
    from helpers import keras

    keras.Sequential([keras.Input((4, 4, 3)), keras.layers.Flatten(name="f"),
                      keras.layers.Dense(2, name="d")]).save(tmp_path / "m.keras")  # fmt: skip
    args = ["inspect", str(tmp_path / "m.keras"), "--from", "f", "--to", "d", "--data",
            str(tmp_path / "images")]  # fmt: skip
    line = error_of(CliRunner().invoke(main, args, catch_exceptions=False))
    assert "is a folder with no images: no .bmp, .gif, .jpeg, .jpg, .png files" in line


def test_missing_data_and_unknown_kinds(tmp_path):
    assert "no such file" in error_of(inspect("seed.keras", str(tmp_path / "x.npy")))
    assert "no such file or folder" in error_of(inspect("seed.keras", str(tmp_path / "x.csv")))
    (tmp_path / "x.csv").write_text("1,2,3")
    assert "not a kind of data layergrad reads" in error_of(
        inspect("seed.keras", str(tmp_path / "x.csv"))
    )


def test_a_folder_named_like_an_array_file(tmp_path):
    for name in ("x.npy", "x.npz"):
        (tmp_path / name).mkdir()
        line = error_of(inspect("seed.keras", str(tmp_path / name)))
        assert f"x.{name[-3:]} is a folder, not a file; expected a .npy or .npz file" in line


def test_a_truncated_npy(tmp_path):
    np.save(tmp_path / "x.npy", normal(100, 5))
    data = (tmp_path / "x.npy").read_bytes()
    (tmp_path / "x.npy").write_bytes(data[: len(data) // 2])
    assert "the file is cut short" in error_of(inspect("seed.keras", str(tmp_path / "x.npy")))


def test_data_and_input_exclude_each_other(tmp_path):
    np.save(tmp_path / "x.npy", normal(4, 5))
    line = error_of(inspect("seed.keras", str(tmp_path / "x.npy"), "--input",
                            str(tmp_path / "x.npy")))  # fmt: skip
    assert "--data and --input exclude each other" in line


def test_data_options_need_data():
    args = ["inspect", sample("seed.keras"), "--from", "dense", "--to", "dense_1"]
    result = CliRunner().invoke(main, [*args, "--limit", "5"], catch_exceptions=False)
    assert "--limit only applies with --data PATH" in error_of(result)


def test_top_is_refused_where_it_ranks_nothing(tmp_path):
    """`--top K` ranks the samples of a data set by their Jacobian norms: without `--measure
    jacobian` or without `--data` it did nothing, and was read silently; refused as `--limit`
    is, naming both options, from the command line and the API."""
    import layergrad

    x = str(tmp_path / "x.npy")
    np.save(x, normal(12, 5))
    said = "--top only applies with --measure jacobian and --data PATH"
    ends = ["--from", "dense", "--to", "dense_1"]
    for command, more in (("inspect", ends), ("scan", [])):
        base = [command, sample("seed.keras"), *more, "--top", "3"]
        for extra in ([], ["--data", x], ["--measure", "jacobian"]):
            result = CliRunner().invoke(main, [*base, *extra], catch_exceptions=False)
            assert said in error_of(result), extra
        both = [*base, "--measure", "jacobian", "--data", x, "--json"]
        assert CliRunner().invoke(main, both, catch_exceptions=False).exit_code == 0
    with pytest.raises(layergrad.UsageError, match=said):
        layergrad.scan_model(sample("seed.keras"), data=x, top=3)


def test_save_gradient_is_refused_with_data(tmp_path):
    np.save(tmp_path / "x.npy", normal(4, 5))
    result = inspect("seed.keras", str(tmp_path / "x.npy"), "--save-gradient",
                     str(tmp_path / "g.npy"))  # fmt: skip
    assert result.exit_code == 2 and "no gradient array is kept" in result.output


def test_ids_outside_the_vocabulary_name_the_batch(tmp_path):
    ids = np.zeros((20, 6), "int32")
    ids[13, 2] = 99  # the Embedding has 20 rows; batch 13 // 8 = 1
    np.save(tmp_path / "ids.npy", ids)
    result = inspect("embedding.keras", str(tmp_path / "ids.npy"), "--batch-size", "8",
                     frm="embedding", to="head")  # fmt: skip
    line = error_of(result)
    assert "the model failed on batch 1" in line


def test_nan_in_the_data_is_warned_even_where_the_gradient_stays_finite(tmp_path):
    # two_input's head is linear in db: d sum(head) / d db is finite whatever db holds, so
    # only a warning can say that sample 70's activations (and outputs) are NaN
    a, b = normal(100, 4), normal(100, 3)
    np.savez(tmp_path / "clean.npz", a=a, b=b)
    b[70, 1] = np.nan
    np.savez(tmp_path / "nan.npz", a=a, b=b)
    said = {}
    for name in ("clean", "nan"):
        args = ["inspect", sample("two_input.keras"), "--from", "db", "--to", "head", "--data",
                str(tmp_path / f"{name}.npz"), "--batch-size", "32"]  # fmt: skip
        out = CliRunner().invoke(main, args, catch_exceptions=False)
        assert out.exit_code == 0, out.output
        assert " ok " in out.output
        said[name] = " ".join(out.output.split())  # (the table wraps long lines)
    assert "NaN/Inf" not in said["clean"]
    assert "'db' holds NaN/Inf in 1 of 4 batches (the first: batch 2)" in said["nan"]
