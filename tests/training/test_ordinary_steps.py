"""GradientMonitor between checkpoints: an ordinary step reduces nothing unless it is the fit's
first non-finite one, which is still named at its own step; the callback's next fit of the
same compiled model runs the steps it traced again, with nothing left over from the last."""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers import NanAt, NanGradientAt, keras, tf

from layergrad import GradientMonitor
from layergrad.core.vocab import Finding


def data(n: int = 160, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 6)).astype("float32")
    return x, (x[:, 0] > 0).astype("int32")


def classifier(middle: keras.layers.Layer, seed: int = 0) -> keras.Model:
    keras.utils.set_random_seed(seed)
    return keras.Sequential(
        [
            keras.Input((6,)),
            keras.layers.Dense(8, name="first"),
            middle,
            keras.layers.Dense(2, activation="softmax", name="head"),
        ]
    )


class _WeightsAfter(keras.callbacks.Callback):
    """Each variable's values after the given batch's update."""

    def __init__(self, batch: int) -> None:
        super().__init__()
        self.batch, self.values = batch, []

    def on_train_batch_end(self, batch, logs=None):
        if batch == self.batch:
            self.values = [v.numpy().copy() for v in self.model.trainable_variables]


@pytest.mark.parametrize("every", [100, 6])
def test_a_nan_only_in_the_gradient_is_named_at_the_update_that_left_it(every):
    # Step 6's gradient of `first` is NaN, its loss finite: Keras's logs do not show it. Its
    # update makes first's weights NaN; step 7's loss is NaN, and its branch (every=100) or
    # its checkpoint (every=6: step 7 is measured) counts the NaN weights: the finding is at
    # step 7, and says the update before left them. Training stops after step 7.
    model = classifier(NanGradientAt(5, name="root"))
    model.compile(optimizer=keras.optimizers.SGD(0.5), loss="sparse_categorical_crossentropy")
    x, y = data()
    monitor, after = GradientMonitor(every=every), _WeightsAfter(5)
    model.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0,
              callbacks=[monitor, after])  # fmt: skip
    report = monitor.report
    (nonfinite,) = [f for f in report.findings if f.code == Finding.NONFINITE]
    assert (nonfinite.layer, nonfinite.step) == ("first", 7)
    assert nonfinite.message.startswith(
        "step 7 (epoch 0, batch 6): the weights of first (56 values) hold NaN/Inf, finite at "
        "the step before: its update"
    )
    assert report.stopped == "nonfinite" and report.steps == 7
    assert math.isfinite(report.losses[5]) and math.isnan(report.losses[6])
    # what the update left, counted apart: every value of first's kernel and bias, none of
    # head's (its gradient was finite, and the update moved it)
    left = [int((~np.isfinite(v)).sum()) for v in after.values]
    assert left == [6 * 8, 8, 0, 0]
    checkpoint = next(c for c in report.checkpoints if c.step == 7)
    rows = {r.layer: r for r in checkpoint.layers}
    assert (rows["first"].nonfinite_weight, rows["head"].nonfinite_weight) == (6 * 8 + 8, 0)
    assert rows["first"].nonfinite_activation == 16 * 8  # its output, from NaN weights
    assert [c.step for c in report.checkpoints] == [1, 7]
    assert all(r.nonfinite_weight == 0 for c in report.checkpoints[:-1] for r in c.layers)


def test_nan_weights_a_relu_hides_from_the_loss_are_named_at_the_next_checkpoint():
    # The NaN gradient of step 6 reaches first's kernel where its ReLU passed; compiled, the
    # ReLU fused to the layer's matmul outputs 0 for NaN, so every loss stays finite. The
    # checkpoint of step 9 (every=4) counts the NaN weights; they were finite at step 5's.
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((6,)),
            keras.layers.Dense(8, activation="relu", name="first"),
            NanGradientAt(5, name="root"),
            keras.layers.Dense(2, activation="softmax", name="head"),
        ]
    )
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="sparse_categorical_crossentropy")
    x, y = data()
    monitor, after = GradientMonitor(every=4), _WeightsAfter(7)
    model.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0,
              callbacks=[monitor, after])  # fmt: skip
    report = monitor.report
    assert all(math.isfinite(v) for v in report.losses)
    kernel, bias = (int((~np.isfinite(v)).sum()) for v in after.values[:2])
    assert kernel > 0 and kernel % 6 == 0  # whole columns: the units the ReLU passed
    (nonfinite,) = [f for f in report.findings if f.code == Finding.NONFINITE]
    assert (nonfinite.layer, nonfinite.step) == ("first", 9) and report.steps == 9
    assert nonfinite.message.startswith(
        f"step 9 (epoch 0, batch 8): the weights of first ({kernel + bias} values) hold "
        "NaN/Inf, finite at step 5: an update of steps 5 to 8"
    )


class _RowNanGradient(keras.layers.Layer):
    """Passes an Embedding's output through; on training call `at` (0-based) the gradient of
    the rows looked up for id 7 is NaN, and only theirs."""

    def __init__(self, at: int, **kwargs):
        super().__init__(**kwargs)
        self.at = at
        self.calls = self.add_weight(shape=(), initializer="zeros", trainable=False, name="calls")

    def call(self, inputs, training=None):
        embedded, ids = inputs
        if not training:
            return embedded
        self.calls.assign_add(1.0)
        hit = tf.logical_and(tf.equal(self.calls, float(self.at + 1)), tf.equal(ids, 7))[..., None]

        @tf.custom_gradient
        def passed(e):
            return tf.identity(e), lambda dy: dy + tf.where(hit, float("nan"), 0.0)

        return passed(embedded)


def test_nan_rows_an_embedding_looks_up_later_give_the_steps_they_may_come_from():
    # Step 6's gradient of row 7 is NaN; id 7 comes again only in step 15's batch, whose loss
    # it makes NaN. The rows other batches look up stay finite, so step 14's loss was finite
    # with the row already NaN: the finding gives steps 1 to 14, not "the step before".
    rng = np.random.default_rng(0)
    ids = rng.integers(8, 50, (320, 5)).astype("int32")
    ids[5 * 16, 0], ids[14 * 16 + 3, 2] = 7, 7
    keras.utils.set_random_seed(0)
    inputs = keras.Input((5,), dtype="int32")
    embedded = _RowNanGradient(5, name="poison")(
        [keras.layers.Embedding(50, 4, name="emb")(inputs), inputs]
    )
    pooled = keras.layers.GlobalAveragePooling1D()(embedded)
    model = keras.Model(inputs, keras.layers.Dense(2, activation="softmax", name="head")(pooled))
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="sparse_categorical_crossentropy")
    monitor, after = GradientMonitor(every=100), _WeightsAfter(13)
    model.fit(ids, ids[:, 0] % 2, batch_size=16, epochs=1, shuffle=False, verbose=0,
              callbacks=[monitor, after])  # fmt: skip
    held = int((~np.isfinite(after.values[0])).sum())
    assert held == 4  # row 7, as step 14 left it
    (nonfinite,) = [f for f in monitor.report.findings if f.code == Finding.NONFINITE]
    assert (nonfinite.layer, nonfinite.step) == ("emb", 15)
    assert monitor.report.stopped == "nonfinite" and monitor.report.steps == 15
    assert nonfinite.message.startswith(
        "step 15 (epoch 0, batch 14): the weights of emb (4 values) hold NaN/Inf, finite at "
        "step 1: an update of steps 1 to 14"
    )


def test_every_layer_whose_weights_hold_nan_is_listed_in_the_models_order():
    # step 6's NaN gradient reaches mid and first; mid's NaN output, hidden from the loss by
    # the fused ReLU of `after`, makes after's gradient, so its weights, NaN at step 7: the
    # checkpoint of step 9 finds all three
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((6,)),
            keras.layers.Dense(8, activation="tanh", name="first"),
            keras.layers.Dense(8, name="mid"),
            NanGradientAt(5, name="root"),
            keras.layers.Dense(8, activation="relu", name="after"),
            keras.layers.Dense(2, activation="softmax", name="head"),
        ]
    )
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="sparse_categorical_crossentropy")
    x, y = data()
    monitor, after = GradientMonitor(every=4), _WeightsAfter(7)
    model.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0,
              callbacks=[monitor, after])  # fmt: skip
    held = [int((~np.isfinite(v)).sum()) for v in after.values]
    counts = {n: held[2 * i] + held[2 * i + 1] for i, n in enumerate(("first", "mid", "after"))}
    assert all(counts.values()) and held[6:] == [0, 0]
    (nonfinite,) = [f for f in monitor.report.findings if f.code == Finding.NONFINITE]
    assert (nonfinite.layer, nonfinite.step) == ("after", 9)
    listed = ", ".join(f"{n} ({c} values)" for n, c in counts.items())
    assert f"the weights of {listed} hold NaN/Inf, finite at step 5" in nonfinite.message
    # a checkpoint's layer rows keep the variables whose weights are NaN
    last = {r.layer: r for r in monitor.report.checkpoints[-1].layers}
    for name in counts:
        mine = [v for v in monitor.report.checkpoints[-1].variables if v.layer == name]
        assert last[name].nonfinite_gradient == sum(v.nonfinite for v in mine)
        assert last[name].grad_l2 is not None and math.isnan(last[name].weight_l2)


class _Impute(keras.layers.Layer):
    def call(self, x):
        return tf.where(tf.math.is_nan(x), tf.zeros_like(x), x)


@pytest.mark.parametrize("every", [100, 3])
def test_nan_inputs_a_model_takes_by_design_are_no_finding(every):
    x, y = data()
    x[40::7, 3] = np.nan  # from step 3 on
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((6,), name="pixels"),
            _Impute(name="impute"),
            keras.layers.Dense(8, activation="relu", name="first"),
            keras.layers.Dense(2, activation="softmax", name="head"),
        ]
    )
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="sparse_categorical_crossentropy")
    monitor = GradientMonitor(every=every)
    model.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0, callbacks=[monitor])
    assert monitor.report.findings == () and monitor.report.steps == 10


def test_a_nan_gradient_beside_a_mask_of_minus_inf_is_put_down_to_its_layer():
    # every batch's mask holds -inf (the softmax takes it); step 6's gradient is NaN from
    # head0 down: the first checkpoint, on a masked batch, was finite, so the mask is not blamed
    rng = np.random.default_rng(0)
    tokens = rng.standard_normal((160, 4, 6)).astype("float32")
    mask = np.zeros((160, 4), "float32")
    mask[:, 3] = -np.inf
    keras.utils.set_random_seed(0)
    tok, bias = keras.Input((4, 6), name="tokens"), keras.Input((4,), name="mask_bias")
    scores = keras.layers.Reshape((4,))(keras.layers.Dense(1, name="score")(tok))
    weights = keras.layers.Softmax(name="attention")(keras.layers.Add()([scores, bias]))
    pooled = keras.layers.Dot(axes=(1, 1), name="pool")([weights, tok])
    hidden = keras.layers.Dense(8, activation="tanh", name="head0")(pooled)
    out = keras.layers.Dense(2, activation="softmax", name="head")(NanGradientAt(5)(hidden))
    model = keras.Model({"tokens": tok, "mask_bias": bias}, out)
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="sparse_categorical_crossentropy")
    monitor = GradientMonitor(every=100)
    model.fit({"tokens": tokens, "mask_bias": mask}, data()[1], batch_size=16, epochs=1,
              shuffle=False, verbose=0, callbacks=[monitor])  # fmt: skip
    (nonfinite,) = [f for f in monitor.report.findings if f.code == Finding.NONFINITE]
    assert (nonfinite.layer, nonfinite.step) == ("head0", 7)
    assert "finite at the step before: its update" in nonfinite.message


def test_weights_that_hold_nan_before_the_first_step_are_named_so():
    model = classifier(keras.layers.Activation("relu", name="relu"))
    kernel = model.get_layer("head").kernel
    kernel.assign(np.where(np.eye(8, 2) > 0, np.nan, kernel.numpy()))  # two NaN values
    model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
    x, y = data(64)
    monitor = GradientMonitor(every=100)
    model.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0, callbacks=[monitor])
    (nonfinite,) = [f for f in monitor.report.findings if f.code == Finding.NONFINITE]
    assert (nonfinite.layer, nonfinite.step) == ("head", 1)
    assert "the weights of head (2 values) hold NaN/Inf before the fit's first step" in (
        nonfinite.message
    )


def test_a_second_fit_reuses_the_steps_and_starts_afresh():
    model = classifier(NanAt(2, name="poison"))
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="sparse_categorical_crossentropy")
    x, y = data(16 * 6)
    start = [v.numpy().copy() for v in model.weights]
    monitor = GradientMonitor(every=4, stop_on_nonfinite=False)
    reports = []
    for _ in range(2):
        model.set_weights(start)  # the poison's call counter too: NaN again at call 2
        model.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0, callbacks=[monitor])
        reports.append(monitor.report)
    first, second = reports
    assert second.steps == first.steps == 6
    assert (
        [c.step for c in second.checkpoints] == [c.step for c in first.checkpoints] == [1, 3, 5, 6]
    )
    assert [(f.code, f.layer, f.step) for f in second.findings if f.code == Finding.NONFINITE] == [
        ("nonfinite", "poison", 3)
    ]
    assert second.losses[:2] == pytest.approx(first.losses[:2], rel=1e-6)
    # the second fit's first checkpoint is the tape's gradient at the starting weights
    model.set_weights(start)
    with tf.GradientTape() as tape:
        loss = keras.losses.SparseCategoricalCrossentropy()(y[:16], model(x[:16]))
    grads = tape.gradient(loss, model.trainable_variables)
    got = [v.grad_l2 for v in second.checkpoints[0].variables]
    np.testing.assert_allclose(got, [float(np.linalg.norm(g)) for g in grads], rtol=1e-5)


def test_a_recompiled_model_is_traced_again():
    model = classifier(keras.layers.Activation("relu", name="relu"))
    x, y = data(64)
    start = [v.numpy().copy() for v in model.weights]
    monitor, optimizer = GradientMonitor(every=100), keras.optimizers.SGD()
    model.compile(optimizer=optimizer, loss="sparse_categorical_crossentropy")
    model.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0, callbacks=[monitor])
    plain = monitor.report.losses[0]

    def doubled(y_true, y_pred):
        return 2.0 * keras.losses.sparse_categorical_crossentropy(y_true, y_pred)

    model.set_weights(start)
    model.compile(optimizer=optimizer, loss=doubled)  # the same optimizer, another loss
    model.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0, callbacks=[monitor])
    assert monitor.report.losses[0] == pytest.approx(2 * plain, rel=1e-5)


def test_a_model_run_eagerly_is_monitored_alike():
    x, y = data(64)
    records = []
    for eager in (False, True):
        model = classifier(keras.layers.Activation("relu", name="relu"))
        model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy", run_eagerly=eager)
        monitor = GradientMonitor(every=2)
        model.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0, callbacks=[monitor])
        records.append(monitor.report)
    graph, eager = records
    assert eager.losses == pytest.approx(graph.losses, rel=1e-5)
    assert [c.step for c in eager.checkpoints] == [c.step for c in graph.checkpoints] == [1, 3, 4]
    for a, b in zip(graph.checkpoints, eager.checkpoints, strict=True):
        np.testing.assert_allclose(
            [v.grad_l2 for v in b.variables], [v.grad_l2 for v in a.variables], rtol=1e-5
        )


def test_steps_a_loss_scale_optimizer_skips_record_their_loss_and_no_finding():
    # mixed float16 with inputs of size 1000: the scaled float16 gradients overflow on the
    # first steps, and the LossScaleOptimizer skips those updates (halving its scale)
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((6,)),
            keras.layers.Dense(16, activation="relu", dtype="mixed_float16", name="hidden"),
            keras.layers.Dense(2, activation="softmax", dtype="float32", name="head"),
        ]
    )
    optimizer = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(1e-6))
    model.compile(optimizer=optimizer, loss="sparse_categorical_crossentropy")
    x, y = data(16 * 20)
    x = x * 1000.0
    loss = float(keras.losses.SparseCategoricalCrossentropy()(y[:16], model(x[:16])))
    monitor = GradientMonitor(every=3)
    model.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0, callbacks=[monitor])
    report = monitor.report
    skipped = 20 - int(optimizer.iterations.numpy())
    assert 0 < skipped < 19 and report.steps == 20 and report.findings == ()
    assert report.losses[0] == pytest.approx(loss, rel=1e-3)  # float16 layers
    assert all(math.isfinite(v) for v in report.losses)
    assert report.learning_rate == pytest.approx(1e-6)
    assert all(c.learning_rate == pytest.approx(1e-6) for c in report.checkpoints)
    for c in report.checkpoints:  # the first `skipped` steps applied no gradient
        grads = [r.grad_l2 for r in c.layers]
        assert (grads == [None, None]) if c.step <= skipped else all(g > 0 for g in grads)


def test_gradients_whose_sum_overflows_are_no_finding_and_a_later_nan_is_still_named():
    # loss = 3e38 * mean(x @ w) on inputs of ones: every step's kernel gradient is 3e38 per
    # entry, finite, but the six sum to Inf; with a learning rate of 0 nothing changes, until
    # the poison's NaN on call 4
    model = keras.Sequential(
        [
            keras.Input((6,)),
            NanAt(4, name="poison"),
            keras.layers.Dense(
                1, use_bias=False, kernel_initializer=keras.initializers.Constant(0.01), name="big"
            ),
        ]
    )

    def huge(y_true, y_pred):
        return 3e38 * keras.ops.mean(y_pred)

    model.compile(optimizer=keras.optimizers.SGD(0.0), loss=huge)
    monitor = GradientMonitor(every=100)
    x = np.ones((16 * 8, 6), "float32")
    model.fit(x, np.zeros(16 * 8), batch_size=16, verbose=0, callbacks=[monitor])
    report = monitor.report
    assert report.losses[:4] == pytest.approx([3e38 * 0.06] * 4, rel=1e-5)
    (nonfinite,) = report.findings
    assert (nonfinite.code, nonfinite.layer, nonfinite.step) == ("nonfinite", "poison", 5)
    assert report.steps == 5 and [c.step for c in report.checkpoints] == [1, 5]
    first = report.checkpoints[0].variables[0]
    assert first.nonfinite == 0 and first.grad_l2 is not None and math.isinf(first.grad_l2)


@pytest.mark.parametrize(
    ("activation", "units", "loss", "labels"),
    [
        ("softmax", 3, "sparse_categorical_crossentropy", lambda y: y),
        ("sigmoid", 1, "binary_crossentropy", lambda y: y.astype("float32")[:, None]),
    ],
)
def test_the_first_nonfinite_step_counts_a_head_its_loss_looks_through(
    activation, units, loss, labels
):
    # Keras computes these losses from the head's logits, so an ordinary step never computes
    # the head's own output; its branch makes it again. `poison`'s NaN at training call 3
    # (NaN x 0 is NaN: all 16 x 8 of its values) reaches every value of the head, 16 rows x
    # its units, as a measuring step (every=1) counts them too.
    x, y = data()
    counted = {}
    for every in (100, 1):
        keras.utils.set_random_seed(0)
        model = keras.Sequential(
            [
                keras.Input((6,)),
                keras.layers.Dense(8, name="first"),
                NanAt(3, name="poison"),
                keras.layers.Dense(units, activation=activation, name="head"),
            ]
        )
        model.compile(optimizer="sgd", loss=loss)
        monitor = GradientMonitor(every=every)
        model.fit(x, labels(y), batch_size=16, epochs=1, shuffle=False, verbose=0,
                  callbacks=[monitor])  # fmt: skip
        (checkpoint,) = [c for c in monitor.report.checkpoints if c.step == 4]
        counted[every] = {r.layer: r.nonfinite_activation for r in checkpoint.layers}
    assert counted[100]["head"] == 16 * units and counted[100]["poison"] == 16 * 8
    assert counted[100] == counted[1]


def test_an_ordinary_step_never_hands_its_branch_a_head_its_loss_looks_through():
    # a branch's input is computed on every step, taken or not
    from layergrad.training.model_facts import layers_and_variables
    from layergrad.training.step_hook import StepHook

    model = classifier(keras.layers.Dense(8, activation="relu"))
    model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
    model.optimizer.build(model.trainable_variables)
    hook = StepHook(model, *layers_and_variables(model), histograms=False)
    with hook.installed():  # the ordinary step is the model's train_step
        specs = (tf.TensorSpec([16, 6], tf.float32), tf.TensorSpec([16], tf.int32))
        graph = tf.function(model.train_step).get_concrete_function(specs).graph
    branches = [op for op in graph.get_operations() if op.type in ("If", "StatelessIf")]
    assert len(branches) == 1  # the forward statistics' (the gradients have none)
    fed = [t.op for op in branches for t in op.inputs]
    # the logits (and the variables' handles, read only in the branch)
    assert [op.type for op in fed if "/head" in op.name and op.type != "Placeholder"] == ["BiasAdd"]


def test_a_monitored_fit_learns_the_same_weights_as_a_plain_one():
    # a hidden sigmoid gate is read by the next layer: the branch must capture the gate's
    # output itself (capturing its logits instead kept oneDNN from fusing the gate's ops, and
    # the weights came out different in their last bits)
    x, y = data(64)
    learned = []
    for callbacks in ([], [GradientMonitor(every=100)]):
        keras.utils.set_random_seed(0)
        inputs = keras.Input((6,))
        hidden = keras.layers.Dense(8, activation="relu", name="hidden")(inputs)
        gate = keras.layers.Dense(8, activation="sigmoid", name="gate")(hidden)
        mixed = keras.layers.Multiply(name="mix")([hidden, gate])
        head = keras.layers.Dense(3, activation="softmax", name="head")(mixed)
        model = keras.Model(inputs, head)
        model.compile(optimizer=keras.optimizers.SGD(0.05), loss="sparse_categorical_crossentropy")
        model.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0, callbacks=callbacks)
        learned.append([np.asarray(w) for w in model.weights])
    assert all(np.array_equal(a, b) for a, b in zip(*learned, strict=True))
