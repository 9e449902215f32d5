"""Regenerate the sample models in this folder.

    python sample_models/make_samples.py [OUTDIR]

OUTDIR defaults to the folder holding this script. Every model is built with
fixed layer names (never Keras' auto-naming counters), after
``keras.utils.set_random_seed(0)``, and some weights are then set by hand, so
re-running reproduces the same architectures and the same weight arrays.
See README.md in this folder for what each file is for, and
tests/test_samples.py for the checks that each one behaves as described.
"""

from __future__ import annotations

import json
import os
import sys
import zipfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import custom_layers as cl  # noqa: E402
import keras  # noqa: E402
from keras import layers  # noqa: E402

SEED = 0


def _seed() -> None:
    keras.utils.set_random_seed(SEED)


def _set(layer, kernel=None, bias=None) -> None:
    """Overwrite a built Dense layer's kernel and/or bias by hand."""
    weights = layer.get_weights()
    if kernel is not None:
        kernel = np.asarray(kernel, dtype="float32")
        assert kernel.shape == weights[0].shape, (layer.name, kernel.shape, weights[0].shape)
        weights[0] = kernel
    if bias is not None:
        bias = np.asarray(bias, dtype="float32")
        assert bias.shape == weights[1].shape, (layer.name, bias.shape, weights[1].shape)
        weights[1] = bias
    layer.set_weights(weights)


# --------------------------------------------------------------------------- healthy


def build_seed() -> keras.Model:
    """The seeds' model: 5 -> 8 relu -> 4 relu -> 1."""
    _seed()
    return keras.Sequential(
        [
            keras.Input((5,), name="input"),
            layers.Dense(8, activation="relu", name="dense"),
            layers.Dense(4, activation="relu", name="dense_1"),
            layers.Dense(1, name="dense_2"),
        ],
        name="sequential",
    )


def build_sequential_add() -> keras.Model:
    _seed()
    model = keras.Sequential(name="sequential_add")
    model.add(keras.Input((5,), name="input"))
    model.add(layers.Dense(8, activation="relu", name="dense"))
    model.add(layers.Dense(8, activation="tanh", name="dense_1"))
    model.add(layers.Dense(3, name="dense_2"))
    return model


def build_residual() -> keras.Model:
    """Residual block plus a sibling branch 'side' that 'head' does not use."""
    _seed()
    x = keras.Input((8,), name="x")
    h = layers.Dense(8, activation="relu", name="stem")(x)
    b = layers.Dense(8, name="block")(h)
    r = layers.Add(name="add")([h, b])
    s = layers.Dense(4, name="side")(h)
    out = layers.Dense(2, name="head")(r)
    return keras.Model(x, [out, s], name="residual")


def build_nested() -> keras.Model:
    _seed()
    encoder = keras.Sequential(
        [
            keras.Input((6,), name="encoder_input"),
            layers.Dense(8, activation="relu", name="dense"),
            layers.Dense(4, activation="tanh", name="dense_1"),
        ],
        name="encoder",
    )
    x = keras.Input((6,), name="x")
    out = layers.Dense(2, name="head")(encoder(x))
    return keras.Model(x, out, name="nested")


def build_shared() -> keras.Model:
    """'shared' is called twice in a chain: shared@0 feeds shared@1."""
    _seed()
    x = keras.Input((6,), name="x")
    h = layers.Dense(6, activation="tanh", name="pre")(x)
    shared = layers.Dense(6, activation="tanh", name="shared")
    a = shared(h)
    b = shared(a)
    out = layers.Dense(2, name="head")(b)
    return keras.Model(x, out, name="shared")


def build_two_input() -> keras.Model:
    _seed()
    a = keras.Input((4,), name="a")
    b = keras.Input((3,), name="b")
    da = layers.Dense(5, activation="relu", name="da")(a)
    db = layers.Dense(5, activation="tanh", name="db")(b)
    c = layers.Concatenate(name="concat")([da, db])
    out = layers.Dense(2, name="head")(c)
    return keras.Model([a, b], out, name="two_input")


def build_embedding() -> keras.Model:
    _seed()
    ids = keras.Input((6,), dtype="int32", name="ids")
    e = layers.Embedding(input_dim=20, output_dim=4, name="embedding")(ids)
    p = layers.GlobalAveragePooling1D(name="pool")(e)
    out = layers.Dense(3, name="head")(p)
    return keras.Model(ids, out, name="embedding")


def build_hand_set() -> keras.Model:
    """b = a @ [[5], [6]], so d sum(b) / d a = [5, 6] for every sample."""
    _seed()
    x = keras.Input((2,), name="x")
    a_layer = layers.Dense(2, use_bias=False, name="a")
    b_layer = layers.Dense(1, use_bias=False, name="b")
    out = b_layer(a_layer(x))
    model = keras.Model(x, out, name="hand_set")
    a_layer.set_weights([np.array([[1.0, 2.0], [3.0, 4.0]], dtype="float32")])
    b_layer.set_weights([np.array([[5.0], [6.0]], dtype="float32")])
    return model


# --------------------------------------------------------------------------- causes

N_IN = 6  # input features of every cause_* model
N_HID = 4  # width of 'dense' and of the middle layer


def _chain(name: str, middle: list, *, head_units: int | None = 2, dtype=None) -> keras.Model:
    """x(6) -> Dense 'dense'(4) -> *middle [-> Dense 'head'].

    Callers seed *before* creating any layer (an initializer without a seed
    draws its seed when the layer is constructed), then pass the middle layers.
    """
    kw = {} if dtype is None else {"dtype": dtype}
    x = keras.Input((N_IN,), name="x")
    h = layers.Dense(N_HID, name="dense", **kw)(x)
    for layer in middle:
        h = layer(h)
    if head_units is not None:
        h = layers.Dense(head_units, name="head", **kw)(h)
    return keras.Model(x, h, name=name)


def build_cause_argmax() -> keras.Model:
    _seed()
    return _chain("cause_argmax", [cl.ArgMaxOneHot(name="argmax")])


def build_cause_round() -> keras.Model:
    _seed()
    return _chain("cause_round", [cl.RoundLayer(name="round")])


def build_cause_cast_int() -> keras.Model:
    _seed()
    return _chain("cause_cast_int", [cl.CastToInt(name="cast")])


def build_cause_stop_gradient() -> keras.Model:
    _seed()
    return _chain("cause_stop_gradient", [cl.StopGrad(name="stop")])


def build_cause_numpy_function() -> keras.Model:
    _seed()
    return _chain("cause_numpy_function", [cl.NumpyFunction(name="numpy_fn")])


def build_cause_dead_relu() -> keras.Model:
    _seed()
    dead = layers.Dense(N_HID, activation="relu", name="dead")
    model = _chain("cause_dead_relu", [dead])
    _set(dead, bias=np.full((N_HID,), -1000.0))
    return model


def build_cause_saturated() -> keras.Model:
    # Pre-activations = h @ kernel + bias with bias = +-1000 and the seeded
    # kernel: |pre-activation| ~ 1e3 >> 104, where float32 sigmoid is exactly
    # 0 or 1 and its derivative y * (1 - y) is exactly 0.
    _seed()
    squash = layers.Dense(N_HID, activation="sigmoid", name="squash")
    model = _chain("cause_saturated", [squash])
    _set(squash, bias=[1000.0, -1000.0, 1000.0, -1000.0])
    return model


def build_cause_nan_weights() -> keras.Model:
    _seed()
    broken = layers.Dense(N_HID, name="broken")
    model = _chain("cause_nan_weights", [broken])
    kernel = broken.get_weights()[0].copy()
    kernel[0, 0] = np.nan
    _set(broken, kernel=kernel)
    return model


def build_cause_sqrt() -> keras.Model:
    # Unit 0 of 'dense' has bias -100, so relu output column 0 is exactly 0
    # for any reasonable input; sqrt'(0) = inf, and ReluGrad's inf * 0 = NaN.
    _seed()
    relu = layers.ReLU(name="relu")
    sqrt = cl.SqrtLayer(name="sqrt")
    model = _chain("cause_sqrt", [relu, sqrt])
    _set(model.get_layer("dense"), bias=[-100.0, 0.0, 0.0, 0.0])
    return model


def build_cause_training() -> keras.Model:
    # With training=True, BN normalises with the batch's own statistics, so
    # the batch sum of each bn unit is beta * batch, a constant: d sum(bn) /
    # d dense is exactly 0 when the batch size is a power of two (the mean's
    # 1/n is exact), ~1e-7 rounding noise otherwise. No 'head': a Dense after
    # bn mixes units and leaves ~1e-6 noise instead of an exact 0.
    _seed()
    return _chain("cause_training", [layers.BatchNormalization(name="bn")], head_units=None)


TINY_SCALE = 1e-5  # 'tiny' kernel: float16 subnormal but representable
HEAD16_SCALE = 1e-4  # 'head' kernel: float16 normal


def build_cause_float16() -> keras.Model:
    # d sum(head) / d dense = tiny.kernel @ head.kernel.sum(1), terms ~1e-9,
    # below half float16's smallest subnormal (2.98e-8): flushes to 0 in
    # float16 while each weight is still representable; non-zero in float32.
    _seed()
    tiny = layers.Dense(N_HID, name="tiny", dtype="mixed_float16")
    model = _chain("cause_float16", [tiny], head_units=1, dtype="mixed_float16")
    tiny_k = tiny.get_weights()[0]
    _set(
        tiny, kernel=TINY_SCALE * np.sign(tiny_k) * (1.0 + np.abs(tiny_k)), bias=np.zeros((N_HID,))
    )
    head = model.get_layer("head")
    _set(head, kernel=np.full((N_HID, 1), HEAD16_SCALE), bias=np.zeros((1,)))
    return model


# --------------------------------------------------------------------------- main

PINNED_DATE = "2000-01-01@00:00:00"
ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)


def _renumber_shared_ids(node, ids: dict) -> None:
    """Replace memory-address shared_object_ids by 1, 2, ... in first-seen order."""
    if isinstance(node, dict):
        if "shared_object_id" in node:
            old = node["shared_object_id"]
            node["shared_object_id"] = ids.setdefault(old, len(ids) + 1)
        for value in node.values():
            _renumber_shared_ids(value, ids)
    elif isinstance(node, list):
        for value in node:
            _renumber_shared_ids(value, ids)


def normalise_archive(path: str) -> None:
    """Make a .keras zip byte-reproducible.

    Keras writes three run-dependent things: ``date_saved`` in metadata.json,
    ``shared_object_id`` values that are Python object addresses in
    config.json, and the wall-clock time on the weights zip entry. Pin the
    date, renumber the ids consistently (1, 2, ...) and give every entry the
    same timestamp. Nothing Keras reads when loading changes meaning.
    """
    with zipfile.ZipFile(path) as zin:
        entries = [(info, zin.read(info.filename)) for info in zin.infolist()]
    with zipfile.ZipFile(path, "w") as zout:
        for info, data in entries:
            if info.filename == "metadata.json":
                meta = json.loads(data)
                meta["date_saved"] = PINNED_DATE
                data = json.dumps(meta).encode()
            elif info.filename == "config.json":
                config = json.loads(data)
                _renumber_shared_ids(config, {})
                data = json.dumps(config).encode()
            new = zipfile.ZipInfo(info.filename, date_time=ZIP_EPOCH)
            new.compress_type = info.compress_type
            new.external_attr = info.external_attr
            new.create_system = info.create_system
            zout.writestr(new, data)


# --------------------------------------------------------------------------- training


def build_train_classifier() -> keras.Model:
    """A healthy classifier, compiled: x(6) -> 'dense'(8, relu, L2-regularized) -> 'bn'
    (frozen BatchNormalization) -> 'head'(3, softmax); sparse categorical cross-entropy."""
    _seed()
    x = keras.Input((6,), name="x")
    h = layers.Dense(8, activation="relu", kernel_regularizer="l2", name="dense")(x)
    bn = layers.BatchNormalization(name="bn")
    out = layers.Dense(3, activation="softmax", name="head")(bn(h))
    bn.trainable = False
    model = keras.Model(x, out, name="train_classifier")
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    return model


def build_train_unused_input() -> keras.Model:
    """x(6) -> 'a'(4) and 'b'(4) -> IgnoreSecond 'mix'([a, b]) -> 'head'(2), compiled with mean
    squared error: 'b' gets no gradient from the loss (unused_input at mix)."""
    _seed()
    x = keras.Input((6,), name="x")
    a = layers.Dense(4, name="a")(x)
    b = layers.Dense(4, name="b")(x)
    out = layers.Dense(2, name="head")(cl.IgnoreSecond(name="mix")([a, b]))
    model = keras.Model(x, out, name="train_unused_input")
    model.compile(optimizer="sgd", loss="mse")
    return model


def build_train_two_outputs() -> keras.Model:
    """x(6) -> 'trunk'(8, relu) -> 'probs'(3, softmax) and 'value'(1), one loss per output:
    sparse categorical cross-entropy (weight 1) and mean squared error (weight 0.5)."""
    _seed()
    x = keras.Input((6,), name="x")
    trunk = layers.Dense(8, activation="relu", name="trunk")(x)
    probs = layers.Dense(3, activation="softmax", name="probs")(trunk)
    value = layers.Dense(1, name="value")(trunk)
    model = keras.Model(x, [probs, value], name="train_two_outputs")
    model.compile(
        optimizer="adam",
        loss={"probs": "sparse_categorical_crossentropy", "value": "mse"},
        loss_weights={"probs": 1.0, "value": 0.5},
    )
    return model


# --------------------------------------------------------------------------- bugs people post
# Each bug_* model has a fixed_* twin that must pass check with no finding.


def _head_model(name: str, units: int, activation: str | None, loss) -> keras.Model:
    """x(6) -> 'dense'(8, relu) -> Dense(units, activation) 'head', compiled with `loss`."""
    _seed()  # before any layer exists: an unseeded initializer draws its seed when created
    x = keras.Input((6,), name="x")
    h = layers.Dense(8, activation="relu", name="dense")(x)
    model = keras.Model(x, layers.Dense(units, activation=activation, name="head")(h), name=name)
    model.compile(optimizer="adam", loss=loss)
    return model


def build_bug_softmax_one_unit() -> keras.Model:
    """Dense(1, softmax) with binary cross-entropy: the output is always 1.0."""
    return _head_model("bug_softmax_one_unit", 1, "softmax", "binary_crossentropy")


def build_fixed_sigmoid_head() -> keras.Model:
    """The yes/no head people mean: Dense(1, sigmoid) with binary cross-entropy."""
    return _head_model("fixed_sigmoid_head", 1, "sigmoid", "binary_crossentropy")


def build_bug_bce_on_softmax() -> keras.Model:
    """A 3-class softmax head compiled with binary cross-entropy."""
    return _head_model("bug_bce_on_softmax", 3, "softmax", "binary_crossentropy")


def build_fixed_softmax_head() -> keras.Model:
    """A 3-class softmax head with sparse categorical cross-entropy."""
    return _head_model("fixed_softmax_head", 3, "softmax", "sparse_categorical_crossentropy")


def build_bug_logits_twice() -> keras.Model:
    """A softmax head with from_logits=True: softmax applied twice."""
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    return _head_model("bug_logits_twice", 3, "softmax", loss)


def build_bug_linear_no_logits() -> keras.Model:
    """A linear head with from_logits=False: Keras clips the logits as probabilities."""
    return _head_model("bug_linear_no_logits", 3, None, "sparse_categorical_crossentropy")


def build_fixed_logits_head() -> keras.Model:
    """A linear head with from_logits=True: what the loss expects of logits."""
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    return _head_model("fixed_logits_head", 3, None, loss)


def build_bug_saturated_head() -> keras.Model:
    """A sigmoid head whose bias (+1000) pins it at 1.0 for every sample."""
    model = build_fixed_sigmoid_head()
    _set(model.get_layer("head"), bias=[1000.0])
    model.name = "bug_saturated_head"
    return model


def build_bug_unscaled_input() -> keras.Model:
    """Pixels in 0-255 straight into Dense(16, tanh) 'squash': feed it raw pixel values."""
    _seed()
    x = keras.Input((12,), name="pixels")
    h = layers.Dense(16, activation="tanh", name="squash")(x)
    out = layers.Dense(3, activation="softmax", name="head")(h)
    model = keras.Model(x, out, name="bug_unscaled_input")
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    return model


def build_fixed_rescaled_input() -> keras.Model:
    """The same with a Rescaling(1/255) layer in front of 'squash'."""
    _seed()
    x = keras.Input((12,), name="pixels")
    scaled = layers.Rescaling(1 / 255, name="rescale")(x)
    h = layers.Dense(16, activation="tanh", name="squash")(scaled)
    out = layers.Dense(3, activation="softmax", name="head")(h)
    model = keras.Model(x, out, name="fixed_rescaled_input")
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    return model


def _stack(
    name: str, activation: str, initializer: str | dict, depth: int = 8, width: int = 64
) -> keras.Model:
    _seed()
    x = keras.Input((32,), name="x")
    h = x
    for i in range(depth):
        h = layers.Dense(width, activation=activation, kernel_initializer=initializer,
                         name=f"dense_{i}")(h)  # fmt: skip
    model = keras.Model(x, layers.Dense(10, name="head")(h), name=name)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    # a named optimizer leaves Keras's name counter, hence the later samples, as they were
    model.compile(optimizer=keras.optimizers.Adam(name=f"adam_{name}"), loss=loss)
    return model


# ------------------------------------------------------ outputs that cannot produce the targets
# Each bug_target_* model comes with `bug_target_*.npz` (x and the labels y it is trained on);
# its fixed_* twin is checked with the same labels.


def _layers_model(name: str, make_tail, loss) -> keras.Model:
    """x(6) -> 'dense'(8, relu) -> the layers `make_tail()` makes, compiled with `loss`."""
    _seed()  # before any layer exists, the tail's included
    x = keras.Input((6,), name="x")
    h = layers.Dense(8, activation="relu", name="dense")(x)
    for layer in make_tail():
        h = layer(h)
    model = keras.Model(x, h, name=name)
    model.compile(optimizer="adam", loss=loss)
    return model


def build_bug_target_sigmoid_range() -> keras.Model:
    """Dense(1, sigmoid) regressing prices 50-500 with mse: a sigmoid never exceeds 1."""
    return _head_model("bug_target_sigmoid_range", 1, "sigmoid", "mse")


def build_fixed_linear_regression() -> keras.Model:
    """The same regression with a linear head."""
    return _head_model("fixed_linear_regression", 1, None, "mse")


def build_bug_target_classes_one_unit() -> keras.Model:
    """Five classes (ids 0-4) into Dense(1, sigmoid) with binary cross-entropy."""
    return _head_model("bug_target_classes_one_unit", 1, "sigmoid", "binary_crossentropy")


def build_fixed_five_classes() -> keras.Model:
    """Dense(5, softmax) with sparse categorical cross-entropy for ids 0-4."""
    return _head_model("fixed_five_classes", 5, "softmax", "sparse_categorical_crossentropy")


def build_bug_target_ids_one_hot_loss() -> keras.Model:
    """Class ids 0-3 with categorical cross-entropy (which wants one-hot rows)."""
    return _head_model("bug_target_ids_one_hot_loss", 4, "softmax", "categorical_crossentropy")


def build_fixed_ids_sparse_loss() -> keras.Model:
    """Class ids 0-3 with sparse categorical cross-entropy."""
    return _head_model("fixed_ids_sparse_loss", 4, "softmax", "sparse_categorical_crossentropy")


def build_bug_target_one_hot_sparse_loss() -> keras.Model:
    """One-hot rows of width 4 with sparse categorical cross-entropy (which wants ids)."""
    return _head_model(
        "bug_target_one_hot_sparse_loss", 4, "softmax", "sparse_categorical_crossentropy"
    )


def build_fixed_one_hot_loss() -> keras.Model:
    """One-hot rows of width 4 with categorical cross-entropy."""
    return _head_model("fixed_one_hot_loss", 4, "softmax", "categorical_crossentropy")


def build_bug_target_ids_beyond_units() -> keras.Model:
    """Class ids 0-4 into Dense(3, softmax): ids 3 and 4 have no unit."""
    return _head_model(
        "bug_target_ids_beyond_units", 3, "softmax", "sparse_categorical_crossentropy"
    )


def _labels(kind: str) -> np.ndarray:
    rng = np.random.default_rng(1)
    if kind == "prices":
        return rng.uniform(50, 500, (32, 1)).astype("float32")
    if kind == "one_hot":
        return np.eye(4, dtype="float32")[rng.integers(0, 4, 32)]
    high = {"ids5": 5, "ids4": 4}[kind]
    return rng.integers(0, high, (32,)).astype("int64")


# file -> (labels, the models checked with them): bug first, then its fixed twin
LABELS = {
    "target_prices.npz": ("prices", "bug_target_sigmoid_range", "fixed_linear_regression"),
    "target_ids5.npz": ("ids5", "bug_target_classes_one_unit", "fixed_five_classes"),
    "target_ids4.npz": ("ids4", "bug_target_ids_one_hot_loss", "fixed_ids_sparse_loss"),
    "target_one_hot.npz": ("one_hot", "bug_target_one_hot_sparse_loss", "fixed_one_hot_loss"),
}


def write_labels(outdir: str) -> None:
    """The probe batch (x, 32 standard-normal rows) and labels y of the target samples."""
    import io

    for filename, (kind, *_models) in LABELS.items():
        x = np.random.default_rng(0).standard_normal((32, 6)).astype("float32")
        # what np.savez writes, with fixed entry dates so regeneration is byte-identical
        with zipfile.ZipFile(os.path.join(outdir, filename), "w") as archive:
            for key, array in (("x", x), ("y", _labels(kind))):
                buffer = io.BytesIO()
                np.lib.format.write_array(buffer, array)
                entry = zipfile.ZipInfo(f"{key}.npy", (1980, 1, 1, 0, 0, 0))
                archive.writestr(entry, buffer.getvalue())


# ------------------------------------------------------ heads the loss cannot train (static)


def build_bug_relu_head_bce() -> keras.Model:
    """Dense(1, relu) with binary cross-entropy: outputs read as probabilities, clipped."""
    return _head_model("bug_relu_head_bce", 1, "relu", "binary_crossentropy")


def build_bug_softmax_poisson() -> keras.Model:
    """A 3-class softmax head compiled with the Poisson loss."""
    return _head_model("bug_softmax_poisson", 3, "softmax", "poisson")


def build_bug_relu_before_softmax() -> keras.Model:
    """Dense(3, relu) 'logits' -> Softmax 'head': negative logits become 0."""

    def tail():
        return [layers.Dense(3, activation="relu", name="logits"), layers.Softmax(name="head")]

    return _layers_model("bug_relu_before_softmax", tail, "sparse_categorical_crossentropy")


def build_fixed_logits_softmax() -> keras.Model:
    """Dense(3) 'logits' -> Softmax 'head'."""

    def tail():
        return [layers.Dense(3, name="logits"), layers.Softmax(name="head")]

    return _layers_model("fixed_logits_softmax", tail, "sparse_categorical_crossentropy")


def build_bug_dropout_logits() -> keras.Model:
    """Dense(3) 'logits' -> Dropout(0.5) 'drop' -> Softmax 'head': dropout on the logits."""

    def tail():
        return [layers.Dense(3, name="logits"), layers.Dropout(0.5, name="drop"),
            layers.Softmax(name="head")]  # fmt: skip

    return _layers_model("bug_dropout_logits", tail, "sparse_categorical_crossentropy")


def build_fixed_dropout_hidden() -> keras.Model:
    """Dropout(0.5) 'drop' before Dense(3, softmax) 'head'."""

    def tail():
        return [
            layers.Dropout(0.5, name="drop"),
            layers.Dense(3, activation="softmax", name="head"),
        ]

    return _layers_model("fixed_dropout_hidden", tail, "sparse_categorical_crossentropy")


def build_bug_all_linear() -> keras.Model:
    """x(6) -> Dense(8) 'dense' (no activation) -> Dense(3, softmax) 'head'."""
    _seed()
    x = keras.Input((6,), name="x")
    h = layers.Dense(8, name="dense")(x)
    out = layers.Dense(3, activation="softmax", name="head")(h)
    model = keras.Model(x, out, name="bug_all_linear")
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    return model


def build_bug_dead_layer() -> keras.Model:
    """A hidden Dense(8, relu) 'dense' whose bias (-100) kills six of its eight units."""
    model = _head_model("bug_dead_layer", 3, "softmax", "sparse_categorical_crossentropy")
    _set(model.get_layer("dense"), bias=[-100.0] * 6 + [0.0] * 2)
    return model


def build_bug_sigmoid_stack() -> keras.Model:
    """Eight Dense(64, sigmoid) layers: the gradient falls ~0.6 decades per layer."""
    return _stack("bug_sigmoid_stack", "sigmoid", "glorot_uniform")


def build_fixed_relu_stack() -> keras.Model:
    """Eight Dense(64, relu, he_normal) layers: the gradient keeps its size."""
    return _stack("fixed_relu_stack", "relu", "he_normal")


def build_bug_large_init_stack() -> keras.Model:
    """20 Dense(32, tanh) layers with kernels drawn from N(0, 2^2), about 11 times the Glorot
    scale: tanh saturates forward while the backward signal grows layer after layer, so the
    first layers' update ratios sit about 5 decades above the last layers'."""
    # a config, not an instance: each layer makes its own initializer (one shared unseeded
    # instance would give every layer of the same shape the same kernel)
    normal = {"class_name": "RandomNormal", "config": {"stddev": 2.0}}
    return _stack("bug_large_init_stack", "tanh", normal, depth=20, width=32)


def build_fixed_glorot_stack() -> keras.Model:
    """The same 20 Dense(32, tanh) layers with Glorot-uniform kernels (Keras' default)."""
    return _stack("fixed_glorot_stack", "tanh", "glorot_uniform", depth=20, width=32)


# file name -> builder; seed.h5 is the legacy-format copy of seed.keras.
BUILDERS = {
    "seed.keras": build_seed,
    "seed.h5": build_seed,
    "sequential_add.keras": build_sequential_add,
    "residual.keras": build_residual,
    "nested.keras": build_nested,
    "shared.keras": build_shared,
    "two_input.keras": build_two_input,
    "embedding.keras": build_embedding,
    "hand_set.keras": build_hand_set,
    "cause_argmax.keras": build_cause_argmax,
    "cause_round.keras": build_cause_round,
    "cause_cast_int.keras": build_cause_cast_int,
    "cause_stop_gradient.keras": build_cause_stop_gradient,
    "cause_numpy_function.keras": build_cause_numpy_function,
    "cause_dead_relu.keras": build_cause_dead_relu,
    "cause_saturated.keras": build_cause_saturated,
    "cause_nan_weights.keras": build_cause_nan_weights,
    "cause_sqrt.keras": build_cause_sqrt,
    "cause_training.keras": build_cause_training,
    "cause_float16.keras": build_cause_float16,
    "train_classifier.keras": build_train_classifier,
    "train_unused_input.keras": build_train_unused_input,
    "train_two_outputs.keras": build_train_two_outputs,
    "bug_softmax_one_unit.keras": build_bug_softmax_one_unit,
    "bug_bce_on_softmax.keras": build_bug_bce_on_softmax,
    "bug_logits_twice.keras": build_bug_logits_twice,
    "bug_linear_no_logits.keras": build_bug_linear_no_logits,
    "bug_saturated_head.keras": build_bug_saturated_head,
    "bug_unscaled_input.keras": build_bug_unscaled_input,
    "bug_sigmoid_stack.keras": build_bug_sigmoid_stack,
    "fixed_sigmoid_head.keras": build_fixed_sigmoid_head,
    "fixed_softmax_head.keras": build_fixed_softmax_head,
    "fixed_logits_head.keras": build_fixed_logits_head,
    "fixed_rescaled_input.keras": build_fixed_rescaled_input,
    "fixed_relu_stack.keras": build_fixed_relu_stack,
    "bug_target_sigmoid_range.keras": build_bug_target_sigmoid_range,
    "fixed_linear_regression.keras": build_fixed_linear_regression,
    "bug_target_classes_one_unit.keras": build_bug_target_classes_one_unit,
    "fixed_five_classes.keras": build_fixed_five_classes,
    "bug_target_ids_one_hot_loss.keras": build_bug_target_ids_one_hot_loss,
    "fixed_ids_sparse_loss.keras": build_fixed_ids_sparse_loss,
    "bug_target_one_hot_sparse_loss.keras": build_bug_target_one_hot_sparse_loss,
    "fixed_one_hot_loss.keras": build_fixed_one_hot_loss,
    "bug_target_ids_beyond_units.keras": build_bug_target_ids_beyond_units,
    "bug_relu_head_bce.keras": build_bug_relu_head_bce,
    "bug_softmax_poisson.keras": build_bug_softmax_poisson,
    "bug_relu_before_softmax.keras": build_bug_relu_before_softmax,
    "fixed_logits_softmax.keras": build_fixed_logits_softmax,
    "bug_dropout_logits.keras": build_bug_dropout_logits,
    "fixed_dropout_hidden.keras": build_fixed_dropout_hidden,
    "bug_all_linear.keras": build_bug_all_linear,
    "bug_dead_layer.keras": build_bug_dead_layer,
    "bug_large_init_stack.keras": build_bug_large_init_stack,
    "fixed_glorot_stack.keras": build_fixed_glorot_stack,
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) > 1 or (argv and argv[0] in ("-h", "--help")):
        print(__doc__.strip())
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    outdir = argv[0] if argv else HERE
    os.makedirs(outdir, exist_ok=True)
    for filename, build in BUILDERS.items():
        model = build()
        path = os.path.join(outdir, filename)
        model.save(path)
        if filename.endswith(".keras"):
            normalise_archive(path)
        print(f"wrote {filename:28s} {os.path.getsize(path):7d} bytes  ({model.name})")
    write_labels(outdir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
