"""A corpus of small training runs, healthy and with one known problem injected each.

Shared by tests/training/test_training_corpus.py (the floors) and
benchmarks/bench_training_corpus.py (recall and false alarms over seeds, the table of
docs/training.md). Every run is a real `model.fit` with `GradientMonitor` on data made here
(learnable tasks, so a healthy run learns); `RUNS` names each run, what it injects and the
finding (and layer, when the problem has one) it must get, and for the runs of a finding that
fails a run, the same run with the finding's repair applied (`repaired`), which must train.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from layergrad import GradientMonitor
from layergrad.core.keras_backend import quiet_import
from layergrad.data.label_stream import TrivialLoss

_, keras = quiet_import()
layers = keras.layers

N = 2048  # samples per task
SMALL = 64  # samples of a small program's data set (a tutorial's, a question's)


@dataclass(frozen=True)
class Run:
    """One training run: `expected` is the finding it must get (None: healthy, no finding at
    all); `layer` the layer that finding must name (None: any); `steps` optimizer steps."""

    name: str
    injected: str
    build: Callable[[int], tuple[object, ...]]  # seed -> (model, x, y, batch size)
    expected: str | None
    layer: str | None = None
    steps: int = 300
    every: int = 10
    callbacks: Callable[[], list[object]] = list
    trivial: bool = False  # give the monitor the labels' trivial loss, as `fit` does
    # the run with the finding's repair applied (what `fix` changes), for the severity evidence
    repaired: Callable[[int], tuple[object, ...]] | None = None


# tasks


def quadrants(seed: int, features: int = 10, n: int = N) -> tuple[np.ndarray, np.ndarray]:
    """4 classes: the signs of the first two features."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, features)).astype("float32")
    y = (x[:, 0] > 0).astype("int64") + 2 * (x[:, 1] > 0).astype("int64")
    return x, y


def regression(seed: int, n: int = N) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 8)).astype("float32")
    y = (np.sin(x[:, 0]) + x[:, 1] * x[:, 2] + 0.5 * x[:, 3]).astype("float32")[:, None]
    return x, y


def images(seed: int, n: int = N) -> tuple[np.ndarray, np.ndarray]:
    """8x8 images, 4 classes: the quadrant holding a bright 3x3 blob."""
    rng = np.random.default_rng(seed)
    x = rng.normal(0, 0.3, (n, 8, 8, 1)).astype("float32")
    y = rng.integers(0, 4, n)
    for i, c in enumerate(y):
        r, q = divmod(int(c), 2)
        a, b = 4 * r + rng.integers(0, 2), 4 * q + rng.integers(0, 2)
        x[i, a : a + 3, b : b + 3, 0] += 1.5
    return x, y.astype("int64")


def sequences(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Sequences of 12 steps, 2 classes: whether the first feature sums above 0."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((N, 12, 3)).astype("float32")
    return x, (x[:, :, 0].sum(axis=1) > 0).astype("int64")


# models


def mlp(
    features: int = 10,
    classes: int = 4,
    *,
    depth: int = 2,
    width: int = 32,
    activation: str = "relu",
    head: str = "softmax",
    init: object = "glorot_uniform",
) -> object:
    model = keras.Sequential([keras.Input((features,))])
    for i in range(depth):
        model.add(
            layers.Dense(width, activation=activation, kernel_initializer=init, name=f"dense_{i}")
        )
    model.add(layers.Dense(classes, activation=head, kernel_initializer=init, name="head"))
    return model


def _run(model: object, optimizer: object, loss: str, x: object, y: object) -> tuple[object, ...]:
    """What a run's build returns: the compiled model, x, y and the batch size."""
    model.compile(optimizer=optimizer, loss=loss)  # type: ignore[attr-defined]
    return model, x, y, 32


def _seeded(seed: int) -> None:
    keras.utils.set_random_seed(seed)


def healthy_mlp(seed: int) -> tuple[object, ...]:
    _seeded(seed)
    x, y = quadrants(seed)
    return _run(mlp(), keras.optimizers.Adam(1e-3), "sparse_categorical_crossentropy", x, y)


def healthy_regression(seed: int) -> tuple[object, ...]:
    _seeded(seed)
    x, y = regression(seed)
    return _run(mlp(8, 1, head="linear", width=64), keras.optimizers.Adam(3e-3), "mse", x, y)


def healthy_conv(seed: int, n: int = N) -> tuple[object, ...]:
    _seeded(seed)
    x, y = images(seed, n)
    model = keras.Sequential(
        [
            keras.Input((8, 8, 1)),
            layers.Conv2D(8, 3, activation="relu", padding="same", name="conv_0"),
            layers.MaxPooling2D(2, name="pool"),
            layers.Conv2D(16, 3, activation="relu", padding="same", name="conv_1"),
            layers.Flatten(name="flat"),
            layers.Dense(4, activation="softmax", name="head"),
        ]
    )
    return _run(model, keras.optimizers.Adam(3e-3), "sparse_categorical_crossentropy", x, y)


def healthy_lstm(seed: int) -> tuple[object, ...]:
    _seeded(seed)
    x, y = sequences(seed)
    model = keras.Sequential(
        [
            keras.Input((12, 3)),
            layers.LSTM(16, name="lstm"),
            layers.Dense(2, activation="softmax", name="head"),
        ]
    )
    return _run(model, keras.optimizers.Adam(1e-2), "sparse_categorical_crossentropy", x, y)


def healthy_binary(seed: int) -> tuple[object, ...]:
    _seeded(seed)
    x, y = quadrants(seed)
    target = (y % 2).astype("float32")  # the sign of the first feature
    return _run(
        mlp(classes=1, head="sigmoid"),
        keras.optimizers.Adam(1e-3),
        "binary_crossentropy",
        x,
        target,
    )


def _mlp_run(optimizer: object, **kw: object) -> Callable[[int], tuple[object, ...]]:
    def build(seed: int) -> tuple[object, ...]:
        _seeded(seed)
        x, y = quadrants(seed)
        model = mlp(**kw)  # type: ignore[arg-type]
        opt = optimizer() if callable(optimizer) else optimizer
        return _run(model, opt, "sparse_categorical_crossentropy", x, y)

    return build


def lr_high(seed: int) -> tuple[object, ...]:
    return _mlp_run(lambda: keras.optimizers.SGD(20.0))(seed)


def lr_fixed(seed: int) -> tuple[object, ...]:
    """The learning rate's repair of the SGD runs: a rate that trains this MLP."""
    return _mlp_run(lambda: keras.optimizers.SGD(0.05))(seed)


def lr_tiny(seed: int) -> tuple[object, ...]:
    return _mlp_run(lambda: keras.optimizers.SGD(1e-9))(seed)


def lr_low(seed: int) -> tuple[object, ...]:
    return _mlp_run(lambda: keras.optimizers.SGD(2e-3))(seed)


def sgd_deep(seed: int) -> tuple[object, ...]:
    return _mlp_run(lambda: keras.optimizers.SGD(2e-3), depth=10, width=16, activation="tanh")(seed)


def sigmoid_stack(seed: int) -> tuple[object, ...]:
    return _mlp_run(lambda: keras.optimizers.Adam(1e-3), depth=8, activation="sigmoid")(seed)


def init_up(seed: int) -> tuple[object, ...]:
    _seeded(seed)  # an unseeded initializer takes its seed when made: make it after seeding
    init = keras.initializers.RandomNormal(stddev=8.0)
    return _mlp_run(lambda: keras.optimizers.SGD(0.01), depth=3, init=init)(seed)


def init_zero(seed: int) -> tuple[object, ...]:
    return _mlp_run(lambda: keras.optimizers.Adam(1e-3), init="zeros")(seed)


def dying(seed: int) -> tuple[object, ...]:
    """Adam at 0.1 on a ReLU MLP: the first large steps silence most units of a layer."""
    return _mlp_run(lambda: keras.optimizers.Adam(0.1))(seed)


def dead_bias(seed: int) -> tuple[object, ...]:
    """A ReLU MLP whose first layer has 24 of its 32 biases at -100: those units output 0 for
    every sample from the first step (its repair, the biases reset to 0, is `healthy_mlp`)."""
    model, x, y, batch = healthy_mlp(seed)
    first = model.get_layer("dense_0")  # type: ignore[attr-defined]
    kernel, bias = first.get_weights()
    bias[:24] = -100.0
    first.set_weights([kernel, bias])
    return model, x, y, batch


def stalled(seed: int) -> tuple[object, ...]:
    """One layer's kernels drawn 100 times too large, with a LayerNormalization after it: the
    forward pass is as healthy as ever, but each step moves that layer by a fraction of its
    size some decades below the others'."""
    _seeded(seed)
    x, y = quadrants(seed)
    big = keras.initializers.RandomNormal(stddev=100.0)
    model = keras.Sequential(
        [
            keras.Input((10,)),
            layers.Dense(32, activation="relu", name="dense_0"),
            layers.Dense(32, kernel_initializer=big, name="big"),
            layers.LayerNormalization(name="norm"),
            layers.Activation("relu", name="relu"),
            layers.Dense(32, activation="relu", name="dense_1"),
            layers.Dense(4, activation="softmax", name="head"),
        ]
    )
    return _run(model, keras.optimizers.Adam(1e-3), "sparse_categorical_crossentropy", x, y)


def constant_head(seed: int) -> tuple[object, ...]:
    _seeded(seed)
    x, y = quadrants(seed)
    return _run(
        mlp(classes=1, head="softmax"),
        keras.optimizers.Adam(1e-3),
        "binary_crossentropy",
        x,
        (y % 2).astype("float32"),
    )


def shuffled_labels(seed: int) -> tuple[object, ...]:
    model, x, y, batch = healthy_mlp(seed)
    return model, x, np.random.default_rng(seed + 99).permutation(y), batch


def unscaled_inputs(seed: int) -> tuple[object, ...]:
    model, x, y, batch = _mlp_run(lambda: keras.optimizers.SGD(0.01))(seed)
    return model, x * 1000.0, y, batch


def batch_of_one(seed: int) -> tuple[object, ...]:
    model, x, y, _ = _mlp_run(lambda: keras.optimizers.SGD(0.1))(seed)
    return model, x, y, 1


def lr_spike(seed: int) -> tuple[object, ...]:
    """SGD at 5 on a ReLU classifier: the loss jumps several-fold in the first steps, the
    ReLU units die and the loss then sits at the trivial loss."""
    return _mlp_run(lambda: keras.optimizers.SGD(5.0))(seed)


def mae_stuck(seed: int, rate: float = 1e-3) -> tuple[object, ...]:
    """A regression with MAE and plain SGD (1e-3) on targets around 100: each step moves the
    weights by at most the rate, and the loss stays where it starts, far above the trivial
    loss of predicting the targets' median."""
    _seeded(seed)
    x, y = regression(seed)
    model = mlp(8, 1, head="linear")
    return _run(model, keras.optimizers.SGD(rate), "mae", x, 100.0 + 20.0 * y)


def mae_fixed(seed: int) -> tuple[object, ...]:
    """The learning rate's repair of `mae_stuck`: a rate at which the MAE's steps reach 100."""
    return mae_stuck(seed, 0.02)


def sigmoid_head(seed: int) -> tuple[object, ...]:
    """The head's repair of `constant_head`: one sigmoid unit."""
    return healthy_binary(seed)


def _small(
    build: Callable[[int], tuple[object, ...]], batch: int | None = None
) -> Callable[[int], tuple[object, ...]]:
    """The run `build` makes, on the first `SMALL` samples of its data (in batches of `batch`,
    default the run's own)."""

    def small(seed: int) -> tuple[object, ...]:
        model, x, y, own = build(seed)
        return model, x[:SMALL], y[:SMALL], batch or own  # type: ignore[index]

    return small


def noisy_labels(seed: int) -> tuple[object, ...]:
    """A quarter of the labels drawn at random: the best loss stays well above half the
    trivial loss, however long the run."""
    model, x, y, batch = healthy_mlp(seed)
    rng = np.random.default_rng(seed + 7)
    flip = rng.random(len(y)) < 0.25  # type: ignore[arg-type]
    y = np.where(flip, rng.integers(0, 4, len(y)), y)  # type: ignore[arg-type]
    return model, x, y, batch


def small_sgd(seed: int) -> tuple[object, ...]:
    return _mlp_run(lambda: keras.optimizers.SGD(0.05))(seed)


def small_regression(seed: int) -> tuple[object, ...]:
    _seeded(seed)
    x, y = regression(seed)
    return _run(mlp(8, 1, head="linear", width=16), keras.optimizers.Adam(1e-2), "mse", x, y)


NAN_STEP = 150  # the step (from 1) whose forward pass first gives NaN in `head`


class NanAt(keras.callbacks.Callback):  # type: ignore[misc,name-defined]
    """Before step `NAN_STEP`, one bias of `head` becomes NaN: a NaN-producing op at a
    known step and layer."""

    def __init__(self) -> None:
        super().__init__()
        self.seen = 0

    def on_train_batch_begin(self, batch: int, logs: object = None) -> None:
        self.seen += 1
        if self.seen == NAN_STEP:
            bias = self.model.get_layer("head").bias
            values = np.array(bias.numpy())
            values[0] = np.nan
            bias.assign(values)


def nan_at_step(seed: int) -> tuple[object, ...]:
    return _mlp_run(lambda: keras.optimizers.Adam(1e-3))(seed)


RUNS: tuple[Run, ...] = (
    Run("mlp", "healthy 4-class MLP (Adam)", healthy_mlp, None),
    Run("regression", "healthy MLP regression (mse)", healthy_regression, None),
    Run("conv", "healthy small conv net", healthy_conv, None),
    Run("lstm", "healthy small LSTM", healthy_lstm, None),
    Run("binary", "healthy binary MLP (sigmoid)", healthy_binary, None),
    Run("lr_high", "SGD learning rate 20", lr_high, "diverging", repaired=lr_fixed),
    Run("lr_tiny", "SGD learning rate 1e-9", lr_tiny, "not_learning", repaired=lr_fixed),
    Run("lr_low", "SGD learning rate 2e-3 (no momentum)", lr_low, "slow_convergence"),
    Run("sgd_deep", "plain SGD (2e-3) on a 10-layer tanh net", sgd_deep, "slow_convergence"),
    Run("sigmoid_stack", "8 sigmoid layers", sigmoid_stack, "vanishing"),
    Run("init_up", "initialisation scaled up (normal, stddev 8)", init_up, "exploding"),
    Run(
        "init_zero",
        "initialisation all zeros",
        init_zero,
        "constant_predictions",
        "head",
        repaired=healthy_mlp,  # the kernels drawn afresh (glorot_uniform)
    ),
    Run(
        "constant_head",
        "Dense(1, softmax) with binary cross-entropy",
        constant_head,
        "constant_predictions",
        "head",
        repaired=sigmoid_head,
    ),
    Run("shuffled", "labels shuffled", shuffled_labels, "plateau_at_chance", "head"),
    Run("unscaled", "inputs x1000", unscaled_inputs, "exploding"),
    Run("batch_1", "a batch of 1 sample (SGD 0.1)", batch_of_one, "oscillating"),
    Run(
        "lr_spike",
        "SGD learning rate 5 (the loss jumps at step 2-4)",
        lr_spike,
        "diverging",
        repaired=lr_fixed,
    ),
    Run(
        "mae_stuck",
        "MAE with SGD 1e-3 on targets ~100",
        mae_stuck,
        "not_learning",
        trivial=True,
        repaired=mae_fixed,
    ),
    Run("dying", "Adam learning rate 0.1 on a ReLU MLP", dying, "dying_units"),
    Run("stalled", "kernels x100 before a LayerNorm", stalled, "stalled_layer", "big"),
    Run(
        "dead_bias",
        "24 of the first layer's 32 ReLU biases at -100",
        dead_bias,
        "dead",
        "dense_0",
        repaired=healthy_mlp,  # the biases reset to 0 (Keras's default)
    ),
    # small programs: 64 samples in batches of 32, as many steps as a tutorial's epochs
    # give, a checkpoint every steps / 50 (as `fit` takes them)
    *(
        Run(
            f"small_{name}",
            f"healthy {what}, {SMALL} samples, {steps} steps",
            _small(build),
            None,
            steps=steps,
            every=max(1, steps // 50),
            trivial=True,
        )
        for name, what, build, steps in (
            ("mlp", "MLP", healthy_mlp, 100),
            ("sgd", "MLP (SGD 0.05)", small_sgd, 100),
            ("binary", "binary MLP", healthy_binary, 60),
            ("regression", "regression", small_regression, 100),
            ("conv", "conv net", healthy_conv, 40),
            ("lstm", "LSTM", healthy_lstm, 30),
        )
    ),
    Run(
        "small_noisy",
        f"healthy MLP, a quarter of the labels random, {SMALL} samples, 200 steps",
        _small(noisy_labels),
        None,
        steps=200,
        every=4,
        trivial=True,
    ),
    Run(
        "small_batch10",
        f"healthy MLP (SGD 0.05), {SMALL} samples in batches of 10, 300 steps",
        _small(small_sgd, 10),
        None,
        steps=300,
        every=6,
        trivial=True,
    ),
    Run(
        "nan_op",
        f"a NaN bias in the head before step {NAN_STEP}",
        nan_at_step,
        "nonfinite",
        "head",
        callbacks=lambda: [NanAt()],
    ),
)


@dataclass(frozen=True)
class Outcome:
    """What one run of the corpus got."""

    run: Run
    seed: int
    findings: tuple[tuple[str, str | None, int], ...]  # (finding, layer, step)
    # the loss of its predictions on its data ended finite and below TRAINED x the trivial loss
    trained: bool = False

    @property
    def named(self) -> bool:
        """The expected finding is there (on the expected layer, when it has one)."""
        return any(
            f == self.run.expected and (self.run.layer is None or layer == self.run.layer)
            for f, layer, _ in self.findings
        )

    @property
    def false_alarm(self) -> bool:
        """A healthy run got a finding."""
        return self.run.expected is None and bool(self.findings)


TRAINED = 0.9  # a run trains when its final loss is below this share of the trivial loss


def train(run: Run, seed: int, repaired: bool = False) -> Outcome:
    """Train `run` (its repaired copy: `repaired`) with seed `seed` and the monitor on."""
    build = run.repaired if repaired and run.repaired is not None else run.build
    model, x, y, batch = build(seed)
    units = int(model.outputs[0].shape[-1])  # type: ignore[attr-defined]
    trivial = TrivialLoss(model.loss, units)  # type: ignore[attr-defined]
    trivial.add(np.asarray(y))
    chance = trivial.value() if run.trivial else None
    monitor = GradientMonitor(every=run.every, chance_loss=chance)
    n = len(x)  # type: ignore[arg-type]
    epochs = max(1, -(-run.steps * batch // n))
    model.fit(  # type: ignore[attr-defined]
        x,
        y,
        batch_size=batch,
        epochs=epochs,
        steps_per_epoch=min(run.steps, -(-n // batch)),
        verbose=0,
        callbacks=[*([] if repaired else run.callbacks()), monitor],
    )
    report = monitor.report
    assert report is not None
    found = tuple((str(f.code), f.layer, f.step) for f in report.findings)
    # the loss of what the model predicts (not of the logits Keras may take the loss from)
    predicted = model.predict(x, batch_size=256, verbose=0)  # type: ignore[attr-defined]
    target = np.asarray(y)
    if target.ndim < predicted.ndim and target.size == predicted.size:
        target = target.reshape(predicted.shape)  # one label a sample, for one unit
    final = float(np.mean(keras.losses.get(model.loss)(target, predicted)))  # type: ignore[attr-defined]
    low = trivial.value()
    trained = bool(np.isfinite(final)) and low is not None and final < TRAINED * low
    return Outcome(run, seed, found, trained)
