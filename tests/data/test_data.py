"""`--data`: statistics over a whole data set, streamed in batches, equal those of the same
samples as one batch through a manual tape (the seeds' recipe), computed with numpy.

Every case uses a sample count that leaves a partial last batch.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from helpers import (
    assert_stats_match,
    keras,
    load_sample,
    manual_gradient,
    normal,
    projection_r,
    sample,
    tf,
    untrained_bn_net,
)

from layergrad.cli.app import main
from layergrad.commands.api import inspect_model, scan_model

RTOL = 1e-5


def run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def reference(g: np.ndarray) -> dict:
    """Everything --data reports about a gradient, from the whole array, in float64."""
    g = np.asarray(g, dtype=np.float64)
    finite = np.isfinite(g)
    clean = np.where(finite, g, 0.0)
    per_sample = np.sqrt((clean.reshape(len(g), -1) ** 2).sum(axis=1))
    units = g.reshape(-1, g.shape[-1])
    return {
        "shape": g.shape,
        "l2": float(np.sqrt((clean**2).sum())),
        "mean_abs": float(np.abs(clean).mean()),
        "max_abs": float(np.abs(clean).max()),
        "zero_fraction": float(np.mean(g == 0)),
        "nonfinite": int(g.size - finite.sum()),
        "dead_units": tuple(int(u) for u in np.flatnonzero(np.all(units == 0, axis=0))),
        "per_sample": per_sample,
    }


def assert_matches(result, ref: dict) -> None:
    """A Result over the data against the one-batch reference."""
    g = result.gradient
    assert g.shape == ref["shape"]
    assert g.l2 == pytest.approx(ref["l2"], rel=RTOL)
    assert g.mean_abs == pytest.approx(ref["mean_abs"], rel=RTOL)
    assert g.max_abs == pytest.approx(ref["max_abs"], rel=RTOL)
    assert g.zero_fraction == pytest.approx(ref["zero_fraction"], abs=1e-12)
    assert g.nonfinite == ref["nonfinite"]
    assert result.data.dead_units == ref["dead_units"]
    s, l2 = result.data.per_sample_l2, ref["per_sample"]
    assert s.count == len(l2)
    assert (s.mean, s.std, s.min, s.max) == pytest.approx(
        (l2.mean(), l2.std(), l2.min(), l2.max()), rel=RTOL, abs=1e-9
    )
    for q, got in ((50, s.p50), (95, s.p95)):  # the documented precision: 1.2%
        assert got == pytest.approx(np.percentile(l2, q, method="inverted_cdf"), rel=0.012)


# ---------------------------------------------------------------------------------- .npy


def test_npy_in_batches_equals_one_batch_through_a_manual_tape(tmp_path):
    x = normal(101, 5)  # 6 batches of 16 and one of 5
    np.save(tmp_path / "x.npy", x)
    m = load_sample("seed.keras")
    expected = manual_gradient(m.get_layer("dense"), m.get_layer("dense_1"), x)
    report = inspect_model(
        sample("seed.keras"), "dense", ["dense_1"], data=tmp_path / "x.npy", batch_size=16
    )
    assert report.probe.samples == 101 and report.probe.batch_size == 16
    assert report.probe.replicas == 1 and report.probe.source == str(tmp_path / "x.npy")
    result = report.results[0]
    assert result.status == "ok"
    assert result.source.shape == (101, 8) and result.target.shape == (101, 4)
    assert_matches(result, reference(expected))
    assert result.data.first_nonfinite_batch is None


def test_reduce_mean_is_the_mean_over_every_sample(tmp_path):
    x = normal(37, 5)
    np.save(tmp_path / "x.npy", x)
    m = load_sample("seed.keras")
    expected = manual_gradient(
        m.get_layer("dense"), lambda h: tf.reduce_mean(m.get_layer("dense_1")(h)), x
    )
    result = inspect_model(
        sample("seed.keras"), "dense", ["dense_1"], data=tmp_path / "x.npy", batch_size=8,
        reduce="mean",
    ).results[0]  # fmt: skip
    assert_matches(result, reference(expected))


def test_json_with_data_has_samples_replicas_and_dead_units(tmp_path):
    np.save(tmp_path / "x.npy", normal(40, 5))
    out = run(
        "inspect", sample("seed.keras"), "--from", "dense", "--to", "dense_1", "--data",
        str(tmp_path / "x.npy"), "--json",
    )  # fmt: skip
    assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout)
    assert doc["probe"] == {
        "source": str(tmp_path / "x.npy"), "seed": None, "batch_size": 32, "training": False,
        "reduce": "sum", "samples": 40, "replicas": 1,
        "data_sha256": hashlib.sha256((tmp_path / "x.npy").read_bytes()).hexdigest(),
    }  # fmt: skip
    res = doc["results"][0]
    assert res["gradient"]["shape"] == [40, 8]
    assert res["dead_units"] == []
    assert set(res["per_sample_l2"]) == {"mean", "std", "min", "p50", "p95", "max"}
    assert res["first_nonfinite_batch"] is None


def test_limit_reads_only_the_first_samples(tmp_path):
    x = normal(50, 5)
    np.save(tmp_path / "x.npy", x)
    m = load_sample("seed.keras")
    expected = manual_gradient(m.get_layer("dense"), m.get_layer("dense_1"), x[:21])
    report = inspect_model(
        sample("seed.keras"), "dense", ["dense_1"], data=tmp_path / "x.npy", limit=21,
        batch_size=8,
    )  # fmt: skip
    assert report.probe.samples == 21
    assert_matches(report.results[0], reference(expected))


def test_the_step_is_traced_once_with_a_partial_last_batch(tmp_path):
    from layergrad.commands import session
    from layergrad.engine import data_step
    from layergrad.model import layer_refs

    np.save(tmp_path / "x.npy", normal(45, 5))  # 2 batches of 20 and one of 5
    options = session.ProbeOptions(data=tmp_path / "x.npy", batch_size=20)
    loaded, _, strategy = session.load(sample("seed.keras"), options)
    model = loaded.model
    plan = data_step.Plan(
        sources=(layer_refs.resolve(model, "dense"),),
        targets=(layer_refs.resolve(model, "dense_1"),),
        data=True,
    )
    batches = session.open_stream(model, options)
    seen: list[tuple[int, int | None]] = []
    run_ = data_step.run_stream(model, plan, batches, strategy, lambda d, t: seen.append((d, t)))
    assert (run_.batches, run_.samples, run_.traces) == (3, 45, 1)
    assert seen == [(0, 45), (20, 45), (40, 45), (45, 45)]  # the first before the trace


def test_a_pass_in_training_mode_leaves_the_batchnorm_statistics_as_the_file_has_them(tmp_path):
    """Keras updates BatchNormalization's moving statistics at every training-mode call; the
    streamed pass puts them back, so rules judged after it see the model as saved."""
    from layergrad.commands import session
    from layergrad.engine import data_step
    from layergrad.model import layer_refs

    keras.utils.set_random_seed(3)
    inputs = keras.Input((5,), name="x")
    h = keras.layers.Dense(4, name="d")(inputs)
    out = keras.layers.BatchNormalization(name="bn")(h)
    keras.Model(inputs, out).save(tmp_path / "bn.keras")
    np.save(tmp_path / "x.npy", normal(40, 5) * 3 + 2)
    options = session.ProbeOptions(data=tmp_path / "x.npy", batch_size=16, training=True)
    loaded, _, strategy = session.load(tmp_path / "bn.keras", options)
    model = loaded.model
    bn = model.get_layer("bn")
    before = (bn.moving_mean.numpy().copy(), bn.moving_variance.numpy().copy())
    # the truth from outside: one training-mode call by hand moves them
    probe = keras.models.clone_model(model)
    probe.set_weights(model.get_weights())
    probe(tf.constant(normal(16, 5) * 3 + 2), training=True)
    assert not np.allclose(probe.get_layer("bn").moving_mean.numpy(), before[0])
    plan = data_step.Plan(targets=(layer_refs.resolve(model, "bn"),), every_leaf=True,
                          training=True, data=True)  # fmt: skip
    run_ = data_step.run_stream(model, plan, session.open_stream(model, options), strategy)
    assert run_.samples == 40
    np.testing.assert_array_equal(bn.moving_mean.numpy(), before[0])
    np.testing.assert_array_equal(bn.moving_variance.numpy(), before[1])


# ---------------------------------------------------------------------------------- .npz


def two_input_reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """d sum(head) / d da of the two-input sample, by hand: da, watched, then the rest."""
    m = load_sample("two_input.keras")
    da, db, concat, head = (m.get_layer(n) for n in ("da", "db", "concat", "head"))
    with tf.GradientTape() as tape:
        h = da(tf.constant(a))
        tape.watch(h)
        y = head(concat([h, db(tf.constant(b))]))
    return tape.gradient(y, h).numpy()


def test_npz_with_two_inputs_and_labels(tmp_path):
    a, b = normal(45, 4, seed=2), normal(45, 3, seed=3)
    np.savez(tmp_path / "d.npz", b=b, a=a, y=np.arange(45))  # order and labels do not matter
    report = inspect_model(
        sample("two_input.keras"), "da", ["head"], data=tmp_path / "d.npz", batch_size=16
    )
    assert report.probe.samples == 45
    assert_matches(report.results[0], reference(two_input_reference(a, b)))


def test_compressed_npz_is_inflated_as_it_is_read(tmp_path):
    a, b = normal(45, 4, seed=2), normal(45, 3, seed=3)
    np.savez_compressed(tmp_path / "d.npz", a=a, b=b)
    result = inspect_model(
        sample("two_input.keras"), "da", ["head"], data=tmp_path / "d.npz", batch_size=16
    ).results[0]
    assert_matches(result, reference(two_input_reference(a, b)))


# ------------------------------------------------------------------------- image folders


def image_model(path: Path) -> keras.Model:
    keras.utils.set_random_seed(4)
    model = keras.Sequential(
        [
            keras.Input((8, 8, 3)),
            keras.layers.Conv2D(4, 3, activation="relu", name="conv"),
            keras.layers.Flatten(name="flat"),
            keras.layers.Dense(3, name="head"),
        ]
    )
    model.save(path)
    return model


def test_image_folder_is_decoded_to_pixels_0_to_255(tmp_path):
    rng = np.random.default_rng(5)
    pixels = rng.integers(0, 256, (23, 8, 8, 3), dtype=np.uint8)
    folder = tmp_path / "images"
    for i, image in enumerate(pixels):  # class sub-folders, one of them nested deeper
        where = folder / ("cats" if i % 2 else "dogs/small" if i % 3 else "dogs")
        where.mkdir(parents=True, exist_ok=True)
        (where / f"{i:02d}.png").write_bytes(tf.io.encode_png(image).numpy())
    model = image_model(tmp_path / "m.keras")
    x = pixels.astype("float32")  # what the images hold, independent of the reader
    expected = manual_gradient(
        model.get_layer("conv"), lambda h: model.get_layer("head")(model.get_layer("flat")(h)), x
    )
    report = inspect_model(tmp_path / "m.keras", "conv", ["head"], data=folder, batch_size=5)
    assert report.probe.samples == 23
    assert_matches(report.results[0], reference(expected))


def test_images_of_another_size_are_resized(tmp_path):
    folder = tmp_path / "images"
    folder.mkdir()
    for i in range(3):
        image = np.full((20, 12, 3), 40 * i, dtype=np.uint8)
        (folder / f"{i}.png").write_bytes(tf.io.encode_png(image).numpy())
    image_model(tmp_path / "m.keras")
    report = inspect_model(tmp_path / "m.keras", "conv", ["head"], data=folder)
    assert report.probe.samples == 3 and report.results[0].source.shape == (3, 6, 6, 4)


# ---------------------------------------------------------------------- module:function

DATASET_MODULE = """
import numpy as np
import tensorflow as tf

HERE = __file__.rsplit("/", 1)[0]


def batches_of_seven():
    x = np.load(HERE + "/x.npy")
    return tf.data.Dataset.from_tensor_slices((x, np.zeros(len(x)))).batch(7)


def samples():
    return tf.data.Dataset.from_tensor_slices(np.load(HERE + "/x.npy"))


def generator():
    x = np.load(HERE + "/x.npy")
    for start in range(0, len(x), 9):
        yield x[start : start + 9], None


def two_inputs():
    a, b = np.load(HERE + "/a.npy"), np.load(HERE + "/b.npy")
    return [{"a": a[i : i + 10], "b": b[i : i + 10]} for i in range(0, len(a), 10)]
"""


@pytest.fixture
def dataset_module(tmp_path, monkeypatch):
    np.save(tmp_path / "x.npy", normal(33, 5, seed=7))
    np.save(tmp_path / "a.npy", normal(33, 4, seed=8))
    np.save(tmp_path / "b.npy", normal(33, 3, seed=9))
    (tmp_path / "mydata.py").write_text(DATASET_MODULE)
    monkeypatch.chdir(tmp_path)  # module:function imports from the working directory
    yield tmp_path
    sys.modules.pop("mydata", None)


@pytest.mark.parametrize(
    "ref", ["mydata:batches_of_seven", "mydata.py:samples", "mydata:generator"]
)
def test_function_giving_batches_equals_one_batch(dataset_module, ref):
    x = np.load(dataset_module / "x.npy")
    m = load_sample("seed.keras")
    expected = manual_gradient(m.get_layer("dense"), m.get_layer("dense_1"), x)
    report = inspect_model(sample("seed.keras"), "dense", ["dense_1"], data=ref, batch_size=8)
    assert report.probe.samples == 33 and report.probe.source == ref
    assert_matches(report.results[0], reference(expected))


def test_function_giving_dicts_for_a_two_input_model(dataset_module):
    a, b = np.load(dataset_module / "a.npy"), np.load(dataset_module / "b.npy")
    result = inspect_model(
        sample("two_input.keras"), "da", ["head"], data=str(dataset_module / "mydata.py")
        + ":two_inputs", batch_size=16,
    ).results[0]  # fmt: skip
    assert_matches(result, reference(two_input_reference(a, b)))


# ---------------------------------------------------------------------------- dead units


def gate_model(path: Path) -> keras.Model:
    """x(4) -> Dense 'gate'(2, relu; weights by hand) -> Dense 'head'(1).

    gate = relu(x0 - 10) and relu(x1): unit 2 and 3 of x feed nothing (zero rows), unit 0
    reaches the head only for samples with x0 > 10, unit 1 only for samples with x1 > 0.
    """
    x = keras.Input((4,), name="x")
    gate = keras.layers.Dense(2, activation="relu", name="gate")
    head = keras.layers.Dense(1, name="head")
    model = keras.Model(x, head(gate(x)))
    gate.set_weights([np.array([[1, 0], [0, 1], [0, 0], [0, 0]], "float32"),
                      np.array([-10, 0], "float32")])  # fmt: skip
    head.set_weights([np.array([[1], [1]], "float32"), np.zeros(1, "float32")])
    model.save(path)
    return model


def test_dead_units_are_dead_for_every_sample_not_for_one_batch(tmp_path):
    x = normal(40, 4, seed=11) * 0.1  # x0 far below 10 ...
    x[:, 1] = -1.0  # and x1 negative: every unit dead ...
    x[37, 0] = 12.0  # except unit 0 in one sample of the last batch
    np.save(tmp_path / "x.npy", x)
    model = gate_model(tmp_path / "m.keras")
    expected = manual_gradient(lambda t: t, model, x)  # d sum(head) / d x
    assert reference(expected)["dead_units"] == (1, 2, 3)  # worked out above
    result = inspect_model(tmp_path / "m.keras", "x", ["head"], data=tmp_path / "x.npy",
                           batch_size=16).results[0]  # fmt: skip
    assert_matches(result, reference(expected))
    first_batch = inspect_model(tmp_path / "m.keras", "x", ["head"], data=tmp_path / "x.npy",
                                batch_size=16, limit=16).results[0]  # fmt: skip
    assert first_batch.data.dead_units == (0, 1, 2, 3)  # one batch alone says all are dead


# ------------------------------------------------------------------------ non-finite data


def test_first_non_finite_batch_is_reported(tmp_path):
    x = normal(40, 6, seed=12)
    x[35, 2] = np.nan  # batch 35 // 8 = 4
    np.save(tmp_path / "x.npy", x)
    m = load_sample("cause_saturated.keras")  # 'squash' is a sigmoid: NaN flows back
    expected = manual_gradient(lambda t: t, lambda t: m.get_layer("squash")(
        m.get_layer("dense")(t)), x)  # fmt: skip
    result = inspect_model(sample("cause_saturated.keras"), "x", ["squash"],
                           data=tmp_path / "x.npy", batch_size=8).results[0]  # fmt: skip
    assert result.status == "nonfinite"
    assert result.gradient.nonfinite == reference(expected)["nonfinite"] > 0
    assert result.data.first_nonfinite_batch == 4
    assert result.causes  # diagnosed on batch 4, where it shows


def test_a_zero_result_over_the_data_gets_its_cause(tmp_path):
    np.save(tmp_path / "x.npy", normal(20, 6))
    result = inspect_model(sample("cause_dead_relu.keras"), "dense", ["head"],
                           data=tmp_path / "x.npy", batch_size=8).results[0]  # fmt: skip
    assert result.status == "zero"
    assert result.causes[0].code == "dead_relu" and result.causes[0].layer == "dead"


def _tape_per_batch(path: Path, x: np.ndarray, rows: int, training: bool) -> np.ndarray:
    """d sum(head) / d conv, batch by batch of `rows` as --data streams them, with bn called
    in the mode given (a fresh copy of the model: training mode moves bn's statistics)."""
    m = keras.saving.load_model(path)
    layers = [m.get_layer(n) for n in ("bn", "act", "pool", "head")]

    def rest(h):
        for layer in layers:
            h = layer(h, training=training) if layer.name == "bn" else layer(h)
        return h

    parts = [manual_gradient(m.get_layer("conv"), rest, x[i : i + rows])
             for i in range(0, len(x), rows)]  # fmt: skip
    return np.concatenate(parts)


def test_untrained_batchnorm_is_probed_over_the_data_as_training_runs_it(tmp_path):
    path = tmp_path / "bn_net.keras"
    untrained_bn_net(path)
    bn = keras.saving.load_model(path).get_layer("bn")
    assert not np.any(bn.moving_mean.numpy()) and np.all(bn.moving_variance.numpy() == 1)
    x = normal(20, 8, 8, 3, seed=3)  # batches of 8, 8 and 4
    np.savez(tmp_path / "x.npz", x=x)
    assert not np.any(_tape_per_batch(path, x, 8, training=False))  # inference: all zero
    expected = _tape_per_batch(path, x, 8, training=True)
    assert np.count_nonzero(expected) == expected.size
    said = "probed in training mode (batch statistics): 1 BatchNormalization layers (bn) hold"
    report = inspect_model(path, "conv", ["head"], data=tmp_path / "x.npz", batch_size=8)
    (result,) = report.results
    assert report.probe.training and report.probe.samples == 20
    assert result.status == "ok" and not result.causes
    assert any(w.startswith(said) for w in result.warnings), result.warnings
    assert_matches(result, reference(expected))
    # one batch of the same 8 samples: --input and --data agree, both in training mode
    np.save(tmp_path / "first.npy", x[:8])
    np.savez(tmp_path / "first.npz", x=x[:8])
    one = inspect_model(path, "conv", ["head"], input_file=tmp_path / "first.npy")
    data = inspect_model(path, "conv", ["head"], data=tmp_path / "first.npz", batch_size=8)
    for got in (one, data):
        assert got.probe.training and got.results[0].status == "ok"
        assert [w for w in got.results[0].warnings if w.startswith(said)]
    assert one.results[0].warnings == data.results[0].warnings
    assert_matches(data.results[0], reference(_tape_per_batch(path, x[:8], 8, training=True)))
    # said the same way in the table and the JSON
    args = ["inspect", str(path), "--from", "conv", "--to", "head"]
    for extra in (["--input", str(tmp_path / "first.npy")],
                  ["--data", str(tmp_path / "x.npz"), "--batch-size", "8"]):  # fmt: skip
        table = " ".join(run(*args, *extra).output.split())  # as one line, however wrapped
        assert ", batch 8, training, d sum(to) / d from" in table and said in table, table
        doc = json.loads(run(*args, *extra, "--json").output)
        assert doc["probe"]["training"] is True and doc["results"][0]["status"] == "ok"
    # a model whose bn was trained (statistics moved off 0 and 1) is judged as it is
    m = keras.saving.load_model(path)
    m.get_layer("bn").moving_mean.assign(np.full(8, 1e-3, "float32"))
    m.save(tmp_path / "trained.keras")
    kept = inspect_model(tmp_path / "trained.keras", "conv", ["head"], data=tmp_path / "x.npz",
                         batch_size=8)  # fmt: skip
    assert not kept.probe.training and kept.results[0].status == "zero"
    assert not any(w.startswith("probed in training mode") for w in kept.results[0].warnings)


def test_scan_over_the_data_probes_untrained_batchnorm_as_training_runs_it_as_one_batch_does(
    tmp_path,
):
    path = tmp_path / "bn_net.keras"
    untrained_bn_net(path)
    x = normal(20, 8, 8, 3, seed=3)
    np.savez(tmp_path / "x.npz", x=x)
    np.save(tmp_path / "first.npy", x[:8])
    # in inference every unit of conv gets exactly zero for every sample: "dead" by magnitude
    assert not np.any(_tape_per_batch(path, x, 8, training=False))
    said = "probed in training mode (batch statistics): 1 BatchNormalization layers (bn) hold"
    over = scan_model(path, data=tmp_path / "x.npz", batch_size=8, target="head")
    one = scan_model(path, input_file=tmp_path / "first.npy", target="head")
    for report, samples in ((over, x), (one, x[:8])):
        rows = {r.layer: r for r in report.rows}
        assert report.probe.training and rows["conv"].status == "ok"
        assert not any(r.flags for r in report.rows), [(r.layer, r.flags) for r in report.rows]
        expected = _tape_per_batch(path, samples, 8, training=True)
        np.testing.assert_allclose(rows["conv"].gradient.l2, np.linalg.norm(expected), rtol=1e-4)
    notes = [[n for n in r.notes if "BatchNormalization" in n] for r in (over, one)]
    assert notes[0] == notes[1] and len(notes[0]) == 1 and notes[0][0].startswith(said)


# ----------------------------------------------------------------------------------- scan


def test_scan_over_data_equals_manual_tapes_for_every_layer(tmp_path):
    x = normal(29, 5, seed=13)
    np.save(tmp_path / "x.npy", x)
    m = load_sample("seed.keras")
    d0, d1, d2 = (m.get_layer(n) for n in ("dense", "dense_1", "dense_2"))
    # the default target projects the output on R, which depends on the sample, not the batch
    r = projection_r(0, 0, (29, 1))
    expected = {
        "input": manual_gradient(lambda t: t, lambda t: d2(d1(d0(t))) * r, x),
        "dense": manual_gradient(d0, lambda h: d2(d1(h)) * r, x),
        "dense_1": manual_gradient(lambda t: d1(d0(t)), lambda h: d2(h) * r, x),
        "dense_2": r.numpy(),
    }
    report = scan_model(sample("seed.keras"), data=tmp_path / "x.npy", batch_size=8)
    assert report.probe.samples == 29
    rows = {r.layer: r for r in report.rows}
    assert list(rows) == list(expected)
    for name, grad in expected.items():
        assert_matches(rows[name], reference(grad))
    doc = json.loads(
        run("scan", sample("seed.keras"), "--data", str(tmp_path / "x.npy"), "--json").stdout
    )
    assert doc["probe"]["samples"] == 29
    assert {"dead_units", "per_sample_l2", "first_nonfinite_batch"} <= set(doc["layers"][1])


# ---------------------------------------------------------------------------------- check


def test_check_runs_its_forward_and_gradient_checks_over_the_data(tmp_path):
    x = normal(30, 6)
    np.save(tmp_path / "x.npy", x)
    out = run("check", sample("cause_saturated.keras"), "--data", str(tmp_path / "x.npy"),
              "--json")  # fmt: skip
    doc = json.loads(out.stdout)
    checks = {c["name"]: c for c in doc["files"][0]["checks"]}
    # finite over every sample; the one-batch rules run on the first batch, so the saturated
    # output is named with --data as without it
    assert checks["forward"]["message"].startswith("finite over 30 samples; the output 'head'")
    assert checks["forward"]["findings"] == ["constant_output"]
    assert "(on the first batch of 30 samples of --data)" in checks["forward"]["message"]
    x[17, 0] = np.inf  # batch 17 // 8 = 2
    np.save(tmp_path / "x.npy", x)
    out = run("check", sample("cause_saturated.keras"), "--data", str(tmp_path / "x.npy"),
              "--batch-size", "8", "--json")  # fmt: skip
    assert out.exit_code == 1
    checks = {c["name"]: c for c in json.loads(out.stdout)["files"][0]["checks"]}
    assert checks["forward"]["findings"] == ["nonfinite"]
    assert checks["forward"]["message"].startswith(  # the input: the data, not a layer
        "the data holds NaN/Inf: input 'x' (first in batch 2), before any layer"
    )


# ------------------------------------------------------------------------------- progress


def test_progress_bar_shows_samples_rate_and_time_left():
    import io

    from rich.console import Console

    from layergrad.cli.progress import sample_progress

    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, width=100)
    with sample_progress(True, console=console) as update:
        assert update is not None
        update(64, 100)
        update(100, 100)
    assert "samples" in buffer.getvalue()
    with sample_progress(False, console=console) as update:
        assert update is None


def test_no_progress_bar_when_stderr_is_not_a_terminal(tmp_path):
    np.save(tmp_path / "x.npy", normal(20, 5))
    args = ["inspect", sample("seed.keras"), "--from", "dense", "--to", "dense_1", "--data",
            str(tmp_path / "x.npy")]  # fmt: skip
    # wide enough that the header's temporary path (its length varies) is not wrapped
    out = CliRunner().invoke(main, args, env={"COLUMNS": "300"}, catch_exceptions=False)
    assert out.exit_code == 0 and out.stderr == ""
    assert "/x.npy (20 samples), batch 32" in out.stdout
    assert "per-sample L2 over 20 samples" in out.stdout


# ------------------------------------------------------------------ per-sample quantities


def test_sample_totals_added_in_batches_match_numpy_over_all_values():
    from layergrad.data.stats.aggregates import SampleTotals

    values = np.abs(np.random.default_rng(3).standard_normal(1003)) * 10.0 ** np.linspace(
        -5, 5, 1003
    )
    values[17] = 0.0
    totals = SampleTotals()
    for start in range(0, len(values), 64):
        totals.add(values[start : start + 64])
    assert_stats_match(totals.stats(), values)


def test_a_last_axis_the_model_leaves_open(tmp_path):
    # x (batch, None, 4) -> permute -> (batch, 4, None): the units of 'perm' are only known
    # once a batch has run, and so is the size reported for its shape.
    keras.utils.set_random_seed(5)
    x_in = keras.Input((None, 4), name="x")
    perm = keras.layers.Permute((2, 1), name="perm")
    pool = keras.layers.GlobalAveragePooling1D(name="pool")
    dense = keras.layers.Dense(4, activation="tanh", name="squash")
    model = keras.Model(x_in, pool(perm(dense(x_in))))
    model.save(tmp_path / "m.keras")
    x = normal(21, 6, 4, seed=14)
    np.save(tmp_path / "x.npy", x)
    (tmp_path / "rows.py").write_text(
        "import numpy as np\n\ndef batches():\n"
        f"    return list(np.load({str(tmp_path / 'x.npy')!r}))\n"
    )  # samples, read in Python: the length axis stays open in the compiled step
    expected = manual_gradient(lambda t: perm(dense(t)), pool, x)
    for data in (tmp_path / "x.npy", f"{tmp_path / 'rows.py'}:batches"):
        result = inspect_model(tmp_path / "m.keras", "perm", ["pool"], data=data,
                               batch_size=8).results[0]  # fmt: skip
        assert result.source.shape == (21, 4, 6)
        assert_matches(result, reference(expected))


def test_per_sample_totals_keep_numpy_exact_on_equal_tiny_and_edge_values():
    """Totals of a measure computed outside the step (Jacobian norms) add up in numpy: equal
    values give a std of exactly 0 and their mean (to the last digit), a subnormal stays the minimum,
    and a value on a bin edge (1e29, in the bin that starts there) sets the median's bin."""
    from layergrad.data.stats.aggregates import SampleTotals

    equal = SampleTotals()
    equal.add(np.full(600, 1.359547220479802))
    stats = equal.stats()
    assert stats.std == 0.0 and stats.min == 1.359547220479802
    assert stats.mean == pytest.approx(stats.min, rel=1e-15)
    tiny = SampleTotals()
    tiny.add(np.array([5e-324, 1.0, 2.0]))
    assert tiny.stats().min == 5e-324
    edge = SampleTotals()
    edge.add(np.array([1.0, 1e29, 2e29]))
    assert 1e29 <= edge.stats().p50 <= 1e29 * 1.024  # the bin [1e29, 1e29 * 10**0.01)


def test_an_undeclared_input_file_keeps_every_array_even_two_named_input(tmp_path):
    """With no declared inputs (a subclassed model), every array but the labels is an input,
    in the order saved: an unnamed one and one saved as `input` are two, both named `input`."""
    from layergrad.data.probe_input import load_batch

    path = tmp_path / "two.npz"
    np.savez(path, **{"": np.zeros((2, 3)), "input": np.ones((2, 4)), "y": np.zeros(2)})
    batch = load_batch(path, None)
    assert batch.names == ("input", "input")
    assert [a.shape for a in batch.arrays] == [(2, 3), (2, 4)]
