"""GradientMonitor under MirroredStrategy over two logical CPUs equals a one-device tape.

Logical CPU devices must be set before TensorFlow initialises its devices: a fresh process,
one for the module, that runs both scripts in turn over one MirroredStrategy (each prints one
JSON line)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from helpers import ROOT, keras, tf

pytestmark = pytest.mark.slow  # a fresh process

PRELUDE = """
import json
import numpy as np
from layergrad.data import devices
devices.split_cpu(2)
from layergrad import GradientMonitor
import keras, tensorflow as tf
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
"""

# each script below runs after PRELUDE, both in one process, with its strategy
SCRIPT = """
rng = np.random.default_rng(1)
x = rng.standard_normal((64, 6)).astype("float32")
y = (x[:, 0] > 0).astype("int32")
keras.utils.set_random_seed(0)
with strategy.scope():
    model = keras.Sequential([keras.Input((6,)),
                              keras.layers.Dense(12, activation="relu", name="hidden"),
                              keras.layers.Dense(2, activation="softmax", name="head")])
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="sparse_categorical_crossentropy")
weights = [v.numpy().tolist() for v in model.trainable_variables]
monitor = GradientMonitor(every=2)
reports = []
for _ in range(2):  # the second fit runs the steps the first traced, afresh
    for v, w in zip(model.trainable_variables, weights):
        v.assign(np.asarray(w, "float32"))
    model.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0, callbacks=[monitor])
    reports.append(monitor.report)
first = reports[0].checkpoints[0]
print(json.dumps({"replicas": strategy.num_replicas_in_sync, "loss": first.loss,
                  "grads": [v.grad_l2 for v in first.variables], "weights": weights,
                  "steps": [c.step for c in reports[0].checkpoints],
                  "again": [[v.grad_l2 for v in c.variables] for c in reports[1].checkpoints],
                  "losses": [r.losses for r in reports]}))
"""


@pytest.fixture(scope="module")
def printed() -> list[dict]:
    """What SCRIPT, then EMBEDDING (defined below), print in one new process."""
    done = subprocess.run(
        [sys.executable, "-c", PRELUDE + SCRIPT + EMBEDDING], capture_output=True, text=True,
        cwd=ROOT, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return [json.loads(line) for line in done.stdout.strip().splitlines()[-2:]]


def test_two_cpu_replicas_give_the_one_device_gradient(printed):
    got = printed[0]
    assert got["replicas"] == 2 and got["steps"] == [1, 3, 4]
    assert len(got["again"]) == 3 and got["again"][0] == pytest.approx(got["grads"], rel=1e-6)
    assert got["losses"][1] == pytest.approx(got["losses"][0], rel=1e-6)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((64, 6)).astype("float32")
    y = (x[:, 0] > 0).astype("int32")
    model = keras.Sequential(
        [
            keras.Input((6,)),
            keras.layers.Dense(12, activation="relu"),
            keras.layers.Dense(2, activation="softmax"),
        ]
    )
    for v, w in zip(model.trainable_variables, got["weights"], strict=True):
        v.assign(np.asarray(w, "float32"))
    with tf.GradientTape() as tape:
        loss = keras.losses.SparseCategoricalCrossentropy()(y[:16], model(x[:16], training=True))
    grads = tape.gradient(loss, model.trainable_variables)
    assert got["loss"] == pytest.approx(float(loss), rel=1e-5)
    want = [float(np.linalg.norm(g.numpy())) for g in grads]
    assert got["grads"] == pytest.approx(want, rel=1e-5)


EMBEDDING = """
ids = np.random.default_rng(2).integers(0, 20, (64, 5)).astype("int32")
y = np.arange(64) % 3
keras.utils.set_random_seed(0)
with strategy.scope():
    inputs = keras.Input((5,), dtype="int32", name="ids")
    pooled = keras.layers.GlobalAveragePooling1D()(keras.layers.Embedding(20, 8, name="emb")(inputs))
    model = keras.Model(inputs, keras.layers.Dense(3, activation="softmax", name="head")(pooled))
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="sparse_categorical_crossentropy")
table = model.get_layer("emb").embeddings
with tf.GradientTape() as tape:  # the first batch on one device, by hand
    loss = keras.losses.SparseCategoricalCrossentropy()(y[:16], model(ids[:16]))
grad = tf.convert_to_tensor(tape.gradient(loss, table))
monitor = GradientMonitor(every=1)
model.fit(ids, y, batch_size=16, epochs=1, shuffle=False, verbose=0, callbacks=[monitor])
first = monitor.report.checkpoints[0]
print(json.dumps({"steps": monitor.report.steps, "tape": float(tf.norm(grad)),
                  "grads": {v.variable: v.grad_l2 for v in first.variables}}))
"""


def test_an_embedding_model_over_two_cpu_replicas_is_monitored(printed):
    # summed over the replicas, the table's IndexedSlices lost their static shape, and the
    # monitor stopped a fit that trains without it
    got = printed[1]
    assert got["steps"] == 4
    assert got["grads"]["emb/embeddings"] == pytest.approx(got["tape"], rel=1e-5)
