"""The training findings on real (tiny) training runs, and each rule on a record made by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers import keras

from layergrad import GradientMonitor
from layergrad.core.fit_results import Checkpoint, LayerStats
from layergrad.core.vocab import Finding
from layergrad.training import curve_rules, rules


def classification(n: int = 1024, classes: int = 4, seed: int = 0):
    """Inputs whose class is the quadrant of their first two features: learnable."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 8)).astype("float32")
    y = ((x[:, 0] > 0).astype("int32") + 2 * (x[:, 1] > 0).astype("int32")) % classes
    return x, y


def mlp(seed: int = 0, classes: int = 4) -> keras.Model:
    keras.utils.set_random_seed(seed)
    return keras.Sequential(
        [
            keras.Input((8,)),
            keras.layers.Dense(32, activation="relu", name="hidden"),
            keras.layers.Dense(16, activation="relu", name="middle"),
            keras.layers.Dense(classes, activation="softmax", name="head"),
        ]
    )


def train(model, x, y, optimizer, *, epochs=10, every=10, callbacks=()):
    model.compile(optimizer=optimizer, loss="sparse_categorical_crossentropy")
    monitor = GradientMonitor(every=every)
    model.fit(x, y, batch_size=32, epochs=epochs, verbose=0, callbacks=[*callbacks, monitor])
    return monitor.report


def found(report) -> dict[str, list]:
    out: dict[str, list] = {}
    for f in report.findings:
        out.setdefault(str(f.code), []).append(f)
    return out


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_healthy_models_trained_a_few_hundred_steps_get_no_finding(optimizer):
    x, y = classification()
    opt = keras.optimizers.Adam(1e-3) if optimizer == "adam" else keras.optimizers.SGD(0.05)
    report = train(mlp(), x, y, opt)
    assert report.steps == 320
    assert report.findings == (), [f.message for f in report.findings]
    assert report.losses[-1] < 0.5 * math.log(4)


def test_learning_rate_10_is_diverging():
    x, y = classification()
    report = train(mlp(), x, y, keras.optimizers.SGD(10.0), epochs=3)
    (diverging,) = found(report)["diverging"]
    assert diverging.layer in ("hidden", "middle", "head") and diverging.step >= 1
    assert "learning rate is too high" in diverging.message


def test_learning_rate_1e_9_is_not_learning():
    x, y = classification()
    report = train(mlp(), x, y, keras.optimizers.SGD(1e-9), epochs=3)
    assert set(found(report)) == {"not_learning"}
    (finding,) = found(report)["not_learning"]
    assert finding.step == 1


class Losses(keras.callbacks.Callback):
    """Each step's loss as Keras reports it: the truth the rules are checked against."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[float] = []

    def on_train_batch_end(self, batch, logs=None):
        self.seen.append(float(logs["loss"]))


def test_a_rate_that_blows_up_the_first_steps_is_named_first_and_hints_hold():
    # SGD at 5 on an all-ReLU classifier: the loss jumps in the first steps, the ReLU units
    # die and the loss then sits near the trivial log 4; the windows of a growing loss never
    # see it grow (their first window holds the jump)
    x, y = classification()
    losses = Losses()
    report = train(mlp(2), x, y, keras.optimizers.SGD(5.0), epochs=5, callbacks=[losses])
    seen = losses.seen
    # Keras's logged loss is the running mean of the epoch: undo it to get each step's loss
    steps = [seen[0]] + [(i + 1) * seen[i] - i * seen[i - 1] for i in range(1, 10)]
    assert max(steps[:10]) > 2 * steps[0]  # the blow-up, from Keras's own numbers
    assert report.findings[0].code == Finding.DIVERGING
    assert "learning rate is too high" in report.findings[0].message
    assert report.findings[0].step == 1 + int(np.argmax(report.losses[:32]))
    for f in report.findings[1:]:
        assert "sigmoid" not in f.message and "one unit" not in f.message, f.message
    constant = found(report)["constant_predictions"]
    assert all("the loss blew up first" in f.message for f in constant)
    (vanishing,) = found(report)["vanishing"]
    assert "their ReLU units are dead" in vanishing.message


def test_a_one_unit_softmax_head_keeps_its_hint():
    x, y = classification()
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [keras.Input((8,)), keras.layers.Dense(16, activation="relu", name="hidden"),
         keras.layers.Dense(1, activation="softmax", name="head")]
    )  # fmt: skip
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="binary_crossentropy")
    monitor = GradientMonitor(every=10)
    model.fit(x, (y % 2).astype("float32"), batch_size=32, epochs=2, verbose=0,
              callbacks=[monitor])  # fmt: skip
    (constant,) = found(monitor.report)["constant_predictions"]
    assert "a softmax over one unit is always 1.0: use sigmoid for one unit" in constant.message
    assert np.all(model.predict(x[:16], verbose=0) == 1.0)  # the premise, from Keras


def test_mae_with_sgd_that_never_moves_is_not_learning():
    # targets around 100, MAE, plain SGD at 1e-3: each step moves a weight by at most ~1e-3,
    # and the loss stays near its start, far above the trivial loss (the mean absolute
    # deviation from the median, worked out here with NumPy)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1024, 8)).astype("float32")
    y = (100 + 20 * x[:, 0] + 10 * x[:, 1]).astype("float32")[:, None]
    trivial = float(np.mean(np.abs(y - np.median(y))))
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [keras.Input((8,)), keras.layers.Dense(32, activation="relu", name="hidden"),
         keras.layers.Dense(1, name="head")]
    )  # fmt: skip
    model.compile(optimizer=keras.optimizers.SGD(1e-3), loss="mae")
    monitor = GradientMonitor(every=10, chance_loss=trivial)
    model.fit(x, y, batch_size=32, epochs=8, verbose=0, callbacks=[monitor])
    report = monitor.report
    assert np.mean(report.losses[-32:]) > 3 * trivial  # stuck, from the recorded losses
    assert abs(np.mean(report.losses[-32:]) - np.mean(report.losses[:32])) < 0.1 * (
        np.mean(report.losses[:32]) - trivial
    )
    (finding,) = found(report)["not_learning"]
    assert f"{trivial:.4g}" in finding.message and "raise the learning rate" in finding.message
    # the same run with Adam at 0.1 learns: no not_learning
    keras.utils.set_random_seed(0)
    model = keras.models.clone_model(model)
    model.compile(optimizer=keras.optimizers.Adam(0.1), loss="mae")
    monitor = GradientMonitor(every=10, chance_loss=trivial)
    model.fit(x, y, batch_size=32, epochs=8, verbose=0, callbacks=[monitor])
    assert "not_learning" not in found(monitor.report)


class KillAt(keras.callbacks.Callback):
    """Pushes every unit of a ReLU layer below zero (a large negative bias) before a step."""

    def __init__(self, layer: str, step: int) -> None:
        super().__init__()
        self.layer, self.step, self.seen = layer, step, 0

    def on_train_batch_begin(self, batch, logs=None):
        if self.seen == self.step:
            bias = self.model.get_layer(self.layer).bias
            bias.assign(np.full(bias.shape, -100.0, "float32"))
        self.seen += 1


def test_a_relu_layer_pushed_dead_during_training_is_dying_units():
    x, y = classification()
    report = train(
        mlp(), x, y, keras.optimizers.SGD(0.05), epochs=3, callbacks=[KillAt("middle", 45)]
    )
    dying = found(report)["dying_units"]
    assert [(f.layer, f.step) for f in dying] == [("middle", 51)]  # the first checkpoint after
    dead = [r.dead_fraction for c in report.checkpoints for r in c.layers if r.layer == "middle"]
    assert max(dead[:5]) < 0.2 and dead[-1] == 1.0


def test_relu_units_dead_from_the_start_are_dead_with_the_bias_hint_not_a_learning_rate():
    x, y = classification()
    model = mlp()
    kernel, bias = model.get_layer("hidden").get_weights()
    bias[:24] = -100.0  # 24 of 32 units: relu(x @ w - 100) is 0 for every sample
    model.get_layer("hidden").set_weights([kernel, bias])
    report = train(model, x, y, keras.optimizers.Adam(1e-3), epochs=3)
    (dead,) = found(report)["dead"]
    assert (dead.layer, dead.step) == ("hidden", 1)
    assert "75% of its units" in dead.message and "reset the biases" in dead.message
    assert "learning rate" not in dead.message
    assert {"dying_units", "vanishing", "stalled_layer"}.isdisjoint(found(report))
    # the truth, from the weights: those units' pre-activations are below 0 for every sample
    pre = x @ kernel + bias
    assert np.all(pre[:, :24] < 0) and np.mean(np.all(pre <= 0, axis=0)) == 0.75


def test_shuffled_labels_plateau_at_chance():
    x, y = classification(n=2048)
    shuffled = np.random.default_rng(5).permutation(y)
    report = train(mlp(), x, shuffled, keras.optimizers.Adam(1e-3), epochs=4)
    (plateau,) = found(report)["plateau_at_chance"]
    assert plateau.layer == "head"
    assert f"{math.log(4):.4g}" in plateau.message
    assert "diverging" not in found(report) and "not_learning" not in found(report)


# the rules on records made by hand


def checkpoint(step: int, ratios: dict[str, float], dead: float = 0.0, loss: float = 1.0):
    rows = tuple(LayerStats(name, 1.0, 1.0, ratio, dead, 0, 0) for name, ratio in ratios.items())
    return Checkpoint(step, 0, step - 1, loss, 0.1, rows, ())


def test_stalled_layer_needs_three_final_checkpoints_three_decades_below_the_median():
    healthy = {"a": 1e-3, "b": 2e-3, "c": 1e-3}
    stalled = {"a": 1e-3, "b": 2e-3, "c": 1e-7}
    points = [checkpoint(1, healthy), checkpoint(11, stalled), checkpoint(21, stalled)]
    assert rules.stalled_layers(points) == []  # two checkpoints are not enough
    points.append(checkpoint(31, stalled))
    (finding,) = rules.stalled_layers(points)
    assert (finding.code, finding.layer, finding.step) == (Finding.STALLED_LAYER, "c", 11)
    just_above = {"a": 1e-3, "b": 2e-3, "c": 1.01e-6}  # median 1.5e-3: 1.5e-6 is the line
    assert rules.stalled_layers([checkpoint(s, just_above) for s in (1, 2, 3)]) != []
    above = {"a": 1e-3, "b": 2e-3, "c": 1.6e-6}
    assert rules.stalled_layers([checkpoint(s, above) for s in (1, 2, 3)]) == []


def test_dying_units_needs_growth_past_the_threshold():
    grows = [checkpoint(1, {"a": 1e-3}, dead=0.1), checkpoint(11, {"a": 1e-3}, dead=0.6)]
    (finding,) = rules.dying_units(grows)
    assert (finding.layer, finding.step) == ("a", 11)
    always = [checkpoint(1, {"a": 1e-3}, dead=0.6), checkpoint(11, {"a": 1e-3}, dead=0.7)]
    assert rules.dying_units(always) == []  # dead from the start is not dying


def test_dead_needs_every_checkpoint_from_the_first_at_the_threshold():
    def run(deads):
        return [checkpoint(1 + 10 * i, {"a": 1e-3}, dead=d) for i, d in enumerate(deads)]

    (finding,) = rules.dead_from_start(run([0.6, 0.7, 0.6]))
    assert (finding.code, finding.layer, finding.step) == (Finding.DEAD, "a", 1)
    assert rules.dead_from_start(run([0.6, 0.6, 0.1])) == []  # revived
    assert rules.dead_from_start(run([0.1, 0.6, 0.7])) == []  # died in training: dying_units
    assert rules.dead_from_start(run([0.6])) == []  # one checkpoint is one batch
    # dead at the start and dying further: dying_units' alone (one cause, one finding)
    grew = run([0.5, 0.8, 0.8, 0.8])
    codes = [f.code for f in rules.findings([1.0] * 40, grew, None)]
    assert codes.count(Finding.DYING_UNITS) == 1 and Finding.DEAD not in codes
    # not measured at the first checkpoint: not known to be dead from the start
    first = [checkpoint(1, {"b": 1e-3}), *run([0.6, 0.7, 0.6])[1:]]
    assert rules.dead_from_start(first) == []
    # the message says the least of what was measured
    (finding,) = rules.dead_from_start(run([0.9, 0.6, 0.8]))
    assert "at least 60% of its units" in finding.message


def test_dead_names_the_first_relu_layer_only_and_explains_what_follows():
    # a ReLU layer 'a' dead from the start, a Dropout after it and a ReLU layer 'b' fed only
    # its zeros: one cause, said once, at 'a'; the head's constant output is said as the dead
    # layers before it, not as its own saturated sigmoid
    from layergrad.training.layer_rules import LayerFacts

    dead = {"a": 1.0, "drop": 1.0, "b": 1.0, "head": 0.0}
    ratios = {"a": 1e-9, "drop": 1e-9, "b": 1e-9, "head": 1e-3}

    def point(step):
        rows = tuple(LayerStats(n, 1.0, 1.0, r, dead[n], 0, 0, 1.0 if n == "head" else 0.0)
                     for n, r in ratios.items())  # fmt: skip
        return Checkpoint(step, 0, step - 1, 0.69, 0.1, rows, ())

    facts = {"a": LayerFacts("relu", 8), "drop": LayerFacts(None, None),
             "b": LayerFacts("relu", 8), "head": LayerFacts("sigmoid", 1)}  # fmt: skip
    found = rules.findings([0.69] * 40, [point(1 + 10 * i) for i in range(4)], None, facts=facts)
    named = [(f.code, f.layer) for f in found]
    assert (Finding.DEAD, "a") in named and [c for c, _ in named].count(Finding.DEAD) == 1
    assert Finding.STALLED_LAYER not in [c for c, _ in named]  # all after a dead layer
    (constant,) = [f for f in found if f.code == Finding.CONSTANT_PREDICTIONS]
    assert "the layers before it are dead" in constant.message
    assert "saturated" not in constant.message


def test_dying_units_must_last_the_final_three_checkpoints():
    # dead on the last batch only (a small data set's small batch): a chance, not a state
    deads = [0.1, 0.1, 0.1, 0.1, 0.6]
    once = [checkpoint(1 + 10 * i, {"a": 1e-3}, dead=d) for i, d in enumerate(deads)]
    assert rules.dying_units(once) == []
    deads = [0.1, 0.1, 0.6, 0.7, 0.6]
    stays = [checkpoint(1 + 10 * i, {"a": 1e-3}, dead=d) for i, d in enumerate(deads)]
    (finding,) = rules.dying_units(stays)
    assert (finding.layer, finding.step) == ("a", 21)


def test_chance_loss_is_log_c_for_categorical_and_log_2_for_binary():
    assert rules.chance_loss("sparse_categorical_crossentropy", [10]) == pytest.approx(math.log(10))
    assert rules.chance_loss("binary_crossentropy", [1]) == pytest.approx(math.log(2))
    assert rules.chance_loss("mean_squared_error", [3]) is None
    assert rules.chance_loss("categorical_crossentropy", [3, 2]) is None  # two outputs


def test_not_learning_and_plateau_need_enough_steps():
    flat = [1.0] * (curve_rules.MIN_STEPS - 1)
    points = [checkpoint(1, {"a": 1e-9})]
    assert rules.not_learning(flat, points) is None
    assert rules.not_learning([*flat, 1.0], points) is not None
    chance = math.log(4)
    steps = curve_rules.PLATEAU_STEPS
    assert rules.plateau_at_chance([chance] * (steps - 1), points, chance) is None
    assert rules.plateau_at_chance([chance] * steps, points, chance) is not None
    assert rules.plateau_at_chance([chance * 0.8] * steps, points, chance) is None
    falling = list(np.linspace(chance * 1.04, chance * 0.96, steps))  # in the band, still moving
    assert rules.plateau_at_chance(falling, points, chance) is None


def test_a_layer_whose_output_is_scaled_away_is_a_stalled_layer():
    keras.utils.set_random_seed(0)
    x_in = keras.Input((8,))
    main = keras.layers.Dense(16, activation="relu", name="main")(x_in)
    side = keras.layers.Rescaling(1e-5, name="tiny")(keras.layers.Dense(16, name="stuck")(x_in))
    out = keras.layers.Dense(4, activation="softmax", name="head")(
        keras.layers.Add(name="join")([main, side])
    )
    x, y = classification()
    report = train(keras.Model(x_in, out), x, y, keras.optimizers.SGD(0.05), epochs=2)
    assert [(f.code, f.layer, f.step) for f in report.findings] == [
        (Finding.STALLED_LAYER, "stuck", 1)
    ]


def test_verbose_1_says_each_new_finding_as_it_is_found_and_a_summary(capsys):
    """As Keras's callbacks with verbose=1: the dying layer is said on stderr during training
    (before the step after its checkpoint), the run summed up at its end; stdout untouched."""

    class Heard(keras.callbacks.Callback):  # what stderr held when step 61 began
        def __init__(self) -> None:
            super().__init__()
            self.seen, self.before = 0, ""

        def on_train_batch_begin(self, batch, logs=None):
            if self.seen == 80:
                self.before = capsys.readouterr().err
            self.seen += 1

    x, y = classification()
    model = mlp()
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="sparse_categorical_crossentropy")
    heard = Heard()
    monitor = GradientMonitor(every=10, verbose=1)
    model.fit(x, y, batch_size=32, epochs=3, verbose=0,
              callbacks=[KillAt("middle", 45), heard, monitor])  # fmt: skip
    after = capsys.readouterr()
    assert after.out == ""
    found = {(str(f.code), f.layer): f for f in monitor.report.findings}
    assert {("dying_units", "middle"), ("constant_predictions", "head")} <= set(found)
    dying = found["dying_units", "middle"]
    # said at its third dead checkpoint (71: a state, not one batch's chance), before the
    # next steps ran, naming the step it died at
    early = heard.before.splitlines()
    assert f"GradientMonitor: step 51: dying_units at middle: {dying.message}" in early
    # every finding is said once, with what the record showed then
    *lines, summary = after.err.splitlines()
    assert sorted(ln.split(": ")[1:3] for ln in early + lines) == sorted(
        [f"step {f.step}", f"{f.code} at {f.layer}"] for f in monitor.report.findings
    )
    names = ", ".join(f"{f.code} at {f.layer}" for f in monitor.report.findings)
    n = len(found)
    assert summary == f"GradientMonitor: 96 steps in 3 epochs, {n} findings: {names}"


# The report of one run of `_tiny_rate_run`, kept by the test that runs it for the next one
# that reads a report of that same (seeded) run.
_TINY_RATE: list = []


def _tiny_rate_run():
    """A 3-epoch run of SGD at 1e-9 on 256 samples: not_learning, and nothing else."""
    x, y = classification(n=256)
    report = train(mlp(), x, y, keras.optimizers.SGD(1e-9), epochs=3)
    _TINY_RATE[:] = [report]
    return report


def test_verbose_0_is_the_default_and_silent(capsys):
    report = _tiny_rate_run()  # run here, inside the captured output
    assert [str(f.code) for f in report.findings] == ["not_learning"]
    assert capsys.readouterr() == ("", "")
    assert GradientMonitor().verbose == 0 == keras.callbacks.EarlyStopping().verbose
    with pytest.raises(ValueError, match="verbose must be 0"):
        GradientMonitor(verbose=-1)


def test_print_report_shows_every_finding(capsys):
    """`print(monitor.report)` lists each finding in full, however many (it showed 12 lines
    and "... 10 more lines")."""
    from dataclasses import replace

    from layergrad.core.results import Reason

    report = _TINY_RATE[0] if _TINY_RATE else _tiny_rate_run()
    extra = tuple(
        Reason(Finding.STALLED_LAYER, f"message number {i}", layer=f"layer_{i}", step=i + 1)
        for i in range(14)
    )
    report = replace(report, findings=report.findings + extra)
    print(report)
    text = capsys.readouterr().out
    assert "more line" not in text
    for finding in report.findings:
        assert f"{finding.code} at {finding.layer} (step {finding.step}):" in text
        assert finding.message.split()[0] in text
    assert "message number 13" in text and "24 steps in 3 epochs" in text
