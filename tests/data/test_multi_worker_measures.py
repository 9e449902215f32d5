"""`--distribute multi-worker` for the measures over data that keep their totals in numpy or
per batch: `--measure jacobian --data` (`inspect`, `scan`), `scan --wrt weights --data` (the
gradient SNR included; labels from a `.npz`, an image folder's classes and a function's
`(x, y)`, each worker's with its own rows) and `check --baseline --data`. Two worker processes on localhost run
every command once in one cluster (a script that invokes the command line several times),
one process runs the same commands, and each report of the chief equals the one process's
(rtol 1e-5); the other worker prints nothing.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from helpers import image_folder, keras, normal, sample, tf
from workers import assert_same_report, one_cluster, same_outcome

from layergrad.cli.app import main

pytestmark = pytest.mark.slow  # two workers and one process, started once: seconds
SAMPLES = 37  # batches of 8: 0-1 on worker 0, 2-4 (the partial one) on worker 1


@pytest.fixture(scope="module")
def cluster_runs(tmp_path_factory):
    """(the folder, the chief's outcomes, the other worker's, one process's), each
    outcome {"code", "stdout"}."""
    where = tmp_path_factory.mktemp("measures")
    keras.utils.set_random_seed(40)
    x = keras.Input((5,), name="x")
    a = keras.layers.Dense(6, activation="tanh", name="a")(x)
    b = keras.layers.Dense(4, activation="tanh", name="b")(a)
    skip = keras.layers.Dense(4, name="skip")(a)
    keras.Model(x, keras.layers.Add(name="out")([b, skip])).save(where / "residual.keras")
    h = keras.layers.Dense(6, activation="relu", name="hidden")(x)
    head = keras.layers.Dense(3, activation="softmax", name="head")(h)
    classifier = keras.Model(x, head)
    classifier.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
    classifier.save(where / "classifier.keras")
    a = keras.layers.Dense(24, activation="tanh", name="a")(x)  # 20 x 24: past the Lanczos steps
    keras.Model(x, keras.layers.Dense(20, activation="tanh", name="out")(a)).save(
        where / "wide.keras"
    )
    data = normal(SAMPLES, 5, seed=31)
    data[30] *= 0.01  # near 0, where tanh is steepest: a sensitive sample, on worker 1
    np.save(where / "x.npy", data)
    labels = np.random.default_rng(32).integers(0, 3, SAMPLES)
    np.savez_compressed(where / "d.npz", x=data, y=labels)  # read round robin, labels too
    base = CliRunner().invoke(
        main,
        ["scan", str(where / "classifier.keras"), "--wrt", "weights", "--data",
         str(where / "d.npz"), "--batch-size", "8", "--json"],
    )  # fmt: skip
    assert base.exit_code == 0, base.output
    (where / "base.json").write_text(base.stdout)
    batch = ["--batch-size", "8", "--json", "--quiet"]
    commands = [
        ["inspect", "residual.keras", "--from", "a", "--to", "out", "--data", "x.npy",
         "--measure", "jacobian", "--top", "5", *batch],
        ["scan", "residual.keras", "--to", "out", "--data", "x.npy", "--measure", "jacobian",
         "--probes", "4", "--top", "4", *batch],
        ["scan", "classifier.keras", "--wrt", "weights", "--data", "d.npz", *batch],
        ["scan", "classifier.keras", "--wrt", "weights", "--data", "x.npy", *batch],
        ["check", "classifier.keras", "--data", "d.npz", "--baseline", "base.json", *batch],
        ["check", sample("bug_dead_layer.keras"), "--data", "x6.npy", *batch],
        # labels with the inputs: by file from class sub-folders, by batch from a function
        ["scan", "image.keras", "--wrt", "weights", "--data", "images", "--batch-size", "4",
         "--json", "--quiet"],
        ["scan", "classifier.keras", "--wrt", "weights", "--data", "pairs.py:pairs", *batch],
        ["inspect", "wide.keras", "--from", "a", "--to", "out", "--data", "x.npy",
         "--measure", "jacobian", "--probes", "4", "--top", "5", *batch],
        # last: a bad batch on worker 1 stops the cluster
        ["scan", sample("embedding.keras"), "--wrt", "weights", "--loss", "mse", "--data",
         "ids.npy", *batch],
    ]  # fmt: skip
    np.save(where / "x6.npy", normal(SAMPLES, 6, seed=34))
    image_folder(where / "images", {"cat": 4, "dog": 3, "fish": 4}, seed=35)  # 11: batches 0 | 1-2
    image = keras.Sequential(
        [keras.Input((8, 8, 3)), keras.layers.Rescaling(1 / 255), keras.layers.Flatten(),
         keras.layers.Dense(3, activation="softmax", name="head")]
    )  # fmt: skip
    image.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
    image.save(where / "image.keras")
    (where / "pairs.py").write_text(
        "import numpy as np\n"
        "X = np.load('x.npy')\n"
        "Y = np.random.default_rng(32).integers(0, 3, len(X))\n"
        "def pairs():\n"
        "    return [(X[i : i + 7], Y[i : i + 7]) for i in range(0, len(X), 7)]\n"
    )
    ids = np.random.default_rng(33).integers(0, 20, (40, 6)).astype("int32")
    ids[35, 1] = 500  # outside the Embedding's vocabulary, in batch 35 // 8 = 4, on worker 1
    np.save(where / "ids.npy", ids)
    return (where, *one_cluster(commands, where))


def outcome(cluster_runs, index: int) -> tuple[dict, dict]:
    """Command `index`'s reports: the chief's and one process's (checked equal), exit 0."""
    _, chief, _, _ = cluster_runs
    assert chief[index]["code"] == 0, chief[index]
    return same_outcome(cluster_runs[1:], index)


def test_exact_jacobian_over_two_workers_with_global_top_samples(cluster_runs):
    many, _ = outcome(cluster_runs, 0)
    j = many["results"][0]["jacobian"]
    assert j["method"] == "exact" and j["frobenius"]["samples"] == SAMPLES
    where = cluster_runs[0]
    model = keras.models.load_model(where / "residual.keras")
    h = tf.constant(model.get_layer("a")(tf.constant(np.load(where / "x.npy"))))
    with tf.GradientTape() as tape:  # every J_i at once, by hand
        tape.watch(h)
        out = model.get_layer("b")(h) + model.get_layer("skip")(h)
    frob = np.sqrt((tape.batch_jacobian(out, h).numpy().astype(np.float64) ** 2).sum((1, 2)))
    ranked = [int(i) for i in np.lexsort((np.arange(SAMPLES), -frob))[:5]]
    assert [t["sample"] for t in j["frobenius"]["top"]] == ranked
    assert max(ranked) >= 16  # read by worker 1: its indices are those of the whole data


def test_estimated_scan_jacobian_over_two_workers_draws_as_one_process(cluster_runs):
    many, _ = outcome(cluster_runs, 1)
    rows = [r for r in many["layers"] if r.get("jacobian")]
    assert rows and all(r["jacobian"]["frobenius"]["samples"] == SAMPLES for r in rows)


@pytest.mark.parametrize(("index", "labels"), [(2, "data"), (3, "random")])
def test_weight_gradient_and_snr_over_two_workers(cluster_runs, index, labels):
    many, _ = outcome(cluster_runs, index)
    assert many["loss"]["labels"] == labels and many["probe"]["samples"] == SAMPLES
    assert [n["layer"] for n in many["gradient_snr"]] == ["hidden", "head"]
    assert all(n["batches"] == 5 and n["snr"] > 0 for n in many["gradient_snr"])


def test_check_baseline_over_two_workers(cluster_runs):
    _, chief, other, one = cluster_runs
    assert chief[4]["code"] == one[4]["code"] == 0, chief[4]
    assert (other[4]["code"], other[4]["stdout"]) == (0, "")
    many, single = json.loads(chief[4]["stdout"]), json.loads(one[4]["stdout"])
    assert_same_report(many, single)
    checks = {c["name"]: c for c in many["files"][0]["checks"]}
    assert checks["baseline"]["passed"] and "no regression" in checks["baseline"]["message"]


def test_units_dead_for_every_sample_of_every_worker(cluster_runs):
    _, chief, other, one = cluster_runs
    assert chief[5]["code"] == one[5]["code"] == 0, chief[5]  # dead warns
    assert (other[5]["code"], other[5]["stdout"]) == (0, "")
    many, single = json.loads(chief[5]["stdout"]), json.loads(one[5]["stdout"])
    assert_same_report(many, single)
    dead = [c for c in many["files"][0]["checks"] if "dead" in c["findings"]]
    assert dead and "for every sample of the data" in dead[0]["message"]


@pytest.mark.parametrize(("index", "samples", "batches"), [(6, 11, 3), (7, SAMPLES, 5)])
def test_labels_of_a_folder_and_a_function_over_two_workers(cluster_runs, index, samples, batches):
    many, _ = outcome(cluster_runs, index)
    assert many["loss"]["labels"] == "data" and many["probe"]["samples"] == samples
    assert all(n["batches"] == batches for n in many["gradient_snr"])


def test_estimated_jacobian_over_two_workers_draws_as_one_process(cluster_runs):
    many, _ = outcome(cluster_runs, 8)  # the compiled step on each worker, seeded per batch
    j = many["results"][0]["jacobian"]
    assert j["method"] == "estimate" and j["spectral"]["samples"] == SAMPLES
    assert j["frobenius"]["rel_stderr"] > 0 and j["spectral"]["iterations"] == 16


def test_a_bad_batch_of_the_weight_scan_on_one_worker_stops_both_with_exit_2(cluster_runs):
    _, chief, other, one = cluster_runs
    assert [chief[9]["code"], other[9]["code"], one[9]["code"]] == [2, 2, 2]
    assert chief[9]["stdout"] == other[9]["stdout"] == ""
    assert "the model failed on batch 4" in other[9]["stderr"]  # as one process says
    assert "the model failed on batch 4" in one[9]["stderr"]
    assert "another worker of the cluster stopped" in chief[9]["stderr"]
