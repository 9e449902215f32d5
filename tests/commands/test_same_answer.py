"""`--seed` seeds every random draw of a run: the same arguments print the same JSON.

The nets: conv (bias +50) -> BatchNormalization 'bn', never trained -> ReLU(6) -> a random
layer (Dropout 'drop', or GaussianNoise 'noise') -> pool -> head. In inference every unit sits
past ReLU6's cap and nothing flows, so every command probes again in training mode (the
never-trained BatchNormalization rule), where the random layer draws: before `--seed` seeded
the layers' SeedGenerators each run drew other masks (the keys Keras takes from Python's
`random` when a layer is made without a seed).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from helpers import fresh_python, normal
from workers import assert_same_document, one_process

from layergrad.cli.app import main
from layergrad.core.probe_options import SEED_HELP
from layergrad.core.tf_runtime import keras, tf
from layergrad.engine import random_layers

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def random_net(path, layer) -> None:
    """Save conv (bias +50) -> untrained bn -> ReLU6 -> `layer` -> pool -> head (mse, adam)."""
    keras.utils.set_random_seed(0)
    x = keras.Input((8, 8, 3), name="x")
    h = keras.layers.Conv2D(8, 3, padding="same", name="conv",
                            bias_initializer=keras.initializers.Constant(50.0))(x)  # fmt: skip
    h = keras.layers.BatchNormalization(name="bn")(h)
    h = layer(keras.layers.ReLU(6.0, name="act")(h))
    h = keras.layers.GlobalAveragePooling2D(name="pool")(h)
    model = keras.Model(x, keras.layers.Dense(3, name="head")(h), name="random_net")
    model.compile(optimizer="adam", loss="mse")
    model.save(path)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("same_answer")
    random_net(folder / "drop.keras", keras.layers.Dropout(0.5, name="drop"))
    random_net(folder / "noise.keras", keras.layers.GaussianNoise(0.5, name="noise"))
    batch = normal(8, 8, 8, 3, seed=3)
    np.save(folder / "x.npy", batch)
    np.savez(folder / "x.npz", x=batch)
    np.savez(folder / "xy.npz", x=normal(32, 8, 8, 3, seed=4), y=normal(32, 3, seed=5))
    return folder


def run(*args: object, code: int = 0) -> str:
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert result.exit_code == code, result.output
    return result.output


def doc(*args: object, code: int = 0) -> dict:
    return json.loads(run(*args, "--json", code=code))


_PRINTED: dict[tuple[str, ...], str] = {}


def printed(*args: object) -> str:
    """What `layergrad ARGS --json` prints, run once for the module: several tests read the
    same command's report (a second run, to compare with, is always made with `run`)."""
    key = tuple(str(a) for a in args)
    if key not in _PRINTED:
        _PRINTED[key] = run(*key, "--json")
    return _PRINTED[key]


INSPECT = "inspect {m} --from conv --to head"
RUNS = {  # each command as a user types it: {m} the model, {x} the batch, {d} the data
    "inspect": f"{INSPECT} --input {{x}}",
    "scan": "scan {m} --input {x}",
    "weights": "scan {m} --wrt weights --training --input {x}",
    "jacobian": f"{INSPECT} --input {{x}} --measure jacobian --probes 4",
    "random batch": "scan {m}",
    "over data": f"{INSPECT} --data {{d}} --batch-size 4 --quiet",
}


def args_of(name: str, folder, model: str) -> list[str]:
    where = {"m": folder / f"{model}.keras", "x": folder / "x.npy", "d": folder / "xy.npz"}
    return [a.format(**where) for a in RUNS[name].split()]


def numbers(report: dict) -> list[float]:
    """Every gradient statistic of an inspect or scan report (results, layers or variables)."""
    found = []
    for part in ("results", "layers", "variables"):
        for entry in report.get(part, []):
            stats = entry.get("gradient") or {}
            found += [stats[k] for k in ("l2", "mean_abs", "max_abs") if stats.get(k) is not None]
    return found


def test_every_command_that_runs_the_model_takes_the_one_seed():
    for name, command in main.commands.items():
        seeds = [p for p in command.params if p.name == "seed"]
        if name in ("layers", "merge"):  # they never run a model
            assert not seeds
            continue
        (seed,) = seeds
        assert seed.default == 0 and seed.help == SEED_HELP, name


@pytest.mark.parametrize("model", ["drop", "noise"])
@pytest.mark.parametrize("name", list(RUNS))
def test_two_runs_print_the_same_json(files, name, model):
    args = args_of(name, files, model)
    first, second = printed(*args), run(*args, "--json")
    report = json.loads(first)
    assert report["probe"]["training"] is True and report["probe"]["seed"] == 0
    assert numbers(report)
    assert first == second


@pytest.mark.parametrize("name", ["inspect", "scan", "over data"])
def test_another_seed_draws_other_masks(files, name):
    """The batch is the file (or the data): only the random layer's masks change."""
    args = args_of(name, files, "drop")
    zero, one = json.loads(printed(*args)), doc(*args, "--seed", "1")
    assert one["probe"]["seed"] == 1
    assert not np.allclose(numbers(zero), numbers(one), rtol=1e-3)


@pytest.mark.parametrize("model", ["drop", "noise"])
def test_a_batch_as_input_and_as_data_gives_the_same_numbers(files, model):
    net = files / f"{model}.keras"
    weights = ["scan", net, "--wrt", "weights"]  # random labels: x.npz has no y
    for args in (["inspect", net, "--from", "conv", "--to", "head"], ["scan", net], weights):
        one = json.loads(printed(*args, "--input", files / "x.npy"))
        data = doc(*args, "--data", files / "x.npz", "--batch-size", "8", "--quiet")
        assert one["probe"]["training"] is data["probe"]["training"] is (args is not weights)
        assert numbers(one) and numbers(data)
        np.testing.assert_allclose(numbers(data), numbers(one), rtol=1e-5, atol=1e-7)


def test_random_labels_are_drawn_per_sample_whatever_the_batches_and_replicas(tmp_path):
    """No labels in the data: each sample's random label depends on the seed and its index
    alone, so two batches, one batch, one batch on two replicas (the second gets no row of
    the last batch) and the batch as --input all differentiate the same loss."""
    keras.utils.set_random_seed(0)
    a, b = keras.Input((3,), name="a"), keras.Input((2,), name="b")
    h = keras.layers.Dense(4, activation="tanh")(keras.layers.Concatenate()([a, b]))
    model = keras.Model([a, b], keras.layers.Dense(3, activation="softmax")(h))
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    model.save(tmp_path / "two.keras")
    np.savez(tmp_path / "d.npz", a=normal(9, 3, seed=1), b=normal(9, 2, seed=2))
    scan = ["scan", tmp_path / "two.keras", "--wrt", "weights"]
    data = [*scan, "--data", tmp_path / "d.npz", "--quiet"]
    whole = numbers(doc(*scan, "--input", tmp_path / "d.npz"))
    assert whole and doc(*scan, "--input", tmp_path / "d.npz")["loss"]["labels"] == "random"
    for extra in (["--batch-size", "9"], ["--batch-size", "4"]):
        np.testing.assert_allclose(numbers(doc(*data, *extra)), whole, rtol=1e-5, atol=1e-7)


@pytest.fixture(scope="module")
def replicas(files):
    """The runs on two CPU replicas (devices are split before TensorFlow starts): in one new
    process, each command in turn, the over-data inspect of the dropout net and a weight scan
    with random labels and an empty share (`d9.npz`, `m.keras`); in a second new process the
    over-data inspect again (the same answer from another process)."""
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, activation="softmax")])
    model.compile(optimizer="adam", loss="categorical_crossentropy")
    model.save(files / "m.keras")
    np.savez(files / "d9.npz", x=normal(9, 3, seed=1))
    over_data = [*args_of("over data", files, "drop"), "--cpu-replicas", "2", "--json"]
    scan = ["scan", str(files / "m.keras"), "--wrt", "weights", "--json", "--data",
            str(files / "d9.npz"), "--batch-size", "4", "--cpu-replicas", "2", "--quiet"]  # fmt: skip
    outcomes = [*one_process([over_data, scan], files), *one_process([over_data], files)]
    for outcome in outcomes:
        assert outcome["code"] == 0 and not outcome["error"], outcome
    return [outcome["stdout"] for outcome in outcomes]


@pytest.mark.slow
def test_random_labels_on_two_replicas_with_an_empty_share(files, replicas):
    """9 samples in batches of 4 on two CPU replicas: the last batch's one sample leaves a
    replica with no rows (it drew labels from the batch's first sample, and failed)."""
    one = doc("scan", files / "m.keras", "--wrt", "weights", "--input", files / "d9.npz")
    two = json.loads(replicas[1])
    assert two["probe"]["replicas"] == 2 and one["loss"]["labels"] == "random"
    np.testing.assert_allclose(numbers(two), numbers(one), rtol=1e-5, atol=1e-7)


def test_a_baseline_check_reproduces_itself(files, tmp_path):
    """A CI gate: `check --baseline` against the scan it was made from finds no change, and
    prints the same JSON twice (the masks moved by more than 0.01 decades unseeded)."""
    base = tmp_path / "base.json"
    net = files / "drop.keras"
    base.write_text(run("scan", net, "--wrt", "weights", "--training", "--json"))
    args = ["check", net, "--baseline", base, "--tolerance", "0.0001", "--json"]
    first, second = run(*args), run(*args)
    assert first == second
    (checked,) = json.loads(first)["files"]
    (baseline,) = [c for c in checked["checks"] if c["name"] == "baseline"]
    assert baseline["passed"], baseline["message"]
    assert "6 variables compared" in baseline["message"]


def test_fit_twice_gives_the_same_report(files):
    args = ["fit", files / "drop.keras", "--data", files / "xy.npz", "--steps", "6",
            "--batch-size", "8", "--json"]  # fmt: skip
    first, second = run(*args), run(*args)
    assert json.loads(first)["losses"]
    assert first == second


def test_fix_twice_gives_the_same_report(tmp_path):
    """Dropout after the logits: the original and the copy train on --data, both draw."""
    keras.utils.set_random_seed(0)
    x = keras.Input((6,), name="x")
    h = keras.layers.Dropout(0.3, name="drop1")(keras.layers.Dense(8, activation="relu")(x))
    out = keras.layers.Dropout(0.5, name="drop_out")(keras.layers.Dense(3, name="logits")(h))
    model = keras.Model(x, out)
    model.compile(optimizer="adam",
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))  # fmt: skip
    model.save(tmp_path / "drops.keras")
    xs = normal(48, 6, seed=6)
    np.savez(tmp_path / "cls.npz", x=xs, y=(xs[:, 0] > 0).astype("int64") + (xs[:, 1] > 0))
    reports = []
    for copy in ("a", "b"):
        out_file = tmp_path / f"{copy}.keras"
        result = CliRunner().invoke(main, [
            "fix", str(tmp_path / "drops.keras"), "--data", str(tmp_path / "cls.npz"), "--steps",
            "6", "--batch-size", "8", "--output", str(out_file), "--json"])  # fmt: skip
        assert result.exit_code in (0, 1), result.output  # 1: a repair not verified
        reports.append(json.loads(result.stdout.replace(str(out_file), "COPY")))
    assert reports[0]["repairs"][0]["layer"] == "drop_out"
    # numbers to float32 rounding (a loss scored eagerly after training in a process that ran
    # other models may differ in its last bits)
    assert_same_document(reports[0], reports[1], rel=1e-6)


def test_a_seeded_dropout_draws_what_tensorflow_draws_from_its_state(files):
    """The mask, against TensorFlow's stateless dropout from the key and counter worked out
    here: the same for the same seed on two loads, batch b's own, and again on a replay."""
    ones = tf.ones([4, 64])
    models = [keras.saving.load_model(files / "drop.keras") for _ in range(2)]
    for model in models:
        random_layers.seed_model(model, 7)
    drop = [m.get_layer("drop") for m in models]
    key = int(np.random.SeedSequence([7, 0]).generate_state(1)[0]) % (2**31 - 3) + 1

    def expected(counter: int) -> np.ndarray:
        seed = tf.constant([key, counter], tf.int32)
        return tf.nn.experimental.stateless_dropout(ones, rate=0.5, seed=seed).numpy()

    np.testing.assert_array_equal(drop[0](ones, training=True).numpy(), expected(0))
    np.testing.assert_array_equal(drop[1](ones, training=True).numpy(), expected(0))
    with random_layers.drawing_for(models[0], 3):
        np.testing.assert_array_equal(drop[0](ones, training=True).numpy(),
                                      expected(3 * random_layers.BATCH_STRIDE))  # fmt: skip
        random_layers.rewind(models[0])  # a pass over batch 3 made again
        np.testing.assert_array_equal(drop[0](ones, training=True).numpy(),
                                      expected(3 * random_layers.BATCH_STRIDE))  # fmt: skip
    random_layers.seed_model(models[1], 8)
    assert not np.array_equal(drop[1](ones, training=True).numpy(), expected(0))


@pytest.mark.slow
def test_a_new_process_prints_what_this_one_prints(files):
    args = args_of("inspect", files, "drop")
    here = run(*args, "--json")
    assert fresh_python("-m", "layergrad", *args, "--json") == here


@pytest.mark.slow
def test_two_cpu_replicas_draw_the_same_twice(replicas):
    """Under tf.distribute (new processes: devices are split before TensorFlow starts) every
    replica's copy of the generators' state is set the same, run after run and process after
    process."""
    first, second = replicas[0], replicas[2]
    report = json.loads(first)
    assert report["probe"]["replicas"] == 2 and report["probe"]["training"] is True
    assert numbers(report)
    assert second == first


@pytest.mark.slow
def test_mobilenet_v3_small_untrained_gives_the_same_numbers_twice(tmp_path):
    """The report that found it: an untrained MobileNetV3Small (BatchNormalization in training
    mode, Dropout before the logits) gave L2 10.35 and 10.18 for the same command."""
    keras.utils.set_random_seed(0)
    keras.applications.MobileNetV3Small(weights=None, input_shape=(96, 96, 3)).save(
        tmp_path / "bn.keras"
    )
    np.save(tmp_path / "x.npy", normal(2, 96, 96, 3, seed=2))
    args = ["inspect", tmp_path / "bn.keras", "--from", "conv", "--to", "logits",
            "--input", tmp_path / "x.npy", "--training"]  # fmt: skip
    first, second = doc(*args), doc(*args)
    assert numbers(first) and numbers(first) == numbers(second)
    assert first == second


def test_a_report_names_the_seed_its_random_projection_or_labels_drew_from(tmp_path):
    """With the user's batch and no random layer, the seed matters only where the run draws:
    scan's projection of the outputs (no --to) and random labels for --wrt weights."""
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(4, name="hidden"),
                              keras.layers.Dense(3, name="out")])  # fmt: skip
    model.compile(optimizer="sgd", loss="mse")
    model.save(tmp_path / "plain.keras")
    np.save(tmp_path / "x.npy", normal(8, 5, seed=1))
    base = ["scan", tmp_path / "plain.keras", "--input", tmp_path / "x.npy", "--seed", 7, "--json"]
    assert doc(*base)["probe"]["seed"] == 7
    assert doc(*base, "--wrt", "weights")["probe"]["seed"] == 7
    assert doc(*base, "--to", "out")["probe"]["seed"] is None  # nothing random was drawn
