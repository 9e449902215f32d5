"""Gradients from `inspect_model` equal independent computations on every kind of model."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from helpers import (
    finite_difference,
    keras,
    load_sample,
    manual_gradient,
    nested_layers,
    normal,
    sample,
    summed,
    tf,
)

from layergrad.cli.app import main
from layergrad.commands.api import inspect_model

RTOL, ATOL = 1e-5, 1e-6


def only(report):
    (result,) = report.results
    return result


@pytest.mark.parametrize("name", ["seed.keras", "seed.h5", "sequential_add.keras"])
def test_sequential_reloaded_matches_seed_recipe(name, write_input):
    x = normal(8, 5)
    m = load_sample(name)
    dense, dense_1 = m.get_layer("dense"), m.get_layer("dense_1")
    expected = manual_gradient(dense, dense_1, x)
    res = only(inspect_model(sample(name), "dense", ["dense_1"], input_file=write_input(x)))
    assert res.status == "ok"
    assert res.source.shape == (8, 8) and res.target.layer == "dense_1"
    np.testing.assert_allclose(res.array, expected, rtol=RTOL, atol=ATOL)
    fd = finite_difference(summed(dense_1), dense(x).numpy())
    np.testing.assert_allclose(res.array, fd, rtol=1e-2, atol=1e-3)


def test_hand_set_weights_give_the_value_on_paper(write_input):
    # b = a @ [[5], [6]] with no bias or activation, so d sum(b) / d a = [5, 6] in every row.
    x = normal(3, 2)
    res = only(inspect_model(sample("hand_set.keras"), "a", ["b"], input_file=write_input(x)))
    np.testing.assert_array_equal(res.array, np.tile([5.0, 6.0], (3, 1)))
    assert res.gradient.l2 == pytest.approx(np.sqrt(3 * (25 + 36)))
    assert res.gradient.max_abs == 6.0
    # from the input: d sum(b) / d x = W_a @ W_b = [[1*5 + 2*6], [3*5 + 4*6]] = [17, 39]
    res = only(inspect_model(sample("hand_set.keras"), "x", ["b"], input_file=write_input(x)))
    np.testing.assert_array_equal(res.array, np.tile([17.0, 39.0], (3, 1)))


def test_mean_reduction_divides_by_target_size(write_input):
    x = normal(4, 2)
    res = only(
        inspect_model(
            sample("hand_set.keras"), "a", ["b"], input_file=write_input(x), reduce="mean"
        )
    )
    np.testing.assert_allclose(res.array, np.tile([5.0, 6.0], (4, 1)) / 4)


def test_residual_add_counts_both_paths(write_input):
    x = normal(8, 8)
    m = load_sample("residual.keras")
    stem, block, head = (m.get_layer(n) for n in ("stem", "block", "head"))
    rest = lambda h: head(h + block(h))  # noqa: E731  (the skip connection written by hand)
    expected = manual_gradient(stem, rest, x)
    res = only(inspect_model(sample("residual.keras"), "stem", ["head"], input_file=write_input(x)))
    np.testing.assert_allclose(res.array, expected, rtol=RTOL, atol=ATOL)
    fd = finite_difference(summed(rest), stem(x).numpy())
    np.testing.assert_allclose(res.array, fd, rtol=1e-2, atol=1e-3)


def test_sibling_and_reversed_layers_are_not_downstream():
    report = inspect_model(sample("residual.keras"), "side", ["head", "stem"])
    sibling, reversed_ = report.results
    for res in (sibling, reversed_):
        assert res.status == "none"
        assert res.gradient is None
        assert res.causes[0].code == "not_downstream"
    assert "swap" in reversed_.causes[0].hint


def test_nested_model_paths(write_input):
    x = normal(8, 6)
    inner, inner_1, head = nested_layers()
    path = sample("nested.keras")
    res = only(inspect_model(path, "encoder/dense", ["encoder/dense_1"], input_file=write_input(x)))
    np.testing.assert_allclose(res.array, manual_gradient(inner, inner_1, x), rtol=RTOL, atol=ATOL)
    res = only(inspect_model(path, "encoder/dense_1", ["head"], input_file=write_input(x)))
    expected = manual_gradient(lambda t: inner_1(inner(t)), head, x)
    np.testing.assert_allclose(res.array, expected, rtol=RTOL, atol=ATOL)
    assert res.source.layer == "encoder/dense_1"


def test_shared_layer_second_call(write_input):
    x = normal(8, 6)
    m = load_sample("shared.keras")
    pre, shared, head = (m.get_layer(n) for n in ("pre", "shared", "head"))
    path = sample("shared.keras")
    res = only(inspect_model(path, "shared@0", ["shared@1"], input_file=write_input(x)))
    expected = manual_gradient(lambda t: shared(pre(t)), shared, x)
    np.testing.assert_allclose(res.array, expected, rtol=RTOL, atol=ATOL)
    res = only(inspect_model(path, "pre", ["shared@1"], input_file=write_input(x)))
    expected = manual_gradient(pre, lambda h: shared(shared(h)), x)
    np.testing.assert_allclose(res.array, expected, rtol=RTOL, atol=ATOL)
    fd = finite_difference(summed(lambda h: shared(shared(h))), pre(x).numpy())
    np.testing.assert_allclose(res.array, fd, rtol=1e-2, atol=1e-3)
    res = only(inspect_model(path, "shared@1", ["head"], input_file=write_input(x)))
    expected = manual_gradient(lambda t: shared(shared(pre(t))), head, x)
    np.testing.assert_allclose(res.array, expected, rtol=RTOL, atol=ATOL)
    res = only(inspect_model(path, "shared@1", ["shared@0"], input_file=write_input(x)))
    assert res.status == "none" and res.causes[0].code == "not_downstream"


def test_a_layer_named_like_a_call_is_that_layer(tmp_path, write_input):
    # Keras allows `@` in a name: `d@1` is the layer so named, not call 1 of `d`. With hand-set
    # kernels: head@2 = h @ [[5], [6]], so d sum(head@2) / d h = [5, 6] in every row (h = `d@1`),
    # and h = g @ diag(1, 2), so d sum(h) / d g = [1, 2] (g = `d`, called once)
    dense = keras.layers.Dense
    model = keras.Sequential(
        [keras.Input((2,)), dense(2, use_bias=False, name="d"),
         dense(2, use_bias=False, name="d@1"), dense(1, use_bias=False, name="head@2")]
    )  # fmt: skip
    model.get_layer("d").set_weights([np.array([[1.0, 2.0], [3.0, 4.0]], "float32")])
    model.get_layer("d@1").set_weights([np.array([[1.0, 0.0], [0.0, 2.0]], "float32")])
    model.get_layer("head@2").set_weights([np.array([[5.0], [6.0]], "float32")])
    path = tmp_path / "named.keras"
    model.save(path)
    x = write_input(normal(3, 2))
    res = only(inspect_model(str(path), "d@1", ["head@2"], input_file=x))
    assert res.source.layer == "d@1"
    np.testing.assert_array_equal(res.array, np.tile([5.0, 6.0], (3, 1)))
    res = only(inspect_model(str(path), "d", ["d@1"], input_file=x))
    assert res.target.layer == "d@1"
    np.testing.assert_array_equal(res.array, np.tile([1.0, 2.0], (3, 1)))
    # the command line checks the names against the file before loading it (there is no
    # layer `head` to take `head@2` for): the same answer
    args = ["inspect", str(path), "--from", "d@1", "--to", "head@2", "--input", x, "--json"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["results"][0]["gradient"]["max_abs"] == 6.0


def test_two_named_inputs(write_input):
    a, b = normal(8, 4), normal(8, 3, seed=2)
    m = load_sample("two_input.keras")
    da, db, concat, head = (m.get_layer(n) for n in ("da", "db", "concat", "head"))
    path = sample("two_input.keras")
    inputs = write_input(a=a, b=b)
    res = only(inspect_model(path, "da", ["head"], input_file=inputs))
    expected = manual_gradient(da, lambda h: head(concat([h, db(tf.constant(b))])), a)
    np.testing.assert_allclose(res.array, expected, rtol=RTOL, atol=ATOL)
    res = only(inspect_model(path, "b", ["head"], input_file=inputs))
    expected = manual_gradient(lambda t: t, lambda t: head(concat([da(tf.constant(a)), db(t)])), b)
    np.testing.assert_allclose(res.array, expected, rtol=RTOL, atol=ATOL)
    res = only(inspect_model(path, "da", ["db"], input_file=inputs))
    assert res.status == "none" and res.causes[0].code == "not_downstream"


def test_embedding_output_is_differentiable_but_integer_ids_are_not(write_input):
    ids = np.random.default_rng(3).integers(0, 20, (8, 6)).astype("int32")
    m = load_sample("embedding.keras")
    emb, pool, head = (m.get_layer(n) for n in ("embedding", "pool", "head"))
    path = sample("embedding.keras")
    res = only(inspect_model(path, "embedding", ["head"], input_file=write_input(ids)))
    assert res.status == "ok"
    np.testing.assert_allclose(
        res.array, manual_gradient(emb, lambda h: head(pool(h)), ids), rtol=RTOL, atol=ATOL
    )
    res = only(inspect_model(path, "ids", ["head"], input_file=write_input(ids)))
    assert res.status == "none"
    assert res.source.dtype == "int32"
    assert "integer_path" in [c.code for c in res.causes]


def test_random_integer_probe_stays_inside_the_embedding():
    # With ids out of [0, input_dim) the Embedding lookup would fail on CPU.
    res = only(inspect_model(sample("embedding.keras"), "embedding", ["head"], batch_size=64))
    assert res.status == "ok" and res.source.shape == (64, 6, 4)


def test_several_targets_share_one_pass(write_input):
    x = normal(8, 5)
    m = load_sample("seed.keras")
    dense, dense_1, dense_2 = (m.get_layer(n) for n in ("dense", "dense_1", "dense_2"))
    report = inspect_model(
        sample("seed.keras"), "dense", ["dense_1", "dense_2"], input_file=write_input(x)
    )
    assert [r.target.layer for r in report.results] == ["dense_1", "dense_2"]
    np.testing.assert_allclose(
        report.results[0].array, manual_gradient(dense, dense_1, x), rtol=RTOL, atol=ATOL
    )
    expected = manual_gradient(dense, lambda h: dense_2(dense_1(h)), x)
    np.testing.assert_allclose(report.results[1].array, expected, rtol=RTOL, atol=ATOL)


def test_integer_index_references(write_input):
    x = normal(8, 5)
    by_name = only(
        inspect_model(sample("seed.keras"), "dense", ["dense_2"], input_file=write_input(x))
    )
    by_index = only(inspect_model(sample("seed.keras"), "0", ["-1"], input_file=write_input(x)))
    np.testing.assert_array_equal(by_name.array, by_index.array)
    assert by_index.source.layer == "dense" and by_index.target.layer == "dense_2"


def test_training_flag_reaches_the_layers(write_input):
    # BatchNormalization in training mode normalises over the batch, so the batch sum of its
    # output is constant (beta * batch) and its gradient is exactly zero; in inference it is not.
    x = normal(8, 6)
    path = sample("cause_training.keras")
    assert only(inspect_model(path, "dense", ["bn"], input_file=write_input(x))).status == "ok"
    res = only(inspect_model(path, "dense", ["bn"], input_file=write_input(x), training=True))
    assert res.status == "zero" or res.gradient.max_abs < 1e-5


def test_the_eager_watch_and_its_custom_gradient_fallback_agree(monkeypatch, write_input):
    """The eager step records its watched identity with TensorFlow's `record_operation`
    (private; `capture._eager_record`); where that is missing it uses `tf.custom_gradient`,
    which the compiled step always uses. Both give the same scan, and the scan's gradient of
    the residual model agrees with the hand-written tape."""
    from layergrad.commands.api import scan_model
    from layergrad.engine import capture

    x = normal(8, 8)
    m = load_sample("residual.keras")
    stem, block, head = (m.get_layer(n) for n in ("stem", "block", "head"))
    expected = np.linalg.norm(manual_gradient(stem, lambda h: head(h + block(h)), x))

    def rows():
        report = scan_model(sample("residual.keras"), target="head", input_file=write_input(x))
        return {r.layer: (r.gradient.l2, r.gradient.max_abs) for r in report.rows if r.gradient}

    recorded = rows()
    assert recorded["stem"][0] == pytest.approx(expected, rel=1e-5)
    monkeypatch.setattr(capture, "_eager_record", lambda: None)
    fallback = rows()
    assert recorded.keys() == fallback.keys()
    for layer, (l2, top) in recorded.items():
        assert fallback[layer] == pytest.approx((l2, top), rel=1e-6)
