"""`--distribute multi-worker`: two worker processes on localhost, configured by TF_CONFIG,
give the report of one process over the same data (rtol 1e-5), and only the chief prints it.

Each run starts two fresh processes (MultiWorkerMirroredStrategy configures TensorFlow's
collectives at start-up); both are killed in `finally`, and every wait is bounded.
"""

from __future__ import annotations

import itertools
import json
import sys

import numpy as np
import pytest
from click.testing import CliRunner
from helpers import normal, sample, small_conv_net, tf
from workers import run_both, run_workers, tf_config

from layergrad.cli.app import main
from layergrad.core.cluster import cluster_from_env, reports_here
from layergrad.core.errors import UsageError
from layergrad.data.shards import part_rows

pytestmark = pytest.mark.slow  # fresh processes: a few seconds each


# ----------------------------------------------------------------------------- the sources


def test_npy_records_inspect_two_targets(tmp_path):
    x = normal(33, 6, seed=21)  # batches of 16, 16 and 1: worker 0 gets one, worker 1 two
    x[:, 0] *= 3.0
    np.save(tmp_path / "x.npy", x)
    many, _ = run_both(["inspect", sample("cause_saturated.keras"), "--from", "x", "--to",
                        "squash", "--to", "head", "--data", "x.npy", "--batch-size", "16"],
                       tmp_path)  # fmt: skip
    assert many["probe"]["samples"] == 33
    assert [r["to"]["layer"] for r in many["results"]] == ["squash", "head"]


def test_scan_of_the_default_target_projects_each_sample_as_one_process_does(tmp_path):
    # the projection of the outputs is seeded per sample index: the shards keep the indices
    np.save(tmp_path / "r.npy", normal(50, 8, seed=22))
    many, _ = run_both(["scan", sample("residual.keras"), "--data", "r.npy", "--batch-size",
                        "8", "--limit", "45"], tmp_path)  # fmt: skip
    assert many["probe"]["samples"] == 45 and many["target"] is None


def test_compressed_npz_and_reduce_mean(tmp_path):
    np.savez_compressed(tmp_path / "d.npz", input=normal(21, 5, seed=23), y=np.zeros(21))
    run_both(["scan", sample("seed.keras"), "--data", "d.npz", "--batch-size", "4", "--reduce",
              "mean"], tmp_path)  # fmt: skip


def test_image_folder_is_sharded_by_file(tmp_path):
    small_conv_net(tmp_path / "m.keras")
    rng = np.random.default_rng(5)
    for i in range(11):  # in two class folders, and of another size: decoded and resized
        where = tmp_path / "images" / ("a" if i < 6 else "b")
        where.mkdir(parents=True, exist_ok=True)
        image = rng.integers(0, 256, (10, 9, 3), dtype=np.uint8)
        (where / f"{i:02d}.png").write_bytes(tf.io.encode_png(image).numpy())
    many, _ = run_both(["scan", "m.keras", "--data", "images", "--batch-size", "4"], tmp_path)
    assert many["probe"]["samples"] == 11


FUNCTIONS = """
import numpy as np

X = np.random.default_rng(24).standard_normal((30, 5)).astype("float32")

def batches():  # no argument: every worker reads it, and keeps its batches
    return [X[i : i + 7] for i in range(0, 30, 7)]

def sharded(input_context):  # its own shard, through the InputContext
    import tensorflow as tf
    n, i = input_context.num_input_pipelines, input_context.input_pipeline_id
    return tf.data.Dataset.from_tensor_slices(X).shard(n, i).batch(5)
"""


@pytest.mark.parametrize("function", ["batches", "sharded"])
def test_function_sources(function, tmp_path):
    (tmp_path / "data.py").write_text(FUNCTIONS)
    many, _ = run_both(["inspect", sample("seed.keras"), "--from", "dense", "--to", "dense_1",
                        "--data", f"data.py:{function}", "--batch-size", "8"],
                       tmp_path)  # fmt: skip
    assert many["probe"]["samples"] == 30


def test_first_non_finite_batch_and_its_causes_are_those_of_one_process(tmp_path):
    x = normal(40, 6, seed=12)
    x[35, 2] = np.nan  # batch 35 // 8 = 4, on worker 1
    np.save(tmp_path / "x.npy", x)
    many, _ = run_both(["inspect", sample("cause_saturated.keras"), "--from", "x", "--to",
                        "squash", "--data", "x.npy", "--batch-size", "8"], tmp_path)  # fmt: skip
    result = many["results"][0]
    assert result["status"] == "nonfinite" and result["first_nonfinite_batch"] == 4
    assert result["causes"]


def test_check_over_the_data(tmp_path):
    np.save(tmp_path / "x.npy", normal(19, 5, seed=25))
    many, _ = run_both(["check", sample("seed.keras"), "--data", "x.npy", "--batch-size", "4"],
                       tmp_path)  # fmt: skip
    forward = [c for c in many["files"][0]["checks"] if c["name"] == "forward"]
    assert forward and "19 samples" in forward[0]["message"]


def test_a_bad_batch_on_one_worker_stops_both_with_exit_2(tmp_path):
    x = np.random.default_rng(26).integers(0, 20, (40, 6)).astype("int32")
    x[35, 1] = 500  # outside the Embedding's vocabulary, in batch 35 // 8 = 4, on worker 1
    np.save(tmp_path / "ids.npy", x)
    done = run_workers(["scan", sample("embedding.keras"), "--data", "ids.npy", "--batch-size",
                        "8"], tmp_path)  # fmt: skip
    assert [d.returncode for d in done] == [2, 2]
    assert all(d.stdout == "" for d in done)
    assert "the model failed on batch 4: indices[3,1] = 500" in done[1].stderr
    assert "another worker of the cluster stopped" in done[0].stderr
    assert "Traceback" not in done[0].stderr + done[1].stderr


COMBINE = """
import json
import numpy as np
from layergrad.data import devices
from layergrad.data.stats import aggregates
from layergrad.data.stats.accumulators import combine_workers
from layergrad.core.cluster import cluster_from_env

w = cluster_from_env().index
strategy = devices.strategy_for("multi-worker")
values = {"sum": np.array([w + 1.0, 2.0]), "max": np.array([w, -w]), "min": np.array([[w]])}
kinds = {"sum": aggregates.SUM, "max": aggregates.MAX, "min": aggregates.MIN}
out = combine_workers(strategy, values, kinds)
print(json.dumps({k: v.tolist() for k, v in out.items()}))
"""


def test_totals_kept_in_numpy_combine_over_the_workers(tmp_path):
    done = run_workers([], tmp_path, [sys.executable, "-c", COMBINE])
    assert [d.returncode for d in done] == [0, 0], done[0].stderr[-2000:]
    want = {"sum": [3.0, 4.0], "max": [1.0, 0.0], "min": [[0.0]]}  # workers 0 and 1, by hand
    assert [json.loads(d.stdout) for d in done] == [want, want]


def test_combine_workers_in_one_process_returns_the_values():
    from layergrad.data.stats import aggregates
    from layergrad.data.stats.accumulators import combine_workers

    values = {"sum": np.array([1.0, 2.0])}
    assert combine_workers(tf.distribute.get_strategy(), values, {"sum": aggregates.SUM}) is values


# ----------------------------------------------------------------------------- TF_CONFIG


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (None, "needs the cluster in the environment variable TF_CONFIG, which is not set"),
        ("{not json", "TF_CONFIG is not JSON"),
        ('["worker"]', "TF_CONFIG is a JSON list, not an object"),
        ('{"task": {"type": "worker", "index": 0}}', 'has no "cluster" object'),
        ('{"cluster": {"worker": ["localhost:1"]}}', 'has no "task" object'),
        ('{"cluster": {"worker": ["localhost"]}, "task": {"type": "worker", "index": 0}}',
         "is not \"host:port\""),
        ('{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 1}}',
         "task worker 1 is not in the cluster, which has 1 worker task(s)"),
        ('{"cluster": {"worker": ["a:1"], "ps": ["b:2"]}, "task": {"type": "ps", "index": 0}}',
         "task type 'ps' does not run the step"),
    ],
    ids=["missing", "not-json", "list", "no-cluster", "no-task", "address", "index", "ps"],
)  # fmt: skip
def test_a_missing_or_malformed_tf_config_is_one_line_and_exit_2(value, message, tmp_path):
    np.save(tmp_path / "x.npy", normal(4, 5))
    env = {"TF_CONFIG": value} if value is not None else {}
    result = CliRunner().invoke(
        main,
        ["scan", sample("seed.keras"), "--data", str(tmp_path / "x.npy"), "--distribute",
         "multi-worker"],
        env={"TF_CONFIG": None, **env},
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.output
    assert "Traceback" not in result.output


def test_cpu_replicas_and_multi_worker_exclude_each_other(tmp_path):
    np.save(tmp_path / "x.npy", normal(4, 5))
    result = CliRunner().invoke(
        main,
        ["scan", sample("seed.keras"), "--data", str(tmp_path / "x.npy"), "--distribute",
         "multi-worker", "--cpu-replicas", "2"],
        env={"TF_CONFIG": tf_config([1, 2], 0)},
    )  # fmt: skip
    assert result.exit_code == 2 and "drop --cpu-replicas" in result.output


def test_workers_are_numbered_chief_first():
    cluster = {"chief": ["c:1"], "worker": ["w:1", "w:2"]}
    number = {}
    for task, index in (("chief", 0), ("worker", 0), ("worker", 1)):
        env = {
            "TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": task, "index": index}})
        }
        got = cluster_from_env(env)
        number[(task, index)] = (got.index, got.workers, got.is_chief)
        assert reports_here("multi-worker", env) == got.is_chief
    assert number == {("chief", 0): (0, 3, True), ("worker", 0): (1, 3, False),
                      ("worker", 1): (2, 3, False)}  # fmt: skip
    assert reports_here(None, {}) and reports_here("mirrored", {})
    with pytest.raises(UsageError, match="2 chief tasks"):
        cluster_from_env({"TF_CONFIG": json.dumps(
            {"cluster": {"chief": ["a:1", "b:1"]}, "task": {"type": "chief", "index": 0}})})  # fmt: skip


def test_parts_are_whole_batches_and_cover_every_row_once():
    for rows in (0, 1, 7, 16, 33, 100):
        for workers in (1, 2, 3, 5):
            parts = [part_rows(rows, 8, (w, workers)) for w in range(workers)]
            assert parts[0][0] == 0 and parts[-1][1] == rows
            for (_, stop), (start, _) in itertools.pairwise(parts):
                assert stop == start and start % 8 == 0
