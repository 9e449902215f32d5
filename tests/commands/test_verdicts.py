"""Verdicts a CI gate can trust: each bug class named at its layer, each fixed twin clean,
failures and warnings told apart. What each sample does is worked out here from its weights,
labels and config, independently of layergrad (see make_samples.py)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from click.testing import CliRunner
from helpers import keras, load_sample, sample

from layergrad import cli
from layergrad.commands.check.check_files import CheckOptions, check_file
from layergrad.commands.weight_rows import scale_flags
from layergrad.core.probe_options import ProbeOptions
from layergrad.core.results import Status, VariableRow
from layergrad.core.vocab import Finding


def findings(verdict):
    return {c.name: tuple(c.findings) for c in verdict.checks if c.findings}


def message(verdict, name):
    return next(c.message for c in verdict.checks if c.name == name)


def labels_of(name):
    with np.load(sample(name)) as data:
        return data["y"]


# (bug, labels, fixed twin, what the message must say)
TARGETS = [
    ("bug_target_sigmoid_range.keras", "target_prices.npz", "fixed_linear_regression.keras",
     "a sigmoid output lies in [0, 1]"),
    ("bug_target_classes_one_unit.keras", "target_ids5.npz", "fixed_five_classes.keras",
     "5 classes cannot be told apart by one sigmoid unit"),
    ("bug_target_ids_one_hot_loss.keras", "target_ids4.npz", "fixed_ids_sparse_loss.keras",
     "but the labels are class ids"),
    ("bug_target_one_hot_sparse_loss.keras", "target_one_hot.npz", "fixed_one_hot_loss.keras",
     "sparse categorical cross-entropy reads one class id per sample, not one-hot rows"),
    ("bug_target_ids_beyond_units.keras", "target_ids5.npz", "fixed_five_classes.keras",
     "class ids must lie in 0 to 2 for 3 units"),
]  # fmt: skip


@pytest.mark.parametrize(("bug", "labels", "fixed", "says"), TARGETS)
def test_labels_the_output_cannot_produce(bug, labels, fixed, says):
    y = labels_of(labels)
    head = load_sample(bug).get_layer("head")
    units, act = head.units, head.activation.__name__
    # the truth from the labels and the head, by hand
    if labels == "target_prices.npz":
        assert act == "sigmoid" and y.min() > 1  # a sigmoid stays below 1
    elif labels == "target_one_hot.npz":
        assert y.shape[1] == units and np.all(y.sum(axis=1) == 1)
    else:
        assert y.ndim == 1 and set(np.unique(y)) == set(range(int(y.max()) + 1))
        assert units == 1 or y.max() >= units or units == 4
    for options in (
        CheckOptions(probe=ProbeOptions(input_file=sample(labels))),
        CheckOptions(probe=ProbeOptions(data=sample(labels))),
    ):
        verdict = check_file(sample(bug), options)
        # outside_range warns (its evidence: a linear head trains no better on these targets)
        warns = bug == "bug_target_sigmoid_range.keras"
        assert verdict.passed is warns and findings(verdict) == {"targets": ("target_mismatch",)}
        targets = next(c for c in verdict.checks if c.name == "targets")
        assert targets.warnings == (("target_mismatch",) if warns else ()), targets
        text = message(verdict, "targets")
        assert says in text and "output 'head'" in text and "layer 'head'" in text, text
        clean = check_file(sample(fixed), options)
        assert clean.passed and findings(clean) == {}, [c.message for c in clean.checks]
        assert "fit every output" in message(clean, "targets")


STATIC = [
    ("bug_relu_head_bce.keras", "a relu head's outputs outside that range get no gradient",
     "head"),
    ("bug_softmax_poisson.keras", "poisson is meant for counts", "head"),
    ("bug_relu_before_softmax.keras", "layer 'logits' applies ReLU to the logits", "logits"),
    ("bug_dropout_logits.keras", "Dropout 'drop' comes after the last layer with weights",
     "drop"),
    ("bug_all_linear.keras", "the network is one linear map before the softmax", "head"),
]  # fmt: skip
TWINS = ["fixed_sigmoid_head.keras", "fixed_softmax_head.keras", "fixed_logits_softmax.keras",
         "fixed_dropout_hidden.keras", "fixed_relu_stack.keras",
         "fixed_glorot_stack.keras"]  # fmt: skip


@pytest.mark.parametrize(("bug", "says", "layer"), STATIC)
def test_heads_the_loss_cannot_train_are_read_from_the_file(bug, says, layer):
    config = load_sample(bug).get_config()
    assert layer in [entry["config"]["name"] for entry in config["layers"]]
    verdict = check_file(sample(bug), CheckOptions(static_only=True))  # no TensorFlow
    assert findings(verdict) == {"loss": ("loss_mismatch",)}
    assert says in message(verdict, "loss") and f"'{layer}'" in message(verdict, "loss")


@pytest.mark.parametrize("name", TWINS)
def test_static_twins_get_no_finding(name):
    verdict = check_file(sample(name))
    assert verdict.passed and findings(verdict) == {}, [c.message for c in verdict.checks]


def test_a_dead_layer_is_named_and_is_a_warning():
    model = load_sample("bug_dead_layer.keras")
    x = np.random.default_rng(0).standard_normal((8, 6)).astype("float32")
    hidden = keras.Model(model.inputs, model.get_layer("dense").output)(x).numpy()
    dead = np.all(hidden == 0, axis=0)
    assert dead.sum() == 6  # bias -100: six of eight units output 0 for every sample
    verdict = check_file(sample("bug_dead_layer.keras"))
    assert verdict.passed and verdict.verdict == "PASS, 1 warning"
    assert findings(verdict) == {"trainable": ("dead",)}
    assert "dead: dense (75% of its units)" in message(verdict, "trainable")
    strict = check_file(sample("bug_dead_layer.keras"), CheckOptions(fail_on=frozenset({"dead"})))
    assert not strict.passed and strict.verdict == "FAIL"
    clean = check_file(sample("fixed_softmax_head.keras"))
    assert clean.verdict == "PASS"


def _layer_update_ratio(grad_kernel, kernel):
    return np.linalg.norm(grad_kernel) / np.linalg.norm(kernel)


def test_a_sigmoid_stack_vanishes_at_its_first_dense_layers_not_at_the_input():
    model = load_sample("bug_sigmoid_stack.keras")
    x = np.random.default_rng(0).standard_normal((8, 32)).astype("float32")
    y = np.random.default_rng(0).integers(0, 10, 8)
    import tensorflow as tf

    kernels = [model.get_layer(f"dense_{i}").kernel for i in range(8)]
    kernels.append(model.get_layer("head").kernel)
    with tf.GradientTape() as tape:  # the truth: a manual tape over the compiled loss
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)(y, model(x))
    grads = tape.gradient(loss, kernels)
    ratios = [
        math.log10(_layer_update_ratio(g.numpy(), k.numpy()))
        for g, k in zip(grads, kernels, strict=True)
    ]
    assert ratios[-1] - ratios[0] > 4  # the first layer learns 10^4 times slower than the head
    verdict = check_file(sample("bug_sigmoid_stack.keras"))
    assert verdict.passed and findings(verdict) == {"trainable": ("vanishing",)}
    text = message(verdict, "trainable")
    assert text.startswith("vanishing: dense_0 (") and "x (" not in text
    clean = check_file(sample("fixed_relu_stack.keras"))
    assert clean.verdict == "PASS" and findings(clean) == {}


def _tape_log_ratios(name, depth, seed):
    """log10 |dL/dW| / |W| of each kernel of a `_stack` sample, from a manual tape over its
    compiled loss (sparse categorical cross-entropy from logits) on a normal batch."""
    import tensorflow as tf

    model = load_sample(name)
    x = np.random.default_rng(seed).standard_normal((8, 32)).astype("float32")
    y = np.random.default_rng(seed).integers(0, 10, 8)
    kernels = [model.get_layer(f"dense_{i}").kernel for i in range(depth)]
    kernels.append(model.get_layer("head").kernel)
    with tf.GradientTape() as tape:
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)(y, model(x))
    grads = tape.gradient(loss, kernels)
    return [
        math.log10(_layer_update_ratio(g.numpy(), k.numpy()))
        for g, k in zip(grads, kernels, strict=True)
    ]


def test_a_large_init_tanh_stack_explodes_at_its_first_dense_layers():
    # the truth from the weights: kernels drawn with stddev 2 (Glorot's is 0.18 for 32 x 32)
    model = load_sample("bug_large_init_stack.keras")
    kernels = [model.get_layer(f"dense_{i}").get_weights()[0] for i in range(20)]
    assert all(1.8 < k.std() < 2.2 for k in kernels)
    assert not np.array_equal(kernels[1], kernels[2])  # one draw per layer, not one shared
    for seed in (0, 1, 2):
        logs = _tape_log_ratios("bug_large_init_stack.keras", 20, seed)
        assert len(logs) == 21  # 20 hidden kernels and the head's: quarters of 5
        end, start = np.median(logs[-5:]), np.median(logs[:5])
        assert end - start < -3.5  # the input end learns > 10^3.5 times faster than the output
        assert logs[0] - end > 4  # the first layer most of all
    verdict = check_file(sample("bug_large_init_stack.keras"))
    assert verdict.passed and findings(verdict) == {"trainable": ("exploding",)}
    text = message(verdict, "trainable")
    assert text.startswith("exploding: dense_0 (") and "x (" not in text
    assert all(f"dense_{i} (" in text for i in range(4)) and "head" not in text
    assert "decades above that of the layers near the output" in text
    strict = CheckOptions(fail_on=frozenset({"exploding"}))
    assert check_file(sample("bug_large_init_stack.keras"), strict).verdict == "FAIL"
    # the twin: the same layers with Glorot-uniform kernels keep their update ratios level
    twin = _tape_log_ratios("fixed_glorot_stack.keras", 20, 0)
    assert abs(np.median(twin[-5:]) - np.median(twin[:5])) < 1
    clean = check_file(sample("fixed_glorot_stack.keras"))
    assert clean.verdict == "PASS" and findings(clean) == {}


def _rows(logs):
    """Variable rows with the update ratios 10^log given, kernel weights of norm 1."""
    out = []
    for i, value in enumerate(logs):
        g = 10.0**value
        stats = type("S", (), {"l2": g})()
        out.append(VariableRow(f"l{i}/kernel", f"l{i}", "kernel", (1,), "float32", Status.OK,
                               stats, g))  # fmt: skip
    return out


def test_the_scale_rule_compares_the_layers_near_the_input_with_those_near_the_output():
    # eight layers: quarter = 2; end median = mean of the last two logs; start likewise
    assert scale_flags(_rows([-4, -3.5, -1, 0, 0, 0, 0, 0])) == {
        "l0": (Finding.VANISHING, -4.0), "l1": (Finding.VANISHING, -3.5),
    }  # fmt: skip
    assert scale_flags(_rows([4, 3.2, 1, 0, 0, 0, 0, 0])) == {
        "l0": (Finding.EXPLODING, 4.0), "l1": (Finding.EXPLODING, 3.2),
    }  # fmt: skip
    # a trend of 2.9 decades (healthy architectures stay within 1.8) is not flagged
    assert scale_flags(_rows([-2.9, -2.9, -1, 0, 0, 0, 0, 0])) == {}
    # a single outlier (a layer-scale branch) is not a trend
    assert scale_flags(_rows([0, 0, -7, 0, 0, 0, 0, 0])) == {}


def test_failures_and_warnings_apart_in_every_format(tmp_path):
    args = ["check", sample("bug_dead_layer.keras"), sample("bug_softmax_poisson.keras")]
    table = CliRunner().invoke(cli.main, args, env={"COLUMNS": "200"})
    assert table.exit_code == 1
    assert "PASS, 1 warning" in table.output and "FAIL" in table.output
    assert "trainable (warning): dead" in table.output
    assert "1 passed, 1 failed, 1 warning" in table.output
    doc = json.loads(CliRunner().invoke(cli.main, [*args, "--json"]).output)
    first, second = doc["files"]
    assert (first["verdict"], first["warnings"], first["failures"]) == (
        "PASS, 1 warning", ["dead"], [],
    )  # fmt: skip
    assert (second["verdict"], second["failures"]) == ("FAIL", ["loss_mismatch"])
    assert doc["summary"] == "1 passed, 1 failed, 1 warning"
    md = CliRunner().invoke(cli.main, [*args, "--format", "markdown"]).output
    assert "⚠️ pass, 1 warning" in md and "❌ **fail**" in md
    page = CliRunner().invoke(cli.main, [*args, "--format", "html"]).output
    assert "PASS, 1 warning" in page and "dead (warning)" in page
    from xml.etree import ElementTree as ET

    CliRunner().invoke(cli.main, [*args, "--junit", str(tmp_path / "out.xml")])
    cases = {c.get("name"): c for c in ET.parse(tmp_path / "out.xml").getroot()
             if c.get("classname") == args[1]}  # fmt: skip
    assert cases["trainable"].find("failure") is None
    assert cases["trainable"].find("system-out").text.startswith("warning (dead): dead: dense")


def test_max_pooling_zeros_are_explained_not_called_dead(tmp_path):
    from layergrad.commands.api import inspect_model

    x = keras.Input((8, 8, 3), name="image")
    conv = keras.layers.Conv2D(4, 3, padding="same", name="conv")(x)
    pool = keras.layers.MaxPooling2D(name="pool")(conv)
    model = keras.Model(x, keras.layers.Dense(2, name="head")(keras.layers.Flatten()(pool)))
    model.save(tmp_path / "pool.keras")
    (res,) = inspect_model(tmp_path / "pool.keras", "conv", ["head"]).results
    # the truth: 2x2 max pooling routes the gradient to 1 of each 4 positions (ties aside)
    assert res.gradient.zero_fraction == pytest.approx(0.75, abs=0.01)
    (warning,) = res.warnings
    assert "exactly zero, by design: max pooling at 'pool'" in warning
    assert "(75% zeros expected)" in warning and "dead" not in warning


def test_units_with_no_gradient_for_any_sample_are_called_dead(tmp_path):
    from layergrad.commands.api import inspect_model

    x = keras.Input((6,), name="x")
    pre = keras.layers.Dense(8, name="pre")
    h = keras.layers.ReLU(name="relu")(pre(x))
    model = keras.Model(x, keras.layers.Dense(2, name="head")(h))
    kernel, _ = pre.get_weights()
    pre.set_weights([kernel * 0.01, np.array([-100.0] * 6 + [1.0] * 2, "float32")])
    model.save(tmp_path / "dead.keras")
    # the truth: units 0-5 of 'pre' are below -99 for every row, so ReLU passes them nothing
    probe = np.random.default_rng(0).standard_normal((8, 6)).astype("float32")
    assert np.all(pre(probe).numpy()[:, :6] < 0)
    (res,) = inspect_model(tmp_path / "dead.keras", "pre", ["head"]).results
    assert res.gradient.zero_fraction == pytest.approx(0.75)
    (warning,) = res.warnings
    assert "75% of the units of pre get zero gradient for every sample (dead)" in warning


def test_the_random_probe_draws_what_the_models_preprocessing_expects(tmp_path):
    from layergrad.commands.session import open_source

    x = keras.Input((4, 4, 3), name="image")
    h = keras.layers.Rescaling(1 / 127.5, offset=-1, name="scale")(x)
    keras.Model(x, keras.layers.Dense(2, name="head")(h)).save(tmp_path / "pixels.keras")
    session = open_source(tmp_path / "pixels.keras", ProbeOptions(batch_size=64))
    (batch,) = session.batch.arrays
    # x / 127.5 - 1 spans [-1, 1] exactly when x spans [0, 255]
    assert batch.min() >= 0 and batch.max() <= 255 and batch.max() > 200
    assert (
        session.probe_meta_of().drawn
        == "image uniform 0-255 (Rescaling 'scale' expects raw values)"
    )

    data = np.random.default_rng(0).normal(50.0, 10.0, (500, 3)).astype("float32")
    norm = keras.layers.Normalization(name="norm")
    norm.adapt(data)
    v = keras.Input((3,), name="v")
    keras.Model(v, keras.layers.Dense(1, name="head")(norm(v))).save(tmp_path / "norm.keras")
    session = open_source(tmp_path / "norm.keras", ProbeOptions(batch_size=256))
    (batch,) = session.batch.arrays
    assert np.mean(batch) == pytest.approx(np.mean(data), abs=2.0)
    assert np.std(batch) == pytest.approx(np.std(data), rel=0.2)
    assert "Normalization 'norm' is adapted to mean" in session.probe_meta_of().drawn
    # a model without preprocessing keeps the standard-normal probe, and says nothing
    plain = open_source(sample("seed.keras"), ProbeOptions())
    assert plain.probe_meta_of().drawn is None


def test_real_pixels_through_a_rescaling_cnn_get_no_finding(tmp_path):
    import zoo

    zoo.rescaling_cnn().save(tmp_path / "cnn.keras")
    pixels = np.random.default_rng(0).integers(0, 256, (16, 32, 32, 3)).astype("float32")
    np.savez(tmp_path / "pixels.npz", image=pixels, y=np.arange(16) % 10)
    for options in (CheckOptions(), CheckOptions(probe=ProbeOptions(input_file=str(tmp_path / "pixels.npz"))),
                    CheckOptions(probe=ProbeOptions(data=str(tmp_path / "pixels.npz")))):  # fmt: skip
        verdict = check_file(tmp_path / "cnn.keras", options)
        assert verdict.verdict == "PASS" and findings(verdict) == {}, findings(verdict)
    forward = message(check_file(tmp_path / "cnn.keras"), "forward")
    assert forward.startswith("finite and varying on a random batch of 8 (image uniform 0-255")


def test_data_names_every_bug_the_one_batch_check_names(tmp_path):
    rng = np.random.default_rng(0)
    np.save(tmp_path / "x.npy", rng.standard_normal((40, 6)).astype("float32"))
    pixels = rng.integers(0, 256, (40, 12)).astype("float32")
    np.save(tmp_path / "pixels.npy", pixels)
    cases = [
        ("bug_softmax_one_unit.keras", "x.npy", "forward", "constant_output"),
        ("bug_unscaled_input.keras", "pixels.npy", "forward", "input_range"),
        ("bug_dead_layer.keras", "x.npy", "trainable", "dead"),
    ]
    for name, data, check, finding in cases:
        one = check_file(
            sample(name), CheckOptions(probe=ProbeOptions(input_file=str(tmp_path / data)))
        )
        over = check_file(sample(name), CheckOptions(probe=ProbeOptions(data=str(tmp_path / data))))
        assert finding in findings(one)[check], findings(one)
        assert finding in findings(over)[check], findings(over)
        assert "(on the first batch of 32 samples of --data)" in message(over, check)
    clean = check_file(
        sample("fixed_rescaled_input.keras"),
        CheckOptions(probe=ProbeOptions(data=str(tmp_path / "pixels.npy"))),
    )
    assert clean.verdict == "PASS" and findings(clean) == {}


def test_data_labels_reach_the_trainable_check(tmp_path):
    # an output without a loss trains nothing: named with --data as with one batch
    x = keras.Input((6,), name="x")
    a = keras.layers.Dense(2, name="a")(x)
    b = keras.layers.Dense(2, name="b")(keras.layers.Dense(4, name="b_hidden")(x))
    model = keras.Model(x, {"a": a, "b": b})
    model.compile(loss={"a": "mse"})
    model.save(tmp_path / "half.keras")
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "d.npz", x=rng.standard_normal((40, 6)).astype("float32"))
    verdict = check_file(
        tmp_path / "half.keras", CheckOptions(probe=ProbeOptions(data=str(tmp_path / "d.npz")))
    )
    assert findings(verdict)["trainable"] == ("no_gradient",)
    assert "b_hidden/kernel" in message(verdict, "trainable")


def test_labels_of_a_sequential_model_are_read_too(tmp_path):
    model = keras.Sequential(
        [keras.Input((5,), name="x"), keras.layers.Dense(8, activation="relu"),
         keras.layers.Dense(1, activation="tanh", name="out")]
    )  # fmt: skip
    model.compile(loss="mse")
    model.save(tmp_path / "seq.keras")
    rng = np.random.default_rng(0)
    y = rng.uniform(10, 1000, (16, 1)).astype("float32")
    assert np.all(np.abs(y) > 1)  # the truth: tanh never leaves (-1, 1)
    np.savez(tmp_path / "d.npz", x=rng.standard_normal((16, 5)).astype("float32"), y=y)
    verdict = check_file(
        tmp_path / "seq.keras", CheckOptions(probe=ProbeOptions(input_file=str(tmp_path / "d.npz")))
    )
    assert findings(verdict) == {"targets": ("target_mismatch",)}
    assert "a tanh output lies in [-1, 1]" in message(verdict, "targets")


def test_labels_from_a_data_function_feed_targets(tmp_path):
    (tmp_path / "source.py").write_text(
        "import numpy as np\n"
        "import tensorflow as tf\n"
        "def batches():\n"
        "    rng = np.random.default_rng(0)\n"
        "    x = rng.standard_normal((20, 6)).astype('float32')\n"
        "    return tf.data.Dataset.from_tensor_slices((x, np.arange(20) % 5)).batch(4)\n"
    )
    ref = f"{tmp_path / 'source.py'}:batches"
    # the truth: ids 0-4, five classes, into one sigmoid unit
    assert load_sample("bug_target_classes_one_unit.keras").get_layer("head").units == 1
    bug = check_file(
        sample("bug_target_classes_one_unit.keras"), CheckOptions(probe=ProbeOptions(data=ref))
    )
    assert findings(bug) == {"targets": ("target_mismatch",)}
    assert "integer class ids 0 to 4 (5 distinct)" in message(bug, "targets")
    fixed = check_file(
        sample("fixed_five_classes.keras"), CheckOptions(probe=ProbeOptions(data=ref))
    )
    assert fixed.verdict == "PASS" and findings(fixed) == {}


def _saved(tmp_path, layers, loss):
    model = keras.Sequential([keras.Input((6,), name="x"), *layers])
    model.compile(loss=loss)
    path = tmp_path / "m.keras"
    model.save(path)
    return path


@pytest.mark.parametrize(
    ("layers", "loss", "bad"),
    [
        ([keras.layers.Dense(8, activation="relu"), keras.layers.Dense(4, activation="softmax")],
         "squared_hinge", True),
        ([keras.layers.Dense(8, activation="relu"), keras.layers.Dense(4, activation="relu")],
         "categorical_crossentropy", True),
        ([keras.layers.Dense(8), keras.layers.Dense(8), keras.layers.Dense(1)], "mse", False),
        ([keras.layers.Dense(8), keras.layers.Dense(3), keras.layers.Softmax()],
         "sparse_categorical_crossentropy", True),
        ([keras.layers.Dense(8, activation="tanh"), keras.layers.Dropout(0.3),
          keras.layers.Dense(3, activation="softmax")], "sparse_categorical_crossentropy", False),
        ([keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1, activation="exponential")],
         "poisson", False),
    ],
)  # fmt: skip
def test_more_loss_and_head_pairings(tmp_path, layers, loss, bad):
    # a deep linear regression fits what one Dense fits and trains: not a mismatch; a linear
    # stack before a softmax is one linear classifier however deep: a mismatch
    verdict = check_file(_saved(tmp_path, layers, loss), CheckOptions(static_only=True))
    assert (findings(verdict).get("loss") == ("loss_mismatch",)) == bad, message(verdict, "loss")


def test_max_pooling_zeros_are_explained_over_data_too(tmp_path):
    from layergrad.commands.api import inspect_model

    x = keras.Input((8, 8, 3), name="image")
    conv = keras.layers.Conv2D(4, 3, padding="same", name="conv")(x)
    pool = keras.layers.MaxPooling2D(name="pool")(conv)
    model = keras.Model(x, keras.layers.Dense(2, name="head")(keras.layers.Flatten()(pool)))
    model.save(tmp_path / "pool.keras")
    np.save(tmp_path / "x.npy", np.random.default_rng(0).standard_normal((20, 8, 8, 3)))
    (res,) = inspect_model(
        tmp_path / "pool.keras", "conv", ["head"], data=tmp_path / "x.npy"
    ).results
    assert res.gradient.zero_fraction == pytest.approx(0.75, abs=0.01)
    (warning,) = res.warnings
    assert "by design: max pooling at 'pool'" in warning and "dead" not in warning


def test_dead_with_data_means_dead_for_every_sample_of_the_data(tmp_path):
    x = keras.Input((6,), name="x")
    gate = keras.layers.Dense(4, activation="relu", name="gate")
    model = keras.Model(x, keras.layers.Dense(3, activation="softmax", name="head")(gate(x)))
    model.compile(loss="sparse_categorical_crossentropy")
    kernel = np.zeros((6, 4), "float32")
    kernel[0, :3] = 1.0  # units 0-2 are x0 - 5: alive only where x0 > 5
    kernel[1, 3] = 1.0  # unit 3 is x1 + 5: alive for standard-normal x1
    gate.set_weights([kernel, np.array([-5.0, -5.0, -5.0, 5.0], "float32")])
    model.save(tmp_path / "gate.keras")
    rows = np.random.default_rng(0).standard_normal((64, 6)).astype("float32")
    rows[32:, 0] = 10.0  # the second batch of 32 wakes every unit
    np.save(tmp_path / "x.npy", rows)
    np.save(tmp_path / "first.npy", rows[:32])
    one = check_file(
        tmp_path / "gate.keras",
        CheckOptions(probe=ProbeOptions(input_file=str(tmp_path / "first.npy"))),
    )
    assert findings(one) == {"trainable": ("dead",)}
    assert "dead: gate (75% of its units)" in message(one, "trainable")
    over = check_file(
        tmp_path / "gate.keras", CheckOptions(probe=ProbeOptions(data=str(tmp_path / "x.npy")))
    )
    assert over.verdict == "PASS" and findings(over) == {}, findings(over)
    dead = check_file(
        sample("bug_dead_layer.keras"),
        CheckOptions(probe=ProbeOptions(data=str(tmp_path / "x.npy"))),
    )
    assert findings(dead) == {"trainable": ("dead",)}
    assert "output 0 for every sample of the data" in message(dead, "trainable")


@pytest.mark.parametrize(
    ("units", "activation", "loss", "y", "says"),
    [
        (2, "sigmoid", "binary_crossentropy", np.arange(16) % 2,
         "one label per sample, but the output has 2 units"),
        (4, "softmax", "categorical_crossentropy", np.eye(5)[np.arange(16) % 5],
         "each sample's labels have width 5, but the output has 4 units"),
        (1, "sigmoid", "binary_crossentropy", np.arange(16) % 2, None),
        (5, "softmax", "categorical_crossentropy", np.eye(5)[np.arange(16) % 5], None),
        (1, None, "mse", np.linspace(-100, 100, 16), None),
    ],
)  # fmt: skip
def test_the_number_of_output_units_against_the_labels(tmp_path, units, activation, loss, y, says):
    x = keras.Input((6,), name="x")
    h = keras.layers.Dense(8, activation="relu", name="dense")(x)
    model = keras.Model(x, keras.layers.Dense(units, activation=activation, name="head")(h))
    model.compile(loss=loss)
    model.save(tmp_path / "m.keras")
    rows = np.random.default_rng(0).standard_normal((16, 6)).astype("float32")
    np.savez(tmp_path / "d.npz", x=rows, y=y.astype("float32"))
    verdict = check_file(
        tmp_path / "m.keras", CheckOptions(probe=ProbeOptions(input_file=str(tmp_path / "d.npz")))
    )
    if says is None:
        assert verdict.verdict == "PASS" and findings(verdict) == {}, findings(verdict)
    else:
        assert findings(verdict) == {"targets": ("target_mismatch",)}
        assert says in message(verdict, "targets")
