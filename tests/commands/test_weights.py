"""`scan --wrt weights`: d loss / d every trainable variable, against Keras's own tape.

The reference is `tape.gradient(loss, model.trainable_variables)` on the model as Keras loads
it, with the loss written out by hand (the Keras loss functions, their mean over the batch, the
loss weights and the regularization losses), never through layergrad.
"""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest
from click.testing import CliRunner
from helpers import CUSTOM_LAYERS, keras, load_sample, normal, random_labels, sample, tf

from layergrad.cli.app import main
from layergrad.commands.api import scan_weights_model
from layergrad.commands.check.check_files import CheckOptions, check_file
from layergrad.core.errors import InputError

layers = keras.layers
RTOL = 1e-5


def reference(model, x, loss_fn):
    """{variable path: gradient or None} of loss_fn(model(x)) + regularization, by hand."""
    with tf.GradientTape() as tape:
        pred = model(x, training=False)
        loss = loss_fn(pred) + tf.add_n(model.losses) if model.losses else loss_fn(pred)
    grads = tape.gradient(loss, model.trainable_variables)
    return {v.path: None if g is None else tf.convert_to_tensor(g).numpy()
            for v, g in zip(model.trainable_variables, grads, strict=True)}  # fmt: skip


def by_name(report):
    return {v.variable: v for v in report.variables}


def assert_matches(row, grad):
    if grad is None:
        assert row.status == "none" and row.gradient is None and row.update_ratio is None
        return
    assert row.gradient.l2 == pytest.approx(float(np.linalg.norm(grad)), rel=RTOL)
    assert row.gradient.mean_abs == pytest.approx(float(np.abs(grad).mean()), rel=RTOL)


def save_batch(tmp_path, **arrays):
    path = tmp_path / "batch.npz"
    np.savez(path, **arrays)
    return str(path)


def test_healthy_classifier_with_frozen_batchnorm_and_a_regularizer(tmp_path):
    x, y = normal(8, 6), np.arange(8) % 3
    report = scan_weights_model(
        sample("train_classifier.keras"), input_file=save_batch(tmp_path, x=x, y=y)
    )
    model = load_sample("train_classifier.keras")
    scce = keras.losses.sparse_categorical_crossentropy
    expected = reference(model, x, lambda p: tf.reduce_mean(scce(y, p)))
    rows = by_name(report)
    assert list(rows) == ["dense/kernel", "dense/bias", "head/kernel", "head/bias"]
    for name, grad in expected.items():
        assert_matches(rows[name], grad)
    assert all(r.status == "ok" and not r.flags and not r.causes for r in report.variables)
    assert report.frozen == 2  # bn (frozen): gamma, beta; its moving statistics are no weights
    assert (report.loss.name, report.loss.source, report.loss.labels) == (
        "sparse_categorical_crossentropy", "compiled", "data",
    )  # fmt: skip
    kernel = model.get_layer("head").kernel.numpy()
    ratio = float(np.linalg.norm(expected["head/kernel"]) / np.linalg.norm(kernel))
    assert rows["head/kernel"].update_ratio == pytest.approx(ratio, rel=RTOL)


def test_two_outputs_with_a_loss_each_and_loss_weights(tmp_path):
    x, ids, value = normal(8, 6), np.arange(8) % 3, normal(8, 1, seed=2)
    batch = save_batch(tmp_path, x=x, **{"y:probs": ids, "y:value": value})
    report = scan_weights_model(sample("train_two_outputs.keras"), input_file=batch)
    model = load_sample("train_two_outputs.keras")
    scce, mse = keras.losses.sparse_categorical_crossentropy, keras.losses.mean_squared_error

    def loss(pred):
        probs, val = pred
        return tf.reduce_mean(scce(ids, probs)) + 0.5 * tf.reduce_mean(mse(value, val))

    rows = by_name(report)
    for name, grad in reference(model, x, loss).items():
        assert_matches(rows[name], grad)


def test_the_random_labels_note_of_two_outputs_names_the_keys_that_work(tmp_path):
    # without labels the note says how to give them; followed as written, it must work (a
    # single `y` is refused for two outputs)
    model = sample("train_two_outputs.keras")
    (note,) = scan_weights_model(model).notes
    assert "`y:probs`" in note and "`y:value`" in note and "a `y` array" not in note, note
    x, ids, value = normal(8, 6), np.arange(8) % 3, normal(8, 1, seed=2)
    with pytest.raises(InputError, match="y:NAME"):
        scan_weights_model(model, input_file=save_batch(tmp_path, x=x, y=ids))
    given = scan_weights_model(
        model, input_file=save_batch(tmp_path, x=x, **{"y:probs": ids, "y:value": value})
    )
    assert given.loss.labels == "data" and not given.notes
    # labels of other rows than the inputs: said of the labels, not a failure of the model
    short = {"y:probs": ids[:7], "y:value": value}
    with pytest.raises(InputError, match=r"labels y:probs in --input have 7 rows and the inputs 8"):
        scan_weights_model(model, input_file=save_batch(tmp_path, x=x, **short))


def test_a_layer_that_ignores_an_input_gets_unused_input(tmp_path):
    report = scan_weights_model(sample("train_unused_input.keras"), imports=[CUSTOM_LAYERS])
    model = load_sample("train_unused_input.keras")
    rows = by_name(report)
    x = np.asarray(_random_x(report, model))
    labels = random_labels(0, 0, (8, 2), "normal")  # mse: standard normal, drawn per sample
    expected = reference(
        model, x, lambda p: tf.reduce_mean(keras.losses.mean_squared_error(labels, p))
    )
    for name, grad in expected.items():
        assert_matches(rows[name], grad)
    assert [n for n, r in rows.items() if r.status == "none"] == ["b/kernel", "b/bias"]
    cause = rows["b/kernel"].causes[0]
    assert (cause.code, cause.layer) == ("unused_input", "mix")
    assert "input 1 (from 'b')" in cause.message
    assert report.loss.labels == "random" and report.notes


def _random_x(report, model):
    """The random probe batch layergrad made (seed 0, standard normal; see inputs.py)."""
    assert report.probe.source == "random"
    return np.random.default_rng(0).standard_normal((8, 6)).astype("float32")


def _compiled(tmp_path, name, build, loss="mse"):
    x = keras.Input((6,), name="x")
    model = keras.Model(x, build(x), name=name)
    model.compile(optimizer="sgd", loss=loss)
    path = tmp_path / f"{name}.keras"
    model.save(path)
    return str(path)


@pytest.mark.parametrize(
    ("layer", "code"),
    [("ArgMaxOneHot", "non_differentiable_op"), ("StopGrad", "stop_gradient")],
)
def test_a_branch_through_a_blocking_layer(tmp_path, layer, code):
    import custom_layers

    def build(x):
        side = custom_layers.__dict__[layer](name="block")(layers.Dense(4, name="side")(x))
        main_path = layers.Dense(4, name="main")(x)
        return layers.Dense(2, name="head")(layers.Concatenate(name="cat")([main_path, side]))

    path = _compiled(tmp_path, "blocked", build)
    rows = by_name(scan_weights_model(path, imports=[CUSTOM_LAYERS]))
    assert {n for n, r in rows.items() if r.status == "none"} == {"side/kernel", "side/bias"}
    cause = rows["side/kernel"].causes[0]
    assert (cause.code, cause.layer) == (code, "block")
    assert rows["main/kernel"].status == "ok"
    verdict = check_file(path, CheckOptions(imports=(CUSTOM_LAYERS,)))
    (trainable,) = [c for c in verdict.checks if c.name == "trainable"]
    assert not trainable.passed and trainable.findings == ("no_gradient",)


def test_nan_in_a_kernel_is_nonfinite_from_that_layer(tmp_path):
    def build(x):
        return layers.Dense(2, name="head")(layers.Dense(4, name="broken")(x))

    path = _compiled(tmp_path, "nan", build)
    model = keras.saving.load_model(path)
    kernel = model.get_layer("broken").kernel
    kernel.assign(np.where(np.eye(6, 4) > 0, np.nan, kernel.numpy()).astype("float32"))
    model.save(path)
    rows = by_name(scan_weights_model(path))
    assert all(r.status == "nonfinite" and "nonfinite" in r.flags for r in rows.values())
    assert (rows["head/kernel"].causes[0].code, rows["head/kernel"].causes[0].layer) == (
        "nonfinite_forward", "broken",
    )  # fmt: skip


def test_embedding_gets_its_sparse_gradient_as_ok(tmp_path):
    ids = keras.Input((6,), dtype="int32", name="ids")
    e = layers.Embedding(20, 4, name="embedding")(ids)
    out = layers.Dense(1, name="head")(layers.GlobalAveragePooling1D(name="pool")(e))
    model = keras.Model(ids, out)
    model.compile(optimizer="sgd", loss="mse")
    path = tmp_path / "emb.keras"
    model.save(path)
    tokens = np.arange(48).reshape(8, 6) % 20
    labels = normal(8, 1)
    report = scan_weights_model(path, input_file=save_batch(tmp_path, ids=tokens, y=labels))
    rows = by_name(report)
    mse = keras.losses.mean_squared_error
    expected = reference(
        keras.saving.load_model(path), tokens, lambda p: tf.reduce_mean(mse(labels, p))
    )
    for name, grad in expected.items():
        assert_matches(rows[name], grad)
    assert rows["embedding/embeddings"].status == "ok"


def test_nested_model_variables_are_named_by_their_path(tmp_path):
    model = load_sample("nested.keras")
    model.compile(optimizer="sgd", loss="mse")
    path = tmp_path / "nested.keras"
    model.save(path)
    rows = by_name(scan_weights_model(path))
    assert list(rows) == [
        "encoder/dense/kernel", "encoder/dense/bias", "encoder/dense_1/kernel",
        "encoder/dense_1/bias", "head/kernel", "head/bias",
    ]  # fmt: skip
    assert rows["encoder/dense/kernel"].layer == "encoder/dense"


def test_sublayers_variables_of_one_name_get_a_row_each_named_by_their_keras_path(tmp_path):
    # A MultiHeadAttention holds four `kernel`s (query, key, value, output) and a Bidirectional
    # two directions of `kernel`, `recurrent_kernel` and `bias`: each is its own row, named by
    # its Keras path below the layer, and a scan JSON of them serves as a baseline.
    x = keras.Input((5, 4), name="x")
    a = layers.MultiHeadAttention(2, 3, name="mha")(x, x)
    h = layers.Bidirectional(layers.GRU(3, return_sequences=True), name="bi")(a)
    model = keras.Model(x, layers.Dense(1, name="out")(layers.GlobalAveragePooling1D()(h)))
    model.compile(optimizer="sgd", loss="mse")
    path = tmp_path / "attention.keras"
    model.save(path)
    xs, ys = normal(6, 5, 4, seed=4), normal(6, 1, seed=5)
    batch = save_batch(tmp_path, x=xs, y=ys)
    rows = by_name(scan_weights_model(path, input_file=batch))
    model = keras.models.load_model(path)
    expected = reference(model, xs, lambda pred: keras.losses.MeanSquaredError()(ys, pred))
    # the model's variables in their order, named by hand (a GRU made earlier in the process
    # makes Keras call these `forward_gru_1`: the names leave the `_1` out)
    attention = [f"mha/{part}/{v}" for part in ("query", "key", "value", "attention_output")
                 for v in ("kernel", "bias")]  # fmt: skip
    directions = [f"bi/{side}_gru/gru_cell/{v}" for side in ("forward", "backward")
                  for v in ("kernel", "recurrent_kernel", "bias")]  # fmt: skip
    named = dict(
        zip([*attention, *directions, "out/kernel", "out/bias"], expected.values(), strict=True)
    )
    assert len(rows) == len(model.trainable_variables) == len(named)
    assert set(rows) == set(named)
    for name, grad in named.items():
        assert_matches(rows[name], grad)
    scan = CliRunner().invoke(main, ["scan", str(path), "--wrt", "weights", "--json"])
    baseline = tmp_path / "baseline.json"
    baseline.write_text(scan.output, encoding="utf-8")
    checked = CliRunner().invoke(main, ["check", str(path), "--baseline", str(baseline)])
    assert checked.exit_code == 0, checked.output


def test_a_custom_layers_unnamed_sublayers_are_named_alike_in_every_load(tmp_path):
    # Keras names a custom layer's unnamed sublayers as it loads them (dense_4, dense_5 on one
    # load, dense_6, dense_7 on the next): their variables are numbered in their order instead
    module = tmp_path / "pair_layer.py"
    module.write_text(
        "import keras\n"
        "@keras.saving.register_keras_serializable(package='pair_layer')\n"
        "class Pair(keras.layers.Layer):\n"
        "    def __init__(self, **kwargs):\n"
        "        super().__init__(**kwargs)\n"
        "        self.first, self.second = keras.layers.Dense(4), keras.layers.Dense(4)\n"
        "    def call(self, x):\n"
        "        return self.second(self.first(x))\n",
        encoding="utf-8",
    )
    spec = importlib.util.spec_from_file_location("pair_layer", module)
    pair_layer = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(pair_layer)
    inputs = keras.Input((4,), name="x")
    model = keras.Model(inputs, layers.Dense(1, name="out")(pair_layer.Pair(name="pair")(inputs)))
    model.compile(optimizer="sgd", loss="mse")
    path = tmp_path / "pair.keras"
    model.save(path)
    names = [list(by_name(scan_weights_model(path, imports=[str(module)]))) for _ in range(2)]
    assert names[0] == names[1] == [
        "pair/kernel#1", "pair/bias#1", "pair/kernel#2", "pair/bias#2", "out/kernel", "out/bias"
    ]  # fmt: skip


def test_loss_option_overrides_and_no_loss_is_a_usage_error():
    with pytest.raises(InputError, match="--loss"):
        scan_weights_model(sample("seed.keras"))
    report = scan_weights_model(sample("train_classifier.keras"), loss="mse")
    assert (report.loss.name, report.loss.source) == ("mse", "option")
    result = CliRunner().invoke(main, ["scan", sample("seed.keras"), "--wrt", "weights"])
    assert result.exit_code == 2 and "--loss" in result.output and "Traceback" not in result.output


def test_json_follows_the_documented_schema():
    result = CliRunner().invoke(
        main, ["scan", sample("train_unused_input.keras"), "--wrt", "weights", "--json",
               "--import", CUSTOM_LAYERS],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["schema"] == "layergrad.scan/1" and doc["wrt"] == "weights"
    assert doc["loss"] == {"name": "mse", "source": "compiled", "labels": "random"}
    assert doc["frozen"] == 0
    first = doc["variables"][0]
    assert set(first) == {"variable", "layer", "name", "shape", "dtype", "status", "gradient",
                          "update_ratio", "flags", "causes"}  # fmt: skip
    assert (first["variable"], first["layer"], first["name"], first["shape"]) == (
        "a/kernel", "a", "kernel", [6, 4],
    )  # fmt: skip
    blocked = [v for v in doc["variables"] if v["status"] == "none"]
    assert blocked and all(v["gradient"] is None and v["update_ratio"] is None for v in blocked)
    assert blocked[0]["causes"][0]["code"] == "unused_input"


def test_check_fails_exactly_the_files_with_a_variable_without_gradient():
    options = CheckOptions(imports=(CUSTOM_LAYERS,))
    verdicts = {name: check_file(sample(name), options) for name in (
        "train_classifier.keras", "train_two_outputs.keras", "train_unused_input.keras", "seed.keras",
    )}  # fmt: skip
    assert {n: v.passed for n, v in verdicts.items()} == {
        "train_classifier.keras": True, "train_two_outputs.keras": True,
        "train_unused_input.keras": False, "seed.keras": True,
    }  # fmt: skip
    trainable = {n: next(c for c in v.checks if c.name == "trainable") for n, v in verdicts.items()}
    assert trainable["seed.keras"].message.startswith("no loss (the file was saved without")
    assert trainable["train_unused_input.keras"].findings == ("no_gradient",)
    assert "unused_input at mix" in trainable["train_unused_input.keras"].message


def test_only_weights_of_frozen_layers_count_as_frozen(tmp_path):
    """Dropout and LSTM keep a seed_generator_state, BatchNormalization its moving statistics:
    non-trainable variables no one could train. Only the frozen Dense's kernel and bias count."""
    x = keras.Input((5, 3), name="x")
    h = keras.layers.LSTM(4, dropout=0.2, name="lstm")(x)
    h = keras.layers.Dropout(0.5, name="drop")(h)
    h = keras.layers.BatchNormalization(name="bn")(h)
    frozen = keras.layers.Dense(4, name="frozen")
    h = frozen(h)
    model = keras.Model(x, keras.layers.Dense(1, name="head")(h))
    frozen.trainable = False
    model.compile(loss="mse")
    path = tmp_path / "m.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    seeds = [v.path for v in loaded.non_trainable_variables if "seed_generator" in v.path]
    assert len(seeds) >= 2 and len(loaded.non_trainable_variables) == len(seeds) + 4
    report = scan_weights_model(str(path))
    assert report.frozen == 2  # frozen/kernel, frozen/bias
    assert "frozen/kernel" not in by_name(report)
    out = CliRunner().invoke(main, ["scan", str(path), "--wrt", "weights", "--json"])
    assert json.loads(out.stdout)["frozen"] == 2


def test_frozen_over_data_counts_only_frozen_weights_as_for_one_batch(tmp_path):
    """`--data` counted every non-trainable variable (BatchNormalization's moving statistics
    too); it counts what one batch counts: the frozen Dense's kernel and bias."""
    x = keras.Input((4,), name="x")
    frozen = keras.layers.Dense(3, name="frozen")
    h = frozen(keras.layers.BatchNormalization(name="bn")(x))
    model = keras.Model(x, keras.layers.Dense(1, name="head")(h))
    frozen.trainable = False
    model.compile(loss="mse")
    path = str(tmp_path / "m.keras")
    model.save(path)
    data = save_batch(tmp_path, x=normal(6, 4), y=normal(6, 1, seed=2))
    assert scan_weights_model(path, data=data, batch_size=4).frozen == 2
    assert scan_weights_model(path, input_file=data).frozen == 2


def test_a_data_function_with_labels_is_called_once(tmp_path):
    """`scan --wrt weights --data FILE.py:function` reads x and y from the function's one
    call (the docs: called once per pass); a second call would draw another data set."""
    (tmp_path / "calls.py").write_text(
        "import numpy as np\n"
        "from pathlib import Path\n"
        "def batches():\n"
        f"    with open({str(tmp_path / 'calls.txt')!r}, 'a') as f:\n"
        "        f.write('call\\n')\n"
        "    rng = np.random.default_rng(0)\n"
        "    return [(rng.standard_normal((4, 6)).astype('float32'), rng.integers(0, 3, 4))\n"
        "            for _ in range(2)]\n"
    )
    report = scan_weights_model(
        sample("train_classifier.keras"), data=f"{tmp_path / 'calls.py'}:batches"
    )
    assert report.loss.labels == "data"
    assert (tmp_path / "calls.txt").read_text().count("call") == 1


@pytest.mark.parametrize("loss", ["sparse_categorical_crossentropy", "mse"])
def test_nan_labels_are_said_as_the_data_not_as_the_model(tmp_path, loss):
    # a NaN label makes the loss NaN and so every weight's gradient: one line naming the
    # batch, exit 2, not rows of nonfinite weights with a made-up cause
    keras.utils.set_random_seed(0)
    units = 3 if loss.startswith("sparse") else 2
    model = keras.Sequential([keras.Input((4,), name="x"), keras.layers.Dense(units, name="out")])
    model.compile(loss=loss)
    path = tmp_path / "m.keras"
    model.save(path)
    x = normal(12, 4)
    y = np.ones((12,) if units == 3 else (12, 2), "float32")
    y[9] = np.nan  # sample 9: the second batch of 8
    np.savez(tmp_path / "d.npz", x=x, y=y)
    before = (tmp_path / "d.npz").read_bytes()
    out = CliRunner().invoke(
        main, ["scan", str(path), "--wrt", "weights", "--data", str(tmp_path / "d.npz"),
               "--batch-size", "8"],
    )  # fmt: skip
    assert out.exit_code == 2, out.output
    assert "batch 1: its labels hold NaN or Inf" in out.output
    assert "drop or fill the samples whose labels are NaN/Inf" in out.output
    assert "Traceback" not in out.output and (tmp_path / "d.npz").read_bytes() == before
