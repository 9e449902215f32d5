"""The measures that run over `--data` batch by batch (`--measure jacobian`, `scan --wrt
weights`, `check --baseline`) equal a hand-written computation over all samples at once.

Every case leaves a partial last batch: 70 samples in batches of 16.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from helpers import keras, load_sample, normal, sample, tf

from layergrad.cli.app import main
from layergrad.commands.api import inspect_model, scan_model, scan_weights_model

SAMPLES, BATCH = 70, 16
RTOL = 1e-5


def run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.fixture
def residual(tmp_path):
    """x(5) -> a = Dense 6 tanh -> out = Dense 4 tanh (b) + Dense 4 (skip), saved; and data.

    Seeded: the 4-sigma checks of the estimate hold for most draws of the weights, not all
    (the top samples are picked by their estimates, which favours overestimates)."""
    keras.utils.set_random_seed(12)
    x = keras.Input((5,), name="x")
    a = keras.layers.Dense(6, activation="tanh", name="a")(x)
    b = keras.layers.Dense(4, activation="tanh", name="b")(a)
    skip = keras.layers.Dense(4, name="skip")(a)
    out = keras.layers.Add(name="out")([b, skip])
    model = keras.Model(x, out)
    path = tmp_path / "residual.keras"
    model.save(path)
    data = normal(SAMPLES, 5, seed=3)
    np.save(tmp_path / "x.npy", data)
    return str(path), str(tmp_path / "x.npy"), model, data


def all_at_once(model, data):
    """Every J_i = d out[i] / d a[i] over all samples at once: tape.batch_jacobian."""
    h = tf.constant(model.get_layer("a")(tf.constant(data)))
    with tf.GradientTape() as tape:
        tape.watch(h)
        out = model.get_layer("b")(h) + model.get_layer("skip")(h)
    return tape.batch_jacobian(out, h).numpy().astype(np.float64)  # (N, 4, 6)


def ranked(values: np.ndarray, k: int) -> list[int]:
    return [int(i) for i in np.lexsort((np.arange(len(values)), -values))[:k]]


def test_exact_jacobian_over_data_equals_batch_jacobian_over_all_samples(residual):
    path, x, model, data = residual
    jac = all_at_once(model, data)
    frob = np.sqrt((jac**2).sum(axis=(1, 2)))
    spec = np.array([np.linalg.norm(j, 2) for j in jac])
    units = np.sqrt((jac**2).sum(axis=1).mean(axis=0))  # column norms, rms over samples
    report = inspect_model(path, "a", ["out"], data=x, batch_size=BATCH, measure="jacobian", top=5)
    j = report.results[0].jacobian
    assert j.method == "exact" and j.batch_independent and j.probes is None
    f, s = j.frobenius.distribution, j.spectral.distribution
    assert f.count == SAMPLES and j.frobenius.per_sample == ()
    assert (f.mean, f.std, f.min, f.max) == pytest.approx(
        (frob.mean(), frob.std(), frob.min(), frob.max()), rel=RTOL
    )
    for q, got in ((50, f.p50), (95, f.p95)):
        assert got == pytest.approx(np.percentile(frob, q, method="inverted_cdf"), rel=0.012)
    assert [r.sample for r in f.top] == ranked(frob, 5)
    assert [r.value for r in f.top] == pytest.approx(np.sort(frob)[::-1][:5], rel=RTOL)
    assert all(r.rel_stderr is None for r in f.top) and f.mean_rel_stderr is None
    assert (s.mean, s.max) == pytest.approx((spec.mean(), spec.max()), rel=1e-4)
    assert [r.sample for r in s.top] == ranked(spec, 5)
    assert j.unit_sensitivity == pytest.approx(units, rel=1e-4)
    assert sum(f.histogram.counts) + f.histogram.zeros == SAMPLES


def test_jacobian_json_over_data_holds_the_distribution_and_the_top_samples(residual):
    path, x, model, data = residual
    frob = np.sqrt((all_at_once(model, data) ** 2).sum(axis=(1, 2)))
    out = run(
        "inspect", path, "--from", "a", "--to", "out", "--data", x, "--batch-size", "16",
        "--measure", "jacobian", "--top", "3", "--json",
    )  # fmt: skip
    assert out.exit_code == 0, out.output
    j = json.loads(out.output)["results"][0]["jacobian"]
    f = j["frobenius"]
    assert {"mean", "p50", "p95", "max", "histogram", "top"} <= set(f)
    assert f["per_sample"] is None and f["samples"] == SAMPLES
    assert f["top"] == [
        {"sample": i, "value": pytest.approx(frob[i], rel=RTOL)} for i in ranked(frob, 3)
    ]
    h = f["histogram"]
    assert len(h["edges"]) == len(h["counts"]) + 1 and sum(h["counts"]) == SAMPLES
    assert all(lo < v <= hi * 1.0001 for v, lo, hi in [(f["p50"], h["edges"][0], h["edges"][-1])])
    assert {"mean", "p50", "p95", "max", "histogram", "top"} <= set(j["spectral"])


def test_estimated_jacobian_over_data_carries_its_standard_errors(residual):
    path, x, model, data = residual
    frob = np.sqrt((all_at_once(model, data) ** 2).sum(axis=(1, 2)))
    report = inspect_model(
        path, "a", ["out"], data=x, batch_size=BATCH, measure="jacobian", probes=16
    )
    j = report.results[0].jacobian
    assert j.method == "estimate" and j.probes == 16
    f = j.frobenius.distribution
    assert f.count == SAMPLES
    assert 0 < f.mean_rel_stderr <= j.frobenius.rel_stderr
    assert all(r.rel_stderr is not None and r.rel_stderr >= 0 for r in f.top)
    # the estimate of the mean is within four of its standard errors of the exact mean
    assert abs(f.mean - frob.mean()) <= 4 * f.mean_rel_stderr * f.mean
    for r in f.top:  # each sample's estimate within four of its own standard errors
        assert abs(r.value - frob[r.sample]) <= 4 * r.rel_stderr * r.value + 1e-6


def test_estimated_spectral_norm_over_data_is_a_lower_bound_from_one_trace(tmp_path, monkeypatch):
    from layergrad.engine import jacobian_data, linear_map

    keras.utils.set_random_seed(4)
    x = keras.Input((24,), name="x")
    a = keras.layers.Dense(40, activation="tanh", name="a")(x)
    keras.Model(x, keras.layers.Dense(32, activation="tanh", name="out")(a)).save(
        tmp_path / "m.keras"
    )
    model = keras.saving.load_model(tmp_path / "m.keras")
    data = normal(SAMPLES, 24, seed=5)
    np.save(tmp_path / "x.npy", data)
    h = tf.constant(model.get_layer("a")(tf.constant(data)))
    with tf.GradientTape() as tape:
        tape.watch(h)
        out = model.get_layer("out")(h)
    jac = tape.batch_jacobian(out, h).numpy().astype(np.float64)  # (N, 32, 40)
    spec = np.linalg.norm(jac, 2, axis=(1, 2))
    made, runs = [], []
    real, run = jacobian_data.estimate_step, jacobian_data.EstimateStep.run
    monkeypatch.setattr(
        jacobian_data, "estimate_step", lambda *a, **k: made.append(real(*a, **k)) or made[-1]
    )
    monkeypatch.setattr(
        jacobian_data.EstimateStep, "run", lambda *a: runs.append(run(*a)) or runs[-1]
    )
    report = inspect_model(
        str(tmp_path / "m.keras"), "a", ["out"], data=str(tmp_path / "x.npy"),
        batch_size=BATCH, measure="jacobian", probes=8, top=SAMPLES,
    )  # fmt: skip
    j = report.results[0].jacobian
    assert j.method == "estimate" and j.batch_independent
    s = j.spectral
    assert s.distribution.count == SAMPLES and s.iterations == linear_map.STEPS
    assert sorted(r.sample for r in s.distribution.top) == list(range(SAMPLES))
    for r in s.distribution.top:  # a lower bound of numpy's norm, and within 1% of it
        assert spec[r.sample] * 0.99 <= r.value <= spec[r.sample] * (1 + 1e-5)
    assert spec.mean() * 0.99 <= s.mean <= spec.mean() * (1 + 1e-5)
    # one compiled step for all five batches, the partial last one (6 samples) padded
    (step, _), *_ = made
    assert len(runs) == 5 and all(r is not None for r in runs)
    assert step.function.experimental_get_tracing_count() == 1


def test_an_estimate_over_one_batch_of_data_draws_as_that_batch_given_with_input(residual):
    path, x, *_ = residual
    one = inspect_model(path, "a", ["out"], input_file=x, measure="jacobian", probes=8, seed=3)
    over = inspect_model(
        path, "a", ["out"], data=x, batch_size=SAMPLES, measure="jacobian", probes=8, seed=3,
        top=SAMPLES,
    )  # fmt: skip
    j, d = one.results[0].jacobian, over.results[0].jacobian
    for norms, totals in ((j.frobenius, d.frobenius), (j.spectral, d.spectral)):
        by_sample = {r.sample: r.value for r in totals.distribution.top}
        assert [by_sample[i] for i in range(SAMPLES)] == pytest.approx(norms.per_sample, rel=1e-6)


def test_estimate_over_data_of_batches_that_mix_samples_takes_the_diagonal_blocks(tmp_path):
    m = load_sample("cause_training.keras")
    dense, bn = m.get_layer("dense"), m.get_layer("bn")
    data = normal(20, 6, seed=6)
    np.save(tmp_path / "x.npy", data)
    blocks = []
    for start in range(0, 20, 8):  # BatchNorm in training mode: each batch's own statistics
        h = dense(tf.constant(data[start : start + 8]))
        with tf.GradientTape(persistent=True) as tape:
            tape.watch(h)
            y = bn(h, training=True)
            rows = [[y[i, j] for j in range(4)] for i in range(len(h))]
        blocks += [
            np.stack([np.asarray(tape.gradient(e, h))[i] for e in row])
            for i, row in enumerate(rows)
        ]
    report = inspect_model(
        sample("cause_training.keras"), "dense", ["bn"], data=str(tmp_path / "x.npy"),
        batch_size=8, measure="jacobian", probes=8, training=True, top=20,
    )  # fmt: skip
    res = report.results[0]
    assert not res.jacobian.batch_independent
    assert any("mixes samples across the batch" in w for w in res.warnings)
    for r in res.jacobian.spectral.distribution.top:  # 4 columns: the Lanczos steps span them
        assert r.value == pytest.approx(np.linalg.norm(blocks[r.sample], 2), rel=1e-3)


def test_scan_jacobian_over_data_equals_batch_jacobian_of_the_outputs(residual):
    path, x, model, data = residual
    frob = np.sqrt((all_at_once(model, data) ** 2).sum(axis=(1, 2)))
    report = scan_model(path, data=x, batch_size=BATCH, measure="jacobian", top=4)
    row = next(r for r in report.rows if r.layer == "a")
    f = row.jacobian.frobenius
    assert f.distribution.count == SAMPLES
    assert (f.mean, f.max) == pytest.approx((frob.mean(), frob.max()), rel=RTOL)
    assert [r.sample for r in f.distribution.top] == ranked(frob, 4)
    assert f.rel_stderr is None  # the output has 4 entries: exact


# ------------------------------------------------------------------- scan --wrt weights


@pytest.fixture
def classifier(tmp_path):
    """x(5) -> Dense 6 relu (L2-regularized) -> Dense 3 softmax, compiled with sparse
    categorical cross-entropy; and an .npz with labels `y`."""
    x = keras.Input((5,), name="x")
    h = keras.layers.Dense(
        6, activation="relu", name="hidden", kernel_regularizer=keras.regularizers.L2(0.01)
    )(x)
    out = keras.layers.Dense(3, activation="softmax", name="head")(h)
    model = keras.Model(x, out)
    model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
    path = tmp_path / "classifier.keras"
    model.save(path)
    data = normal(SAMPLES, 5, seed=4)
    labels = np.random.default_rng(5).integers(0, 3, SAMPLES)
    np.savez(tmp_path / "d.npz", x=data, y=labels)
    return str(path), str(tmp_path / "d.npz"), model, data, labels


def loss_gradients(model, x, y) -> list[np.ndarray]:
    """tape.gradient of the mean cross-entropy over these samples, plus the regularization."""
    with tf.GradientTape() as tape:
        probs = model(tf.constant(x), training=False)
        loss = keras.losses.SparseCategoricalCrossentropy()(y, probs)
        loss += tf.add_n(model.losses) if model.losses else 0.0
    return [g.numpy().astype(np.float64) for g in tape.gradient(loss, model.trainable_variables)]


def test_weight_gradient_over_data_equals_one_full_batch_tape_gradient(classifier):
    path, d, model, data, labels = classifier
    full = loss_gradients(model, data, labels)
    report = scan_weights_model(path, data=d, batch_size=BATCH)
    assert report.probe.samples == SAMPLES and report.loss.labels == "data"
    names = [f"{v.path.split('/')[0]}/{v.name}" for v in model.trainable_variables]
    by_name = {r.variable: r for r in report.variables}
    for name, g, v in zip(names, full, model.trainable_variables, strict=True):
        row = by_name[name]
        assert row.status == "ok"
        assert row.gradient.l2 == pytest.approx(np.linalg.norm(g), rel=RTOL)
        assert row.gradient.mean_abs == pytest.approx(np.abs(g).mean(), rel=RTOL)
        assert row.gradient.max_abs == pytest.approx(np.abs(g).max(), rel=RTOL)
        w = np.linalg.norm(np.asarray(v.numpy(), np.float64))
        expected = np.linalg.norm(g) / w if w else None  # none for a fresh (zero) bias
        assert row.update_ratio == (expected and pytest.approx(expected, rel=RTOL))


def test_gradient_snr_per_layer_from_the_batch_gradients(classifier):
    path, d, model, data, labels = classifier
    starts = range(0, SAMPLES, BATCH)
    per_batch = [loss_gradients(model, data[s : s + BATCH], labels[s : s + BATCH]) for s in starts]
    sizes = np.array([min(BATCH, SAMPLES - s) for s in starts], np.float64)
    w = sizes / sizes.sum()
    layers = [v.path.split("/")[0] for v in model.trainable_variables]
    report = scan_weights_model(path, data=d, batch_size=BATCH)
    noise = {n.layer: n for n in report.noise}
    assert set(noise) == {"hidden", "head"}
    for layer in ("hidden", "head"):
        mine = [i for i, name in enumerate(layers) if name == layer]
        flat = np.stack([np.concatenate([g[i].ravel() for i in mine]) for g in per_batch])
        mean = (w[:, None] * flat).sum(axis=0)
        spread = (w * ((flat - mean) ** 2).sum(axis=1)).sum() / (1 - (w**2).sum())
        n = noise[layer]
        assert n.batches == len(sizes)
        assert n.signal == pytest.approx((mean**2).sum(), rel=RTOL)
        assert n.variance == pytest.approx(spread, rel=1e-4)
        assert n.snr == pytest.approx((mean**2).sum() / spread, rel=1e-4)


def test_weights_json_over_data_has_the_snr_and_the_data_hash(classifier):
    path, d, *_ = classifier
    out = run("scan", path, "--wrt", "weights", "--data", d, "--batch-size", "16", "--json")
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    assert doc["probe"]["samples"] == SAMPLES and len(doc["probe"]["data_sha256"]) == 64
    assert [n["layer"] for n in doc["gradient_snr"]] == ["hidden", "head"]
    assert all(n["snr"] > 0 and n["batches"] == 5 for n in doc["gradient_snr"])


def test_random_labels_over_data_are_drawn_per_batch(classifier, tmp_path):
    path, _, _, data, _ = classifier
    np.save(tmp_path / "x.npy", data)
    report = scan_weights_model(path, data=tmp_path / "x.npy", batch_size=BATCH)
    assert report.loss.labels == "random" and "drawn per sample" in report.notes[0]
    assert all(r.status == "ok" for r in report.variables)


# ------------------------------------------------------------------ check --baseline --data


def test_check_baseline_over_the_same_data_and_other_data(classifier, tmp_path):
    path, d, _, data, labels = classifier
    made = run("scan", path, "--wrt", "weights", "--data", d, "--batch-size", "16", "--json")
    base = tmp_path / "base.json"
    base.write_text(made.output)
    same = run("check", path, "--data", d, "--baseline", str(base), "--json")
    assert same.exit_code == 0, same.output
    checks = {c["name"]: c for c in json.loads(same.output)["files"][0]["checks"]}
    assert checks["baseline"]["passed"] and "no regression" in checks["baseline"]["message"]
    np.savez(tmp_path / "other.npz", x=data[::-1], y=labels[::-1])  # other content
    other = run("check", path, "--data", str(tmp_path / "other.npz"), "--baseline", str(base))
    assert other.exit_code == 2 and "--allow-other-data" in other.output
    assert "`layergrad scan MODEL --wrt weights --data " in other.output  # remade as it was
    fewer = run("check", path, "--data", d, "--limit", "40", "--baseline", str(base))
    assert fewer.exit_code == 2 and "70 samples" in fewer.output
    allowed = run(
        "check", path, "--data", str(tmp_path / "other.npz"), "--baseline", str(base),
        "--allow-other-data", "--json",
    )  # fmt: skip
    assert allowed.exit_code == 0, allowed.output
    checks = {c["name"]: c for c in json.loads(allowed.output)["files"][0]["checks"]}
    assert "over other data" in checks["baseline"]["message"]


def test_a_baseline_of_one_probe_batch_is_other_data(classifier, tmp_path):
    path, d, *_ = classifier
    base = tmp_path / "base.json"
    base.write_text(run("scan", path, "--wrt", "weights", "--json").output)
    refused = run("check", path, "--data", d, "--baseline", str(base))
    assert refused.exit_code == 2 and "random probe batch" in refused.output
    no_data = tmp_path / "data_base.json"
    no_data.write_text(
        run("scan", path, "--wrt", "weights", "--data", d, "--batch-size", "16", "--json").output
    )
    again = run("check", path, "--baseline", str(no_data))
    assert again.exit_code == 2 and "--data" in again.output
    lone = run("check", path, "--allow-other-data")
    assert lone.exit_code == 2


@pytest.mark.slow
def test_two_cpu_replicas_equal_one_device_for_the_weights_and_the_jacobian(classifier, tmp_path):
    """One device here; two CPU replicas in one new process (devices are split before
    TensorFlow starts) that runs both commands in turn."""
    from workers import one_process

    path, d, *_ = classifier
    commands = [
        ["scan", path, "--wrt", "weights"],
        # not `--to head`: the gradient of a softmax's sum is 0, and what the replicas
        # compare would be its rounding noise (1e-7), which depends on the order of the sums
        ["inspect", path, "--from", "x", "--to", "hidden", "--measure", "jacobian"],
    ]
    data = ["--data", d, "--batch-size", "16", "--json"]
    outcomes = one_process([[*c, *data, "--cpu-replicas", "2"] for c in commands], tmp_path)
    for command, outcome in zip(commands, outcomes, strict=True):
        assert outcome["code"] == 0 and not outcome["error"], outcome
        here = run(*command, *data)
        assert here.exit_code == 0, here.output
        one, two = json.loads(here.stdout), json.loads(outcome["stdout"])
        assert one["probe"]["replicas"] == 1
        assert two["probe"]["replicas"] == 2 and two["probe"]["samples"] == SAMPLES
        assert one["probe"]["data_sha256"] == two["probe"]["data_sha256"]
        one.pop("probe"), two.pop("probe")
        assert json.dumps(two) == json.dumps(one) or _close(one, two)


def _close(a: object, b: object) -> bool:
    """Equal up to rtol 1e-5 (only the order of the sums differs between replicas)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float):
        return a == pytest.approx(b, rel=1e-5, abs=1e-12)
    return a == b


def test_check_baseline_over_data_for_a_file_without_a_loss(residual, tmp_path):
    path, x, *_ = residual
    base = tmp_path / "base.json"
    base.write_text(run("scan", path, "--data", x, "--batch-size", "16", "--json").output)
    doc = json.loads(base.read_text())
    assert doc["probe"]["samples"] == SAMPLES and doc["probe"]["data_sha256"]
    out = run("check", path, "--data", x, "--baseline", str(base), "--json")
    assert out.exit_code == 0, out.output
    checks = {c["name"]: c for c in json.loads(out.output)["files"][0]["checks"]}
    assert checks["baseline"]["passed"] and "layers compared" in checks["baseline"]["message"]
    assert checks["forward"]["message"].startswith(f"finite over {SAMPLES} samples")


def test_labels_y_for_a_sequential_model(tmp_path):
    model = keras.Sequential(
        [keras.Input((5,), name="x"), keras.layers.Dense(3, activation="softmax", name="head")]
    )
    model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
    model.save(tmp_path / "seq.keras")
    data, labels = normal(SAMPLES, 5, seed=6), np.random.default_rng(7).integers(0, 3, SAMPLES)
    np.savez(tmp_path / "d.npz", x=data, y=labels)
    report = scan_weights_model(tmp_path / "seq.keras", data=tmp_path / "d.npz", batch_size=BATCH)
    assert report.loss.labels == "data"
    full = loss_gradients(model, data, labels)
    kernel = next(r for r in report.variables if r.variable == "head/kernel")
    assert kernel.gradient.l2 == pytest.approx(np.linalg.norm(full[0]), rel=RTOL)


def test_a_variable_without_gradient_over_data_gets_its_cause_from_a_batch(tmp_path):
    from helpers import CUSTOM_LAYERS, sample

    np.savez(tmp_path / "d.npz", x=normal(40, 6, seed=8))
    report = scan_weights_model(
        sample("train_unused_input.keras"), data=tmp_path / "d.npz", batch_size=BATCH,
        imports=[CUSTOM_LAYERS],
    )  # fmt: skip
    rows = {r.variable: r for r in report.variables}
    assert rows["b/kernel"].status == "none" and "blocked" in rows["b/kernel"].flags
    assert rows["b/kernel"].causes[0].code == "unused_input"
    assert {n.layer for n in report.noise} == {"a", "head"}  # b has no gradient: no SNR


def test_two_outputs_with_labels_y_name_equal_the_full_batch_compiled_loss(tmp_path):
    from helpers import sample

    path = sample("train_two_outputs.keras")
    data = normal(50, 6, seed=9)
    ids = np.random.default_rng(10).integers(0, 3, 50)
    value = normal(50, 1, seed=11)
    np.savez(tmp_path / "two.npz", x=data, **{"y:probs": ids, "y:value": value})
    report = scan_weights_model(path, data=tmp_path / "two.npz", batch_size=BATCH)
    assert report.loss.labels == "data"
    model = keras.saving.load_model(path, safe_mode=True)  # compiled as saved: the reference
    with tf.GradientTape() as tape:
        outputs = model(tf.constant(data), training=False)
        loss = model.compute_loss(y={"probs": ids, "value": value}, y_pred=outputs)
    grads = tape.gradient(loss, model.trainable_variables)
    rows = {r.variable: r for r in report.variables}
    for v, g in zip(model.trainable_variables, grads, strict=True):
        row = rows[f"{v.path.split('/')[0]}/{v.name}"]
        assert row.gradient.l2 == pytest.approx(float(np.linalg.norm(g.numpy())), rel=RTOL)


def test_a_target_without_gradient_gets_no_jacobian_over_data(residual):
    path, x, *_ = residual
    report = inspect_model(path, "skip", ["b", "out"], data=x, batch_size=BATCH, measure="jacobian")
    none, ok = report.results
    assert none.status == "none" and none.jacobian is None and none.causes
    assert ok.status == "ok" and ok.jacobian.frobenius.distribution.count == SAMPLES


def test_scan_jacobian_estimate_over_data(residual):
    path, x, model, data = residual
    frob = np.sqrt((all_at_once(model, data) ** 2).sum(axis=(1, 2)))
    report = scan_model(path, data=x, batch_size=BATCH, measure="jacobian", probes=8)
    f = next(r for r in report.rows if r.layer == "a").jacobian.frobenius
    assert f.distribution.count == SAMPLES and f.rel_stderr > 0
    assert abs(f.mean - frob.mean()) <= 4 * f.distribution.mean_rel_stderr * f.mean


def test_weights_over_data_render_their_snr_in_every_format(classifier):
    from pagecheck import external_references, read_page

    path, d, *_ = classifier
    base = ["scan", path, "--wrt", "weights", "--data", d, "--batch-size", "16", "--format"]
    for fmt in ("table", "markdown", "html"):
        out = run(*base, fmt)
        assert out.exit_code == 0, out.output
        assert "signal-to-noise" in out.output and "hidden" in out.output
    page = read_page(run(*base, "html").output)
    assert not page.errors and not external_references(page)


def test_a_shard_of_one_short_batch_draws_what_the_whole_run_draws(residual, tmp_path):
    """70 samples in batches of 16: the last batch holds 6. A shard of just those 6
    (`--first-sample 64`) is traced for a whole batch and padded, as the whole run pads its
    last batch, so the estimate of each of its samples is the whole run's."""
    path, x, _, data = residual
    np.save(tmp_path / "tail.npy", data[64:])
    whole = inspect_model(path, "a", ["out"], data=x, batch_size=BATCH, measure="jacobian",
                          probes=8, top=SAMPLES)  # fmt: skip
    tail = inspect_model(path, "a", ["out"], data=str(tmp_path / "tail.npy"), batch_size=BATCH,
                         first_sample=64, measure="jacobian", probes=8, top=6)  # fmt: skip
    by_sample = {r.sample: r.value for r in whole.results[0].jacobian.frobenius.distribution.top}
    shard = tail.results[0].jacobian.frobenius.distribution.top
    assert sorted(r.sample for r in shard) == list(range(64, 70))
    for r in shard:
        assert r.value == pytest.approx(by_sample[r.sample], rel=1e-6)
