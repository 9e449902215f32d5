"""GradientMonitor under `model.compile(steps_per_execution=k)`: Keras runs k steps per call and
calls the callback once after them. The monitor counts optimizer steps all the same: every
step's loss, checkpoints at the steps `every` names, each one its own step's gradient, checked
against a hand-written training loop (tape.gradient and optimizer.apply, step by step)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers import NanAt, keras, tf

from layergrad import GradientMonitor
from layergrad.core.vocab import Finding

BATCH, LR = 16, 0.1


def model_and_data(seed: int = 0):
    keras.utils.set_random_seed(seed)
    model = keras.Sequential(
        [
            keras.Input((6,)),
            keras.layers.Dense(10, activation="relu", name="hidden"),
            keras.layers.Dense(3, activation="softmax", name="head"),
        ]
    )
    rng = np.random.default_rng(seed + 1)
    x = rng.standard_normal((BATCH * 10, 6)).astype("float32")  # 10 batches: 4 + 4 + 2 per epoch
    y = (x[:, 0] > 0).astype("int32") + (x[:, 1] > 0.5).astype("int32")
    return model, x, y


def monitored(k: int, every: int, epochs: int = 2, **monitor):
    model, x, y = model_and_data()
    model.compile(
        optimizer=keras.optimizers.SGD(LR),
        loss="sparse_categorical_crossentropy",
        steps_per_execution=k,
    )
    found = GradientMonitor(every=every, **monitor)
    model.fit(x, y, batch_size=BATCH, epochs=epochs, shuffle=False, verbose=0, callbacks=[found])
    return found.report


def by_hand(epochs: int = 2):
    """Each step's loss, and each variable's gradient and weight norms before its update, from
    a plain loop over the same batches: tape.gradient, then SGD's apply."""
    model, x, y = model_and_data()
    optimizer = keras.optimizers.SGD(LR)
    loss_fn = keras.losses.SparseCategoricalCrossentropy()
    losses, grads, weights = [], [], []
    for _ in range(epochs):
        for start in range(0, len(x), BATCH):
            xb, yb = x[start : start + BATCH], y[start : start + BATCH]
            weights.append([float(np.linalg.norm(v.numpy())) for v in model.trainable_variables])
            with tf.GradientTape() as tape:
                loss = loss_fn(yb, model(xb, training=True))
            g = tape.gradient(loss, model.trainable_variables)
            grads.append([float(np.linalg.norm(t.numpy())) for t in g])
            losses.append(float(loss))
            optimizer.apply(g, model.trainable_variables)
    return losses, grads, weights


def test_every_step_is_an_optimizer_step_with_its_own_gradient():
    losses, grads, weights = by_hand()
    report = monitored(4, every=3)
    assert report.steps == 20  # 2 epochs of 10 batches, in executions of 4, 4 and 2 steps
    assert report.losses == pytest.approx(losses, rel=1e-5)
    # every 3 steps from the first, and the last: steps inside an execution included
    assert [c.step for c in report.checkpoints] == [1, 4, 7, 10, 13, 16, 19, 20]
    assert [(c.epoch, c.batch) for c in report.checkpoints] == [
        (0, 0), (0, 3), (0, 6), (0, 9), (1, 2), (1, 5), (1, 8), (1, 9)
    ]  # fmt: skip
    for c in report.checkpoints:
        assert c.loss == pytest.approx(losses[c.step - 1], rel=1e-5)
        got = [[v.grad_l2 for v in c.variables], [v.weight_l2 for v in c.variables]]
        want = [grads[c.step - 1], weights[c.step - 1]]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("k", [1, 3])
def test_every_loss_of_a_fit_longer_than_the_ring_is_its_own_step(k):
    # 80 steps: the callback reads the losses every 64 steps of one execution and at the
    # checkpoints, so with k = 1 the ring of losses wraps round between reads
    losses, _, _ = by_hand(epochs=8)
    report = monitored(k, every=1000, epochs=8)
    assert report.steps == 80 and report.losses == pytest.approx(losses, rel=1e-5)
    assert [c.step for c in report.checkpoints] == [1, 80]


def test_the_same_record_as_one_step_per_execution():
    one, four = monitored(1, every=2), monitored(4, every=2)
    assert four.steps == one.steps and four.losses == pytest.approx(one.losses, rel=1e-6)
    assert [c.step for c in four.checkpoints] == [c.step for c in one.checkpoints]
    for a, b in zip(one.checkpoints, four.checkpoints, strict=True):
        assert (a.epoch, a.batch) == (b.epoch, b.batch)
        assert [r.layer for r in b.layers] == [r.layer for r in a.layers]
        got = [[r.grad_l2, r.update_ratio, r.dead_fraction] for r in b.layers]
        want = [[r.grad_l2, r.update_ratio, r.dead_fraction] for r in a.layers]
        np.testing.assert_allclose(got, want, rtol=1e-5)
    assert [f.code for f in four.findings] == [f.code for f in one.findings]


def test_tensorboard_steps_are_optimizer_steps(tmp_path):
    from tensorboard.backend.event_processing import event_accumulator

    report = monitored(4, every=5, epochs=1, log_dir=tmp_path / "logs")
    acc = event_accumulator.EventAccumulator(
        str(tmp_path / "logs"), size_guidance={event_accumulator.TENSORS: 0}
    )
    acc.Reload()
    steps = [e.step for e in acc.Tensors("layergrad/grad_l2/hidden")]
    assert steps == [c.step for c in report.checkpoints] == [1, 6, 10]
    for event, c in zip(acc.Tensors("layergrad/grad_l2/hidden"), report.checkpoints, strict=True):
        want = next(r.grad_l2 for r in c.layers if r.layer == "hidden")
        assert float(tf.make_ndarray(event.tensor_proto)) == pytest.approx(want, rel=1e-6)
    counts = tf.make_ndarray(acc.Tensors("layergrad/gradient/hidden")[1].tensor_proto)
    assert counts[:, 2].sum() == 6 * 10 + 10  # step 6's histogram: every gradient value once


def test_a_nan_inside_an_execution_is_named_at_its_own_step():
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((6,)),
            keras.layers.Dense(8, activation="relu", name="before"),
            NanAt(5, name="poison"),  # the 6th step: the second of the second execution
            keras.layers.Dense(3, activation="softmax", name="after"),
        ]
    )
    model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy", steps_per_execution=4)
    _, x, y = model_and_data()
    monitor = GradientMonitor(every=100)
    model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0, callbacks=[monitor])
    report = monitor.report
    (nonfinite,) = [f for f in report.findings if f.code == Finding.NONFINITE]
    assert (nonfinite.layer, nonfinite.step) == ("poison", 6) and "batch 5" in nonfinite.message
    assert report.stopped == "nonfinite"
    # the execution's last steps ran before Keras could stop: they are recorded too
    assert report.steps == 8 and all(math.isfinite(v) for v in report.losses[:5])
    assert [c.step for c in report.checkpoints] == [1, 6]
