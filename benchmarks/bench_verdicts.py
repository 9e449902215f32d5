"""Benchmark: what each verdict rule of `check` costs, as ratios to one plain training step.

Models (weights=None, saved once to a temp dir): a 12-layer He ReLU MLP, MobileNetV2 at 96x96
and ResNet50 at 32x32, batch 8. In one process, alternating rounds time, per model:
  baseline    one forward and one backward pass of the compiled loss w.r.t. every weight
              (the model already loaded, the batch made)
  weights     the weight scan `check` runs (`scan_weights`: the trace of every layer call,
              d loss / d every layer's output and every variable, from one pass)
  scale       the update-ratio rule on the weight scan's rows (`weight_rows.scale_flags`)
  dead        the dead-ReLU rule on the trace (`weights.dead_layers`)
  loss, targets   the static rules (`loss_fit.read_file`) and the label rules
              (`target_fit.target_mismatches` on a summary of 10,000 labels)
  probe       the random probe with the preprocessing rule (`pipeline.probe_batch`)
  check       the whole `check_file`, loading included
Printed: medians in ms and each rule's ratio to the baseline.

    python benchmarks/bench_verdicts.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from layergrad.commands.check.check_files import check_file
from layergrad.commands.session import open_session, probe_batch
from layergrad.commands.weight_rows import dead_layers, scale_flags
from layergrad.commands.weight_scan import scan_weights
from layergrad.core.keras_backend import quiet_import
from layergrad.core.probe_options import ProbeOptions
from layergrad.engine.trace import run_trace
from layergrad.model.label_summary import LabelSummary
from layergrad.model.loss_fit import output_heads, per_output, read_file
from layergrad.model.target_fit import target_mismatches

tf, keras = quiet_import()


def mlp() -> keras.Model:
    x = keras.Input((32,))
    h = x
    for _ in range(12):
        h = keras.layers.Dense(64, activation="relu", kernel_initializer="he_normal")(h)
    return keras.Model(x, keras.layers.Dense(10, activation="softmax")(h))


def application(name: str, size: int) -> Callable[[], keras.Model]:
    def build() -> keras.Model:
        return getattr(keras.applications, name)(
            weights=None, input_shape=(size, size, 3), classes=10
        )

    return build


MODELS = {"mlp12": mlp, "MobileNetV2": application("MobileNetV2", 96),
          "ResNet50": application("ResNet50", 32)}  # fmt: skip


def median_ms(run: Callable[[], object], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def bench(path: Path, rounds: int) -> dict[str, float]:
    session = open_session(path, ProbeOptions(training=True))
    model, batch = session.model, session.batch
    x = batch.arrays[0]
    y = np.eye(10, dtype="float32")[np.arange(len(x)) % 10]
    loss = keras.losses.CategoricalCrossentropy()

    def baseline() -> None:
        with tf.GradientTape() as tape:
            value = loss(y, model(x, training=True))
        tape.gradient(value, model.trainable_weights)

    report = scan_weights(session)
    trace = run_trace(model, batch, training=True)
    layers = {layer.name: layer for layer in model.layers}
    info = session.info
    labels = LabelSummary()
    labels.add(np.random.default_rng(0).integers(0, 10, 10_000))
    heads = output_heads(info.config, info.graph)
    specs = per_output("categorical_crossentropy", [h.name for h in heads])
    names = {h.name: labels for h in heads}
    out = {"baseline": median_ms(baseline, rounds)}
    out["weights"] = median_ms(lambda: scan_weights(session), rounds)
    out["scale"] = median_ms(lambda: scale_flags(report.variables), rounds)
    out["dead"] = median_ms(lambda: dead_layers(trace, layers), rounds)
    out["loss"] = median_ms(lambda: read_file(info.config, info.graph, info.compile_config), rounds)
    out["targets"] = median_ms(lambda: target_mismatches(heads, specs, names), rounds)
    out["probe"] = median_ms(lambda: probe_batch(model, session.options), rounds)
    out["check"] = median_ms(lambda: check_file(path), max(1, rounds // 2))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for name, build in MODELS.items():
            keras.utils.set_random_seed(0)
            model = build()
            model.compile(loss="categorical_crossentropy")
            path = Path(tmp) / f"{name}.keras"
            model.save(path)
            times = bench(path, args.rounds)
            base = times["baseline"]
            cells = ", ".join(f"{k} {v:.1f} ms ({v / base:.2f}x)" for k, v in times.items())
            print(f"{name}: {cells}")


if __name__ == "__main__":
    main()
