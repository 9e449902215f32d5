"""Per-sample Jacobian norms of one batch, from a live persistent tape: between two layers
(`inspect --measure jacobian`) and of one target to every layer (`scan`).

For each sample i, J_i = d to[i] / d from[i], both flattened (m target entries by n source
entries). `inspect` reports ||J_i||_F, ||J_i||_2 and, per unit of the source's last axis, the
norm of J_i's columns for that unit (root-mean-square over samples), by one of two methods:

- exact: every row of every J_i, m vector-Jacobian products vectorized into one computation
  (pfor); then the norms directly, the spectral norm from the largest eigenvalue of the
  smaller Gram matrix, or, past DIRECT_SIZE, by MAX_STEPS Lanczos steps through the model
  (the Gram matrix's when the residual bound is then above TOLERANCE). Used when one sample's
  J has at most EXACT_ENTRIES entries (and the batch's at most EXACT_BUDGET), or `--exact`.
- estimate: Frobenius by K random sign vectors v (Hutchinson: E ||J_i^T v||^2 = ||J_i||_F^2),
  the K products vectorized, their spread each sample's standard error; spectral by a fixed
  number of Lanczos steps on J_i^T J_i, a lower bound (`linear_map.py`).

`scan` takes ||d target[i] / d a[i]||_F for every watched activation a at once: one backward
pass with cotangent v gives J_a^T v at every layer, so K random-sign cotangents cost K
backward passes in all, not K per layer; a target with at most as many entries per sample as
there would be probes (a classifier's logits) is measured exactly by its m one-hot rows.
Over `--data` the same ops run batch by batch (`jacobian_data.py`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from functools import partial

import numpy as np

from layergrad.core.errors import InputError
from layergrad.core.probe_options import JacobianOptions
from layergrad.core.results import FrobeniusNorms, JacobianStats, SpectralNorms
from layergrad.core.tf_runtime import tf
from layergrad.core.tf_types import Tensor, TensorTree
from layergrad.core.vocab import JacobianMethod
from layergrad.engine import linear_map
from layergrad.engine.layer_calls import is_float
from layergrad.engine.linear_map import LinearMap
from layergrad.engine.trace import Replay
from layergrad.model.layer_refs import ref_of

EXACT_ENTRIES = 2**20  # exact when one sample's Jacobian has at most this many entries
EXACT_BUDGET = 2**28  # ... and the whole batch's at most this many (1 GiB in float32)
CHUNK_ENTRIES = 2**26  # entries one vectorized chunk of products may hold at once
DIRECT_SIZE = 256  # exact spectral norms of matrices up to this small side: Gram eigenvalues
MAX_STEPS = 64  # Lanczos steps of an exact spectral norm past DIRECT_SIZE
TOLERANCE = 2e-6  # ... converged: relative residual bound on the largest eigenvalue of J^T J
DEFAULT_PROBES = 32
SCAN_EXACT_ROWS = 4096  # scan --exact: at most this many target entries per sample

Key = tuple[str, int, int]  # a watched activation of scan: (layer path, call, output)


def no_batch_axis(source: Tensor, target: Tensor) -> str | None:
    """Why per-sample Jacobians cannot be taken between these tensors, or None if they can."""
    for what, tensor in (("from", source), ("to", target)):
        if tensor.shape.rank == 0 or tensor.shape[0] != source.shape[0]:
            return (
                f"no per-sample Jacobian: the {what} activation {tuple(tensor.shape)} has no "
                "batch axis shared with the other end"
            )
    return None


def measure_jacobian(
    lin: LinearMap, options: JacobianOptions
) -> tuple[JacobianStats, tuple[str, ...]]:
    """Norms of d target[i] / d source[i] for every sample, from a live persistent tape.

    Args:
        lin: the map between the watched source (batch axis first) and a target computed
            from it, on the persistent GradientTape that recorded the forward pass.
        options: probes / exact / seed.

    Returns:
        The JacobianStats and the warnings to show with them (batch mixing, no convergence).

    Raises:
        InputError: `--exact` for Jacobians beyond EXACT_BUDGET entries.
    """
    warnings: list[str] = []
    lin.independent = not bool(lin.mixing(options.seed)[0])
    if not lin.independent:
        warnings.append(
            "the target mixes samples across the batch (to[i] depends on other samples' from, "
            "e.g. BatchNorm in training mode): the per-sample norms are those of the diagonal "
            "blocks d to[i] / d from[i], other samples' influence left out"
        )
    method, note = choose_method(lin, options)
    if note:
        warnings.append(note)
    if method == JacobianMethod.EXACT:
        return _exact(lin, options.seed), tuple(warnings)
    stats, why = _estimate(lin, options.probes or DEFAULT_PROBES, options.seed)
    return stats, (*warnings, *why)


def linear_maps(live: Replay, missing: dict[int, str]) -> Iterator[tuple[int, LinearMap]]:
    """The map from the replay's source to each of its targets with a batch axis, by target
    index; the others go into `missing`, with why."""
    for t, target in enumerate(live.targets):
        why = no_batch_axis(live.sources[0], target)
        if why:
            missing[t] = why
        else:
            yield t, LinearMap(live.tape, live.sources[0], target)


def choose_method(lin: LinearMap, options: JacobianOptions) -> tuple[JacobianMethod, str | None]:
    """The method, and a note when the exact one was chosen against for its size."""
    per_sample = lin.m * lin.n
    total = lin.batch * per_sample
    if options.exact:
        if total > EXACT_BUDGET:
            raise InputError(
                f"--exact: the batch's Jacobians have {lin.batch} x {lin.m} x {lin.n} = {total} "
                f"entries, more than the {EXACT_BUDGET} (1 GiB) layergrad holds; drop --exact "
                "to estimate them, or use a smaller --batch-size"
            )
        return JacobianMethod.EXACT, None
    if options.probes is not None or per_sample > EXACT_ENTRIES:
        return JacobianMethod.ESTIMATE, None
    if total > EXACT_BUDGET:
        return JacobianMethod.ESTIMATE, (
            f"estimated: the batch's exact Jacobians would have {total} entries (more than "
            f"{EXACT_BUDGET}); a smaller --batch-size gets exact norms"
        )
    return JacobianMethod.EXACT, None


def chunk_size(lin: LinearMap, count: int) -> int:
    """How many products to vectorize at once so one chunk holds at most CHUNK_ENTRIES."""
    per_product = lin.batch * max(lin.m, lin.n) * (1 if lin.independent else lin.batch)
    return max(1, min(count, CHUNK_ENTRIES // max(per_product, 1)))


def in_chunks(
    lin: LinearMap,
    fn: Callable[[Tensor], TensorTree],
    count: int,
    make: Callable[[int, int], np.ndarray],
) -> TensorTree:
    """`fn` (one tensor or a list of them out) over items 0..count-1, stacked, in chunks
    (`chunk_size`) that one compiled function vectorizes; `make(start, stop)` builds a chunk's
    input, so only one chunk's inputs exist at a time. The last chunk is padded to the size of
    the others, so the function is traced once."""
    size = chunk_size(lin, count)

    @tf.function
    def run(rows: Tensor) -> TensorTree:
        if size == 1:  # nothing to vectorize
            return tf.nest.map_structure(lambda out: out[None], fn(rows[0]))
        return tf.vectorized_map(fn, rows, warn=False)

    outs = []
    for start in range(0, count, size):
        stop = min(start + size, count)
        part = make(start, stop)
        short = size - (stop - start)
        if short:
            part = np.concatenate([part, np.repeat(part[-1:], short, axis=0)])
        outs.append(run(tf.constant(part)))
    return tf.nest.map_structure(lambda *parts: tf.concat(parts, axis=0)[:count], *outs)


def one_hot_products(
    lin: LinearMap, product: Callable[[Tensor], TensorTree], width: int, count: int
) -> TensorTree:
    """`product` (over the batch) of the one-hot vectors 0..count-1 of length `width`,
    stacked (`in_chunks`)."""

    def one(k: Tensor) -> TensorTree:
        onehot = tf.one_hot(k, width, dtype=tf.float32)
        return product(tf.broadcast_to(onehot[None], [lin.batch, width]))

    return in_chunks(lin, one, count, lambda start, stop: np.arange(start, stop, dtype=np.int32))


def _exact(lin: LinearMap, seed: int) -> JacobianStats:
    """Every entry of every J_i, by rows (m VJPs) or, when J_i has at most half as many
    columns as rows, by columns (n JVPs); then the norms of the dense matrices."""
    columns = exact_columns(lin) if 2 * lin.n <= lin.m else None  # (n, B, m)
    if columns is not None:
        products, order = columns, [1, 2, 0]
        column_sq = tf.transpose(tf.reduce_sum(tf.square(columns), axis=2))
    else:
        products, order = exact_rows(lin), [1, 0, 2]  # (m, B, n)
        column_sq = tf.reduce_sum(tf.square(products), axis=0)
    per_unit = tf.reduce_sum(tf.reshape(column_sq, [lin.batch, -1, lin.units]), axis=1)
    squared = tf.reduce_sum(per_unit, axis=1)
    # past DIRECT_SIZE a Gram eigendecomposition would cost more than J did
    sigma = _lanczos_spectral(lin, seed) if min(lin.m, lin.n) > DIRECT_SIZE else None
    if sigma is None:
        sigma = direct_spectral(tf.transpose(products, order))  # every J_i: (B, m, n)
    frob = frobenius(np.sqrt(squared.numpy().astype(np.float64)))
    units = _rms(per_unit.numpy())
    return JacobianStats(JacobianMethod.EXACT, None, lin.independent, frob, spectral(sigma), units)


def exact_rows(lin: LinearMap) -> Tensor:
    """The (m, B, n) tensor of every row of every J_i: m one-hot VJPs, vectorized over rows."""
    return one_hot_products(lin, partial(lin.blocks, lin.vjp), lin.m, lin.m)


def exact_columns(lin: LinearMap) -> Tensor | None:
    """The (n, B, m) tensor of every column of every J_i: n one-hot JVPs, vectorized; None
    when J v cannot be formed (an op on the path has no second derivative)."""
    try:
        return one_hot_products(lin, partial(lin.blocks, lin.jvp), lin.n, lin.n)
    except (LookupError, ValueError, TypeError):
        return None


def _lanczos_spectral(lin: LinearMap, seed: int) -> np.ndarray | None:
    """MAX_STEPS Lanczos steps through the model (fewer for a small J), checked against
    TOLERANCE at the end; None if it cannot form J v or has not converged."""
    run = tf.function(lambda s: linear_map.spectral_estimate(lin, s, MAX_STEPS), autograph=False)
    try:
        sigma, residual = run(tf.constant(seed, tf.int64))
    except (LookupError, ValueError, TypeError):  # an op without a second derivative
        return None
    if np.any(residual.numpy() > TOLERANCE):
        return None
    return sigma.numpy().astype(np.float64)


def direct_spectral(jac: Tensor) -> np.ndarray:
    """||J_i||_2 of a (B, m, n) tensor from the largest eigenvalue of the smaller Gram matrix
    (in float64 when that matrix is small, so rounding stays that of the entries)."""
    if min(int(jac.shape[1]), int(jac.shape[2])) <= DIRECT_SIZE:
        jac = tf.cast(jac, tf.float64)
    if jac.shape[1] <= jac.shape[2]:
        gram = tf.matmul(jac, jac, transpose_b=True)
    else:
        gram = tf.matmul(jac, jac, transpose_a=True)
    top = tf.linalg.eigvalsh(gram)[:, -1].numpy().astype(np.float64)
    return np.sqrt(np.maximum(top, 0.0))


def estimate_ops(lin: LinearMap, probes: int, seed: Tensor, spectral: bool) -> list[Tensor]:
    """The estimate's products, as ops to run in a tf.function: the K probes' squared norms
    (K, B) and per-unit squared norms (B, units) (`linear_map.probe_norms`) and, with
    `spectral`, the Lanczos estimate's sigma and residual (B,) each."""
    found = list(linear_map.probe_norms(lin, probes, seed, chunk_size(lin, probes)))
    return [*found, *linear_map.spectral_estimate(lin, seed)] if spectral else found


def _estimate(lin: LinearMap, probes: int, seed: int) -> tuple[JacobianStats, list[str]]:
    """The estimate on the live tape (Frobenius only when J v cannot be formed), and its
    warnings."""

    def run(spectral: bool) -> list[np.ndarray]:
        ops = tf.function(lambda s: estimate_ops(lin, probes, s, spectral), autograph=False)
        return [t.numpy() for t in ops(tf.constant(seed, tf.int64))]

    try:
        found, notes = run(True), []
    except (LookupError, ValueError, TypeError) as exc:  # an op without a second derivative
        found, notes = run(False), [no_spectral(exc)]
    stats, why = estimate_stats(found, lin.n, probes, lin.independent)
    return stats, notes + why


def no_spectral(exc: Exception) -> str:
    """The warning for an estimate without a spectral norm."""
    return f"no spectral norm: J v needs the gradient of a gradient, and {exc}"


def estimate_stats(
    found: Sequence[np.ndarray], n: int, probes: int, independent: bool
) -> tuple[JacobianStats, list[str]]:
    """The JacobianStats of `estimate_ops`' arrays for J_i with n columns, and a warning when
    some sample's spectral norm has not settled (its residual bound above SETTLED of it)."""
    squared, units, *lanczos = found
    spec, warnings = None, []
    if lanczos:
        sigma, residual = (np.asarray(a, np.float64) for a in lanczos)
        steps = min(linear_map.STEPS, n)  # past n, nothing is left
        settled = bool(np.all(residual <= linear_map.SETTLED))
        spec = spectral(sigma, steps, settled)
        if not settled:
            warnings.append(
                f"the estimated spectral norm of some samples has not settled in {steps} "
                f"Lanczos steps (a residual bound above {linear_map.SETTLED} of the "
                "value: close largest singular values); it is a lower bound of ||J||_2, here "
                "possibly by more than that; --exact computes it exactly"
            )
    # ||J||_F >= ||J||_2 >= the Lanczos estimate (a lower bound): a Frobenius estimate below
    # it, which a few probes can give, is raised to it
    floor = None if spec is None else np.asarray(spec.per_sample, np.float64)
    frob = estimated_frobenius(np.asarray(squared, np.float64), floor)
    stats = JacobianStats(JacobianMethod.ESTIMATE, probes, independent, frob, spec, _rms(units))
    return stats, warnings


def frobenius(per_sample: np.ndarray) -> FrobeniusNorms:
    """Exact per-sample Frobenius norms."""
    return FrobeniusNorms(*_norms(per_sample))


def estimated_frobenius(squared: np.ndarray, floor: np.ndarray | None = None) -> FrobeniusNorms:
    """Per-sample Frobenius estimates from K x B squared projections ||J_i^T v_k||^2, each at
    least `floor` (per sample: a lower bound of the norm, the spectral norm's estimate).

    The estimate of ||J_i||_F^2 is the mean over k; its standard error is the sample standard
    deviation over k divided by sqrt(K). For the norm (the square root) the relative standard
    error is half that of the square (first-order error propagation).
    """
    k = squared.shape[0]
    mean_sq = squared.mean(axis=0)
    stderr_sq = squared.std(axis=0, ddof=1) / np.sqrt(k)
    rel = np.where(mean_sq > 0, 0.5 * stderr_sq / np.where(mean_sq > 0, mean_sq, 1.0), 0.0)
    rels, _, largest = _norms(rel)
    norms = np.sqrt(mean_sq) if floor is None else np.maximum(np.sqrt(mean_sq), floor)
    return FrobeniusNorms(*_norms(norms), largest, rels)


def spectral(
    sigma: np.ndarray, iterations: int | None = None, converged: bool = True
) -> SpectralNorms:
    """SpectralNorms from per-sample largest singular values."""
    return SpectralNorms(*_norms(sigma), iterations, converged)


def _rms(per_sample_unit: np.ndarray) -> tuple[float, ...]:
    """(B, units) squared column norms -> per-unit norm, root-mean-square over samples."""
    return tuple(float(u) for u in np.sqrt(np.asarray(per_sample_unit, np.float64).mean(axis=0)))


def _norms(per_sample: np.ndarray) -> tuple[tuple[float, ...], float, float]:
    """Per-sample values as floats, their mean and their largest (0.0 for none)."""
    values = tuple(float(x) for x in per_sample)
    if not values:
        return (), 0.0, 0.0
    return values, float(np.mean(values)), float(np.max(values))


def scan_frobenius(
    live: Replay, options: JacobianOptions
) -> tuple[dict[Key, FrobeniusNorms], tuple[str, ...]]:
    """Per-sample Frobenius norms of d target / d each watched activation, and notes.

    Raises:
        InputError: `--exact` with a target of more than SCAN_EXACT_ROWS entries per sample.
    """
    ends = live.ends
    if not ends:
        return {}, ()
    batch = int(ends[0].shape[0]) if ends[0].shape.rank else 0
    if not batch or any(e.shape.rank == 0 or int(e.shape[0]) != batch for e in ends):
        return {}, ("no per-sample Jacobian norms: the target has no batch axis",)
    m = sum(math.prod(int(d) for d in e.shape[1:]) for e in ends)
    watched = [
        ((r.site.path, r.site.call, k), t)
        for r in live.records
        for k, t in enumerate(r.tensors)
        if is_float(t) and t.shape.rank and t.shape[0] == batch
    ]
    exact = _is_exact(m, options)
    count = m if exact else (options.probes or DEFAULT_PROBES)
    lin = LinearMap(live.tape, [t for _, t in watched], list(ends))
    flags = lin.mixing(options.seed).numpy() if watched else []
    mixing = [key for (key, _), mixes in zip(watched, flags, strict=True) if mixes]
    lin.independent = not mixing
    squared = _squared_norms(lin, exact, count, options.seed) if watched else []  # (count, B) each
    norms = {
        key: frobenius(np.sqrt(sq.sum(axis=0))) if exact else estimated_frobenius(sq)
        for (key, _), sq in zip(watched, squared, strict=True)
    }
    if exact:
        entries = f"{m} entr{'y' if m == 1 else 'ies'}"
        how = f"exact (one backward pass per target entry: {entries} per sample)"
    else:
        how = (
            f"estimated from {count} random projections of the target (rel_stderr: the "
            "largest relative standard error of a sample)"
        )
    target = "outputs" if live.target_sites[0] is None else live.target_sites[0].ref
    notes = [f"Jacobian norms ‖d {target}[i] / d layer[i]‖F per sample: {how}"]
    if mixing:
        refs = (ref_of((path, call)) for path, call, _ in mixing)
        names = ", ".join(dict.fromkeys(refs))
        notes.append(
            f"the target mixes samples across the batch (e.g. BatchNorm in training mode): "
            f"target[i] depends on other samples' outputs of {names}, whose norms are of the "
            "diagonal blocks d target[i] / d layer[i], other samples' influence left out"
        )
    return norms, tuple(notes)


def _is_exact(m: int, options: JacobianOptions) -> bool:
    if options.exact:
        if m > SCAN_EXACT_ROWS:
            raise InputError(
                f"--exact: the target has {m} entries per sample, one backward pass each; "
                f"layergrad does at most {SCAN_EXACT_ROWS}: drop --exact to estimate the norms, "
                "or pick a smaller --to"
            )
        return True
    return options.probes is None and m <= DEFAULT_PROBES


def _squared_norms(lin: LinearMap, exact: bool, count: int, seed: int) -> list[np.ndarray]:
    """Per source, ||J_i^T v||^2 for `count` cotangents v (count, B): the target's one-hot
    rows (exact) or random signs; one backward pass to every source at once for each v."""

    def norms(cotangent: Tensor) -> list[Tensor]:
        return [tf.reduce_sum(tf.square(g), axis=1) for g in lin.blocks(lin.vjps, cotangent)]

    if exact:
        found = one_hot_products(lin, norms, lin.m, count)
    else:
        rng = np.random.default_rng([seed, 3])

        def signs(start: int, stop: int) -> np.ndarray:
            return rng.integers(0, 2, (stop - start, lin.batch, lin.m)).astype(np.float32) * 2 - 1

        found = in_chunks(lin, norms, count, signs)
    return [f.numpy().astype(np.float64) for f in found]
