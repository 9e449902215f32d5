"""GradientMonitor's files follow the command line's output rules, and the callback never
breaks a `model.fit` that works without it (subclassed models, custom train steps, models
Keras builds at their first step)."""

from __future__ import annotations

import hashlib
import json
import math
import os
import sys

import numpy as np
import pytest
from helpers import keras, tf

from layergrad import GradientMonitor
from layergrad.core.errors import OutputError


def data(n: int = 64, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 4)).astype("float32")
    return x, (x[:, 0] > 0).astype("int32")


def small(input_layer: bool = True) -> keras.Model:
    keras.utils.set_random_seed(0)
    layers = [keras.layers.Dense(6, activation="relu"), keras.layers.Dense(2)]
    return keras.Sequential(([keras.Input((4,))] if input_layer else []) + layers)


def compiled(model: keras.Model) -> keras.Model:
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def digest(path) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


class Steps(keras.callbacks.Callback):
    def __init__(self) -> None:
        super().__init__()
        self.ran = 0

    def on_train_batch_end(self, batch, logs=None):
        self.ran += 1


# 1. the report and log_dir


@pytest.fixture
def model_file(tmp_path):
    path = tmp_path / "model.keras"
    compiled(small()).save(path)
    return path


def test_a_report_linked_to_the_model_file_is_refused_when_the_callback_is_made(
    tmp_path, model_file
):
    link = tmp_path / "fit.json"
    link.symlink_to(model_file)
    before = digest(model_file)
    with pytest.raises(OutputError, match="refusing to overwrite"):
        GradientMonitor(report=link)
    assert digest(model_file) == before


@pytest.mark.parametrize("content", [b"my notes\n", b'{"schema": "other/1"}'])
def test_a_file_layergrad_did_not_write_is_never_replaced(tmp_path, content):
    path = tmp_path / "fit.json"
    path.write_bytes(content)
    with pytest.raises(OutputError, match="not a training report written by layergrad"):
        GradientMonitor(report=path)
    assert path.read_bytes() == content


def test_a_fifo_and_a_directory_are_refused_at_once(tmp_path):
    fifo = tmp_path / "fit.json"
    os.mkfifo(fifo)
    with pytest.raises(OutputError, match="FIFO"):
        GradientMonitor(report=fifo)  # never opened: this would block
    folder = tmp_path / "report.html"
    folder.mkdir()
    with pytest.raises(OutputError, match="a directory"):
        GradientMonitor(report=folder)


def test_a_file_that_appears_before_fit_is_refused_before_any_step(tmp_path):
    path = tmp_path / "fit.json"
    monitor = GradientMonitor(every=1, report=path)
    path.write_text("written by someone else\n")
    model, steps = compiled(small()), Steps()
    before = [v.numpy().copy() for v in model.trainable_variables]
    x, y = data()
    with pytest.raises(OutputError):
        model.fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=[monitor, steps])
    assert steps.ran == 0
    assert path.read_text() == "written by someone else\n"
    for v, w in zip(model.trainable_variables, before, strict=True):
        np.testing.assert_array_equal(v.numpy(), w)


def test_its_own_report_is_replaced_atomically_and_a_link_is_replaced_not_followed(tmp_path):
    x, y = data()
    first = tmp_path / "fit.json"
    model = compiled(small())
    model.fit(x, y, batch_size=16, epochs=1, verbose=0,
              callbacks=[GradientMonitor(every=1, report=first)])  # fmt: skip
    assert json.loads(first.read_text())["schema"] == "layergrad.fit/1"
    kept = first.read_bytes()
    link = tmp_path / "again.json"
    link.symlink_to(first)  # a link onto a report layergrad wrote may be replaced
    model.fit(x, y, batch_size=16, epochs=2, verbose=0,
              callbacks=[GradientMonitor(every=1, report=link)])  # fmt: skip
    assert not link.is_symlink()
    assert json.loads(link.read_text())["training"]["epochs"] == 2
    assert first.read_bytes() == kept  # the link was replaced, never written through
    model.fit(x, y, batch_size=16, epochs=1, verbose=0,
              callbacks=[GradientMonitor(every=1, report=tmp_path / "fit.html")])  # fmt: skip
    GradientMonitor(report=tmp_path / "fit.html")  # its own page may be replaced too


def test_log_dir_naming_a_file_a_fifo_or_dev_null_is_refused(tmp_path, model_file):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for target, says in [
        (model_file, "is a file, not a folder"),
        (fifo, "FIFO"),
        ("/dev/null", "not a folder"),
        (model_file / "logs", "is not a folder"),
    ]:
        with pytest.raises(OutputError, match=says):
            GradientMonitor(log_dir=target)
    dangling = tmp_path / "logs"
    dangling.symlink_to(tmp_path / "nowhere")
    with pytest.raises(OutputError, match="not a folder"):
        GradientMonitor(log_dir=dangling)


def test_log_dir_tensorboard_cannot_create_is_one_output_error_before_any_step(tmp_path):
    """A folder the checks cannot rule out (root may write anywhere, but not under /proc)."""
    x, y = data()
    model = compiled(small())
    before = [w.copy() for w in model.get_weights()]
    with pytest.raises(OutputError, match=r"TensorBoard cannot write there \(/proc/"):
        model.fit(x, y, epochs=1, verbose=0, callbacks=[GradientMonitor(log_dir="/proc/no/logs")])
    assert all(np.array_equal(a, b) for a, b in zip(before, model.get_weights(), strict=True))
    model.fit(x, y, epochs=1, verbose=0)  # the model trains afterwards: nothing left installed


def test_log_dir_without_tensorboard_is_refused_with_the_install_command(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorboard", None)
    with pytest.raises(OutputError, match="pip install tensorboard"):
        GradientMonitor(log_dir=tmp_path / "logs")


def test_tensorboard_is_a_dependency_of_the_package():
    from importlib.metadata import requires

    assert any(r.startswith("tensorboard") and "extra" not in r for r in requires("layergrad"))


@pytest.mark.parametrize("every", [2.7, "3", None, math.nan, True, 0, -1])
def test_every_must_be_a_whole_number_of_steps(every):
    with pytest.raises(ValueError, match="every must be at least 1, a whole number"):
        GradientMonitor(every=every)


@pytest.mark.parametrize("chance", [math.nan, math.inf, -1.0, 0, "1.0", True])
def test_chance_loss_must_be_a_positive_finite_number(chance):
    # a NaN trivial loss would make a healthy run `not_learning` ("nanx the trivial loss")
    with pytest.raises(ValueError, match="chance_loss must be a positive finite number"):
        GradientMonitor(chance_loss=chance)
    assert GradientMonitor(chance_loss=np.float32(1.386)).chance_loss == pytest.approx(1.386)


def test_every_accepts_numpy_integers_and_whole_floats():
    assert GradientMonitor(every=np.int64(3)).every == 3
    assert GradientMonitor(every=4.0).every == 4


# 2. never break a fit that works without the monitor


class Subclassed(keras.Model):
    def __init__(self) -> None:
        super().__init__()
        keras.utils.set_random_seed(0)
        self.hidden = keras.layers.Dense(6, activation="relu")
        self.head = keras.layers.Dense(2)

    def call(self, x):
        return self.head(self.hidden(x))


class CustomStep(Subclassed):
    """A custom train_step through compute_loss and the optimizer: fully visible."""

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            loss = self.compute_loss(x=x, y=y, y_pred=self(x, training=True))
        grads = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables, strict=True))
        return {"loss": loss}


class HandMade(Subclassed):
    """Its own loss and its own update: the monitor can see neither."""

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            logits = self(x, training=True)
            loss = tf.reduce_mean(
                keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)
            )
        grads = tape.gradient(loss, self.trainable_variables)
        for g, v in zip(grads, self.trainable_variables, strict=True):
            v.assign_sub(0.1 * g)
        return {"loss": loss}


def losses_without_monitor(make, x, y):
    """Every step's loss, from a run without the monitor (the truth)."""

    class Record(keras.callbacks.Callback):
        def __init__(self) -> None:
            super().__init__()
            self.losses = []

        def on_train_batch_end(self, batch, logs=None):
            self.losses.append(float(logs["loss"]))

    record = Record()
    compiled(make()).fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0,
                         callbacks=[record])  # fmt: skip
    return record.losses


@pytest.mark.parametrize("make", [Subclassed, CustomStep, lambda: small(input_layer=False)])
def test_models_keras_builds_at_the_first_step_train_and_are_monitored_from_step_2(make):
    x, y = data()
    monitor = GradientMonitor(every=2)
    model = compiled(make())
    model.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0, callbacks=[monitor])
    report = monitor.report
    assert report.steps == 4
    assert [c.step for c in report.checkpoints] == [2, 3, 4]
    assert all(r.grad_l2 and r.grad_l2 > 0 for c in report.checkpoints for r in c.layers)
    assert any("step 1 ran unmonitored" in n and "starts at step 2" in n for n in report.notes)
    # the first step's loss is the one Keras saw; the same run without the monitor agrees
    truth = losses_without_monitor(make, x, y)
    assert report.losses[0] == pytest.approx(truth[0], rel=1e-5)


def test_a_train_step_the_monitor_cannot_see_is_loss_only_said_once():
    x, y = data()
    model = compiled(HandMade())
    model(x[:1])
    monitor = GradientMonitor(every=1)
    with pytest.warns(UserWarning, match="loss-only") as caught:
        model.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0, callbacks=[monitor])
    assert len([w for w in caught if "loss-only" in str(w.message)]) == 1
    report = monitor.report
    assert report.steps == 8 and report.checkpoints == ()
    assert all(v is not None and math.isfinite(v) and v > 0 for v in report.losses)
    assert any(n.startswith("loss-only") for n in report.notes)
    assert report.findings == ()


# 8. NaN in the training data: the input, the sample and the step


@pytest.mark.parametrize("where", ["forward", "gradient_only"])
def test_a_nan_in_the_inputs_names_the_input_the_sample_and_the_step(where):
    """A NaN in sample 37 (step 3, row 5 of batches of 16, unshuffled). Through relu (fused to
    its matmul, compiled: NaN becomes 0) the forward pass stays finite, only the first
    kernel's gradient is NaN, and its update leaves NaN weights, which the next checkpoint
    (the last step) finds: the data is still named, at its step, never a layer."""
    keras.utils.set_random_seed(0)
    first = keras.layers.Dense(6, activation="relu" if where == "gradient_only" else None)
    inputs = keras.Input((4,), name="pixels")
    model = keras.Model(inputs, keras.layers.Dense(2)(first(inputs)))
    compiled(model)
    x, y = data()
    x[37, 2] = np.nan
    monitor = GradientMonitor(every=100)
    model.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0, callbacks=[monitor])
    (nonfinite,) = [f for f in monitor.report.findings if f.code == "nonfinite"]
    assert nonfinite.step == 3 and nonfinite.layer == "pixels"
    assert "input 'pixels' of the step's batch has" in nonfinite.message
    if where == "forward":  # measured on the step itself
        assert "1 NaN/Inf values, the first in sample 5 of the batch" in nonfinite.message
    else:
        assert all(math.isfinite(v) for v in monitor.report.losses)
        assert nonfinite.message.startswith("step 3 (epoch 0, batch 2): the training data holds")
        assert f"found at step {monitor.report.steps}" in nonfinite.message
        assert monitor.report.stopped is None  # found at the last step: every step ran
        # the steps after the NaN weights (a dead first layer) are no run to judge
        others = [f for f in monitor.report.findings if f is not nonfinite]
        assert all(f.step is not None and f.step < 3 for f in others), others


def test_a_dict_of_inputs_names_the_key_that_holds_the_nan():
    keras.utils.set_random_seed(0)
    a, b = keras.Input((3,), name="a"), keras.Input((2,), name="b")
    out = keras.layers.Dense(2)(keras.layers.Concatenate()([a, b]))
    model = compiled(keras.Model({"a": a, "b": b}, out))
    rng = np.random.default_rng(0)
    xa, xb = rng.random((32, 3)).astype("float32"), rng.random((32, 2)).astype("float32")
    xb[20, 1] = np.inf
    monitor = GradientMonitor(every=100)
    model.fit({"a": xa, "b": xb}, np.zeros(32, "int32"), batch_size=16, shuffle=False,
              verbose=0, callbacks=[monitor])  # fmt: skip
    (nonfinite,) = [f for f in monitor.report.findings if f.code == "nonfinite"]
    assert (nonfinite.layer, nonfinite.step) == ("b", 2) and "sample 4" in nonfinite.message


def test_a_run_that_ran_every_step_is_not_stopped():
    """A NaN found at the last step: the run was not cut short (`stopped` is None)."""
    from helpers import NanGradientAt

    keras.utils.set_random_seed(0)
    model = compiled(keras.Sequential(
        [keras.Input((4,)), keras.layers.Dense(6), NanGradientAt(3, name="root"),
         keras.layers.Dense(2)]
    ))  # fmt: skip
    x, y = data()
    monitor = GradientMonitor(every=100)
    model.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0, callbacks=[monitor])
    assert monitor.report.steps == 4
    assert [f.step for f in monitor.report.findings if f.code == "nonfinite"] == [4]
    assert monitor.report.stopped is None


def test_a_model_built_by_a_first_execution_of_several_steps_starts_after_it():
    x, y = data(96)
    model = small(input_layer=False)
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  steps_per_execution=2)  # fmt: skip
    monitor = GradientMonitor(every=2)
    model.fit(x, y, batch_size=16, epochs=2, verbose=0, callbacks=[monitor])
    report = monitor.report
    assert report.steps == 12 and report.losses[0] is None and report.losses[1] is not None
    assert [c.step for c in report.checkpoints] == [3, 5, 7, 9, 11, 12]
    assert any("steps 1-2 ran unmonitored" in n for n in report.notes)


def test_the_loss_of_each_output_is_named_as_compiled_an_output_without_one_too():
    """A list or dict of losses is named entry by entry; an output without a loss (None) says
    so by its type, as the fit report has always written it."""
    from layergrad.training.model_facts import loss_name

    assert loss_name(None) == ""
    assert loss_name("mse") == "mse"
    assert loss_name(["mse", None]) == "mse, NoneType"
    assert loss_name({"o1": "mse", "o2": None}) == "o1: mse, o2: NoneType"
    assert loss_name(keras.losses.MeanSquaredError()) == "mean_squared_error"


def test_a_measured_step_adds_no_op_that_check_numerics_refuses():
    # float16 outputs of 512 units near 10 sum past float16's largest value (65504): all
    # finite, so a fit under TensorFlow's check-numerics debugger must run, monitored or not
    keras.mixed_precision.set_global_policy("mixed_float16")
    tf.debugging.enable_check_numerics()
    try:
        rng = np.random.default_rng(1)
        x = np.abs(rng.standard_normal((64, 6))).astype("float32")
        keras.utils.set_random_seed(0)
        wide = keras.layers.Dense(512, activation="relu", name="wide",
                                  bias_initializer=keras.initializers.Constant(10.0))  # fmt: skip
        model = keras.Sequential(
            [keras.Input((6,)), wide, keras.layers.Dense(2, activation="softmax", dtype="float32")]
        )
        model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
        monitor = GradientMonitor(every=1)
        model.fit(x, (x[:, 0] > 0.5).astype("int32"), batch_size=32, verbose=0,
                  callbacks=[monitor])  # fmt: skip
    finally:
        tf.debugging.disable_check_numerics()
        keras.mixed_precision.set_global_policy("float32")
    row = monitor.report.checkpoints[0].layers[0]
    assert (row.layer, row.nonfinite_activation) == ("wide", 0)
