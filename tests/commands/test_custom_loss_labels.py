"""A custom loss reads its labels in its own layout: a policy-gradient `ActorLoss` reads `y` as
`[action, advantage]` against a softmax over the actions. No label rule applies to its output
(the width-2, signed labels are not a `target_mismatch` of the 2-unit softmax), and labels the
loss itself cannot read (an action beyond the head's units) are a `target_mismatch` naming
the loss's error, never a check that fails unexpectedly. A loss Keras ships, given labels that
do not fit its head, is still `target_mismatch`. The truth is how the labels are built."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from helpers import keras, random_labels

from layergrad.commands.check.check_files import CheckOptions, check_file
from layergrad.core.probe_options import ProbeOptions

LOSS_MODULE = '''
import keras
from keras import ops


@keras.saving.register_keras_serializable(package="rl_test")
class ActorLoss(keras.losses.Loss):
    """-log pi(action) * advantage, with y = [action, advantage] per sample."""

    def call(self, y_true, y_pred):
        action = ops.cast(y_true[:, 0:1], "int32")
        picked = ops.take_along_axis(y_pred, action, axis=1)[:, 0]
        return -ops.log(picked + 1e-8) * y_true[:, 1]
'''


@pytest.fixture(scope="module")
def actor(tmp_path_factory):
    """The loss module (registered, as `--import` registers it) and a policy compiled with it."""
    folder = tmp_path_factory.mktemp("actor")
    module = folder / "actor_loss.py"
    module.write_text(LOSS_MODULE)
    spec = importlib.util.spec_from_file_location("actor_loss", module)
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    keras.utils.set_random_seed(0)
    x = keras.Input((4,), name="state")
    h = keras.layers.Dense(16, activation="relu", name="hidden")(x)
    model = keras.Model(x, keras.layers.Dense(2, activation="softmax", name="policy")(h))
    model.compile("adam", loaded.ActorLoss())
    model.save(folder / "actor.keras")
    return folder, str(module)


def _episodes(folder, actions, name):
    rng = np.random.default_rng(0)
    states = rng.standard_normal((64, 4)).astype("float32")
    action = rng.integers(0, actions, 64)
    advantage = rng.standard_normal(64)
    np.savez(folder / name, x=states, y=np.stack([action, advantage], 1).astype("float32"))
    return str(folder / name)


def _checks(path, data, imports=()):
    options = CheckOptions(imports=tuple(imports), probe=ProbeOptions(data=data))
    return {c.name: c for c in check_file(path, options).checks}


def test_a_custom_loss_reads_its_own_label_layout(actor):
    folder, module = actor
    checks = _checks(folder / "actor.keras", _episodes(folder, 2, "episodes.npz"), [module])
    assert all(c.findings == () for c in checks.values()), {
        n: c.message for n, c in checks.items() if c.findings
    }
    assert "custom loss" in checks["targets"].message
    assert "get a gradient from the loss" in checks["trainable"].message


def test_labels_the_custom_loss_cannot_read_are_a_target_mismatch_not_an_error(actor):
    """Actions 0-2 for a head of 2 units: the loss's gather fails on them."""
    folder, module = actor
    checks = _checks(folder / "actor.keras", _episodes(folder, 3, "three.npz"), [module])
    found = {f for c in checks.values() for f in c.findings}
    assert found == {"target_mismatch"}, {n: c.message for n, c in checks.items()}
    message = checks["targets"].message
    assert "rl_test>ActorLoss" in message and "is not in [0, 2)" in message, message
    assert "[Op:" not in message


def test_a_loss_keras_ships_still_judges_the_labels(tmp_path):
    """The near miss: the same policy under sparse categorical cross-entropy, given class
    ids 0-2 for its 2 units."""
    keras.utils.set_random_seed(0)
    x = keras.Input((4,), name="state")
    model = keras.Model(x, keras.layers.Dense(2, activation="softmax", name="policy")(x))
    model.compile("adam", "sparse_categorical_crossentropy")
    model.save(tmp_path / "policy.keras")
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "ids.npz", x=rng.standard_normal((64, 4)).astype("float32"),
             y=rng.integers(0, 3, 64))  # fmt: skip
    checks = _checks(tmp_path / "policy.keras", str(tmp_path / "ids.npz"))
    assert checks["targets"].findings == ("target_mismatch",), checks["targets"].message
    assert "class ids must lie in 0 to 1" in checks["targets"].message
    assert not any("error" in c.findings for c in checks.values())


def test_random_labels_a_custom_loss_cannot_read_leave_trainable_unjudged(actor):
    """Without labels the gradient checks draw random ones, which the actor's gather cannot
    read (normal values cast to actions beyond 0-1): `trainable` says so; the file does not
    fail, and the forward pass, which ran, is judged."""
    folder, module = actor
    # seed 5's labels hold an action of 2 (by the formula, in numpy): beyond the 2 units
    assert (random_labels(5, 0, (32, 2), "normal")[:, 0] >= 2).any()
    options = CheckOptions(imports=(module,), probe=ProbeOptions(seed=5, batch_size=32))
    verdict = check_file(folder / "actor.keras", options)
    checks = {c.name: c for c in verdict.checks}
    assert verdict.passed, {n: c.message for n, c in checks.items()}
    assert checks["forward"].findings == () and "finite and varying" in checks["forward"].message
    assert "fails on random labels" in checks["trainable"].message
