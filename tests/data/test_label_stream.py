"""The labels of `--data` read with its inputs (`data/label_stream.py`): an image folder's
classes exactly as `keras.utils.image_dataset_from_directory(labels="inferred")` gives them,
a data function's `y` from the same element as its x, a `.npz`'s `y`; each worker's part of
the data holding its own rows' labels; what has no labels said in one line."""

from __future__ import annotations

import re

import numpy as np
import pytest
from helpers import image_folder, keras

from layergrad.core.errors import InputError
from layergrad.data.label_stream import LabelRequest, open_labelled
from layergrad.data.value_checks import InputSpec

IMAGES = (InputSpec("image", (8, 8, 3), "float32"),)
VECTOR = (InputSpec("x", (5,), "float32"),)


def read(labelled) -> tuple[np.ndarray, np.ndarray]:
    """(inputs, labels) of every batch of a one-input, one-output labelled stream."""
    xs, ys = [], []
    for x, y in labelled.stream.dataset:
        xs.append(x.numpy())
        ys.append(y.numpy())
    labelled.stream.raise_failure()
    return np.concatenate(xs), np.concatenate(ys)


def keras_folder(root, mode: str) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """What Keras itself reads from the folder: images, labels, class names."""
    ds = keras.utils.image_dataset_from_directory(
        root, labels="inferred", label_mode=mode, image_size=(8, 8), shuffle=False,
        batch_size=4, verbose=False,
    )  # fmt: skip
    x, y = zip(*[(a.numpy(), b.numpy()) for a, b in ds], strict=True)
    return np.concatenate(x), np.concatenate(y), ds.class_names


@pytest.mark.parametrize(
    ("kind", "units", "mode"),
    [("ids", 3, "int"), ("", None, "int"), ("one_hot", 3, "categorical")],
)
def test_folder_labels_are_those_keras_infers(tmp_path, kind, units, mode):
    # `cat-big` sorts between `cat` and `cat/more`: Keras lists class by class, not by path
    root = image_folder(tmp_path / "images", {"cat": 4, "cat-big": 3, "dog": 5})
    (root / ".hidden").mkdir()  # not a class: Keras skips sub-folders whose names start with .
    (root / ".hidden" / "x.png").write_bytes((root / "dog" / "00.png").read_bytes())
    request = LabelRequest(("head",), (kind,), ("some loss",), (units,))
    labelled = open_labelled(root, IMAGES, request, batch_size=5)
    x, y = read(labelled)
    want_x, want_y, names = keras_folder(root, mode)
    assert labelled.classes == tuple(names) == ("cat", "cat-big", "dog")
    assert labelled.stream.samples == len(want_y) == 12 and labelled.stream.labels == ("y",)
    np.testing.assert_array_equal(y, want_y)
    np.testing.assert_allclose(x, want_x)
    alone = np.concatenate([b["y"] for b in labelled.label_batches()])
    np.testing.assert_array_equal(alone, want_y)


def test_one_hot_rows_as_wide_as_the_output_and_binary_labels_for_one_unit(tmp_path):
    root = image_folder(tmp_path / "images", {"a": 3, "b": 4})
    wide = open_labelled(root, IMAGES, LabelRequest(("h",), ("one_hot",), ("cce",), (5,)), 4)
    _, y = read(wide)
    ids = np.repeat([0, 1], [3, 4])
    np.testing.assert_array_equal(y, np.eye(5, dtype="float32")[ids])  # 2 classes, 5 units
    binary = open_labelled(root, IMAGES, LabelRequest(("h",), ("bits",), ("bce",), (1,)), 4)
    _, y = read(binary)
    _, want, _ = keras_folder(root, "binary")
    assert y.dtype == want.dtype == np.float32 and y.shape == want.shape == (7, 1)
    np.testing.assert_array_equal(y, want)


@pytest.mark.parametrize(
    ("kind", "units", "says"),
    [
        ("ids", 2, "has 3 classes (one per sub-folder), but output 'h' has 2 units"),
        ("one_hot", 2, "has 3 classes (one per sub-folder), but output 'h' has 2 units"),
        ("bits", 1, "output 'h' is one unit with the loss, which tells two apart"),
    ],
)
def test_more_classes_than_the_output_takes_are_refused_or_kept_for_check(
    tmp_path, kind, units, says
):
    root = image_folder(tmp_path / "images", {"a": 2, "b": 2, "c": 2})
    request = LabelRequest(("h",), (kind,), ("the loss",), (units,))
    with pytest.raises(InputError, match="^--data .*" + re.escape(says)):
        open_labelled(root, IMAGES, request, 4)
    kept = open_labelled(root, IMAGES, request, 4, strict=False)  # Keras's own form, judged
    _, y = read(kept)
    assert y.shape[0] == 6 and (y.shape[1:] == (3,) if kind == "one_hot" else y.ndim == 1)


def test_a_folder_without_class_sub_folders_has_no_labels(tmp_path):
    root = image_folder(tmp_path / "flat", {"": 3})
    found = open_labelled(root, IMAGES, LabelRequest(("h",)), 4)
    assert found.stream is None and "with no class sub-folders" in found.missing
    assert "put each class's images in a sub-folder of its own" in found.missing
    image_folder(root, {"cats": 2})  # now a class, and 3 images that belong to none
    with pytest.raises(InputError, match="3 images lie directly in the folder"):
        open_labelled(root, IMAGES, LabelRequest(("h",)), 4)
    assert open_labelled(root, IMAGES, LabelRequest(("h",)), 4, strict=False).stream is None


FUNCTIONS = """
import numpy as np
import tensorflow as tf

def f(x):
    return np.argmax(x[:, :3], axis=1)

def random_pairs():  # new random data on every call: only x and y of one element agree
    rng = np.random.default_rng()
    for _ in range(4):
        x = rng.standard_normal((5, 5)).astype("float32")
        yield x, f(x)

def samples():  # one sample per element, a scalar label each
    rng = np.random.default_rng()
    for _ in range(9):
        x = rng.standard_normal(5).astype("float32")
        yield x, int(np.argmax(x[:3]))

def shuffled():  # a tf.data pipeline that reshuffles on every pass
    x = np.random.default_rng(3).standard_normal((23, 5)).astype("float32")
    data = tf.data.Dataset.from_tensor_slices((x, f(x)))
    return data.shuffle(23, reshuffle_each_iteration=True).batch(4)

def fixed():  # the same batches on every call: each worker reads them all, keeps its own
    rng = np.random.default_rng(4)
    for _ in range(5):
        x = rng.standard_normal((5, 5)).astype("float32")
        yield x, f(x)

def x_only():
    yield np.zeros((4, 5), "float32")

def weighted():
    yield np.zeros((4, 5), "float32"), np.zeros(4), np.ones(4)

def text_labels():
    yield np.zeros((2, 5), "float32"), np.array(["a", "b"])

def big_endian():  # labels in the other byte order (as a file written elsewhere may hold)
    x = np.arange(20, dtype="float32").reshape(4, 5)
    yield x, (x[:, 0] * 2).astype(">f4")
"""


@pytest.fixture
def functions(tmp_path):
    (tmp_path / "labelled.py").write_text(FUNCTIONS)
    return tmp_path / "labelled.py"


@pytest.mark.parametrize("name", ["random_pairs", "samples", "shuffled"])
def test_a_function_gives_x_and_y_of_the_same_element(functions, name):
    labelled = open_labelled(f"{functions}:{name}", VECTOR, LabelRequest(("out",)), 7)
    for _ in range(2):  # each pass calls the function again: its x and y still agree
        x, y = read(labelled)
        assert len(x) == {"random_pairs": 20, "samples": 9, "shuffled": 23}[name]
        np.testing.assert_array_equal(y, np.argmax(x[:, :3], axis=1))


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("weighted", r"is \(x, y, sample_weight\); layergrad weighs every sample alike"),
        ("text_labels", "the labels are <U1, not numbers"),
    ],
)
def test_a_function_whose_labels_cannot_be_read_is_one_line(functions, name, says):
    with pytest.raises(InputError, match=says):
        open_labelled(f"{functions}:{name}", VECTOR, LabelRequest(("out",)), 4)


def test_labels_in_the_other_byte_order_are_read_as_their_values(functions):
    x, y = read(open_labelled(f"{functions}:big_endian", VECTOR, LabelRequest(("out",)), 4))
    np.testing.assert_array_equal(y, x[:, 0] * 2)


def test_check_reads_x_y_and_sample_weight_as_x_and_y(functions):
    """Without `strict` (check: only the labels' values are judged) the weights are dropped."""
    found = open_labelled(f"{functions}:weighted", VECTOR, LabelRequest(("out",)), 4, strict=False)
    x, y = read(found)
    np.testing.assert_array_equal(x, np.zeros((4, 5), "float32"))
    np.testing.assert_array_equal(y, np.zeros(4))  # the labels, not the weights (ones)


def test_a_function_yielding_x_only_has_no_labels(functions):
    found = open_labelled(f"{functions}:x_only", VECTOR, LabelRequest(("out",)), 4)
    assert found.stream is None and "gives inputs without labels; yield (x, y)" in found.missing


def test_labels_of_several_outputs_by_name_or_in_output_order(tmp_path):
    (tmp_path / "two.py").write_text(
        "import numpy as np\n"
        "X = np.arange(20, dtype='float32').reshape(4, 5)\n"
        "def named():\n    yield X, {'b': X[:, :1] * 2, 'a': np.arange(4)}\n"
        "def ordered():\n    yield X, (np.arange(4), X[:, :1] * 2)\n"
        "def short():\n    yield X, {'a': np.arange(4)}\n"
    )
    request = LabelRequest(("a", "b"))
    for name in ("named", "ordered"):
        labelled = open_labelled(f"{tmp_path / 'two.py'}:{name}", VECTOR, request, 3)
        assert labelled.stream.labels == ("y:a", "y:b")
        batch = labelled.stream.batch(0)
        np.testing.assert_array_equal(batch.labels["y:a"], [0, 1, 2])
        np.testing.assert_array_equal(batch.labels["y:b"], batch.arrays[0][:, :1] * 2)
    with pytest.raises(InputError, match="missing: b"):
        open_labelled(f"{tmp_path / 'two.py'}:short", VECTOR, request, 3)


def _npz(tmp_path, compressed: bool):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((37, 5)).astype("float32")
    y = rng.integers(0, 3, 37)
    save = np.savez_compressed if compressed else np.savez
    save(tmp_path / "d.npz", x=x, y=y)
    return tmp_path / "d.npz", x, y


def test_a_npz_gives_its_y_beside_the_inputs(tmp_path):
    path, x, y = _npz(tmp_path, compressed=False)
    got_x, got_y = read(open_labelled(path, VECTOR, LabelRequest(("out",)), 8, limit=30))
    np.testing.assert_array_equal(got_x, x[:30])
    np.testing.assert_array_equal(got_y, y[:30])
    np.savez(tmp_path / "short.npz", x=x, y=y[:30])
    with pytest.raises(InputError, match="the labels and the inputs have different numbers"):
        open_labelled(tmp_path / "short.npz", VECTOR, LabelRequest(("out",)), 8)


@pytest.mark.parametrize("source", ["npz", "compressed", "folder", "function"])
def test_each_worker_part_holds_its_own_rows_labels(tmp_path, functions, source):
    """Under --distribute multi-worker: the parts of two workers, put together, are the
    whole data with every label beside its own inputs."""
    if source == "folder":
        path, specs = image_folder(tmp_path / "images", {"a": 7, "b": 6, "c": 5}), IMAGES
    elif source == "function":
        path, specs = f"{functions}:fixed", VECTOR
    else:
        path, specs = _npz(tmp_path, compressed=source == "compressed")[0], VECTOR
    request = LabelRequest(("out",), ("ids",), ("loss",), (3,))
    whole = read(open_labelled(path, specs, request, 4))
    parts = []
    for worker in (0, 1):
        labelled = open_labelled(path, specs, request, 4, shard=(worker, 2))
        parts.append([(x.numpy(), y.numpy()) for x, y in labelled.stream.dataset])
        assert parts[-1], "each worker has batches"
    x = np.concatenate([b[0] for part in parts for b in part])
    y = np.concatenate([b[1] for part in parts for b in part])
    if source in ("npz", "folder"):  # contiguous parts, cut as header and footer bytes, or by file
        np.testing.assert_allclose(x, whole[0])
        np.testing.assert_array_equal(y, whole[1])
    # any source: the same rows, each with its own label (round robin: batch j on worker j % 2)
    pairs = sorted(zip(map(tuple, x.reshape(len(x), -1)), y.tolist(), strict=True))
    want = sorted(zip(map(tuple, whole[0].reshape(len(x), -1)), whole[1].tolist(), strict=True))
    assert pairs == want


def test_labels_alone_read_no_image(tmp_path):
    root = image_folder(tmp_path / "images", {"a": 2, "b": 3})
    labelled = open_labelled(root, IMAGES, LabelRequest(("h",), ("ids",), ("l",), (2,)), 2)
    for path in root.rglob("*.png"):
        path.write_bytes(b"not a png any more")  # listed already; never opened again
    assert np.concatenate([b["y"] for b in labelled.label_batches()]).tolist() == [0, 0, 1, 1, 1]
