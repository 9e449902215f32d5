"""`diff BASE NEW` on real saved models: regressions where the math says so, and nowhere else.

Expected decades come from outside layergrad: a linear chain's gradients scale exactly with a
kernel (so a kernel times 1e-4 moves every row before it by exactly -4 decades and leaves the
rows after it bit-identical), and a tanh chain's gradients are backpropagated by hand in numpy
(`chains.gradients`).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from chains import ROWS, chain_weights, gradients, mean_abs, save_chain, scaled, with_nan
from click.testing import CliRunner
from helpers import keras, load_sample, normal, sample, tf

from layergrad import cli
from layergrad.commands.diff import diff_models
from layergrad.core.errors import LayerNotFound, UsageError
from layergrad.core.probe_options import ProbeOptions
from layergrad.core.vocab import Change, Status

BEFORE, AFTER = ("x", "l0", "l1"), ("l2", "l3", "l4", "head")  # around the changed kernel of l2


def run(*args: str):
    return CliRunner().invoke(cli.main, list(args))


def by_name(report):
    return {r.name: r for r in report.rows}


@pytest.fixture(scope="module")
def tanh_files(tmp_path_factory):
    """A tanh chain, the same with l2's kernel x 1e-4, with a NaN in it, and with a layer added."""
    d = tmp_path_factory.mktemp("tanh")
    w = chain_weights()
    x = normal(8, 6, seed=3)
    np.save(d / "x.npy", x)
    return {
        "weights": w,
        "x": x,
        "input": str(d / "x.npy"),
        "base": save_chain(d / "base.keras", w),
        "scaled": save_chain(d / "scaled.keras", scaled(w, "l2", 1e-4)),
        "nan": save_chain(d / "nan.keras", with_nan(w, "l2")),
        "added": save_chain(d / "added.keras", w, extra_after="l2"),
    }


def test_identical_files_have_no_regression(tanh_files):
    report = diff_models(tanh_files["base"], tanh_files["base"])
    assert [r.name for r in report.rows] == list(ROWS)
    assert {r.change for r in report.rows} == {Change.SAME}
    assert report.regressions == ()
    assert all(r.decades == 0.0 for r in report.rows)


def test_the_same_model_in_both_formats_is_the_same():
    report = diff_models(sample("seed.keras"), sample("seed.h5"))
    assert {r.change for r in report.rows} == {Change.SAME} and not report.regressions


def test_a_linear_kernel_scaled_by_1e_4_moves_the_rows_before_it_by_exactly_4_decades(tmp_path):
    # y = ... W2 ... : d (R . y) / d h_k is a product of the kernels after k, so scaling W2 by
    # 1e-4 scales the rows before l2 by exactly 1e-4 and leaves l2 and after untouched.
    w = chain_weights(seed=1)
    base = save_chain(tmp_path / "a.keras", w, activation=None)
    new = save_chain(tmp_path / "b.keras", scaled(w, "l2", 1e-4), activation=None)
    rows = by_name(diff_models(base, new))
    for name in BEFORE:
        assert rows[name].decades == pytest.approx(-4.0, abs=1e-5)
        assert rows[name].regression and rows[name].change == Change.CHANGED
        assert rows[name].why.startswith("mean |g| fell 4.0 decades (tolerance 2)")
    for name in AFTER:
        assert rows[name].change == Change.SAME and not rows[name].regression


def test_a_tanh_kernel_scaled_by_1e_4_matches_hand_backpropagation(tanh_files):
    w, x = tanh_files["weights"], tanh_files["x"]
    base_g = mean_abs(gradients(w, x))
    new_g = mean_abs(gradients(scaled(w, "l2", 1e-4), x))
    expected = {name: math.log10(new_g[name] / base_g[name]) for name in ROWS}
    report = diff_models(
        tanh_files["base"],
        tanh_files["scaled"],
        options=ProbeOptions(input_file=tanh_files["input"]),
    )
    rows = by_name(report)
    for name in ROWS:
        assert rows[name].decades == pytest.approx(expected[name], abs=1e-4), name
        assert rows[name].base.mean_abs == pytest.approx(base_g[name], rel=1e-4)
        assert rows[name].regression == (abs(expected[name]) > 2), name
    assert all(expected[n] == pytest.approx(-4, abs=0.3) for n in BEFORE)  # about -4 decades
    assert [r.name for r in report.regressions] == list(BEFORE)
    assert not any(rows[n].regression for n in AFTER)


def test_a_nan_kernel_is_a_nonfinite_regression(tanh_files):
    w, x = tanh_files["weights"], tanh_files["x"]
    hand = gradients(with_nan(w, "l2"), x)
    nonfinite = {name for name in ROWS if not np.all(np.isfinite(hand[name]))}
    assert nonfinite >= set(BEFORE)  # the NaN reaches every row before l2
    report = diff_models(
        tanh_files["base"], tanh_files["nan"], options=ProbeOptions(input_file=tanh_files["input"])
    )
    rows = by_name(report)
    for name in ROWS:
        assert (rows[name].new.status == Status.NONFINITE) == (name in nonfinite), name
        assert rows[name].regression == (name in nonfinite), name
    assert rows["x"].why == "was ok, now nonfinite (nonfinite_forward at l2)"
    assert rows["x"].decades is None


def test_an_added_layer_is_added_and_nothing_else_changes(tanh_files):
    report = diff_models(tanh_files["base"], tanh_files["added"])
    rows = by_name(report)
    assert rows["extra"].change == Change.ADDED and rows["extra"].base is None
    assert rows["extra"].why == "only in the new scan"
    # an identity layer changes no other gradient, not even by rounding
    assert {r.change for n, r in rows.items() if n != "extra"} == {Change.SAME}
    assert report.regressions == ()
    back = diff_models(tanh_files["added"], tanh_files["base"])
    # removed rows come where they were: after the layer before them in the base scan
    assert [r.name for r in back.rows] == ["x", "l0", "l1", "l2", "extra", "l3", "l4", "head"]
    assert by_name(back)["extra"].change == Change.REMOVED and not back.regressions


def test_a_newly_dead_layer_is_a_regression(tmp_path):
    # x -> pre Dense(4) -> ReLU -> head: a bias of -1000 on 3 of pre's 4 units zeroes their
    # gradient for every sample (0.75 of the units > the 0.5 of `dead`); one unit lives on.
    rng = np.random.default_rng(0)
    k, k_head = rng.standard_normal((6, 4)).astype("float32"), rng.standard_normal((4, 2))
    x = normal(8, 6, seed=2)
    np.save(tmp_path / "x.npy", x)

    def save(name, bias):
        inp = keras.Input((6,), name="x")
        pre = keras.layers.Dense(4, name="pre")
        head = keras.layers.Dense(2, name="head")
        out = head(keras.layers.ReLU(name="act")(pre(inp)))
        pre.set_weights([k, bias])
        head.set_weights([k_head.astype("float32"), np.zeros(2, "float32")])
        keras.Model(inp, out).save(tmp_path / name)
        return str(tmp_path / name), (x @ k + bias) > 0

    base, alive = save("a.keras", np.zeros(4, "float32"))
    new, alive_new = save("b.keras", np.array([-1000, -1000, -1000, 0], "float32"))
    # independently: which units of pre get a gradient at all (relu mask over the batch)
    assert np.mean(~alive.any(axis=0)) <= 0.5 < np.mean(~alive_new.any(axis=0))
    assert alive_new[:, 3].any()  # so the row is still ok, not zero
    report = diff_models(base, new, options=ProbeOptions(input_file=str(tmp_path / "x.npy")))
    row = by_name(report)["pre"]
    assert row.new.status == Status.OK and "dead" in row.new.flags and row.regression
    assert row.why.startswith("newly flagged dead")


def test_models_whose_inputs_differ_need_one_input_batch(tmp_path):
    def save(name, vocabulary):
        ids = keras.Input((5,), dtype="int32", name="ids")
        h = keras.layers.Embedding(vocabulary, 3, name="embedding")(ids)
        out = keras.layers.Dense(2, name="head")(keras.layers.Flatten(name="flat")(h))
        keras.Model(ids, out).save(tmp_path / name)
        return str(tmp_path / name)

    base, new = save("a.keras", 20), save("b.keras", 30)
    with pytest.raises(UsageError, match=r"ids in \[0, 20\).*ids in \[0, 30\).*--input"):
        diff_models(base, new)
    np.save(tmp_path / "ids.npy", np.arange(40, dtype="int32").reshape(8, 5) % 20)
    report = diff_models(base, new, options=ProbeOptions(input_file=str(tmp_path / "ids.npy")))
    assert [r.name for r in report.rows][-1] == "head"


def test_a_target_missing_from_one_model_is_a_usage_error(tanh_files):
    with pytest.raises(LayerNotFound):
        diff_models(tanh_files["base"], tanh_files["added"], target="extra")
    result = run("diff", tanh_files["base"], tanh_files["added"], "--to", "extra")
    assert result.exit_code == 2 and result.output.startswith("error: ")


def test_cli_exit_codes_and_the_verdict(tanh_files):
    same = run("diff", tanh_files["base"], tanh_files["base"])
    assert same.exit_code == 0
    assert "PASS: no regression in 7 layers compared (tolerance 2 decades)" in same.output
    added = run("diff", tanh_files["base"], tanh_files["added"])
    assert added.exit_code == 0 and "1 added" in added.output and "extra" in added.output
    broken = run("diff", tanh_files["base"], tanh_files["scaled"])
    assert broken.exit_code == 1
    assert "FAIL: 3 regressions in 7 layers compared (tolerance 2 decades)" in broken.output
    lenient = run("diff", tanh_files["base"], tanh_files["scaled"], "--tolerance", "5")
    assert lenient.exit_code == 0
    bad = run("diff", tanh_files["base"], tanh_files["scaled"], "--tolerance", "0")
    assert bad.exit_code == 2
    endless = run("diff", tanh_files["base"], tanh_files["scaled"], "--tolerance", "inf")
    assert endless.exit_code == 2 and "positive, finite number of decades: inf" in endless.output


def row_names(table: str) -> list[str]:
    """The layer of each table row, in order (a regression row starts with its mark)."""
    names = []
    for line in table.splitlines():
        words = line.split()
        words = words[1:] if words[:1] == ["✗"] else words
        if words and words[0] in ROWS:
            names.append(words[0])
    return names


def test_the_table_shows_changed_rows_regressions_first_and_all_rows_with_all(tanh_files):
    result = run("diff", tanh_files["base"], tanh_files["scaled"])
    order = row_names(result.output)
    regressions, changed = order[:3], order[3:]
    assert regressions == list(BEFORE) and set(changed) <= set(AFTER) and changed
    assert "unchanged rows not shown; --all shows every row" in result.output
    every = run("diff", tanh_files["base"], tanh_files["scaled"], "--all").output
    assert row_names(every) == list(ROWS)
    assert "not shown" not in every


def test_json_document(tanh_files):
    result = run("diff", tanh_files["base"], tanh_files["scaled"], "--json")
    assert result.exit_code == 1
    doc = json.loads(result.output)
    assert doc["schema"] == "layergrad.diff/1"
    assert doc["base"]["path"] == tanh_files["base"] and doc["new"]["class"] == "Functional"
    assert doc["probe"] == {
        "source": "random", "seed": 0, "batch_size": 8, "training": False, "reduce": "sum"
    }  # fmt: skip
    assert doc["tolerance"] == 2.0 and doc["target"] is None
    assert [row["layer"] for row in doc["layers"]] == list(ROWS)  # every row, in order
    assert doc["regressions"] == sum(row["regression"] for row in doc["layers"]) == 3
    for row in doc["layers"]:
        assert set(row) == {"layer", "change", "base", "new", "decades", "regression", "why"}
        ratio = row["new"]["mean_abs"] / row["base"]["mean_abs"]
        assert row["decades"] == pytest.approx(math.log10(ratio), abs=1e-12)
    added = json.loads(run("diff", tanh_files["base"], tanh_files["added"], "--json").output)
    (extra,) = [row for row in added["layers"] if row["layer"] == "extra"]
    assert extra["base"] is None and extra["decades"] is None and extra["change"] == "added"


def test_markdown_for_a_pull_request(tanh_files):
    result = run("diff", tanh_files["base"], tanh_files["scaled"], "--format", "markdown")
    text = result.output
    assert text.startswith("**layergrad diff**") and "❌ **3 regressions" in text
    table = text.split("<details>")[0]
    assert all(f"| `{n}` |" in table for n in BEFORE)  # regressions in the open
    assert "<summary>" in text and "| `l2` |" in text.split("<details>")[1]  # the rest folded
    ok = run("diff", tanh_files["base"], tanh_files["base"], "--format", "markdown").output
    assert "✅ no regression" in ok and "|" not in ok


def scan_json(tmp_path, model, name, *args):
    result = run("scan", model, "--json", *args)
    assert result.exit_code == 0, result.output
    path = tmp_path / name
    path.write_text(result.output, encoding="utf-8")
    return str(path)


def test_a_scan_json_stands_for_its_model(tanh_files, tmp_path):
    base_json = scan_json(tmp_path, tanh_files["base"], "base.json")
    from_json = diff_models(base_json, tanh_files["scaled"])
    from_model = diff_models(tanh_files["base"], tanh_files["scaled"])
    assert from_json.rows == from_model.rows  # the same numbers: the JSON is exact
    both = diff_models(base_json, base_json)  # nothing to scan
    assert {r.change for r in both.rows} == {Change.SAME}
    assert run("diff", base_json, tanh_files["scaled"]).exit_code == 1
    reverse = diff_models(tanh_files["scaled"], base_json)  # either side
    assert {r.name for r in reverse.regressions} == set(BEFORE)


def test_the_probe_recorded_in_a_scan_json_is_used(tanh_files, tmp_path):
    args = ["--seed", "3", "--batch-size", "5", "--reduce", "mean", "--training"]
    recorded = scan_json(tmp_path, tanh_files["base"], "b.json", *args)
    report = diff_models(recorded, tanh_files["base"])
    assert {r.change for r in report.rows} == {Change.SAME}  # scanned the same way
    assert report.probe.seed == 3 and report.probe.batch_size == 5
    assert run("diff", recorded, tanh_files["base"], *args).exit_code == 0  # the same, said again
    contradicted = run("diff", recorded, tanh_files["base"], "--seed", "4")
    assert (
        contradicted.exit_code == 2 and "records the probe it was made with" in contradicted.output
    )
    with_input = scan_json(tmp_path, tanh_files["base"], "i.json", "--input", tanh_files["input"])
    missing = run("diff", with_input, tanh_files["base"])
    assert missing.exit_code == 2 and "pass the same batch: --input" in missing.output
    given = run("diff", with_input, tanh_files["base"], "--input", tanh_files["input"])
    assert given.exit_code == 0, given.output
    targeted = scan_json(tmp_path, tanh_files["base"], "t.json", "--to", "l3")
    report = diff_models(targeted, tanh_files["scaled"])
    assert report.target == "l3" and [r.name for r in report.rows] == ["x", "l0", "l1", "l2", "l3"]


def test_names_from_the_file_are_text_not_markup(tmp_path):
    x = keras.Input((3,), name="x")
    out = keras.layers.Dense(2, name="y[b]")(keras.layers.Dense(4, name="[red]a")(x))
    path = tmp_path / "markup.keras"
    keras.Model(x, out).save(path)
    table = run("diff", str(path), str(path), "--all").output
    assert "[red]a" in table and "y[b]" in table
    markdown = run("diff", str(path), str(path), "--all", "--format", "markdown").output
    assert "`[red]a`" in markdown


SAMPLES = ["seed.keras", "residual.keras", "nested.keras", "shared.keras", "two_input.keras",
           "embedding.keras"]  # fmt: skip


@pytest.mark.parametrize("name", SAMPLES)
def test_every_kind_of_model_is_the_same_as_itself_and_as_its_scan_json(name, tmp_path):
    # Sequential, residual branches, nested, shared layers, two inputs, integer inputs
    path = sample(name)
    report = diff_models(path, path)
    assert report.rows and {r.change for r in report.rows} == {Change.SAME}
    from_json = diff_models(scan_json(tmp_path, path, "scan.json"), path)
    assert from_json.rows == report.rows


def test_a_scaled_head_on_a_residual_model_matches_manual_tapes(tmp_path, write_input):
    # residual: stem -> block; add = stem + block; outputs head(add) and side(stem). The
    # default target projects both outputs; only the head path shrinks, so add and block
    # lose 4 decades while stem, fed by the side path too, loses less.
    x = normal(8, 8, seed=5)
    model = load_sample("residual.keras")
    head = model.get_layer("head")
    kernel, bias = head.get_weights()
    head.set_weights([kernel * 1e-4, bias])
    scaled_path = tmp_path / "residual_scaled.keras"
    model.save(scaled_path)
    expected = {}
    for label, m in (("base", load_sample("residual.keras")), ("new", model)):
        r_head, r_side = (tf.constant(a, tf.float32) for a in _projections((8, 2), (8, 4)))
        layer = m.get_layer
        with tf.GradientTape(persistent=True) as tape:
            inputs = tf.constant(x)
            tape.watch(inputs)
            stem = layer("stem")(inputs)
            block = layer("block")(stem)
            add = layer("add")([stem, block])
            target = tf.reduce_sum(layer("head")(add) * r_head) + tf.reduce_sum(
                layer("side")(stem) * r_side
            )
        acts = {"x": inputs, "stem": stem, "block": block, "add": add}
        expected[label] = {
            k: float(np.mean(np.abs(tape.gradient(target, a)))) for k, a in acts.items()
        }
    report = diff_models(
        sample("residual.keras"), str(scaled_path), options=ProbeOptions(input_file=write_input(x))
    )
    rows = by_name(report)
    for name in ("x", "stem", "block", "add"):
        decades = math.log10(expected["new"][name] / expected["base"][name])
        assert rows[name].decades == pytest.approx(decades, abs=1e-4), name
        assert rows[name].regression == (abs(decades) > 2), name
    assert rows["add"].regression and rows["block"].regression
    assert rows["add"].decades == pytest.approx(-4, abs=1e-4)  # linear from add to head
    assert not rows["side"].regression and rows["head"].change == Change.SAME


def _projections(*shapes, seed=0):
    """The documented default target's R, one per output in order (see conftest)."""
    from helpers import projection_r

    return [
        projection_r(seed, k, shape).numpy().astype(np.float64) for k, shape in enumerate(shapes)
    ]


@pytest.fixture(scope="module")
def compiled_files(tmp_path_factory):
    """A linear chain compiled with mse, the same with l2's kernel x 1e-4, and a probe batch
    with labels `y`."""
    from chains import save_compiled

    d = tmp_path_factory.mktemp("compiled")
    w = chain_weights(seed=2)
    x, y = normal(8, 6, seed=6), normal(8, 3, seed=7)
    np.savez(d / "xy.npz", x=x, y=y)
    return {
        "weights": w,
        "x": x,
        "y": y,
        "input": str(d / "xy.npz"),
        "base": save_compiled(d / "base.keras", w),
        "scaled": save_compiled(d / "scaled.keras", scaled(w, "l2", 1e-4)),
    }


def test_weights_diff_matches_hand_backpropagation_of_the_loss(compiled_files):
    from chains import mse_weight_gradients

    f = compiled_files
    base = mse_weight_gradients(f["weights"], f["x"], f["y"])
    new = mse_weight_gradients(scaled(f["weights"], "l2", 1e-4), f["x"], f["y"])
    report = diff_models(
        f["base"], f["scaled"], wrt="weights", options=ProbeOptions(input_file=f["input"])
    )
    assert report.loss == "mse" and report.wrt == "weights"
    rows = by_name(report)
    assert set(rows) == set(base)  # every trainable variable, named layer/variable
    for name in base:
        expected = math.log10(new[name] / base[name])
        assert rows[name].decades == pytest.approx(expected, abs=1e-3), name
        assert rows[name].regression == (abs(expected) > 2), name
    # the variables before l2 get about 1e-4 of the gradient; l2's own kernel does not
    assert rows["l0/kernel"].regression and rows["l1/bias"].regression
    assert not rows["l2/kernel"].regression and not rows["head/kernel"].regression
    doc = json.loads(
        run(
            "diff", f["base"], f["scaled"], "--wrt", "weights", "--input", f["input"], "--json"
        ).output
    )
    assert doc["wrt"] == "weights" and doc["loss"] == "mse" and "target" not in doc
    assert {v["variable"] for v in doc["variables"]} == set(base) and "layers" not in doc


def test_a_weights_scan_json_of_a_compiled_loss_is_compared_with_that_loss(tmp_path):
    # The JSON names a compiled loss by its Keras name only: `from_logits=True` and one loss
    # per output are not in it, so the model is scanned with its own compiled loss again.
    x = keras.Input((4,), name="x")
    h = keras.layers.Dense(5, activation="tanh", name="h")(x)
    logits = keras.layers.Dense(3, name="logits")(h)
    value = keras.layers.Dense(1, name="value")(h)
    one = keras.Model(x, logits)
    one.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    two = keras.Model(x, {"logits": logits, "value": value})
    two.compile(loss={"logits": "sparse_categorical_crossentropy", "value": "mse"})
    xs, ids = normal(8, 4, seed=8), np.arange(8) % 3
    np.savez(tmp_path / "xy.npz", x=xs, y=ids)
    with tf.GradientTape() as tape:  # what the file's loss gives: from the logits
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)(ids, one(xs))
    kernel = tape.gradient(loss, one.get_layer("logits").kernel).numpy()
    for name, model in (("one", one), ("two", two)):
        path = str(tmp_path / f"{name}.keras")
        model.save(path)
        options = ["--input", str(tmp_path / "xy.npz")] if name == "one" else []
        scanned = run("scan", path, "--wrt", "weights", "--json", *options)
        assert scanned.exit_code == 0, scanned.output
        recorded = json.loads(scanned.output)
        assert recorded["loss"]["source"] == "compiled"
        baseline = tmp_path / f"{name}.json"
        baseline.write_text(scanned.output, encoding="utf-8")
        result = run("diff", str(baseline), path, "--json", *options)
        assert result.exit_code == 0, result.output
        rows = json.loads(result.output)["variables"]
        assert rows and all(r["change"] == "same" and r["decades"] == 0.0 for r in rows)
        if name == "one":
            new = {r["variable"]: r["new"] for r in rows}["logits/kernel"]
            assert new["mean_abs"] == pytest.approx(float(np.abs(kernel).mean()), rel=1e-5)


def test_a_compiled_loss_json_against_a_model_without_that_loss_uses_the_recorded_name(tmp_path):
    # The model on the other side compiles no loss, or another: it is scanned with the loss
    # the JSON names, as `--loss NAME` would (the compiled one's arguments are not there)
    keras.utils.set_random_seed(3)
    model = keras.Sequential([keras.Input((4,), name="x"), keras.layers.Dense(2, name="out")])
    model.compile(loss="mse")
    xs, ys = normal(6, 4, seed=9), normal(6, 2, seed=10)
    np.savez(tmp_path / "xy.npz", x=xs, y=ys)
    batch = ["--input", str(tmp_path / "xy.npz")]
    base = tmp_path / "base.keras"
    model.save(base)
    scanned = run("scan", str(base), "--wrt", "weights", "--json", *batch)
    baseline = tmp_path / "base.json"
    baseline.write_text(scanned.output, encoding="utf-8")
    with tf.GradientTape() as tape:  # mse by hand: the mean of the squared errors
        loss = tf.reduce_mean(tf.square(model(xs) - ys))
    kernel = tape.gradient(loss, model.get_layer("out").kernel).numpy()
    for other in ("none", "mae"):
        copy = keras.models.clone_model(model)
        copy.set_weights(model.get_weights())
        if other == "mae":
            copy.compile(loss="mae")
        path = tmp_path / f"{other}.keras"
        copy.save(path)
        result = run("diff", str(baseline), str(path), "--json", *batch)
        assert result.exit_code == 0, result.output
        rows = {r["variable"]: r for r in json.loads(result.output)["variables"]}
        assert all(r["change"] == "same" for r in rows.values())
        new = rows["out/kernel"]["new"]["mean_abs"]
        assert new == pytest.approx(float(np.abs(kernel).mean()), rel=1e-5)


def test_weights_diff_usage_errors(compiled_files):
    f = compiled_files
    with_to = run("diff", f["base"], f["base"], "--wrt", "weights", "--to", "l3")
    assert with_to.exit_code == 2 and "--to" in with_to.output
    loss_alone = run("diff", f["base"], f["base"], "--loss", "mse")
    assert loss_alone.exit_code == 2 and "--loss needs --wrt weights" in loss_alone.output


def test_html_page_verdict_rows_and_nothing_fetched(tanh_files, tmp_path):
    from pagecheck import external_references, read_page

    result = run("diff", tanh_files["base"], tanh_files["scaled"], "--format", "html")
    assert result.exit_code == 1
    page = read_page(result.output)
    assert not page.errors and not external_references(page)
    assert "FAIL: 3 regressions in 7 layers compared" in page.text
    (rows,) = page.tables
    assert [r[1] for r in rows[:3]] == list(BEFORE) and all(r[0] == "regression" for r in rows[:3])
    every = read_page(
        run("diff", tanh_files["base"], tanh_files["scaled"], "--all", "--format", "html").output
    )
    assert [r[1] for r in every.tables[0]] == list(ROWS)
    # a hostile name read from the file stays text
    x = keras.Input((3,), name="x")
    out = keras.layers.Dense(2, name="<script>alert(1)<")(x)
    hostile = tmp_path / "hostile.keras"
    keras.Model(x, out).save(hostile)
    page = read_page(run("diff", str(hostile), str(hostile), "--all", "--format", "html").output)
    assert not page.errors and len(page.scripts) == 1
    assert any("<script>alert(1)<" in r[1] for r in page.tables[0])
