"""The labels of every `--data` source in `scan --wrt weights --data` and `check --data`: an
image folder's classes and a data function's `(x, y)`, read by the one label reader `fit`
uses. The weight gradient equals one full-batch `tape.gradient` of the compiled loss with the
labels Keras's `image_dataset_from_directory` infers; `check` judges the folder's classes
against the head (`target_mismatch`)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from helpers import image_folder, keras, tf

from layergrad.cli.app import main
from layergrad.commands.api import scan_weights_model

CLASSES = {"cat": 5, "dog": 4, "fish": 6}  # 15 images


def run(*args: str):
    return CliRunner().invoke(main, list(args))


def weight_scan(path: str, data: str, *options: str) -> dict:
    """The report of `scan --wrt weights --data DATA --json`, which must exit 0."""
    out = run("scan", path, "--wrt", "weights", "--data", data, *options, "--json")
    assert out.exit_code == 0, out.output
    return json.loads(out.stdout)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return image_folder(tmp_path_factory.mktemp("labelled") / "images", CLASSES, seed=3)


def classifier(path, units: int, loss: str = "sparse_categorical_crossentropy") -> str:
    keras.utils.set_random_seed(2)
    model = keras.Sequential(
        [
            keras.Input((8, 8, 3)),
            keras.layers.Rescaling(1 / 255, name="scale"),
            keras.layers.Conv2D(4, 3, activation="relu", name="conv"),
            keras.layers.Flatten(name="flat"),
            keras.layers.Dense(units, activation="softmax", name="head"),
        ]
    )
    model.compile(optimizer="sgd", loss=loss)
    model.save(path)
    return str(path)


def full_batch_gradients(path: str, x, y) -> dict[str, np.ndarray]:
    """d loss / d every variable, the compiled loss over all samples at once, by hand."""
    model = keras.saving.load_model(path, safe_mode=True)
    with tf.GradientTape() as tape:
        loss = model.compute_loss(y=y, y_pred=model(tf.constant(x), training=False))
    grads = tape.gradient(loss, model.trainable_variables)
    return {
        f"{v.path.split('/')[0]}/{v.name}": g.numpy()
        for v, g in zip(model.trainable_variables, grads, strict=True)
    }


def assert_json_gradients(doc: dict, want: dict[str, np.ndarray]) -> None:
    """Each variable's gradient L2 in a `scan --wrt weights --json` report is the reference's."""
    for row in doc["variables"]:
        g = want[row["variable"]]
        assert row["gradient"]["l2"] == pytest.approx(float(np.linalg.norm(g)), rel=1e-5)


def keras_images(root, mode: str = "int"):
    ds = keras.utils.image_dataset_from_directory(
        root, label_mode=mode, image_size=(8, 8), shuffle=False, batch_size=64, verbose=False
    )
    ((x, y),) = list(ds)
    return x.numpy(), y.numpy()


@pytest.mark.parametrize(("loss", "mode"), [("sparse_categorical_crossentropy", "int"),
                                            ("categorical_crossentropy", "categorical")])  # fmt: skip
def test_weight_gradient_over_an_image_folder_uses_its_classes(tmp_path, folder, loss, mode):
    path = classifier(tmp_path / "m.keras", 3, loss)
    report = scan_weights_model(path, data=folder, batch_size=4)  # 4 batches, the last of 3
    assert report.loss.labels == "data" and report.probe.samples == 15
    assert report.probe.seed is None  # nothing random
    assert any("0 cat, 1 dog, 2 fish" in n for n in report.notes)
    x, y = keras_images(folder, mode)
    want = full_batch_gradients(path, x, y)
    rows = {r.variable: r for r in report.variables}
    assert sorted(rows) == sorted(want)
    for name, g in want.items():
        assert rows[name].gradient.l2 == pytest.approx(float(np.linalg.norm(g)), rel=1e-5)
        assert rows[name].gradient.max_abs == pytest.approx(float(np.abs(g).max()), rel=1e-5)


def test_weight_gradient_over_a_data_function_uses_its_y(tmp_path):
    (tmp_path / "pairs.py").write_text(
        "import numpy as np\n"
        "def pairs():\n"
        "    rng = np.random.default_rng(8)\n"
        "    for _ in range(4):\n"
        "        x = rng.uniform(0, 255, (5, 8, 8, 3)).astype('float32')\n"
        "        yield x, rng.integers(0, 3, 5)\n"
    )
    path = classifier(tmp_path / "m.keras", 3)
    doc = weight_scan(path, f"{tmp_path / 'pairs.py'}:pairs", "--batch-size", "6")
    assert doc["loss"]["labels"] == "data" and doc["probe"]["samples"] == 20
    rng = np.random.default_rng(8)
    parts = [(rng.uniform(0, 255, (5, 8, 8, 3)).astype("float32"), rng.integers(0, 3, 5))
             for _ in range(4)]  # fmt: skip
    x = np.concatenate([p[0] for p in parts])
    y = np.concatenate([p[1] for p in parts])
    want = full_batch_gradients(path, x, y)
    assert_json_gradients(doc, want)


def test_an_unbatched_dataset_of_samples_and_scalar_ids_gives_its_labels(tmp_path):
    """`Dataset.from_tensor_slices((x, y))` without `.batch()`: one sample and one id each."""
    (tmp_path / "slices.py").write_text(
        "import numpy as np, tensorflow as tf\n"
        "X = np.random.default_rng(5).uniform(0, 255, (10, 8, 8, 3)).astype('float32')\n"
        "Y = np.arange(10) % 3\n"
        "def samples():\n"
        "    return tf.data.Dataset.from_tensor_slices((X, Y))\n"
        "def words():\n"
        "    return tf.data.Dataset.from_tensor_slices((X, np.array(['a'] * 10)))\n"
    )
    path = classifier(tmp_path / "m.keras", 3)
    doc = weight_scan(path, f"{tmp_path / 'slices.py'}:samples", "--batch-size", "4")
    assert doc["loss"]["labels"] == "data" and doc["probe"]["samples"] == 10
    x = np.random.default_rng(5).uniform(0, 255, (10, 8, 8, 3)).astype("float32")
    want = full_batch_gradients(path, x, np.arange(10) % 3)
    assert_json_gradients(doc, want)
    out = run("check", path, "--data", f"{tmp_path / 'slices.py'}:samples", "--json")
    (result,) = json.loads(out.stdout)["files"]
    targets = next(c for c in result["checks"] if c["name"] == "targets")
    assert targets["findings"] == [], targets
    out = run("fit", path, "--data", f"{tmp_path / 'slices.py'}:words", "--steps", "1")
    assert out.exit_code == 2 and "not numbers" in out.stderr, out.output
    assert len(out.stderr.strip().splitlines()) == 1


def test_a_folder_of_images_without_classes_still_draws_random_labels(tmp_path):
    flat = image_folder(tmp_path / "flat", {"": 6})
    report = scan_weights_model(classifier(tmp_path / "m.keras", 3), data=flat, batch_size=4)
    assert report.loss.labels == "random" and report.probe.seed == 0
    assert "class sub-folders of an image folder" in report.notes[0]


def test_check_reports_more_classes_than_the_softmax_head_has_units(tmp_path, folder):
    two = classifier(tmp_path / "two.keras", 2)
    out = run("check", two, "--data", str(folder), "--json")
    assert out.exit_code == 1, out.output
    (result,) = json.loads(out.stdout)["files"]
    targets = next(c for c in result["checks"] if c["name"] == "targets")
    assert targets["findings"] == ["target_mismatch"]
    assert "integer class ids 0 to 2 (3 distinct)" in targets["message"]
    assert "class ids must lie in 0 to 1 for 2 units" in targets["message"]
    three = classifier(tmp_path / "three.keras", 3)
    out = run("check", three, "--data", str(folder), "--json")
    (result,) = json.loads(out.stdout)["files"]
    targets = next(c for c in result["checks"] if c["name"] == "targets")
    assert targets["findings"] == []
    assert "(the class sub-folders 0 cat, 1 dog, 2 fish) fit every output" in targets["message"]
    assert "target_mismatch" not in out.stdout


def test_check_judges_the_labels_of_weighted_batches_and_fit_refuses_them(tmp_path):
    (tmp_path / "weighted.py").write_text(
        "import numpy as np\n"
        "def batches():\n"
        "    rng = np.random.default_rng(4)\n"
        "    for _ in range(3):\n"
        "        x = rng.uniform(0, 255, (4, 8, 8, 3)).astype('float32')\n"
        "        yield x, np.full(4, 5), np.ones(4)\n"  # class id 5 for a 3-unit head
    )
    path = classifier(tmp_path / "m.keras", 3)
    data = f"{tmp_path / 'weighted.py'}:batches"
    out = run("check", path, "--data", data, "--json")
    assert out.exit_code == 1, out.output
    (result,) = json.loads(out.stdout)["files"]
    targets = next(c for c in result["checks"] if c["name"] == "targets")
    assert targets["findings"] == ["target_mismatch"]
    assert "class ids must lie in 0 to 2 for 3 units" in targets["message"]
    out = run("fit", path, "--data", data, "--steps", "1")
    assert out.exit_code == 2 and "(x, y, sample_weight)" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_check_baseline_over_weighted_batches_uses_the_labels_check_read(tmp_path):
    """`check --baseline --data` takes the labels as check reads them ((x, y) of a weighted
    batch): its weight gradient equals the baseline's made from the same x and y."""
    x = np.random.default_rng(6).uniform(0, 255, (12, 8, 8, 3)).astype("float32")
    y = np.arange(12) % 3
    np.save(tmp_path / "x.npy", x)
    np.savez(tmp_path / "d.npz", x=x, y=y)
    (tmp_path / "weighted.py").write_text(
        "import numpy as np, pathlib\n"
        "X = np.load(pathlib.Path(__file__).with_name('x.npy'))\n"
        "def batches():\n"
        "    for i in range(0, 12, 4):\n"
        "        yield X[i : i + 4], np.arange(i, i + 4) % 3, np.ones(4)\n"
    )
    path = classifier(tmp_path / "m.keras", 3)
    base = run("scan", path, "--wrt", "weights", "--data", str(tmp_path / "d.npz"), "--json")
    assert base.exit_code == 0, base.output
    (tmp_path / "base.json").write_text(base.stdout)
    out = run("check", path, "--data", f"{tmp_path / 'weighted.py'}:batches", "--baseline",
              str(tmp_path / "base.json"), "--allow-other-data", "--json")  # fmt: skip
    assert out.exit_code == 0, out.output
    (result,) = json.loads(out.stdout)["files"]
    checked = next(c for c in result["checks"] if c["name"] == "baseline")
    assert checked["passed"] and checked["findings"] == [], checked


def test_check_judges_one_hot_rows_of_the_folder_against_the_units(tmp_path, folder):
    path = classifier(tmp_path / "cce.keras", 2, "categorical_crossentropy")
    out = run("check", path, "--data", str(folder), "--json")
    (result,) = json.loads(out.stdout)["files"]
    targets = next(c for c in result["checks"] if c["name"] == "targets")
    assert targets["findings"] == ["target_mismatch"]
    assert "one-hot rows of width 3" in targets["message"] and "2 units" in targets["message"]
