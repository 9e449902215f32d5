"""`--distribute multi-worker`: two worker processes on localhost, configured by TF_CONFIG,
give the report of one process over the same data (rtol 1e-5), and only the chief prints it.

The two workers are started once for the module: each runs every command of `COMMANDS` in
turn, in one cluster (a script that invokes the command line once per command), and one
process runs the same commands; a bad batch on one worker, which stops the cluster, comes
last. Both workers are killed in `finally`, and every wait is bounded (tests/workers.py).
"""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from click.testing import CliRunner
from helpers import normal, sample, small_conv_net, tf
from workers import one_cluster, same_outcome, tf_config

from layergrad.cli.app import main
from layergrad.core.cluster import cluster_from_env
from layergrad.core.errors import UsageError
from layergrad.core.probe_options import ProbeOptions, with_cluster
from layergrad.data.shards import part_rows

pytestmark = pytest.mark.slow  # two workers and one process, started once: seconds

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

COMBINE = """
import json
from layergrad.data import devices
from layergrad.data.stats.accumulators import gather_workers
from layergrad.core.cluster import cluster_from_env

w = cluster_from_env().index
strategy = devices.strategy_for("multi-worker")
# payloads of different lengths and shapes; floats that only an exact round trip keeps
payload = {"worker": w, "values": [0.1 + w, 1e-300, -2.5e17][: 3 - w], "note": "w" * (w + 1)}
print(json.dumps(gather_workers(strategy, payload)))
"""

JSON = ["--json"]
COMMANDS: dict[str, list[str]] = {  # name -> the command (in this order)
    # batches of 16, 16 and 1: worker 0 gets one, worker 1 two
    "two_targets": ["inspect", sample("cause_saturated.keras"), "--from", "x", "--to", "squash",
                    "--to", "head", "--data", "x33.npy", "--batch-size", "16", *JSON],
    "default_target": ["scan", sample("residual.keras"), "--data", "r.npy", "--batch-size", "8",
                       "--limit", "45", *JSON],
    "npz_mean": ["scan", sample("seed.keras"), "--data", "d.npz", "--batch-size", "4",
                 "--reduce", "mean", *JSON],
    "images": ["scan", "m.keras", "--data", "images", "--batch-size", "4", *JSON],
    "batches": ["inspect", sample("seed.keras"), "--from", "dense", "--to", "dense_1", "--data",
                "data.py:batches", "--batch-size", "8", *JSON],
    "sharded": ["inspect", sample("seed.keras"), "--from", "dense", "--to", "dense_1", "--data",
                "data.py:sharded", "--batch-size", "8", *JSON],
    "nonfinite": ["inspect", sample("cause_saturated.keras"), "--from", "x", "--to", "squash",
                  "--data", "nan.npy", "--batch-size", "8", *JSON],
    "check": ["check", sample("seed.keras"), "--data", "x19.npy", "--batch-size", "4", *JSON],
    "combine": ["--python", COMBINE],
    # last: a bad batch on worker 1 stops the cluster
    "bad_batch": ["scan", sample("embedding.keras"), "--data", "ids.npy", "--batch-size", "8",
                  *JSON],
}  # fmt: skip
AT = {name: i for i, name in enumerate(COMMANDS)}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The outcomes of `COMMANDS`: the chief's, the other worker's and one process's."""
    where = tmp_path_factory.mktemp("workers")
    x = normal(33, 6, seed=21)
    x[:, 0] *= 3.0
    np.save(where / "x33.npy", x)
    # the projection of the outputs is seeded per sample index: the shards keep the indices
    np.save(where / "r.npy", normal(50, 8, seed=22))
    np.savez_compressed(where / "d.npz", input=normal(21, 5, seed=23), y=np.zeros(21))
    small_conv_net(where / "m.keras")
    rng = np.random.default_rng(5)
    for i in range(11):  # in two class folders, and of another size: decoded and resized
        folder = where / "images" / ("a" if i < 6 else "b")
        folder.mkdir(parents=True, exist_ok=True)
        image = rng.integers(0, 256, (10, 9, 3), dtype=np.uint8)
        (folder / f"{i:02d}.png").write_bytes(tf.io.encode_png(image).numpy())
    (where / "data.py").write_text(FUNCTIONS)
    x = normal(40, 6, seed=12)
    x[35, 2] = np.nan  # batch 35 // 8 = 4, on worker 1
    np.save(where / "nan.npy", x)
    np.save(where / "x19.npy", normal(19, 5, seed=25))
    ids = np.random.default_rng(26).integers(0, 20, (40, 6)).astype("int32")
    ids[35, 1] = 500  # outside the Embedding's vocabulary, in batch 35 // 8 = 4, on worker 1
    np.save(where / "ids.npy", ids)
    return one_cluster(list(COMMANDS.values()), where)


# ----------------------------------------------------------------------------- the sources


def test_npy_records_inspect_two_targets(runs):
    many, _ = same_outcome(runs, AT["two_targets"])
    assert many["probe"]["samples"] == 33
    assert [r["to"]["layer"] for r in many["results"]] == ["squash", "head"]


def test_scan_of_the_default_target_projects_each_sample_as_one_process_does(runs):
    many, _ = same_outcome(runs, AT["default_target"])
    assert many["probe"]["samples"] == 45 and many["target"] is None


def test_compressed_npz_and_reduce_mean(runs):
    same_outcome(runs, AT["npz_mean"])


def test_image_folder_is_sharded_by_file(runs):
    many, _ = same_outcome(runs, AT["images"])
    assert many["probe"]["samples"] == 11


@pytest.mark.parametrize("function", ["batches", "sharded"])
def test_function_sources(function, runs):
    many, _ = same_outcome(runs, AT[function])
    assert many["probe"]["samples"] == 30


def test_first_non_finite_batch_and_its_causes_are_those_of_one_process(runs):
    many, _ = same_outcome(runs, AT["nonfinite"])
    result = many["results"][0]
    assert result["status"] == "nonfinite" and result["first_nonfinite_batch"] == 4
    assert result["causes"]


def test_check_over_the_data(runs):
    many, _ = same_outcome(runs, AT["check"])
    forward = [c for c in many["files"][0]["checks"] if c["name"] == "forward"]
    assert forward and "19 samples" in forward[0]["message"]


def test_a_bad_batch_on_one_worker_stops_both_with_exit_2(runs):
    chief, other, one = (outcomes[AT["bad_batch"]] for outcomes in runs)
    assert [chief["code"], other["code"], one["code"]] == [2, 2, 2]
    assert chief["stdout"] == other["stdout"] == ""
    assert "the model failed on batch 4: indices[3,1] = 500" in other["stderr"]
    assert "the model failed on batch 4: indices[3,1] = 500" in one["stderr"]
    assert "another worker of the cluster stopped" in chief["stderr"]
    assert chief["error"] == other["error"] == ""  # no exception let out
    assert "Traceback" not in chief["stderr"] + other["stderr"]


def test_totals_of_any_shape_are_gathered_from_every_worker_in_worker_order(runs):
    chief, other, _ = (outcomes[AT["combine"]] for outcomes in runs)
    assert [chief["code"], other["code"]] == [0, 0], chief["error"] + other["error"]
    want = [  # workers 0 and 1, by hand, on both
        {"worker": 0, "values": [0.1, 1e-300, -2.5e17], "note": "w"},
        {"worker": 1, "values": [1.1, 1e-300], "note": "ww"},
    ]
    assert [json.loads(chief["stdout"]), json.loads(other["stdout"])] == [want, want]


def test_gather_workers_in_one_process_returns_the_payload_alone():
    from layergrad.data.stats.accumulators import gather_workers

    payload = {"values": [1.0, 2.0]}
    assert gather_workers(tf.distribute.get_strategy(), payload) == [payload]


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


def _reports_here(distribute: str | None, environ: dict[str, str]) -> bool:
    """Whether this process prints the report, as the CLI decides it from TF_CONFIG."""
    options = ProbeOptions(data="d.npz", distribute=distribute)
    return with_cluster(options, environ).reports_here


def test_workers_are_numbered_chief_first():
    cluster = {"chief": ["c:1"], "worker": ["w:1", "w:2"]}
    number = {}
    for task, index in (("chief", 0), ("worker", 0), ("worker", 1)):
        env = {
            "TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": task, "index": index}})
        }
        got = cluster_from_env(env)
        number[(task, index)] = (got.index, got.workers, got.is_chief)
        assert _reports_here("multi-worker", env) == got.is_chief
    assert number == {("chief", 0): (0, 3, True), ("worker", 0): (1, 3, False),
                      ("worker", 1): (2, 3, False)}  # fmt: skip
    assert _reports_here(None, {}) and _reports_here("mirrored", {})
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
