"""`layergrad merge`: the reports of runs over shards of a data set combine into the report of
one run over all of it. The truth is an independent run over the concatenated data; p50 and
p95, which do not combine, are null."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from helpers import keras, normal, sample

from layergrad.cli.app import main
from layergrad.commands.merge import merge_gradients, merge_samples
from layergrad.core.results import GradientStats, SampleStats

PERCENTILES = ("p50", "p95")


def cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


def report(*args: str) -> dict:
    quiet = ["--quiet"] if "--data" in args else []
    code, out = cli(*args, "--json", *quiet)
    assert code in (0, 1), out
    return json.loads(out)


def shards(tmp_path: Path, x: np.ndarray, cut: int) -> tuple[str, str, str]:
    """The data whole and in two shards: (whole, first, second) paths."""
    paths = [str(tmp_path / f"{name}.npy") for name in ("whole", "first", "second")]
    for path, part in zip(paths, (x, x[:cut], x[cut:]), strict=True):
        np.save(path, part)
    return paths[0], paths[1], paths[2]


def write(tmp_path: Path, name: str, doc: dict) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return str(path)


def merged(tmp_path: Path, *docs: dict) -> dict:
    paths = [write(tmp_path, f"shard{i}.json", d) for i, d in enumerate(docs)]
    return report("merge", *paths)


def assert_equal_but_percentiles(got: object, want: object, where: str = "report") -> None:
    """Equal, numbers within rtol 1e-9 (float64 sums in another order); p50 / p95 null in
    `got`; probe.source, replicas and shards are what a merge says about itself, and it has
    no data_sha256 (the content hash of one file)."""
    if isinstance(want, dict):
        assert isinstance(got, dict), where
        skip = set()
        if where.endswith("probe"):
            skip = {"source", "replicas", "shards", "data_sha256"}
            assert "data_sha256" not in got, where
        assert set(got) - skip == set(want) - skip, where
        for key in set(want) - skip:
            if key in PERCENTILES:
                assert got[key] is None, f"{where}.{key}"
            else:
                assert_equal_but_percentiles(got[key], want[key], f"{where}.{key}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), where
        for i, (a, b) in enumerate(zip(got, want, strict=True)):
            assert_equal_but_percentiles(a, b, f"{where}[{i}]")
    elif isinstance(want, float):
        assert got == pytest.approx(want, rel=1e-9, abs=1e-12), where
    else:
        assert got == want, where


@pytest.mark.parametrize("reduce", ["sum", "mean"])
def test_inspect_shards_merge_into_the_run_over_both(reduce, tmp_path):
    x = normal(45, 6, seed=31)
    x[:, 0] *= 3.0
    whole, a, b = shards(tmp_path, x, 24)  # three batches of 8, then 21 rows: a partial batch
    args = ["inspect", sample("cause_saturated.keras"), "--from", "x", "--to", "squash", "--to",
            "head", "--batch-size", "8", "--reduce", reduce]  # fmt: skip
    one = report(*args, "--data", whole)
    got = merged(tmp_path, report(*args, "--data", a), report(*args, "--data", b))
    assert got["probe"]["samples"] == 45 and got["probe"]["shards"] == 2
    assert got["probe"]["source"] == f"{a} + {b}"
    assert_equal_but_percentiles(got, one)


def test_scan_of_the_default_target_merges_when_shards_number_their_samples(tmp_path):
    whole, a, b = shards(tmp_path, normal(30, 8, seed=32), 16)
    args = ["scan", sample("residual.keras"), "--batch-size", "8"]
    one = report(*args, "--data", whole)
    first = report(*args, "--data", a)
    second = report(*args, "--data", b, "--first-sample", "16")
    assert second["probe"]["first_sample"] == 16 and "first_sample" not in one["probe"]
    both = merged(tmp_path, first, second)
    assert_equal_but_percentiles(both, one)
    # as a baseline over the data: no one file's hash, so other data unless allowed
    base = write(tmp_path, "base.json", both)
    check = ["check", sample("residual.keras"), "--data", whole, "--baseline", base]
    code, out = cli(*check)
    assert code == 2 and "merged from 2 shards" in out, out
    code, out = cli(*check, "--allow-other-data", "--json")
    checks = {c["name"]: c for c in json.loads(out)["files"][0]["checks"]}
    assert code == 0 and "over other data" in checks["baseline"]["message"], out
    # numbered from 0, the second shard's projection is not the whole run's: refused
    code, out = cli("merge", write(tmp_path, "a.json", first),
                    write(tmp_path, "b.json", report(*args, "--data", b)))  # fmt: skip
    assert code == 2 and "--first-sample" in out and len(out.strip().splitlines()) == 1


def test_scan_with_a_target_and_the_first_non_finite_batch(tmp_path):
    x = normal(40, 6, seed=33)
    x[29, 2] = np.nan  # in the second shard; batch 29 // 8 = 3 of the whole run
    whole, a, b = shards(tmp_path, x, 16)
    args = ["scan", sample("cause_saturated.keras"), "--to", "squash", "--batch-size", "8"]
    one = report(*args, "--data", whole)
    got = merged(tmp_path, report(*args, "--data", a), report(*args, "--data", b))
    bad = [r for r in got["layers"] if r["status"] == "nonfinite"]
    assert bad and all(r["first_nonfinite_batch"] == 3 and r["causes"] for r in bad)
    assert_equal_but_percentiles(got, one)


def test_dead_units_are_those_dead_in_every_shard(tmp_path):
    # gate = relu(x0 - 10), relu(x1): units 2, 3 of x feed nothing; unit 0 lives only where
    # x0 > 10 (one sample of the second shard), unit 1 nowhere (x1 < 0)
    x_in = keras.Input((4,), name="x")
    gate, head = keras.layers.Dense(2, activation="relu", name="gate"), keras.layers.Dense(1)
    model = keras.Model(x_in, head(gate(x_in)))
    gate.set_weights([np.array([[1, 0], [0, 1], [0, 0], [0, 0]], "float32"),
                      np.array([-10, 0], "float32")])  # fmt: skip
    head.set_weights([np.ones((2, 1), "float32"), np.zeros(1, "float32")])
    model.save(tmp_path / "m.keras")
    x = normal(30, 4, seed=34) * 0.1
    x[:, 1] = -1.0
    x[25, 0] = 12.0
    whole, a, b = shards(tmp_path, x, 16)
    args = ["inspect", str(tmp_path / "m.keras"), "--from", "x", "--to", head.name]
    first, second = report(*args, "--data", a), report(*args, "--data", b)
    assert first["results"][0]["dead_units"] == [0, 1, 2, 3]
    assert second["results"][0]["dead_units"] == [1, 2, 3]
    got = merged(tmp_path, first, second)
    assert got["results"][0]["dead_units"] == [1, 2, 3]  # worked out above
    assert_equal_but_percentiles(got, report(*args, "--data", whole))
    _, table = cli("merge", *(str(tmp_path / f"shard{i}.json") for i in range(2)))
    assert "p50 n/a (shards do not combine)" in table and "30 samples" in table


def test_the_rules_on_numbers_worked_out_by_hand():
    # two shards of a gradient of shape (n, 2): sum of squares, element-weighted means
    a = GradientStats((1, 2), l2=3.0, mean_abs=1.0, max_abs=2.0, zero_fraction=0.5, nonfinite=0)
    b = GradientStats((3, 2), l2=4.0, mean_abs=2.0, max_abs=5.0, zero_fraction=0.0, nonfinite=1)
    g = merge_gradients([a, b], [1.0, 1.0], (4, 2))
    assert (g.l2, g.mean_abs, g.max_abs, g.nonfinite) == (5.0, 1.75, 5.0, 1)
    assert g.zero_fraction == pytest.approx(1 / 8)
    # per-sample values {1} and {2, 4}: mean 7/3, std sqrt(21/3 - 49/9)
    s = merge_samples([SampleStats(1, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0),
                       SampleStats(2, 3.0, 1.0, 2.0, 2.0, 4.0, 4.0)], [1, 2], [1.0, 1.0])  # fmt: skip
    values = np.array([1.0, 2.0, 4.0])
    assert s is not None and s.count == 3 and (s.min, s.max) == (1.0, 4.0)
    assert s.mean == pytest.approx(values.mean()) and s.std == pytest.approx(values.std())
    assert s.p50 is None and s.p95 is None


@pytest.fixture(scope="module")
def two_shards(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("shards")
    _, a, b = shards(tmp, normal(20, 5, seed=35), 8)
    args = ["scan", sample("seed.keras"), "--to", "dense_2", "--batch-size", "8"]
    docs = [report(*args, "--data", p) for p in (a, b)]
    return tmp, [write(tmp, f"s{i}.json", d) for i, d in enumerate(docs)], docs


@pytest.mark.parametrize("fmt", ["table", "markdown", "html"])
def test_other_formats(fmt, two_shards):
    _, paths, _ = two_shards
    code, out = cli("merge", *paths, "--format", fmt)
    assert code == 0, out
    assert "dense_2" in out
    if fmt == "table":
        assert "20 samples" in out


def test_diff_reads_a_merged_report(two_shards):
    tmp, paths, _ = two_shards
    _, out = cli("merge", *paths, "--json")
    merged_path = write(tmp, "merged.json", json.loads(out))
    code, out = cli("diff", merged_path, merged_path, "--json")
    assert code == 0, out
    assert json.loads(out)["regressions"] == 0 or json.loads(out)["regressions"] == []


def refused(*paths: str) -> str:
    code, out = cli("merge", *paths)
    lines = out.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in out, out
    return lines[0]


def test_shards_that_do_not_fit_are_refused(two_shards, tmp_path):
    _, paths, docs = two_shards
    other = {**docs[1], "probe": {**docs[1]["probe"], "batch_size": 4}}
    assert "--batch-size 4 vs 8" in refused(paths[0], write(tmp_path, "b.json", other))
    renamed = {**docs[1], "model": {**docs[1]["model"], "name": "other"}}
    assert "model name" in refused(paths[0], write(tmp_path, "n.json", renamed))
    fewer = {**docs[1], "layers": docs[1]["layers"][:-1]}
    assert "layers differ" in refused(paths[0], write(tmp_path, "l.json", fewer))
    one_batch = report("scan", sample("seed.keras"), "--to", "dense_2")
    assert "not of --data" in refused(write(tmp_path, "o.json", one_batch), paths[0])
    inspect = report("inspect", sample("seed.keras"), "--from", "dense", "--to", "dense_1",
                     "--data", docs[0]["probe"]["source"], "--batch-size", "8")  # fmt: skip
    assert "is a scan report but" in refused(write(tmp_path, "i.json", inspect), paths[0])


def test_first_sample_needs_data():
    code, out = cli("scan", sample("seed.keras"), "--first-sample", "3")
    assert code == 2 and "--first-sample only applies with --data PATH" in out


def test_files_that_are_not_reports_are_refused(two_shards, tmp_path):
    _, paths, _ = two_shards
    (tmp_path / "bad.json").write_text("{not json")
    assert "is not a JSON document" in refused(str(tmp_path / "bad.json"))
    (tmp_path / "nan.json").write_text('{"schema": NaN}')
    assert "is not a JSON document" in refused(str(tmp_path / "nan.json"))
    text = Path(paths[1]).read_text()  # a real shard, its schema named a second time
    (tmp_path / "twice.json").write_text(text.replace("{", '{"schema": "x", ', 1))
    assert "member 'schema' is given twice" in refused(paths[0], str(tmp_path / "twice.json"))
    diff_doc = write(tmp_path, "d.json", {"schema": "layergrad.diff/1"})
    assert 'schema "layergrad.diff/1"' in refused(diff_doc)
    assert "no such file" in refused(str(tmp_path / "missing.json"))
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    assert "not a regular file" in refused(str(fifo))  # refused before it is opened
    broken = json.loads(Path(paths[0]).read_text())
    broken["layers"][0]["gradient"]["l2"] = "big"
    assert 'layers[0].gradient.l2 is "big", expected' in refused(write(tmp_path, "x.json", broken))


# ------------------------------------------------------------------ --measure jacobian


@pytest.fixture(scope="module")
def residual_model(tmp_path_factory):
    """x(5) -> a = Dense 6 tanh -> Dense 4 tanh + Dense 4 (a skip), saved (once: the tests
    only read it)."""
    tmp = tmp_path_factory.mktemp("residual")
    keras.utils.set_random_seed(39)
    x = keras.Input((5,), name="x")
    a = keras.layers.Dense(6, activation="tanh", name="a")(x)
    out = keras.layers.Add(name="out")(
        [keras.layers.Dense(4, activation="tanh", name="b")(a), keras.layers.Dense(4)(a)]
    )
    keras.Model(x, out).save(tmp / "r.keras")
    return str(tmp / "r.keras")


JACOBIAN_TOP = ["--from", "a", "--to", "out", "--batch-size", "8", "--measure", "jacobian",
                "--top", "4"]  # fmt: skip


@pytest.fixture(scope="module")
def jacobian_runs(residual_model, tmp_path_factory):
    """The data whole and in shards, and the runs over the whole and over the first shard,
    which do not change with how the second shard numbers its samples: (paths, whole, first)."""
    tmp = tmp_path_factory.mktemp("jacobian")
    x = normal(37, 5, seed=35)
    x[30] *= 0.01  # near 0, where tanh is steepest: a sensitive sample in shard 2
    whole, a, b = shards(tmp, x, 16)
    args = ["inspect", residual_model, *JACOBIAN_TOP]
    return (whole, a, b), report(*args, "--data", whole), report(*args, "--data", a)


@pytest.mark.parametrize("numbered", [False, True], ids=["from-0", "first-sample"])
def test_jacobian_shards_merge_into_the_run_over_both(
    numbered, residual_model, jacobian_runs, tmp_path
):
    (_, _, b), one, first_doc = jacobian_runs
    args = ["inspect", residual_model, *JACOBIAN_TOP]
    second = ["--first-sample", "16"] if numbered else []
    second_doc = report(*args, "--data", b, *second)
    # the second shard's top: its samples numbered within it, or from --first-sample 16
    mine = [t["sample"] for t in second_doc["results"][0]["jacobian"]["frobenius"]["top"]]
    whole_top = [t["sample"] for t in one["results"][0]["jacobian"]["frobenius"]["top"]]
    later = [i for i in whole_top if i >= 16]
    assert later and [i + (0 if numbered else 16) for i in mine][: len(later)] == later
    got = merged(tmp_path, first_doc, second_doc)  # numbered from its first shard's 0
    assert_equal_but_percentiles(got, one)
    j = got["results"][0]["jacobian"]
    assert [t["sample"] for t in j["frobenius"]["top"]] == whole_top
    assert j["frobenius"]["samples"] == 37
    assert sum(j["frobenius"]["histogram"]["counts"]) == 37
    estimated = report(*args, "--probes", "4", "--data", b, *second)
    assert "with 4 probes vs exactly" in refused(
        write(tmp_path, "j.json", first_doc), write(tmp_path, "e.json", estimated)
    )


def test_scan_jacobian_shards_merge_and_other_measures_are_refused(residual_model, tmp_path):
    whole, a, b = shards(tmp_path, normal(29, 5, seed=36), 8)
    args = ["scan", residual_model, "--to", "out", "--batch-size", "8", "--measure", "jacobian"]
    one = report(*args, "--data", whole)
    first, second = report(*args, "--data", a), report(*args, "--data", b)
    assert_equal_but_percentiles(merged(tmp_path, first, second), one)
    plain = report("scan", residual_model, "--to", "out", "--batch-size", "8", "--data", b)
    assert "--measure 'gradient' vs 'jacobian'" in refused(
        write(tmp_path, "j.json", first), write(tmp_path, "p.json", plain)
    )
    estimated = report(*args, "--probes", "4", "--data", b, "--first-sample", "8")
    assert "by an estimate vs exactly" in refused(
        write(tmp_path, "j.json", first), write(tmp_path, "e.json", estimated)
    )
    # an estimate draws per batch, seeded by the batch's index in the data: shards cut on a
    # batch and numbered with --first-sample draw what the run over both draws
    one = report(*args, "--probes", "4", "--data", whole)
    got = merged(tmp_path, report(*args, "--probes", "4", "--data", a), estimated)
    assert_equal_but_percentiles(got, one)
    assert got["layers"][1]["jacobian"]["frobenius"]["rel_stderr"] is not None


def test_weight_scans_are_refused_with_the_reason(tmp_path):
    x = keras.Input((3,), name="x")
    model = keras.Model(x, keras.layers.Dense(2, name="head")(x))
    model.compile(loss="mse")
    model.save(tmp_path / "m.keras")
    np.save(tmp_path / "x.npy", normal(10, 3, seed=37))
    doc = report("scan", str(tmp_path / "m.keras"), "--wrt", "weights", "--data",
                 str(tmp_path / "x.npy"))  # fmt: skip
    line = refused(write(tmp_path, "w0.json", doc), write(tmp_path, "w1.json", doc))
    assert "cannot combine exactly" in line and "--distribute multi-worker" in line


@pytest.fixture(scope="module")
def jacobian_shards(residual_model, tmp_path_factory) -> list[str]:
    """The reports of two jacobian runs over two shards (once for every format)."""
    tmp = tmp_path_factory.mktemp("jacobian_shards")
    _, a, b = shards(tmp, normal(20, 5, seed=38), 8)
    args = ["inspect", residual_model, "--from", "a", "--to", "out", "--batch-size", "8",
            "--measure", "jacobian"]  # fmt: skip
    return [write(tmp, f"s{i}.json", report(*args, "--data", p)) for i, p in enumerate((a, b))]


@pytest.mark.parametrize("fmt", ["table", "markdown", "html"])
def test_a_merged_jacobian_report_renders_without_its_percentiles(fmt, jacobian_shards):
    code, out = cli("merge", *jacobian_shards, "--format", fmt)
    assert code == 0 and out.strip(), out
    if fmt == "table":
        assert "20 samples" in out and "p50 n/a (shards do not combine)" in out


# ------------------------------------------------------------------ shards given twice, edited


def test_a_shard_given_twice_is_refused(two_shards, tmp_path):
    _, paths, docs = two_shards
    assert "same file as" in refused(paths[0], paths[1], paths[0])
    link = tmp_path / "link.json"
    link.symlink_to(paths[1])
    assert "same file as" in refused(paths[0], paths[1], str(link))
    copy = write(tmp_path, "copy.json", docs[0])
    line = refused(paths[0], copy)
    assert "copy.json" in line and "twice" in line
    # the same data under two reports (another run over one shard's file)
    again = {
        **docs[1],
        "probe": {**docs[1]["probe"], "data_sha256": docs[0]["probe"]["data_sha256"]},
    }
    assert docs[0]["probe"]["data_sha256"]
    assert "same data" in refused(paths[0], write(tmp_path, "again.json", again))


@pytest.mark.parametrize(
    ("field", "value", "said"),
    [
        ("l2", 1.7e308, "gradient.l2 is 1.7e+308"),
        ("l2", "1e999", "gradient.l2 is Infinity"),
        ("mean_abs", -0.5, "gradient.mean_abs is -0.5"),
        ("zero_fraction", 5, "gradient.zero_fraction is 5"),
        ("nonfinite", -1, "gradient.nonfinite is -1"),
        ("max_abs", 1e6, "gradient.max_abs is 1000000.0, expected a number at most l2"),
    ],
)
def test_numbers_out_of_range_are_refused_naming_shard_and_field(
    field, value, said, two_shards, tmp_path
):
    _, paths, docs = two_shards
    doc = json.loads(json.dumps(docs[1]))
    row = next(i for i, r in enumerate(doc["layers"]) if r.get("gradient"))
    doc["layers"][row]["gradient"][field] = 0.0 if value == "1e999" else value
    text = json.dumps(doc)
    if value == "1e999":  # Python's json writes no such number: put it in by hand
        text = text.replace('"l2": 0.0', '"l2": 1e999', 1)
    (tmp_path / "edited.json").write_text(text)
    line = refused(paths[0], str(tmp_path / "edited.json"))
    assert line.startswith("error: ") and "edited.json" in line, line
    assert f"layers[{row}].{said}" in line, line


def test_merged_table_says_shards_not_replicas(two_shards):
    _, paths, _ = two_shards
    code, out = cli("merge", *paths)
    assert code == 0 and "(20 samples in 2 shards)" in out, out
    assert "replicas" not in out


def test_diff_of_a_merge_and_a_model_suggests_commands_that_run(two_shards, tmp_path):
    """`diff merged.json model.keras` suggested `--input a.npy + b.npy`, which no shell runs."""
    import re
    import shlex

    _, paths, docs = two_shards
    _, out = cli("merge", *paths, "--json")
    merged_path = write(tmp_path, "merged.json", json.loads(out))
    first = str(docs[0]["probe"]["samples"])  # N1: the samples of the shard before
    code, out = cli("diff", merged_path, sample("seed.keras"))
    lines = out.strip().splitlines()
    assert code == 2 and len(lines) == 1, out
    assert " + " not in out.split("(", 1)[1].split(")", 1)[1], out  # only inside the source
    commands = re.findall(r"`(layergrad [^`]*)`", out)
    assert [c.split()[1] for c in commands] == ["scan", "scan", "merge", "diff"], out
    # run them, MODEL being the model and with the shards' options, from the tmp folder
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        for command in commands:
            line = command.split(">")[0].replace("MODEL", sample("seed.keras"))
            argv = shlex.split(line.replace("N1", first))[1:]
            if argv[0] == "scan":
                argv += ["--to", "dense_2", "--batch-size", "8", "--quiet"]
            code, text = cli(*argv)
            assert code in (0, 1), (command, text)
            if ">" in command:
                Path(command.split(">")[1].strip()).write_text(text)
    finally:
        os.chdir(cwd)
    assert code == 0, text  # the same model over the same shards: no regression


def test_a_per_sample_mean_outside_its_min_and_max_is_refused(two_shards, tmp_path):
    _, paths, docs = two_shards
    doc = json.loads(json.dumps(docs[1]))
    row = next(i for i, r in enumerate(doc["layers"]) if r.get("per_sample_l2"))
    stats = doc["layers"][row]["per_sample_l2"]
    stats["mean"] = stats["max"] * 3 + 1
    line = refused(paths[0], write(tmp_path, "mean.json", doc))
    assert f"layers[{row}].per_sample_l2.mean is" in line and "mean.json" in line, line
    stats["mean"], stats["std"] = (stats["min"] + stats["max"]) / 2, -1.0
    assert "per_sample_l2.std is -1.0" in refused(paths[0], write(tmp_path, "std.json", doc))
