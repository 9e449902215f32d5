"""Measure each head rule's severity evidence: do its flagged examples train, and its repairs?

For every rule of `layergrad/model/head_rules.RULES` and each of its examples, a small MLP
(16 features, Dense(32, relu), the example's head) is trained on learnable data (Gaussian
clusters, one per class; XOR-like labels for the linear-network examples, which a straight
boundary cannot split) with Adam (1e-3) and SGD (1e-2), over several seeds, flagged as the
example is and repaired as the rule's `Change` says. Judged on held-back data:

  trained   the training loss stayed finite and the model closed at least half of the gap
            between the prior and the repaired copy (accuracy over the majority class; R^2
            for a regression): a repaired copy must itself close half the gap to perfect.

Per rule it prints the runs, how many flagged and repaired runs trained, and the cells
(the example's index, the optimizer) where no flagged seed trained: a rule may fail a file only
when such a cell exists and every repaired run trained (`Evidence.supports_failing`). Copy the
printed `Evidence(...)` into the rule.

    python benchmarks/bench_rule_evidence.py [--rules a,b] [--seeds 2] [--steps 300]
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np
from rule_examples import build, data, facts, repaired

from layergrad.core.tf_runtime import keras, tf
from layergrad.model.head_rules import RULES, Example

OPTIMIZERS = {
    "adam": lambda: keras.optimizers.Adam(1e-3),
    "sgd": lambda: keras.optimizers.SGD(1e-2),
}


def score(example: Example, seed: int, optimizer: str, steps: int) -> tuple[float, bool]:
    """(held-back accuracy or R^2, whether the training loss stayed finite)."""
    keras.utils.set_random_seed(seed)
    x, y, _ = data(example, 2048, seed)
    xt, _, truth_t = data(example, 512, seed, held_back=True)
    model, loss = build(example)
    model.compile(optimizer=OPTIMIZERS[optimizer](), loss=loss)
    epochs = int(np.ceil(steps * 32 / len(x)))
    try:
        history = model.fit(x, y, batch_size=32, epochs=epochs, verbose=0)
    except (ValueError, tf.errors.OpError):  # the run crashes: it does not train
        return float("nan"), False
    finite = bool(np.all(np.isfinite(history.history["loss"])))
    p = np.asarray(model.predict(xt, verbose=0))
    if example.labels == "real":
        return 1.0 - float(np.mean((p[:, 0] - truth_t) ** 2) / np.var(truth_t)), finite
    if p.shape[-1] > 1:
        guess = p.argmax(axis=-1)
    else:
        # a linear unit read as a logit splits at 0; any other output as a probability
        cut = 0.0 if example.activation == "linear" and example.from_logits else 0.5
        guess = (p[:, 0] > cut).astype(int)
    return float(np.mean(guess == truth_t)), finite


def prior(example: Example, seed: int) -> float:
    if example.labels == "real":
        return 0.0
    _, _, truth = data(example, 512, seed, held_back=True)
    return float(np.bincount(truth).max() / len(truth))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rules", default=None, help="rule names (all with examples if unset)")
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    wanted = set(args.rules.split(",")) if args.rules else None
    start = time.perf_counter()
    print(f"{'rule':<34} {'severity':<8} Evidence(runs, flagged, repaired, never trained)")
    for rule in RULES:
        if (wanted and rule.name not in wanted) or not rule.examples:
            continue
        runs = flagged_ok = repaired_ok = 0
        cells: list[str] = []
        for index, example in enumerate(rule.examples):
            change = rule.repair(facts(example))
            if change is None:
                continue
            fixed = repaired(example, change)
            for optimizer in OPTIMIZERS:
                trained_here = 0
                for seed in range(args.seeds):
                    base = prior(example, seed)
                    good, good_finite = score(fixed, seed, optimizer, args.steps)
                    bad, bad_finite = score(example, seed, optimizer, args.steps)
                    top = 1.0
                    runs += 1
                    repaired_ok += good_finite and good - base >= 0.5 * (top - base)
                    ok = bad_finite and bad - base >= 0.5 * (good - base)
                    flagged_ok += ok
                    trained_here += ok
                if trained_here == 0:
                    cells.append(f'({index}, "{optimizer}")')
        untrained = f"({', '.join(cells)}{',' if len(cells) == 1 else ''})"
        print(f"{rule.name:<34} {rule.severity!s:<8} Evidence({runs}, {flagged_ok}, "
              f"{repaired_ok}, {untrained})", flush=True)  # fmt: skip
    print(f"({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
