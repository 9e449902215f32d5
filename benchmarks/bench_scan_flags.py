"""Benchmark: `scan`'s vanishing flag against `check`, on healthy networks and true vanishing.

Healthy: stock untrained keras.applications ResNet50, MobileNetV2 and DenseNet121
(weights=None, their default input size), a 20-layer He ReLU MLP and a 10-layer Glorot tanh
MLP. Vanishing: Glorot sigmoid stacks of 6, 8 and 10 layers (32 units). Each is saved once
and scanned with a random probe of 8 (seed 0); prints per model the rows flagged `vanishing`
and whether `check` warns `vanishing`, then the recall on the stacks and the false alarms on
the healthy models. Run it on two checkouts to compare the rule before and after:

    python benchmarks/bench_scan_flags.py [--skip-applications]
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Callable
from pathlib import Path

from layergrad.commands.api import scan_model
from layergrad.commands.check.check_files import check_file
from layergrad.core.keras_backend import quiet_import

_, keras = quiet_import()


def _mlp(depth: int, activation: str, init: str, width: int = 32) -> Callable[[], object]:
    def build() -> object:
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((16,))])
        for i in range(depth):
            model.add(keras.layers.Dense(width, activation, kernel_initializer=init,
                                         name=f"dense_{i}"))  # fmt: skip
        model.add(keras.layers.Dense(4, activation="softmax", name="head"))
        model.compile("adam", "sparse_categorical_crossentropy")
        return model

    return build


HEALTHY: dict[str, Callable[[], object]] = {
    "ResNet50": lambda: keras.applications.ResNet50(weights=None),
    "MobileNetV2": lambda: keras.applications.MobileNetV2(weights=None),
    "DenseNet121": lambda: keras.applications.DenseNet121(weights=None),
    "relu_mlp_20": _mlp(20, "relu", "he_normal"),
    "tanh_mlp_10": _mlp(10, "tanh", "glorot_uniform"),
}
VANISHING = {f"sigmoid_{n}": _mlp(n, "sigmoid", "glorot_uniform") for n in (6, 8, 10)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-applications", action="store_true")
    args = parser.parse_args()
    healthy = {k: v for k, v in HEALTHY.items() if not (args.skip_applications and k[0].isupper())}
    flagged: dict[str, bool] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, build in {**healthy, **VANISHING}.items():
            path = Path(tmp) / f"{name}.keras"
            build().save(path)  # type: ignore[attr-defined]
            rows = [r.layer for r in scan_model(path).rows if "vanishing" in r.flags]
            warned = any("vanishing" in c.findings for c in check_file(str(path)).checks)
            flagged[name] = bool(rows)
            shown = ", ".join(rows[:4]) + (f" (+{len(rows) - 4})" if len(rows) > 4 else "")
            print(f"{name:14} scan: {len(rows):3} vanishing rows {shown:60} check: "
                  f"{'vanishing' if warned else '-'}", flush=True)  # fmt: skip
    print(f"recall on sigmoid stacks: {sum(flagged[k] for k in VANISHING)}/{len(VANISHING)}")
    print(f"false alarms on healthy models: {sum(flagged[k] for k in healthy)}/{len(healthy)}")


if __name__ == "__main__":
    main()
