"""Benchmark: `inspect --measure jacobian` against hand-written Jacobian scripts.

A tanh MLP of four Dense(1024) layers is saved once to a temp dir; the probe batch is 64
standard-normal rows. Each variant loads the model and computes per-sample norms of
J_i = d d2[i] / d d0[i] (first to third layer: 1024 x 1024 = 2^20 entries per sample, so the
exact method). In one process, alternating rounds time:
  exact      layergrad, exact: Frobenius, spectral and per-unit norms
  baseline   hand-written: tape.batch_jacobian for the pair, then the Frobenius and per-unit
             norms (the Jacobian alone: no spectral norm)
  estimate   layergrad with --probes K: Frobenius by K projections, spectral by Lanczos steps
  backward   hand-written: one forward pass and K plain backward passes (random cotangents)
  scan       layergrad scan --measure jacobian --probes K: every layer's norms at once
  scan_base  hand-written: one forward pass, K backward passes to every layer's output
and, once each for contrast:
  loop       the Jacobian by a Python loop over its 1024 rows (one tape.gradient per row)
  svd        (with --svd; minutes) the baseline plus numpy.linalg.norm(J, 2), the obvious way
             to the spectral norm
Printed: medians and the median of the per-round ratios exact/baseline (goal <= 1.3),
estimate/backward and scan/scan_base, then loop/baseline (and svd/baseline).

    python benchmarks/bench_jacobian.py [--rounds 3] [--probes 32] [--no-loop] [--svd]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from layergrad.commands.api import inspect_model, scan_model
from layergrad.core.keras_backend import quiet_import

tf, keras = quiet_import()
WIDTH, BATCH = 1024, 64


def build(folder: Path) -> tuple[Path, Path]:
    """The MLP file and the probe batch file."""
    keras.utils.set_random_seed(0)
    x = keras.Input((WIDTH,), name="x")
    h = x
    for i in range(4):
        h = keras.layers.Dense(WIDTH, activation="tanh", name=f"d{i}")(h)
    path, batch = folder / "mlp.keras", folder / "x.npy"
    keras.Model(x, h, name="mlp").save(path)
    np.save(batch, np.random.default_rng(0).standard_normal((BATCH, WIDTH)).astype("float32"))
    return path, batch


def _tape(path: Path, x: np.ndarray) -> tuple[object, object, object]:
    """Load the model and run d0 -> d2 under a persistent tape watching d0's output."""
    model = keras.saving.load_model(path, compile=False)
    d0, d1, d2 = (model.get_layer(n) for n in ("d0", "d1", "d2"))
    with tf.GradientTape(persistent=True) as tape:
        h0 = d0(tf.constant(x))
        tape.watch(h0)
        h2 = d2(d1(h0))
    return tape, h0, h2


def baseline(path: Path, x: np.ndarray) -> None:
    tape, h0, h2 = _tape(path, x)
    jac = tape.batch_jacobian(h2, h0)  # (64, 1024, 1024)
    tf.norm(jac, axis=(1, 2)).numpy()
    tf.sqrt(tf.reduce_mean(tf.reduce_sum(tf.square(jac), axis=1), axis=0)).numpy()


def svd(path: Path, x: np.ndarray) -> None:
    tape, h0, h2 = _tape(path, x)
    jac = tape.batch_jacobian(h2, h0).numpy()
    np.linalg.norm(jac, axis=(1, 2)), np.linalg.norm(jac, 2, axis=(1, 2))


def loop(path: Path, x: np.ndarray) -> None:
    tape, h0, h2 = _tape(path, x)
    with tape:  # record the row slices too (one forward pass, as ours)
        outputs = [h2[:, j] for j in range(WIDTH)]
    rows = [tape.gradient(y, h0) for y in outputs]  # the per-row Python loop
    jac = tf.stack(rows, axis=1)
    tf.norm(jac, axis=(1, 2)).numpy()


def backward(path: Path, x: np.ndarray, probes: int) -> None:
    tape, h0, h2 = _tape(path, x)
    rng = np.random.default_rng(0)
    for _ in range(probes):
        signs = rng.integers(0, 2, (BATCH, WIDTH)).astype("float32") * 2 - 1
        tape.gradient(h2, h0, output_gradients=tf.constant(signs)).numpy()


def scan(path: Path, x_file: Path, probes: int) -> None:
    scan_model(path, input_file=x_file, measure="jacobian", probes=probes)


def scan_base(path: Path, x: np.ndarray, probes: int) -> None:
    """K backward passes from the output to every layer's output (watched as scan watches)."""
    model = keras.saving.load_model(path, compile=False)
    with tf.GradientTape(persistent=True) as tape:
        h = tf.constant(x)
        tape.watch(h)
        outs = [h]
        for layer in model.layers[1:]:
            h = tf.identity(layer(h))
            tape.watch(h)
            outs.append(h)
    rng = np.random.default_rng(0)
    for _ in range(probes):
        signs = rng.integers(0, 2, (BATCH, WIDTH)).astype("float32") * 2 - 1
        grads = tape.gradient(h, outs, output_gradients=tf.constant(signs))
        [float(tf.reduce_sum(tf.square(g))) for g in grads]


def ours(path: Path, x_file: Path, probes: int | None) -> int | None:
    report = inspect_model(path, "d0", ["d2"], input_file=x_file, measure="jacobian", probes=probes)
    j = report.results[0].jacobian
    return None if j is None or j.spectral is None else j.spectral.iterations


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--probes", type=int, default=32)
    parser.add_argument("--no-loop", action="store_true", help="skip the per-row loop")
    parser.add_argument("--svd", action="store_true", help="also time numpy's SVD (minutes)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path, x_file = build(Path(tmp))
        x = np.load(x_file)
        iterations = ours(path, x_file, args.probes)  # warm up Keras and TensorFlow
        baseline(path, x)
        names = ("exact", "baseline", "estimate", "backward", "scan", "scan_base")
        times: dict[str, list[float]] = {name: [] for name in names}
        for _ in range(args.rounds):
            times["exact"].append(timed(lambda: ours(path, x_file, None)))
            times["baseline"].append(timed(lambda: baseline(path, x)))
            times["estimate"].append(timed(lambda: ours(path, x_file, args.probes)))
            times["backward"].append(timed(lambda: backward(path, x, args.probes)))
            times["scan"].append(timed(lambda: scan(path, x_file, args.probes)))
            times["scan_base"].append(timed(lambda: scan_base(path, x, args.probes)))
        for name, values in times.items():
            print(f"{name:9}: median {statistics.median(values):6.2f} s")

        def ratio(a: str, b: str) -> float:
            return statistics.median(x / y for x, y in zip(times[a], times[b], strict=True))

        print(f"exact / baseline   : {ratio('exact', 'baseline'):.2f}  (goal <= 1.3)")
        print(
            f"estimate / backward: {ratio('estimate', 'backward'):.2f}  "
            f"(K={args.probes}; the spectral estimate ran {iterations} Lanczos steps of J^T J)"
        )
        print(f"scan / scan_base   : {ratio('scan', 'scan_base'):.2f}  (K={args.probes})")
        base = statistics.median(times["baseline"])
        if not args.no_loop:
            t_loop = timed(lambda: loop(path, x))
            print(f"loop     : {t_loop:6.2f} s, {t_loop / base:.1f}x the baseline")
        if args.svd:
            t_svd = timed(lambda: svd(path, x))
            print(f"svd      : {t_svd:6.2f} s, {t_svd / base:.1f}x the baseline")


if __name__ == "__main__":
    main()
