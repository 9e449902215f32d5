"""Each failure cause: a committed sample model, the status it must give, and the top cause.

The expected cause and layer come from how each model was built (sample_models/README.md);
the statuses are confirmed there with a manual GradientTape, independently of layergrad.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import CUSTOM_LAYERS, keras, sample, tf

from layergrad.commands.api import inspect_model

CASES = [
    # model, --from, --to, extra options, status, top cause, its layer, its op (or None)
    ("cause_argmax.keras", "dense", "head", {}, "none", "non_differentiable_op", "argmax", "ArgMax"),
    ("cause_round.keras", "dense", "head", {}, "none", "non_differentiable_op", "round", "Round"),
    ("cause_cast_int.keras", "dense", "head", {}, "none", "non_differentiable_op", "cast", "Cast to int32"),
    ("cause_numpy_function.keras", "dense", "head", {}, "none", "non_differentiable_op", "numpy_fn", "PyFunc"),
    ("cause_stop_gradient.keras", "dense", "head", {}, "none", "stop_gradient", "stop", "StopGradient"),
    ("cause_dead_relu.keras", "dense", "head", {}, "zero", "dead_relu", "dead", None),
    ("cause_saturated.keras", "dense", "head", {}, "zero", "saturated", "squash", None),
    ("cause_nan_weights.keras", "dense", "head", {}, "nonfinite", "nonfinite_forward", "broken", None),
    ("cause_sqrt.keras", "dense", "head", {}, "nonfinite", "nonfinite_backward", "sqrt", "Sqrt"),
    ("cause_sqrt.keras", "relu", "head", {}, "nonfinite", "nonfinite_backward", "sqrt", "Sqrt"),
    ("cause_training.keras", "dense", "bn", {"training": True}, "zero", "training_mode", "bn", None),
    ("cause_float16.keras", "dense", "head", {}, "zero", "float16_underflow", "tiny", None),
    ("embedding.keras", "ids", "head", {}, "none", "integer_path", "ids", None),
    ("residual.keras", "side", "head", {}, "none", "not_downstream", "head", None),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "source", "target", "options", "status", "code", "layer", "op"), CASES
)
def test_cause_is_found(name, source, target, options, status, code, layer, op):
    report = inspect_model(sample(name), source, [target], imports=[CUSTOM_LAYERS], **options)
    (res,) = report.results
    assert res.status == status
    assert res.causes, "a non-ok result always has at least one cause"
    top = res.causes[0]
    assert (top.code, top.layer) == (code, layer)
    assert top.op == op
    assert top.message and top.hint


def test_cast_to_int_also_names_the_integer_path():
    (res,) = inspect_model(
        sample("cause_cast_int.keras"), "dense", ["head"], imports=[CUSTOM_LAYERS]
    ).results
    assert [c.code for c in res.causes] == ["non_differentiable_op", "integer_path"]


def test_dead_relu_reports_the_fraction_of_dead_units():
    # Every unit of 'dead' has bias -1000 while |x @ W| is far smaller, so all 4 are dead.
    (res,) = inspect_model(sample("cause_dead_relu.keras"), "dense", ["head"]).results
    assert "100% of the ReLU units" in res.causes[0].message


def test_training_zero_is_ok_in_inference():
    (res,) = inspect_model(sample("cause_training.keras"), "dense", ["bn"]).results
    assert res.status == "ok" and res.causes == ()


def test_after_the_blocking_layer_the_gradient_is_fine():
    (res,) = inspect_model(
        sample("cause_argmax.keras"), "argmax", ["head"], imports=[CUSTOM_LAYERS]
    ).results
    assert res.status == "ok" and res.causes == ()


def test_zero_weights_make_a_constant_output(tmp_path):
    # A Dense layer with an all-zero kernel outputs its bias whatever its input.
    x = keras.Input((3,), name="x")
    h = keras.layers.Dense(3, name="h")(x)
    zeroed = keras.layers.Dense(2, name="zeroed", kernel_initializer="zeros")(h)
    path = tmp_path / "zeroed.keras"
    keras.Model(x, zeroed).save(path)
    (res,) = inspect_model(path, "h", ["zeroed"]).results
    assert res.status == "zero"
    assert [(c.code, c.layer) for c in res.causes] == [("constant_output", "zeroed")]
    assert "weights are all zero" in res.causes[0].message


def test_the_unknown_cause_says_what_was_checked():
    from layergrad.diagnose import causes

    cause = causes.cause("unknown")
    assert cause.code == "unknown" and cause.layer is None
    for checked in ("graph connectivity", "dtypes", "ops", "NaN/Inf", "float16", "training mode"):
        assert checked in cause.message


HEALTHY = [
    ("seed.keras", "dense", "dense_2"),
    ("seed.h5", "dense", "dense_1"),
    ("sequential_add.keras", "dense", "dense_2"),
    ("residual.keras", "stem", "head"),
    ("nested.keras", "encoder/dense", "head"),
    ("shared.keras", "shared@0", "head"),
    ("two_input.keras", "a", "head"),
    ("embedding.keras", "embedding", "head"),
    ("hand_set.keras", "a", "b"),
]


@pytest.mark.parametrize(("name", "source", "target"), HEALTHY)
def test_healthy_models_get_no_causes_or_warnings(name, source, target):
    (res,) = inspect_model(sample(name), source, [target]).results
    assert res.status == "ok"
    assert res.causes == () and res.warnings == ()


def test_vanishing_gradient_is_a_warning_not_a_status(tmp_path):
    # d sum(b) / d a = 1e-9 exactly per element (kernel filled by hand): ok, but vanishing.
    x = keras.Input((2,), name="x")
    a = keras.layers.Dense(2, name="a")(x)
    b_layer = keras.layers.Dense(1, name="b", use_bias=False)
    model = keras.Model(x, b_layer(a))
    b_layer.set_weights([np.full((2, 1), 1e-9, "float32")])
    path = tmp_path / "tiny.keras"
    model.save(path)
    (res,) = inspect_model(path, "a", ["b"]).results
    assert res.status == "ok"
    np.testing.assert_allclose(res.array, np.full((8, 2), 1e-9), rtol=1e-6)
    assert res.warnings and res.warnings[0].startswith("vanishing")


def test_cause_panel_in_the_table():
    from click.testing import CliRunner

    from layergrad.cli.app import main

    result = CliRunner().invoke(
        main,
        ["inspect", sample("cause_round.keras"), "--import", CUSTOM_LAYERS,
         "--from", "dense", "--to", "head"],
    )  # fmt: skip
    assert result.exit_code == 0
    assert "non_differentiable_op at round (op Round)" in result.output
    assert "fix:" in result.output


def test_integer_ids_give_the_integer_path_alone(tmp_path):
    """ids -> Embedding -> LSTM -> softmax: the ids have no gradient because they are integers;
    the Embedding's own index ops (a comparison) are not a second, misleading cause."""
    tokens = keras.Input((7,), dtype="int32", name="tokens")
    emb = keras.layers.Embedding(20, 8, name="emb")(tokens)
    out = keras.layers.Dense(3, activation="softmax", name="out")(
        keras.layers.LSTM(6, name="lstm")(emb)
    )
    keras.Model(tokens, out).save(tmp_path / "text.keras")
    (res,) = inspect_model(str(tmp_path / "text.keras"), "tokens", ["out"]).results
    assert res.status == "none"
    assert [(c.code, c.layer) for c in res.causes] == [("integer_path", "tokens")]


def test_check_names_the_float16_underflow_of_a_stock_layer():
    """cause_float16: 'head' sums values of about 1e-9 in float16, which rounds them to 0, so
    its output is the same for every sample. check says float16, not 'read the call()' of a
    Dense."""
    from layergrad import check_files

    (verdict,) = check_files([sample("cause_float16.keras")])
    (forward,) = [c for c in verdict.checks if c.name == "forward"]
    assert "float16" in forward.message and "call()" not in forward.message
    assert "dtype='float32'" in forward.message


def test_units_whose_gradient_float16_rounds_to_zero_are_not_called_dead(tmp_path):
    """A mixed_float16 model from a hidden ReLU layer to a Dense whose kernel rows are 1e-6
    for 4 units and 1e-9 for the other 28: by hand the gradient of the sum is each row's sum,
    and float16 holds 1e-6 (as a subnormal) but rounds 1e-9 to 0 (its smallest value is
    6e-8). Those 28 units are alive (each positive for some sample of the batch, checked
    here), so the warning says float16 may have rounded them, besides dead."""
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        keras.utils.set_random_seed(11)
        x = keras.Input((10,), name="x")
        h = keras.layers.Dense(32, activation="relu", name="d1")(x)
        small = keras.layers.Dense(3, name="small")
        model = keras.Model(x, small(h))
    finally:
        keras.mixed_precision.set_global_policy("float32")
    kernel = np.full((32, 3), 1e-9 / 3, "float32")
    kernel[:4] = 1e-6 / 3
    small.set_weights([kernel, np.zeros(3, "float32")])
    model.save(tmp_path / "mixed.keras")
    batch = np.random.default_rng(0).normal(size=(16, 10)).astype("float32")
    np.save(tmp_path / "x.npy", batch)
    (res,) = inspect_model(str(tmp_path / "mixed.keras"), "d1", ["small"],
                           input_file=str(tmp_path / "x.npy")).results  # fmt: skip
    active = np.asarray(model.get_layer("d1")(batch), np.float32).max(axis=0) > 0
    assert active[4:].all() and res.status == "ok"
    row = np.float16(1e-6 / 3)  # a row of the kernel in float16, summed in float16
    assert res.gradient.max_abs == pytest.approx(float(row + row + row), rel=1e-3)
    assert np.float16(1e-9 / 3) == 0
    zero = [w for w in res.warnings if "exactly zero" in w]
    assert zero and "or float16 rounded it to 0" in zero[0], res.warnings


def test_a_softmax_target_whose_sum_is_exactly_one_names_the_softmax(tmp_path):
    """A head of two softmax units whose logits are 1e4 and -5e3 times one hidden sum: for
    every sample the softmax is exactly [1, 0] or [0, 1] by the sign of that sum ([0.5, 0.5]
    where it is 0), so the outputs vary between samples while their sum is exactly 1 and its
    gradient exactly 0 (by hand: d sum / d logits = p * (1 - sum p) = 0). The cause is the
    softmax target, whose sum no layer before can move, saturated or not (`:logits` the fix),
    said once; taken at its logits the gradient is not zero."""
    keras.utils.set_random_seed(3)
    x = keras.Input((5,), name="x")
    hidden = keras.layers.Dense(6, activation="relu", name="hidden")(x)
    head = keras.layers.Dense(2, activation="softmax", name="head")
    model = keras.Model(x, head(hidden))
    column = np.random.default_rng(0).normal(size=(6, 1)).astype("float32")
    head.set_weights([np.hstack([1e4 * column, -5e3 * column]), np.zeros(2, "float32")])
    model.save(tmp_path / "m.keras")
    batch = np.random.default_rng(1).normal(size=(16, 5)).astype("float32")
    np.save(tmp_path / "x.npy", batch)
    out = np.asarray(model(batch))
    assert {0.0, 1.0} <= set(out[:, 0].tolist()) <= {0.0, 0.5, 1.0}  # saturated (0.5: h = 0)
    assert np.all(out.sum(axis=1) == 1.0)
    path, probe = str(tmp_path / "m.keras"), str(tmp_path / "x.npy")
    (res,) = inspect_model(path, "hidden", ["head"], input_file=probe).results
    assert res.status == "zero"
    assert [(c.code, c.rule, c.layer) for c in res.causes] == [
        ("constant_output", "constant_output/softmax_sum", "head")
    ]
    assert "--to head:logits" in res.causes[0].hint
    assert not [w for w in res.warnings if "ends in softmax" in w]  # said once, as the cause
    (logits,) = inspect_model(path, "hidden", ["head:logits"], input_file=probe).results
    assert logits.status == "ok" and not logits.causes


def test_a_softmax_target_that_is_constant_keeps_its_own_cause():
    """bug_softmax_one_unit: a softmax over one unit is 1.0 for every sample, so its logits
    are no way out; the cause stays the constant output (make_samples.py), not the sum."""
    (res,) = inspect_model(sample("bug_softmax_one_unit.keras"), "x", ["head"]).results
    assert res.status == "zero"
    assert res.causes[0].rule == "constant_output/softmax_one_unit", res.causes
    assert all(c.rule != "constant_output/softmax_sum" for c in res.causes)


def _blocked_by_tape(model, source: str, target: str, x) -> bool:
    """The seed's manual tape: watch `source`'s output, differentiate `target`'s sum."""
    inner = keras.Model(model.inputs, [model.get_layer(source).output])
    head = keras.Model(model.get_layer(source).output, model.get_layer(target).output)
    with tf.GradientTape() as tape:
        h = inner(x)
        tape.watch(h)
        y = head(h)
    return tape.gradient(tf.reduce_sum(y), h) is None


@pytest.mark.parametrize(
    ("op", "make", "tf_op"),
    [
        ("round", lambda d: keras.ops.round(d), "Round"),
        ("argmax", lambda d: keras.ops.expand_dims(
            keras.ops.cast(keras.ops.argmax(d, axis=-1), "float32"), -1), "ArgMax"),
    ],
)  # fmt: skip
def test_a_keras_ops_call_between_layers_is_named_as_the_blocker(tmp_path, op, make, tf_op):
    # A functional model's `keras.ops` call is an operation of the model, not a layer: no
    # layer's call() holds it, so the blocker is found in the operations before the layer.
    x = keras.Input((4,), name="x")
    dense = keras.layers.Dense(6, name="dense")(x)
    after = keras.layers.Dense(3, name="after")(make(dense))
    model = keras.Model(x, keras.layers.Dense(2, name="head")(after))
    path = tmp_path / f"{op}.keras"
    model.save(path)
    batch = np.random.default_rng(0).standard_normal((8, 4)).astype("float32")
    assert _blocked_by_tape(model, "dense", "head", batch)
    (res,) = inspect_model(path, "dense", ["head"]).results
    assert res.status == "none"
    top = res.causes[0]
    assert (top.code, top.layer, top.op) == ("non_differentiable_op", "after", tf_op)
    # (Keras numbers a name taken before in the process: round_1)
    assert f"the functional operation '{op}" in top.message and "keras.ops" in top.hint


def test_argmax_inside_a_layer_is_named_not_its_nan_comparison(tmp_path):
    # keras.ops.argmax compares for NaN on a side path (Equal) before its ArgMax: the ArgMax
    # is what stops the gradient, and what the cause names
    @keras.saving.register_keras_serializable("layergrad_test")
    class HardPick(keras.layers.Layer):
        def call(self, x):
            return keras.ops.one_hot(keras.ops.argmax(x, axis=-1), 3)

    x = keras.Input((4,), name="x")
    dense = keras.layers.Dense(3, name="dense")(x)
    model = keras.Model(x, keras.layers.Dense(2, name="head")(HardPick(name="pick")(dense)))
    path = tmp_path / "pick.keras"
    model.save(path)
    (res,) = inspect_model(path, "dense", ["head"], unsafe=True).results  # (our own class)
    assert res.status == "none"
    assert (res.causes[0].layer, res.causes[0].op) == ("pick", "ArgMax")


def test_the_blocking_operation_is_found_on_the_path_through_nested_models(tmp_path):
    def encoder():  # a nested model that rounds its input first
        i = keras.Input((6,), name="enc_in")
        return keras.Model(i, keras.layers.Dense(3, name="enc_d")(keras.ops.round(i)), name="enc")

    # the nested model called twice: its second call's round is found too
    x = keras.Input((4,), name="x")
    d1, d2 = keras.layers.Dense(6, name="d1")(x), keras.layers.Dense(6, name="d2")(x)
    enc = encoder()
    cat = keras.layers.Concatenate(name="cat")([enc(d1), enc(d2)])
    twice = keras.Model(x, keras.layers.Dense(2, name="head")(cat))
    twice.save(tmp_path / "twice.keras")
    # an operation before a nested model, and a Floor on a side branch the path does not take
    x = keras.Input((4,), name="x")
    dense, side = keras.layers.Dense(6, name="dense")(x), keras.layers.Dense(6, name="side")(x)
    inner = keras.Input((6,), name="inner_in")
    wrap = keras.Model(inner, keras.layers.Dense(6, name="inner_d")(inner), name="wrap")
    mixed = keras.ops.multiply(wrap(keras.ops.round(dense)), keras.ops.floor(side))
    before = keras.Model(x, keras.layers.Dense(2, name="head")(mixed))
    before.save(tmp_path / "before.keras")
    batch = np.random.default_rng(0).standard_normal((8, 4)).astype("float32")
    with tf.GradientTape() as tape:  # the seed's tape, the operations written out by hand
        h = before.get_layer("dense")(batch)
        tape.watch(h)
        floor = keras.ops.floor(before.get_layer("side")(batch))
        out = before.get_layer("head")(before.get_layer("wrap")(keras.ops.round(h)) * floor)
    assert tape.gradient(tf.reduce_sum(out), h) is None
    layer = twice.get_layer
    for watched in ("d1", "d2"):  # the seed's tape through the shared encoder, by hand
        with tf.GradientTape() as tape:
            h = {name: layer(name)(batch) for name in ("d1", "d2")}
            tape.watch(h[watched])
            out = layer("head")(layer("cat")([layer("enc")(h["d1"]), layer("enc")(h["d2"])]))
        assert tape.gradient(tf.reduce_sum(out), h[watched]) is None
    for name, source, layer in (
        ("twice", "d1", "enc/enc_d"), ("twice", "d2", "enc/enc_d@1"), ("before", "dense", "wrap/inner_d")
    ):  # fmt: skip
        (res,) = inspect_model(tmp_path / f"{name}.keras", source, ["head"]).results
        top = res.causes[0]
        assert (top.code, top.layer, top.op) == ("non_differentiable_op", layer, "Round"), top
