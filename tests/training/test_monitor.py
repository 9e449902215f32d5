"""GradientMonitor inside model.fit: its numbers against a manual GradientTape on the same batch
and weights, non-finite values named where they start, TensorBoard and report files."""

from __future__ import annotations

import json
import logging
import math

import numpy as np
import pytest
from helpers import NanAt, fresh_python, keras, tf

from layergrad import GradientMonitor
from layergrad.core.vocab import Finding

BATCH = 16


def mlp(seed: int = 0, outputs: int = 3) -> keras.Model:
    keras.utils.set_random_seed(seed)
    return keras.Sequential(
        [
            keras.Input((6,)),
            keras.layers.Dense(12, activation="relu", name="hidden"),
            keras.layers.Dense(8, activation="tanh", name="middle"),
            keras.layers.Dense(outputs, activation="softmax", name="head"),
        ]
    )


def data(n: int = 128, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 6)).astype("float32")
    return x, (x[:, 0] > 0).astype("int32") + (x[:, 1] > 1).astype("int32")


class WeightsAt(keras.callbacks.Callback):
    """Copies every trainable variable just before the given step (0-based) runs."""

    def __init__(self, step: int) -> None:
        super().__init__()
        self.step, self.seen, self.weights = step, 0, None

    def on_train_batch_begin(self, batch, logs=None):
        if self.seen == self.step:
            self.weights = [v.numpy().copy() for v in self.model.trainable_variables]
        self.seen += 1


def reference(model, weights, x, y, loss_fn):
    """d loss / d each trainable variable by hand, on a fresh copy of the model."""
    clone = keras.models.clone_model(model)
    clone.build((None, 6))
    for v, w in zip(clone.trainable_variables, weights, strict=True):
        v.assign(w)
    with tf.GradientTape() as tape:
        loss = loss_fn(y, clone(x, training=True))
    grads = tape.gradient(loss, clone.trainable_variables)
    return float(loss), [g.numpy() for g in grads]


@pytest.mark.parametrize("step", [0, 5])
def test_numbers_equal_a_manual_tape_on_the_same_batch_and_weights(step):
    x, y = data()
    model = mlp()
    lr = 0.05
    model.compile(optimizer=keras.optimizers.SGD(lr), loss="sparse_categorical_crossentropy")
    snapshot, monitor = WeightsAt(step), GradientMonitor(every=5)
    model.fit(
        x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0, callbacks=[snapshot, monitor]
    )
    report = monitor.report
    (checkpoint,) = [c for c in report.checkpoints if c.step == step + 1]
    batch = slice(step * BATCH, (step + 1) * BATCH)
    loss, grads = reference(
        model, snapshot.weights, x[batch], y[batch], keras.losses.SparseCategoricalCrossentropy()
    )
    assert checkpoint.loss == pytest.approx(loss, rel=1e-5)
    assert report.losses[step] == pytest.approx(loss, rel=1e-5)
    assert checkpoint.learning_rate == pytest.approx(lr)
    assert len(checkpoint.variables) == len(grads)
    for row, g, w in zip(checkpoint.variables, grads, snapshot.weights, strict=True):
        assert row.grad_l2 == pytest.approx(float(np.linalg.norm(g)), rel=1e-5)
        assert row.weight_l2 == pytest.approx(float(np.linalg.norm(w)), rel=1e-5)
        units = g.reshape(-1, g.shape[-1])
        assert row.dead_fraction == pytest.approx(float(np.mean(np.all(units == 0, axis=0))))
        assert row.nonfinite == 0
    layers = {r.layer: r for r in checkpoint.layers}
    assert list(layers) == ["hidden", "middle", "head"]  # forward order
    kernels = list(zip(grads[::2], grads[1::2], strict=True))
    weights = list(zip(snapshot.weights[::2], snapshot.weights[1::2], strict=True))
    for name, (gk, gb), (wk, wb) in zip(layers, kernels, weights, strict=True):
        grad = math.sqrt(np.sum(gk**2) + np.sum(gb**2))
        weight = math.sqrt(np.sum(wk**2) + np.sum(wb**2))
        assert layers[name].grad_l2 == pytest.approx(grad, rel=1e-5)
        assert layers[name].update_ratio == pytest.approx(lr * grad / weight, rel=1e-5)
    h = x[batch]
    activations = (lambda z: np.maximum(z, 0), np.tanh, None)
    for name, (wk, wb), act in zip(layers, weights, activations, strict=True):
        z = h @ wk + wb
        if act is None:  # softmax: never exactly 0
            assert layers[name].dead_fraction == 0.0
            break
        h = act(z)
        assert layers[name].dead_fraction == pytest.approx(float(np.mean(np.all(h == 0, axis=0))))


def test_checkpoints_are_every_n_steps_and_the_first_and_last():
    x, y = data(n=16 * 23)
    model = mlp()
    model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
    monitor = GradientMonitor(every=10)
    model.fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=[monitor])
    assert [c.step for c in monitor.report.checkpoints] == [1, 11, 21, 23]
    assert monitor.report.steps == 23 and monitor.report.findings == ()


def test_multi_output_functional_model_on_a_dataset_matches_the_tape():
    keras.utils.set_random_seed(3)
    inp = keras.Input((6,), name="x")
    trunk = keras.layers.Dense(10, activation="relu", name="trunk")(inp)
    a = keras.layers.Dense(3, activation="softmax", name="a")(trunk)
    b = keras.layers.Dense(1, name="b")(keras.layers.Add(name="skip")([trunk, trunk]))
    model = keras.Model(inp, {"a": a, "b": b})
    model.compile(optimizer="sgd", loss={"a": "sparse_categorical_crossentropy", "b": "mse"})
    x, y = data(64)
    target = x[:, :1] * 2
    weights = [v.numpy().copy() for v in model.trainable_variables]
    dataset = tf.data.Dataset.from_tensor_slices((x, {"a": y, "b": target})).batch(16)
    monitor = GradientMonitor(every=100)
    model.fit(dataset, epochs=1, verbose=0, callbacks=[monitor])
    first = monitor.report.checkpoints[0]
    clone = keras.models.clone_model(model)
    for v, w in zip(clone.trainable_variables, weights, strict=True):
        v.assign(w)
    with tf.GradientTape() as tape:
        out = clone(x[:16], training=True)
        loss = keras.losses.SparseCategoricalCrossentropy()(
            y[:16], out["a"]
        ) + keras.losses.MeanSquaredError()(target[:16], out["b"])
    grads = tape.gradient(loss, clone.trainable_variables)
    assert first.loss == pytest.approx(float(loss), rel=1e-5)
    got = {r.variable: r.grad_l2 for r in first.variables}
    for v, g in zip(clone.trainable_variables, grads, strict=True):
        owner = next(
            layer.name for layer in clone.layers if any(w is v for w in layer.trainable_variables)
        )
        assert got[f"{owner}/{v.name}"] == pytest.approx(float(np.linalg.norm(g.numpy())), rel=1e-5)
    called = [r.layer for r in first.layers]  # the order the step called them
    assert called[0] == "trunk" and called.index("skip") < called.index("b")
    assert sorted(r.layer for r in first.layers if r.grad_l2 is not None) == ["a", "b", "trunk"]


def test_a_generator_is_monitored():
    x, y = data(64)

    def batches():
        while True:
            for i in range(0, 64, 16):
                yield x[i : i + 16], y[i : i + 16]

    model = mlp()
    model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
    monitor = GradientMonitor(every=3)
    model.fit(batches(), steps_per_epoch=4, epochs=2, verbose=0, callbacks=[monitor])
    assert [c.step for c in monitor.report.checkpoints] == [1, 4, 7, 8]
    assert all(c.layers[0].grad_l2 > 0 for c in monitor.report.checkpoints)


def test_a_nan_at_a_known_step_stops_training_there_naming_the_layer(tmp_path):
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((6,)),
            keras.layers.Dense(8, activation="relu", name="before"),
            NanAt(6, name="poison"),
            keras.layers.Dense(3, activation="softmax", name="after"),
        ]
    )
    model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
    x, y = data(16 * 20)
    report_file = tmp_path / "fit.json"
    monitor = GradientMonitor(every=100, report=report_file)
    history = model.fit(x, y, batch_size=16, epochs=3, verbose=0, callbacks=[monitor])
    report = monitor.report
    assert report.steps == 7 and report.stopped == "nonfinite"  # step 7 is call 6, 0-based
    assert len(history.history["loss"]) == 1  # stopped inside the first epoch
    (nonfinite,) = [f for f in report.findings if f.code == Finding.NONFINITE]
    assert (nonfinite.layer, nonfinite.step) == ("poison", 7)
    assert "batch 6" in nonfinite.message
    assert report.losses[-1] is not None and math.isnan(report.losses[-1])
    doc = json.loads(report_file.read_text(), parse_constant=lambda c: pytest.fail(c))
    assert doc["schema"] == "layergrad.fit/1"
    assert doc["losses"][-1] is None  # strict JSON: NaN written as null
    assert {k: doc["findings"][0][k] for k in ("finding", "layer", "step")} == {
        "finding": "nonfinite",
        "layer": "poison",
        "step": 7,
    }
    assert [c["step"] for c in doc["checkpoints"]] == [1, 7]


def test_a_nan_only_in_the_backward_pass_names_the_layer_nearest_the_loss():
    keras.utils.set_random_seed(0)

    class SqrtFromZero(keras.layers.Layer):
        def call(self, x):
            return tf.sqrt(tf.nn.relu(x) * 0.0)  # finite forward, Inf * 0 = NaN backward

    model = keras.Sequential(
        [
            keras.Input((6,)),
            keras.layers.Dense(8, name="first"),
            SqrtFromZero(name="root"),
            keras.layers.Dense(3, activation="softmax", name="head"),
        ]
    )
    model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
    x, y = data(64)
    monitor = GradientMonitor(every=100)
    model.fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=[monitor])
    (nonfinite,) = [f for f in monitor.report.findings if f.code == Finding.NONFINITE]
    assert nonfinite.step == 1 and nonfinite.layer == "first"
    assert "forward pass is finite" in nonfinite.message
    assert monitor.report.steps == 1


def test_stop_on_nonfinite_false_records_and_trains_on():
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [keras.Input((6,)), NanAt(2, name="poison"), keras.layers.Dense(3, name="head")]
    )
    model.compile(optimizer="sgd", loss="mse")
    x = np.ones((64, 6), "float32")
    monitor = GradientMonitor(every=100, stop_on_nonfinite=False)
    model.fit(x, np.zeros((64, 3)), batch_size=16, epochs=1, verbose=0, callbacks=[monitor])
    assert monitor.report.steps == 4 and monitor.report.stopped is None
    assert [f.step for f in monitor.report.findings if f.code == Finding.NONFINITE] == [3]


def test_tensorboard_scalars_and_histograms_read_back(tmp_path):
    from tensorboard.backend.event_processing import event_accumulator

    x, y = data(64)
    model = mlp()
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="sparse_categorical_crossentropy")
    monitor = GradientMonitor(every=2, log_dir=tmp_path / "logs")
    model.fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=[monitor])
    acc = event_accumulator.EventAccumulator(
        str(tmp_path / "logs"), size_guidance={event_accumulator.TENSORS: 0}
    )
    acc.Reload()
    tags = set(acc.Tags()["tensors"])
    for layer in ("hidden", "middle", "head"):
        for quantity in ("update_ratio", "grad_l2", "dead_fraction", "gradient"):
            assert f"layergrad/{quantity}/{layer}" in tags
    checkpoints = monitor.report.checkpoints
    ratios = acc.Tensors("layergrad/update_ratio/middle")
    assert [e.step for e in ratios] == [c.step for c in checkpoints] == [1, 3, 4]
    for event, c in zip(ratios, checkpoints, strict=True):
        want = next(r.update_ratio for r in c.layers if r.layer == "middle")
        assert float(tf.make_ndarray(event.tensor_proto)) == pytest.approx(want, rel=1e-6)
    histogram = tf.make_ndarray(acc.Tensors("layergrad/gradient/hidden")[0].tensor_proto)
    assert histogram.shape == (30, 3)
    assert histogram[:, 2].sum() == 6 * 12 + 12  # every gradient value of the layer once


def test_html_report_is_self_contained(tmp_path):
    from pagecheck import read_page

    x, y = data(64)
    model = mlp()
    model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
    model.fit(
        x,
        y,
        batch_size=16,
        epochs=2,
        verbose=0,
        callbacks=[GradientMonitor(every=2, report=tmp_path / "fit.html")],
    )
    page = read_page((tmp_path / "fit.html").read_text())
    assert not page.errors
    assert page.count("svg") == 2 and page.count("rect") == 3 * 5  # 3 layers x 5 checkpoints
    assert page.count("polyline") == 1


def test_a_second_fit_without_the_monitor_runs_the_plain_step():
    x, y = data(64)
    model = mlp()
    model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
    model.fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=[GradientMonitor(every=1)])
    assert "train_step" not in model.__dict__ and "compute_loss" not in model.__dict__
    model.fit(x, y, batch_size=16, epochs=1, verbose=0)  # would fail on a stale hook


def test_bad_arguments_say_what_was_expected():
    with pytest.raises(ValueError, match="every must be at least 1"):
        GradientMonitor(every=0)
    with pytest.raises(ValueError, match=r"\.json or \.html"):
        GradientMonitor(report="fit.txt")


def test_import_layergrad_does_not_import_tensorflow_until_the_monitor_is_used():
    code = (
        "import sys, layergrad\n"
        "before = 'tensorflow' in sys.modules\n"
        "monitor = layergrad.GradientMonitor\n"
        "print(before, 'tensorflow' in sys.modules, monitor.__name__)"
    )
    assert fresh_python("-c", code).split() == ["False", "True", "GradientMonitor"]


def test_nested_shared_multi_input_and_integer_input_models_match_the_tape():
    keras.utils.set_random_seed(4)
    ids = keras.Input((5,), dtype="int32", name="ids")
    feats = keras.Input((4,), name="feats")
    encoder = keras.Sequential(
        [keras.Input((4,)), keras.layers.Dense(6, activation="relu", name="inner")], name="encoder"
    )
    shared = keras.layers.Dense(6, activation="tanh", name="shared")
    embedded = keras.layers.GlobalAveragePooling1D(name="pool")(
        keras.layers.Embedding(20, 4, name="embed")(ids)
    )
    a = shared(encoder(feats))
    b = shared(keras.layers.Dense(6, name="project")(embedded))
    out = keras.layers.Dense(1, name="head")(keras.layers.Add(name="residual")([a, b, a]))
    model = keras.Model({"ids": ids, "feats": feats}, out)
    model.compile(optimizer="sgd", loss="mse")
    rng = np.random.default_rng(2)
    x = {"ids": rng.integers(0, 20, (32, 5)).astype("int32"),
         "feats": rng.standard_normal((32, 4)).astype("float32")}  # fmt: skip
    y = rng.standard_normal((32, 1)).astype("float32")
    weights = [v.numpy().copy() for v in model.trainable_variables]
    monitor = GradientMonitor(every=100)
    model.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0, callbacks=[monitor])
    first = monitor.report.checkpoints[0]
    clone = keras.models.clone_model(model)
    for v, w in zip(clone.trainable_variables, weights, strict=True):
        v.assign(w)
    batch = {k: v[:16] for k, v in x.items()}
    with tf.GradientTape() as tape:
        loss = keras.losses.MeanSquaredError()(y[:16], clone(batch, training=True))
    grads = tape.gradient(loss, clone.trainable_variables)
    assert first.loss == pytest.approx(float(loss), rel=1e-5)
    want = sorted(float(np.linalg.norm(tf.convert_to_tensor(g).numpy())) for g in grads)
    assert sorted(v.grad_l2 for v in first.variables) == pytest.approx(want, rel=1e-5)
    layers = [r.layer for r in first.layers]
    assert "encoder/inner" in layers and layers.count("shared") == 1
    assert {v.layer for v in first.variables} == {
        "embed", "project", "encoder/inner", "shared", "head"
    }  # fmt: skip


def test_a_fit_that_raised_leaves_nothing_behind_for_the_next_one():
    class Boom(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch == 1:
                raise RuntimeError("interrupted")

    x, y = data(64)
    model = mlp()
    model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
    with pytest.raises(RuntimeError, match="interrupted"):
        model.fit(x, y, batch_size=16, verbose=0, callbacks=[GradientMonitor(every=1), Boom()])
    monitor = GradientMonitor(every=1)
    model.fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=[monitor])
    assert [c.step for c in monitor.report.checkpoints] == [1, 2, 3, 4]
    assert "train_step" not in model.__dict__


def test_every_step_of_a_fit_longer_than_the_rows_kept_is_measured_on_its_own_weights():
    """every=1 writes its measured steps into 16 rows, read 16 at a time: each checkpoint of
    a 40-step fit holds its own step's weight norms and loss, as a callback copying the
    weights before each batch (and Keras's per-batch loss) finds them."""
    norms: list[dict[str, float]] = []

    class Norms(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            norms.append(
                {
                    layer.name: float(np.sqrt(sum(np.sum(w.astype(np.float64) ** 2)
                                                  for w in layer.get_weights())))
                    for layer in self.model.layers
                }
            )  # fmt: skip

    x, y = data(16 * 40)
    model = mlp()
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="sparse_categorical_crossentropy")
    monitor = GradientMonitor(every=1)
    model.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0,
              callbacks=[Norms(), monitor])  # fmt: skip
    checkpoints = monitor.report.checkpoints
    assert [c.step for c in checkpoints] == list(range(1, 41))
    for checkpoint, before in zip(checkpoints, norms, strict=True):
        got = {row.layer: row.weight_l2 for row in checkpoint.layers}
        assert got == pytest.approx(before, rel=1e-5), checkpoint.step
    assert [c.loss for c in checkpoints] == list(monitor.report.losses)
    assert len({round(c.layers[0].weight_l2, 6) for c in checkpoints}) == 40  # all differ


def test_an_embedding_is_measured_on_the_rows_its_batch_touches():
    """An Embedding's gradient reaches only the rows of the batch's ids: its weight norm (and
    so its update ratio) is over those rows, each once, not the whole table."""
    keras.utils.set_random_seed(0)
    ids = keras.Input((4,), dtype="int32", name="ids")
    h = keras.layers.GlobalAveragePooling1D(name="pool")(
        keras.layers.Embedding(1000, 4, name="embed")(ids)
    )
    model = keras.Model(ids, keras.layers.Dense(1, name="head")(h))
    model.compile(optimizer="sgd", loss="mse")
    rng = np.random.default_rng(0)
    x = rng.integers(0, 1000, (16, 4)).astype("int32")
    x[:, 0] = x[0, 0]  # an id repeated in every sample counts once
    y = rng.standard_normal((16, 1)).astype("float32")
    table = model.get_layer("embed").embeddings.numpy().astype(np.float64)
    monitor = GradientMonitor(every=1)
    model.fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=[monitor])
    first = monitor.report.checkpoints[0]
    touched = float(np.linalg.norm(table[np.unique(x)]))
    embed = next(v for v in first.variables if v.variable == "embed/embeddings")
    assert embed.weight_l2 == pytest.approx(touched, rel=1e-5)
    assert embed.weight_l2 < 0.5 * np.linalg.norm(table)
    row = next(r for r in first.layers if r.layer == "embed")
    assert row.update_ratio == pytest.approx(
        first.learning_rate * embed.grad_l2 / touched, rel=1e-5
    )


class RemakesTrainFunction(keras.callbacks.Callback):
    """What some callbacks do between epochs: make Keras's train function again."""

    def on_epoch_end(self, epoch, logs=None):
        self.model.make_train_function(force=True)


def test_another_callback_remaking_the_train_function_does_not_end_the_monitoring():
    model = mlp()
    model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
    x, y = data(64)
    monitor = GradientMonitor(every=2, verbose=0)
    model.fit(x, y, batch_size=BATCH, epochs=3, verbose=0,
              callbacks=[RemakesTrainFunction(), monitor])  # fmt: skip
    # 3 epochs of 64 / 16 = 4 steps: every step counted, a checkpoint every second step
    assert monitor.report.steps == 12
    assert [c.step for c in monitor.report.checkpoints] == [1, 3, 5, 7, 9, 11, 12]


def test_fresh_models_monitored_one_after_another_draw_no_tensorflow_warning():
    # a tf.function made per fit is traced again for each new model: TensorFlow's logger
    # warns of "retracing" from the fifth on
    said: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: said.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger("tensorflow")
    level = logger.level  # (the command line quiets it; a script of the user's does not)
    logger.addHandler(handler)
    logger.setLevel(logging.WARNING)
    x, y = data(64)
    try:
        for seed in range(7):
            model = mlp(seed)
            model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
            monitor = GradientMonitor(every=1)
            model.fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=[monitor])
            assert len(monitor.report.checkpoints) == 4
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    assert not [s for s in said if "retracing" in s]
