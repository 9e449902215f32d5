"""Benchmark: the estimated Jacobian norms over `--data` against K hand-written backward passes.

In one run, side by side (the time ratio is the median of per-round ratios, alternating order):

  estimate  `inspect_model(mlp, "d0", ["d2"], measure="jacobian", probes=K, data=M.npy)` on a
            tanh MLP of four Dense(WIDTH) layers, the first to the third layer's output;
  baseline  per batch, one forward pass on a persistent tape and K backward passes
            `tape.gradient(h2, h0, output_gradients=u_k)` (J^T u_k), u_k standard normal;
            each sample's Frobenius estimate sqrt(mean_k ||J^T u_k||^2), over the data.

Goal: at most 1.3x. layergrad also estimates the spectral norm and the per-unit column norms
from the same K products, and checks that samples do not mix (batch independence).

    python benchmarks/bench_jacobian_estimate.py [--rounds 3] [--samples 2048] [--probes 16]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

BATCH = 64


def make_files(folder: Path, samples: int, width: int) -> None:
    from layergrad.core.keras_backend import quiet_import

    _, keras = quiet_import()
    keras.utils.set_random_seed(0)
    x = keras.Input((width,), name="x")
    h = x
    for i in range(4):
        h = keras.layers.Dense(width, activation="tanh", name=f"d{i}")(h)
    keras.Model(x, h, name="mlp").save(folder / "mlp.keras")
    rng = np.random.default_rng(0)
    np.save(folder / "m.npy", rng.standard_normal((samples, width), np.float32))


def baseline(folder: Path, probes: int) -> np.ndarray:
    """K backward passes per batch, by hand."""
    from layergrad.core.keras_backend import quiet_import

    tf, keras = quiet_import()
    model = keras.saving.load_model(folder / "mlp.keras", compile=False)
    d0, d1, d2 = (model.get_layer(n) for n in ("d0", "d1", "d2"))
    x = np.load(folder / "m.npy", mmap_mode="r")
    rng = np.random.default_rng(0)
    norms = []
    for start in range(0, len(x), BATCH):
        with tf.GradientTape(persistent=True) as tape:
            h0 = d0(tf.constant(x[start : start + BATCH]))
            tape.watch(h0)
            h2 = d2(d1(h0))
        squares = 0.0
        for _ in range(probes):
            u = tf.constant(rng.standard_normal(h2.shape).astype(np.float32))
            g = tape.gradient(h2, h0, output_gradients=u)  # J^T u, one backward pass
            squares = squares + tf.reduce_sum(g * g, axis=1)
        del tape
        norms.append(np.sqrt(np.asarray(squares) / probes))
    return np.concatenate(norms)


def layergrad_run(folder: Path, probes: int) -> float:
    from layergrad import inspect_model

    report = inspect_model(
        str(folder / "mlp.keras"), "d0", ["d2"], measure="jacobian", probes=probes,
        data=str(folder / "m.npy"), batch_size=BATCH,
    )  # fmt: skip
    jacobian = report.results[0].jacobian
    assert jacobian is not None
    return float(jacobian.frobenius.mean)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--samples", type=int, default=2048)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--probes", type=int, default=16)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        make_files(folder, args.samples, args.width)
        hand = float(np.mean(baseline(folder, args.probes)))  # warm-up, and the reference
        ours = layergrad_run(folder, args.probes)
        print(f"mean Frobenius norm: layergrad {ours:.4g}, hand-written {hand:.4g} (estimates)")
        ratios = []
        for r in range(args.rounds):
            times = {}
            jobs = [("layergrad", layergrad_run), ("hand", baseline)]
            for name, job in jobs if r % 2 == 0 else jobs[::-1]:
                start = time.perf_counter()
                job(folder, args.probes)
                times[name] = time.perf_counter() - start
            ratios.append(times["layergrad"] / times["hand"])
            print(f"round {r + 1}: layergrad {times['layergrad']:.2f}s, hand {times['hand']:.2f}s")
        print(
            f"estimate (K={args.probes}) vs K backward passes: "
            f"{statistics.median(ratios):.2f}x (goal <= 1.3x)"
        )


if __name__ == "__main__":
    main()
