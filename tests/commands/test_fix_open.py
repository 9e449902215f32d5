"""`fix` opens each file once: the original is read once for the checks that read files, and
loaded once for the check, the repairs and the training; each repaired copy is read back once
for its check and its training.

Truth from outside `fix`: the loads are counted at Keras's own `keras.saving.load_model`; the
weights are compared with the file loaded by plain Keras.
"""

from __future__ import annotations

import numpy as np
import pytest

from layergrad.commands.check import check_files
from layergrad.commands.check.check_files import check_file
from layergrad.commands.check.verdicts import CheckOptions
from layergrad.commands.fix.repair import FixOptions, OpenedFile, check_findings, fix_model
from layergrad.core.keras_backend import quiet_import
from layergrad.core.probe_options import ProbeOptions
from layergrad.files.file_info import read_file_info

tf, keras = quiet_import()


def _data(tmp_path) -> tuple[str, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = (50 + 20 * rng.normal(size=(256, 6))).astype("float32")  # far from BN's 0 / 1
    y = (x[:, 0] > x[:, 1]).astype("float32")[:, None]
    path = tmp_path / "d.npz"
    np.savez(path, x=x, y=y)
    return str(path), x, y


def _bn_model(tmp_path, head: str = "sigmoid") -> str:
    """Dense -> BatchNormalization (never trained: moving mean 0, variance 1) -> head."""
    keras.utils.set_random_seed(3)
    inp = keras.Input((6,), name="x")
    h = keras.layers.BatchNormalization(name="bn")(keras.layers.Dense(8, name="d")(inp))
    out = keras.layers.Dense(1, activation=head, name="head")(keras.layers.ReLU()(h))
    model = keras.Model(inp, out)
    model.compile("adam", "binary_crossentropy")
    path = str(tmp_path / f"bn_{head}.keras")
    model.save(path)
    return path


def _same(weights, reference) -> bool:
    return len(weights) == len(reference) and all(
        np.array_equal(np.asarray(w), np.asarray(r))
        for w, r in zip(weights, reference, strict=True)
    )


def test_the_twin_starts_from_the_files_weights_and_the_model_stays_as_loaded(tmp_path):
    path = _bn_model(tmp_path)
    data, x, y = _data(tmp_path)
    stored = [v.numpy() for v in keras.saving.load_model(path, compile=False).weights]
    probe = ProbeOptions(data=data)
    opened = OpenedFile(path)
    # the check runs the model (in training mode for a never-trained BatchNormalization)
    check_file(path, CheckOptions(probe=probe, opener=opened))
    loaded, _, _ = opened.get(probe)
    assert _same([v.numpy() for v in loaded.model.weights], stored)
    twin, _, _ = opened.twin(probe)
    assert twin.model is not loaded.model
    assert _same([v.numpy() for v in twin.model.weights], stored)
    twin.model.compile("adam", "binary_crossentropy")
    twin.model.fit(x, y, epochs=1, batch_size=32, verbose=0)
    assert not _same([v.numpy() for v in twin.model.weights], stored)  # it trained
    assert _same([v.numpy() for v in loaded.model.weights], stored)  # the model did not


@pytest.mark.slow
def test_the_original_is_loaded_once_and_the_copy_once(tmp_path, monkeypatch):
    path = _bn_model(tmp_path, head="softmax")  # a softmax over one unit: one repair
    data, _, _ = _data(tmp_path)
    loads: list[str] = []
    real = keras.saving.load_model

    def counted(filepath, *args, **kwargs):
        loads.append(str(filepath))
        return real(filepath, *args, **kwargs)

    monkeypatch.setattr(keras.saving, "load_model", counted)
    out = tmp_path / "o.keras"
    report = fix_model(path, data, FixOptions(output=str(out), steps=150))
    (repair,) = report.repairs
    assert repair.code == ('Dense(1, activation="softmax") -> Dense(1, activation="sigmoid") '
                           'at "head"',)  # fmt: skip
    assert report.original is not None and repair.repaired is not None
    assert len(report.original.losses) == len(repair.repaired.losses) == 150
    assert len(loads) == 2, loads  # the original, then the copy read back
    copy = real(out, compile=False)  # the copy kept the original's weights (not its head's)
    original = real(path, compile=False)
    for name in ("d", "bn", "head"):
        assert _same(copy.get_layer(name).get_weights(), original.get_layer(name).get_weights())


@pytest.mark.parametrize("with_data", [False, True])
def test_the_file_is_read_once_for_the_checks_that_read_it(tmp_path, monkeypatch, with_data):
    """The original's weights are read for their health once, not once to refuse an
    unreadable file and again for the check, nor its header again to load it; and the
    verdict is the one `check` gives."""
    path = _bn_model(tmp_path, head="softmax")  # a softmax over one unit: one repair
    data = _data(tmp_path)[0] if with_data else None
    read: list[str] = []

    def counted(source, *args, **kwargs):
        read.append(str(source))
        return read_file_info(source, *args, **kwargs)

    from layergrad.files import file_info

    monkeypatch.setattr(check_files, "read_file_info", counted)
    monkeypatch.setattr(file_info, "read_file_info", counted)  # (as the loading imports it)
    report = fix_model(path, data, FixOptions(output=str(tmp_path / "o.keras"), steps=20))
    assert read.count(path) == 1, read
    if data is None:
        checked = check_file(path, CheckOptions())
        assert report.before == check_findings(checked) and report.before
