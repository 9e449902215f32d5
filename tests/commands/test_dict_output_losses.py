"""A model whose outputs are a dict keyed unlike its layers, compiled with one loss per key:
the labels drawn for each output follow that output's own loss (Keras flattens the outputs in
sorted key order). Before, every output had "no loss", one-hot labels were drawn for a sparse
cross-entropy output, and `check` failed the file with an error."""

from __future__ import annotations

from helpers import keras

from layergrad.commands.check.check_files import CheckOptions, check_file
from layergrad.core.vocab import Finding
from layergrad.engine.compiled_loss import label_request
from layergrad.model.loss_forms import find_loss

layers = keras.layers


def _dict_model(alpha_loss: str = "binary_crossentropy") -> keras.Model:
    # keys sort as (alpha, zeta): opposite to the order the outputs are given and to the
    # layers' names, so neither insertion order nor layer names can line them up by chance
    x = keras.Input((4,), name="x")
    h = layers.Dense(8, activation="relu", name="hidden")(x)
    kind = layers.Dense(3, activation="softmax", name="a_kind")(h)
    flag = layers.Dense(1, activation="sigmoid", name="b_flag")(h)
    model = keras.Model(x, {"zeta": kind, "alpha": flag})
    model.compile("adam", loss={"zeta": "sparse_categorical_crossentropy", "alpha": alpha_loss})
    return model


def test_each_output_gets_the_loss_of_its_key(tmp_path):
    model = _dict_model()
    path = tmp_path / "dict.keras"
    model.save(path)
    loaded = keras.models.load_model(path)
    # by hand: "alpha" (b_flag) sorts first, then "zeta" (a_kind)
    assert list(loaded.output_names) == ["b_flag", "a_kind"]
    spec = find_loss(loaded.get_compile_config(), None)
    assert spec is not None
    request = label_request(loaded, spec)
    assert request.losses == ("binary_crossentropy", "sparse_categorical_crossentropy")


def test_check_passes_a_dict_output_model(tmp_path):
    path = tmp_path / "dict.keras"
    _dict_model().save(path)
    verdict = check_file(path, CheckOptions())
    errors = [c for c in verdict.checks if Finding.ERROR in c.findings]
    assert not errors, [c.message for c in errors]
    assert verdict.passed, [c.message for c in verdict.checks if not c.passed]


def test_the_loss_check_judges_each_head_by_its_key(tmp_path):
    # "alpha" makes one sigmoid unit: categorical cross-entropy over one unit is always 0,
    # so the loss cannot fit that head (a mismatch worked out from how the model is built)
    path = tmp_path / "mismatch.keras"
    _dict_model(alpha_loss="categorical_crossentropy").save(path)
    verdict = check_file(path, CheckOptions(static_only=True))
    loss = next(c for c in verdict.checks if c.name == "loss")
    assert Finding.LOSS_MISMATCH in loss.findings, loss.message
    assert "b_flag" in loss.message and "a_kind" not in loss.message, loss.message


def test_fit_takes_labels_that_fit_each_keyed_loss(tmp_path):
    # class ids 0..2 for the 3-unit softmax under sparse cross-entropy, 0/1 for the sigmoid
    # under binary cross-entropy: labels that fit, so fit runs (no target_mismatch)
    import numpy as np

    from layergrad.commands.fit.train import FitOptions, fit_model

    path = tmp_path / "dict.keras"
    _dict_model().save(path)
    rng = np.random.default_rng(0)
    data = tmp_path / "d.npz"
    np.savez(
        data,
        x=rng.normal(size=(32, 4)).astype("float32"),
        **{
            "y:b_flag": rng.integers(0, 2, (32, 1)).astype("float32"),
            "y:a_kind": rng.integers(0, 3, (32,)).astype("int64"),
        },
    )
    report = fit_model(path, data, FitOptions(steps=2, batch_size=8))
    assert Finding.TARGET_MISMATCH.value not in [f.code.value for f in report.findings]
    assert report.steps == 2


def _partly_keyed() -> keras.Model:
    # one key is its layer's name ("value"), the other is not ("kind" -> layer "kind_act"): the
    # loss dict names one output both ways, the other only by its key
    x = keras.Input((4,), name="x")
    h = layers.Dense(8, activation="relu", name="hidden")(x)
    kind = layers.Activation("softmax", name="kind_act")(layers.Dense(3, name="kind_logits")(h))
    value = layers.Dense(1, name="value")(h)
    model = keras.Model(x, {"kind": kind, "value": value})
    model.compile("adam", loss={"kind": "sparse_categorical_crossentropy", "value": "mse"})
    return model


def test_outputs_keyed_partly_by_layer_name_get_their_own_loss(tmp_path):
    path = tmp_path / "partly.keras"
    _partly_keyed().save(path)
    loaded = keras.models.load_model(path)
    assert list(loaded.output_names) == ["kind_act", "value"]  # sorted keys: kind, value
    spec = find_loss(loaded.get_compile_config(), None)
    assert spec is not None
    assert label_request(loaded, spec).losses == ("sparse_categorical_crossentropy", "mse")
    verdict = check_file(path, CheckOptions())
    assert verdict.passed, [c.message for c in verdict.checks if not c.passed]


def test_check_data_reads_labels_keyed_by_the_dict_key(tmp_path):
    """`y:kind` names the output keyed "kind" (layer "kind_act"): its labels are read. Class
    ids up to 4 for a 3-unit softmax cannot be its targets (worked out from the model)."""
    import numpy as np

    path = tmp_path / "partly.keras"
    _partly_keyed().save(path)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((32, 4)).astype("float32")
    value = rng.standard_normal((32, 1)).astype("float32")
    good, bad = tmp_path / "good.npz", tmp_path / "bad.npz"
    np.savez(good, x=x, **{"y:kind": rng.integers(0, 3, 32), "y:value": value})
    np.savez(bad, x=x, **{"y:kind": np.arange(32) % 5, "y:value": value})
    from layergrad.core.probe_options import ProbeOptions

    verdict = check_file(path, CheckOptions(probe=ProbeOptions(data=str(good))))
    assert verdict.passed, [c.message for c in verdict.checks if not c.passed]
    verdict = check_file(path, CheckOptions(probe=ProbeOptions(data=str(bad))))
    found = {f for c in verdict.checks for f in c.findings}
    assert Finding.TARGET_MISMATCH in found, [c.message for c in verdict.checks]
    said = " ".join(c.message for c in verdict.checks)
    assert "kind" in said


def test_check_input_reads_labels_keyed_by_the_dict_key(tmp_path):
    """The same labels in an `--input` batch: `y:kind` is the output keyed "kind"."""
    import numpy as np

    from layergrad.core.probe_options import ProbeOptions

    path = tmp_path / "partly.keras"
    _partly_keyed().save(path)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 4)).astype("float32")
    value = rng.standard_normal((8, 1)).astype("float32")
    bad = tmp_path / "bad.npz"
    np.savez(bad, x=x, **{"y:kind": np.arange(8) % 5, "y:value": value})
    verdict = check_file(path, CheckOptions(probe=ProbeOptions(input_file=str(bad))))
    found = {f for c in verdict.checks for f in c.findings}
    assert Finding.TARGET_MISMATCH in found, [c.message for c in verdict.checks]
