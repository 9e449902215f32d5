"""`layergrad fit --data` takes its labels from every source: an image folder's class
sub-folders (as `keras.utils.image_dataset_from_directory` infers them, in the form the loss
takes) and a data function's `(x, y)`. Each run is compared with an independent `model.fit` of
the same saved model on the same images and labels loaded by Keras itself. Every batch is the
whole data set, so the order fit shuffles the samples in cannot change a step: the losses and
the weights before each step must agree."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from helpers import image_folder, keras, tf

from layergrad.cli.app import main
from layergrad.commands.fit.train import FitOptions, fit_model

STEPS, LR = 4, 0.5
CLASSES = {"cat": 4, "dog": 5, "fish": 3}  # 12 images; the last of each in a nested folder


def image_model(path, units: int, loss: str) -> str:
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((8, 8, 3)),
            keras.layers.Rescaling(1 / 255, name="scale"),
            keras.layers.Flatten(name="flat"),
            keras.layers.Dense(6, activation="relu", name="hidden"),
            keras.layers.Dense(units, activation="sigmoid" if units == 1 else "softmax",
                               name="head"),
        ]
    )  # fmt: skip
    model.compile(optimizer=keras.optimizers.SGD(LR), loss=loss)
    model.save(path)
    return str(path)


class Record(keras.callbacks.Callback):
    """Each step's loss (Keras logs the running mean of the epoch) and each variable's weight
    norms before the step."""

    def __init__(self) -> None:
        super().__init__()
        self.means, self.weights = [], []

    def on_train_batch_begin(self, batch, logs=None):
        self.weights.append(
            [float(np.linalg.norm(v.numpy())) for v in self.model.trainable_variables]
        )

    def on_train_batch_end(self, batch, logs=None):
        self.means.append(float(logs["loss"]))

    def losses(self) -> list[float]:
        return [
            (i + 1) * m - i * (self.means[i - 1] if i else 0.0) for i, m in enumerate(self.means)
        ]


def reference(path: str, dataset) -> Record:
    """model.fit of the saved model on `dataset` (one batch of every sample), STEPS steps."""
    model = keras.saving.load_model(path, safe_mode=True)
    model.compile(optimizer=keras.optimizers.SGD(LR), loss=model.loss)
    record = Record()
    model.fit(dataset.repeat(), steps_per_epoch=STEPS, epochs=1, verbose=0, callbacks=[record])
    return record


def assert_same_run(report, record: Record) -> None:
    assert report.steps == STEPS and [c.step for c in report.checkpoints] == [1, 2, 3, 4]
    np.testing.assert_allclose(report.losses, record.losses(), rtol=1e-5)
    for c in report.checkpoints:
        np.testing.assert_allclose(
            [v.weight_l2 for v in c.variables], record.weights[c.step - 1], rtol=1e-5, atol=1e-7
        )
    assert report.losses[-1] < report.losses[0]  # it learns


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return image_folder(tmp_path_factory.mktemp("fit_images") / "images", CLASSES)


@pytest.mark.parametrize(
    ("units", "loss", "mode"),
    [
        (3, "sparse_categorical_crossentropy", "int"),
        (4, "categorical_crossentropy", "categorical"),  # one-hot rows of the output's 4 units
    ],
)
def test_fit_on_an_image_folder_equals_model_fit_on_what_keras_reads(
    tmp_path, folder, units, loss, mode
):
    path = image_model(tmp_path / "m.keras", units, loss)
    options = FitOptions(steps=STEPS, batch_size=12, every=1)
    report = fit_model(path, folder, options)
    keras_data = keras.utils.image_dataset_from_directory(
        folder, label_mode=mode, image_size=(8, 8), shuffle=False, batch_size=12, verbose=False
    )
    assert keras_data.class_names == ["cat", "dog", "fish"]
    if mode == "categorical":  # Keras's rows are 3 wide (the classes); the head has 4 units
        keras_data = keras_data.map(lambda x, y: (x, tf.pad(y, [[0, 0], [0, units - 3]])))
    assert_same_run(report, reference(path, keras_data))
    assert report.data == str(folder)
    assert report.notes == (
        f"labels from the class sub-folders of {folder}, as keras.utils."
        "image_dataset_from_directory infers them: 0 cat, 1 dog, 2 fish",
    )


def test_two_classes_train_one_binary_unit(tmp_path):
    two = image_folder(tmp_path / "two", {"no": 5, "yes": 6}, seed=2)
    path = image_model(tmp_path / "b.keras", 1, "binary_crossentropy")
    report = fit_model(path, two, FitOptions(steps=STEPS, batch_size=11, every=1))
    keras_data = keras.utils.image_dataset_from_directory(
        two, label_mode="binary", image_size=(8, 8), shuffle=False, batch_size=11, verbose=False
    )
    assert_same_run(report, reference(path, keras_data))


def test_the_command_line_trains_on_a_folder_and_names_its_classes(tmp_path, folder):
    path = image_model(tmp_path / "m.keras", 3, "sparse_categorical_crossentropy")
    result = CliRunner().invoke(
        main, ["fit", path, "--data", str(folder), "--steps", str(STEPS), "--batch-size", "12",
               "--every", "1", "--json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    keras_data = keras.utils.image_dataset_from_directory(
        folder, image_size=(8, 8), shuffle=False, batch_size=12, verbose=False
    )
    record = reference(path, keras_data)
    np.testing.assert_allclose(doc["losses"], record.losses(), rtol=1e-5)
    assert doc["training"]["data"] == str(folder)
    assert doc["notes"] == [
        f"labels from the class sub-folders of {folder}, as keras.utils."
        "image_dataset_from_directory infers them: 0 cat, 1 dog, 2 fish"
    ]


FUNCTIONS = """
import numpy as np

def pairs():  # three batches of ten (x, y), the same on every call
    rng = np.random.default_rng(5)
    for _ in range(3):
        x = rng.standard_normal((10, 6)).astype("float32")
        yield x, (x[:, 0] > 0).astype("int32") + (x[:, 1] > 0).astype("int32")

def inputs_only():
    yield np.zeros((10, 6), "float32")
"""


def vector_model(path) -> str:
    keras.utils.set_random_seed(1)
    model = keras.Sequential(
        [
            keras.Input((6,), name="x"),
            keras.layers.Dense(8, activation="tanh", name="hidden"),
            keras.layers.Dense(3, activation="softmax", name="head"),
        ]
    )
    model.compile(optimizer=keras.optimizers.SGD(LR), loss="sparse_categorical_crossentropy")
    model.save(path)
    return str(path)


def test_fit_on_a_data_function_yielding_x_y_equals_model_fit_on_the_arrays(tmp_path):
    (tmp_path / "train.py").write_text(FUNCTIONS)
    path = vector_model(tmp_path / "v.keras")
    # re-cut into one batch of all 30 rows (three calls' worth of steps: one call per pass)
    report = fit_model(
        path, f"{tmp_path / 'train.py'}:pairs", FitOptions(steps=STEPS, batch_size=30, every=1)
    )
    rng = np.random.default_rng(5)
    xs = [rng.standard_normal((10, 6)).astype("float32") for _ in range(3)]
    x = np.concatenate(xs)
    y = (x[:, 0] > 0).astype("int32") + (x[:, 1] > 0).astype("int32")
    assert_same_run(report, reference(path, tf.data.Dataset.from_tensor_slices((x, y)).batch(30)))
    by_epochs = fit_model(
        path, f"{tmp_path / 'train.py'}:pairs", FitOptions(epochs=2, batch_size=10)
    )
    assert by_epochs.steps == 6 and by_epochs.epochs == 2  # 30 samples, counted from the labels


@pytest.mark.parametrize(
    ("data", "says"),
    [
        ("flat", "layergrad fit needs labels: --data {flat} has its images directly in the "
                 "folder, with no class sub-folders"),
        ("train.py:inputs_only", "layergrad fit needs labels: --data {tmp}/train.py:inputs_only "
                                 "gives inputs without labels; yield (x, y)"),
        ("many", "--data {many} has 4 classes (one per sub-folder), but output 'head' has 3 "
                 "units"),
    ],
)  # fmt: skip
def test_data_without_labels_fit_can_use_is_one_line_and_exit_2(tmp_path, data, says):
    (tmp_path / "train.py").write_text(FUNCTIONS)
    image_folder(tmp_path / "flat", {"": 3})
    image_folder(tmp_path / "many", {"a": 1, "b": 1, "c": 1, "d": 1})
    model = image_model(tmp_path / "m.keras", 3, "sparse_categorical_crossentropy")
    if data.startswith("train.py"):
        model = vector_model(tmp_path / "v.keras")
    where = str(tmp_path / data)
    result = CliRunner().invoke(main, ["fit", model, "--data", where, "--steps", "2"])
    assert result.exit_code == 2, result.output
    line = says.format(flat=tmp_path / "flat", tmp=tmp_path, many=tmp_path / "many")
    assert line in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_fix_without_labels_names_itself(tmp_path):
    image_folder(tmp_path / "flat", {"": 3})
    model = image_model(tmp_path / "m.keras", 3, "sparse_categorical_crossentropy")
    result = CliRunner().invoke(main, ["fix", model, "--data", str(tmp_path / "flat")])
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error: layergrad fix needs labels: --data ")
