"""Measure each label rule's severity evidence and its recall and false alarms.

For every rule of `layergrad/model/target_fit.RULES` and each of its examples, a small model
(16 features, Dense(32, relu), the example's head; a Conv2D on 4x4 maps for a head on a
feature map) gets labels of the example's form on a learnable task (Gaussian clusters, one
per distinct label of the example; a linear target for real-valued labels). It is trained
with Adam (1e-3) and SGD (1e-2) over several seeds, flagged as the example is, and repaired:
with the rule's `ConfigChange` when it has one, else with the labels the rule's hint asks
for (its near miss: the labels are data, so the data is what changes). A run trains when it
does not crash and the loss of its predictions on its data ends finite, at 0 or above, and
below 0.9 times the trivial loss of the labels as the loss reads them (a sparse loss cuts
them to whole ids; the untrained copy's loss when the labels have none). A rule may fail a
file only when some flagged cell (the example, the optimizer) never trained and every
repaired run did.

The corpus: every example and near miss of every rule, on three architectures (an MLP, a
deeper MLP, a conv net with a Flatten; the heads on a feature map on one and two convs) and
three seeds, saved to a file and judged by `check`'s label check from the file and the labels.
Per rule, recall is the flagged models named by that rule; false alarms are the near misses
(of every rule) it names.

    python benchmarks/bench_rule_labels.py [--rules a,b] [--seeds 2] [--steps 300]
        [--results benchmarks/results/label_rules.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402

from layergrad.commands.check.verdicts import output_ranks, targets  # noqa: E402
from layergrad.core.results import ConfigChange, Reason  # noqa: E402
from layergrad.core.tf_runtime import keras, tf  # noqa: E402
from layergrad.data.label_stream import TrivialLoss, summarise_arrays  # noqa: E402
from layergrad.files.file_info import read_file_info  # noqa: E402
from layergrad.model.target_fit import RULES, TargetExample, TargetRule  # noqa: E402

FEATURES, ROWS, TRAINED = 16, 1024, 0.9
OPTIMIZERS = {
    "adam": lambda: keras.optimizers.Adam(1e-3),
    "sgd": lambda: keras.optimizers.SGD(1e-2),
}
LOSS_CLASSES = {
    "binary_crossentropy": "BinaryCrossentropy",
    "categorical_crossentropy": "CategoricalCrossentropy",
    "sparse_categorical_crossentropy": "SparseCategoricalCrossentropy",
}
ARCHS = ("mlp", "deep", "conv")


@keras.saving.register_keras_serializable(package="bench")
def custom_loss(y_true: object, y_pred: object) -> object:
    """A loss Keras does not ship (squared error, written by hand)."""
    return keras.ops.mean(keras.ops.square(keras.ops.cast(y_true, "float32") - y_pred), axis=-1)


@dataclass(frozen=True)
class Case:
    """A model to build: the example's head, labels and loss, on `arch`; `flatten`: a Flatten
    goes between a feature map and the head."""

    example: TargetExample
    arch: str = "mlp"
    flatten: bool = False


def labels_like(example: TargetExample, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(x, labels of the example's form): its distinct labels as classes of Gaussian clusters
    (text, ids, rows), or a linear target spanning its range (two real values), with its
    NaN/Inf in one sample of 20 where it has any."""
    rng = np.random.default_rng(seed)
    raw = np.array(example.labels, dtype=object)
    if any(isinstance(v, str) for v in raw.ravel()):
        distinct = np.unique(raw.astype(str))
    else:
        raw = raw.astype(float)
        finite = raw[np.isfinite(raw).reshape(len(raw), -1).all(axis=1)]
        values = np.unique(finite, axis=0)
        real = raw.ndim == 1 and len(values) == 2 and not np.all(values == np.round(values))
        if real or len(finite) < len(raw):
            x = rng.normal(size=(ROWS, FEATURES)).astype("float32")
            u = 1 / (1 + np.exp(-x[:, :4].sum(axis=1) / 2))
            low, high = (values.min(), values.max()) if len(values) > 1 else (0.0, 2 * values[0])
            y = low + (high - low) * u
            bad = raw[~np.isfinite(raw)]
            if bad.size:
                y[rng.random(ROWS) < 0.05] = bad[0]
            return x, y.astype("float32")
        distinct = values
    classes = len(distinct)
    centres = np.random.default_rng([seed, 2]).normal(size=(classes, FEATURES)) * 1.5
    cls = rng.integers(0, classes, ROWS)
    x = (centres[cls] + rng.normal(size=(ROWS, FEATURES))).astype("float32")
    y = distinct[cls]
    return x, y if y.dtype.kind in "US" else y.astype("float32")


def build(case: Case) -> object:
    """The compiled model: MLP / deeper MLP / conv net with a Flatten; a Dense head on a
    feature map (one conv, two on `deep`) for an example whose output keeps axes."""
    example = case.example
    mapped = (example.output_rank or 1) > 1 or case.flatten or case.arch == "conv"
    inputs = keras.Input((4, 4, 1) if mapped else (FEATURES,), name="x")
    hidden = inputs
    if mapped:
        for i in range(2 if case.arch == "deep" else 1):
            hidden = keras.layers.Conv2D(8, 3, padding="same", activation="relu", name=f"c{i}")(
                hidden
            )
        if case.flatten or (example.output_rank or 1) == 1:
            hidden = keras.layers.Flatten(name="flat")(hidden)
    else:
        for i in range(2 if case.arch == "deep" else 1):
            hidden = keras.layers.Dense(32, activation="relu", name=f"h{i}")(hidden)
    act = None if example.activation == "linear" else example.activation
    out = keras.layers.Dense(example.units, activation=act, name="head")(hidden)
    model = keras.Model(inputs, out)
    name = LOSS_CLASSES.get(example.loss)
    loss = (
        custom_loss
        if example.loss == "custom"
        else getattr(keras.losses, name)(from_logits=example.from_logits)
        if name
        else example.loss
    )
    model.compile(optimizer=OPTIMIZERS["adam"](), loss=loss)
    return model


def shaped(case: Case, x: np.ndarray) -> np.ndarray:
    mapped = (case.example.output_rank or 1) > 1 or case.flatten or case.arch == "conv"
    return x.reshape(len(x), 4, 4, 1) if mapped else x


def repaired(rule: TargetRule, example: TargetExample, index: int) -> Case | None:
    """The example as the rule's repair leaves it; the near miss when the labels must change."""
    change = rule.change(example.facts())
    if change is None:
        near = rule.near_misses
        return Case(near[min(index, len(near) - 1)]) if near else None
    return Case(applied(example, change), flatten=change.kind == "flatten")


def applied(example: TargetExample, change: ConfigChange) -> TargetExample:
    if change.kind == "loss":
        return replace(example, loss=change.loss or example.loss, from_logits=change.from_logits)
    if change.kind == "activation":
        logits = example.from_logits if change.loss is None else change.from_logits
        return replace(example, activation=change.activation or example.activation,
                       units=change.units or example.units, loss=change.loss or example.loss,
                       from_logits=logits)  # fmt: skip
    return example  # flatten: the model changes, not the head


def final_loss(model: object, loss: object, x: np.ndarray, y: np.ndarray) -> float:
    """The loss of the model's predictions on (x, y), NaN when it cannot be computed."""
    try:
        p = np.asarray(model.predict(x, batch_size=256, verbose=0))  # type: ignore[attr-defined]
        target = y.reshape(p.shape) if y.ndim < p.ndim and y.size == p.size else y
        measure = keras.losses.get(loss) if isinstance(loss, str) else loss
        return float(np.mean(np.asarray(measure(target, p))))
    except (ValueError, TypeError, tf.errors.OpError):
        return float("nan")


def trivial_loss(example: TargetExample, y: np.ndarray) -> float | None:
    """The trivial loss of the labels as the loss reads them: a sparse loss cuts them to whole
    ids (the entropy of their frequencies, 0 when they all become one id); None when unknown."""
    if y.dtype.kind not in "biuf" or not np.all(np.isfinite(y)):
        return None
    if example.loss.startswith("sparse"):
        ids = y.astype("int64").ravel()
        share = np.bincount(ids - ids.min()) / ids.size
        share = share[share > 0]
        return float(-(share * np.log(share)).sum())
    trivial = TrivialLoss(example.loss, example.units)
    trivial.add(y)
    return trivial.value() if trivial.known else None


def trains(case: Case, seed: int, optimizer: str, steps: int) -> bool:
    """Whether the case's model trains on its labels (see the module doc)."""
    keras.utils.set_random_seed(seed)
    x, y = labels_like(case.example, seed)
    x = shaped(case, x)
    model = build(case)
    loss = model.loss  # type: ignore[attr-defined]
    model.compile(optimizer=OPTIMIZERS[optimizer](), loss=loss)  # type: ignore[attr-defined]
    before = final_loss(model, loss, x, y)
    try:
        model.fit(x, y, batch_size=32, epochs=int(np.ceil(steps * 32 / ROWS)), verbose=0)  # type: ignore[attr-defined]
    except (ValueError, TypeError, tf.errors.OpError):  # the run crashes: it does not train
        return False
    after = final_loss(model, loss, x, y)
    base = trivial_loss(case.example, y)
    base = before if base is None else base
    return bool(np.isfinite(after) and np.isfinite(base) and 0 <= after < TRAINED * base)


def named(case: Case, seed: int, folder: str) -> list[Reason]:
    """The label findings `check` gives the case's saved model on its labels."""
    keras.utils.set_random_seed(seed)
    model = build(case)
    path = os.path.join(folder, "model.keras")
    model.save(path)  # type: ignore[attr-defined]
    info = read_file_info(path, read_weights=False)
    _, y = labels_like(case.example, seed)
    names, ranks = output_ranks(model)  # type: ignore[arg-type]
    labels = summarise_arrays({"y": y}, names, ranks)
    found: list[Reason] = []

    def add(name: str, message: str, findings: object = (), **kw: object) -> bool:
        found.extend(kw.get("reasons", ()))  # type: ignore[arg-type]
        return True

    targets(info, None, labels, "y", add)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rules", default=None, help="rule names (all if unset)")
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--corpus-seeds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--results", default="", help="write the evidence as JSON")
    args = parser.parse_args()
    wanted = set(args.rules.split(",")) if args.rules else None
    chosen = [r for r in RULES if not wanted or r.name in wanted]
    start = time.perf_counter()
    results: dict[str, dict[str, object]] = {}
    with tempfile.TemporaryDirectory() as folder:
        healthy = [
            named(Case(near, arch), seed, folder)
            for rule in RULES
            for near in rule.near_misses
            for arch in ARCHS
            for seed in range(args.corpus_seeds)
        ]
        for rule in chosen:
            runs = flagged_ok = repaired_ok = 0
            cells: list[list[object]] = []
            for index, example in enumerate(rule.examples):
                fixed = repaired(rule, example, index)
                for optimizer in OPTIMIZERS:
                    here = 0
                    for seed in range(args.seeds):
                        runs += 1
                        ok = trains(Case(example), seed, optimizer, args.steps)
                        flagged_ok += ok
                        here += ok
                        repaired_ok += fixed is not None and trains(
                            fixed, seed, optimizer, args.steps
                        )
                    if here == 0:
                        cells.append([index, optimizer])
            mutants = [
                named(Case(example, arch), seed, folder)
                for example in rule.examples
                for arch in ARCHS
                for seed in range(args.corpus_seeds)
            ]
            hits = sum(any(r.rule == rule.name for r in found) for found in mutants)
            false = sum(any(r.rule == rule.name for r in found) for found in healthy)
            results[rule.name] = {
                "runs": runs, "flagged_trained": flagged_ok, "repaired_trained": repaired_ok,
                "untrained": cells, "corpus": [hits, len(mutants), false, len(healthy)],
            }  # fmt: skip
            supports = bool(cells) and repaired_ok == runs
            print(f"{rule.name:24} {rule.severity!s:5} trained {flagged_ok}/{repaired_ok} of "
                  f"{runs}, never {cells}, recall {hits}/{len(mutants)}, false alarms "
                  f"{false}/{len(healthy)}, supports fail: {supports}", flush=True)  # fmt: skip
    seconds = time.perf_counter() - start
    print(f"({seconds:.0f} s)")
    if args.results:
        source = (f"benchmarks/bench_rule_labels.py --seeds {args.seeds} --corpus-seeds "
                  f"{args.corpus_seeds} --steps {args.steps}")  # fmt: skip
        document = {"source": source, "rules": results}
        Path(args.results).write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
