"""The largest singular value of each sample's Jacobian, to float32 precision (exact method).

Lanczos iteration on J_i^T J_i for all samples in lockstep, with full reorthogonalization,
until the residual bound of the largest Ritz value is below TOLERANCE of it. J^T J is applied
through the model (one J v and one J^T u per step, see `linear_map.py`), which costs far less
than a product with the dense Jacobians; a full eigendecomposition of the Gram matrices would
cost more than computing the Jacobians did. `direct` is that decomposition: used for small
matrices and whenever Lanczos cannot finish (no second derivative, MAX_STEPS reached).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from layergrad.core.tf_runtime import tf
from layergrad.core.tf_types import Tensor

MAX_STEPS = 64
TOLERANCE = 2e-6  # relative residual bound on the largest eigenvalue of J^T J
DIRECT_FLOAT64 = 256  # Gram matrices up to this size are decomposed in float64


def lanczos_top(
    gram_step: Callable[[Tensor], Tensor], batch: int, n: int, seed: int = 0
) -> np.ndarray | None:
    """||J_i||_2 for every sample, or None when some sample has not converged in MAX_STEPS.

    Args:
        gram_step: v -> J^T J v for a (B, n) float32 batch of vectors, one per sample.
        batch, n: B and the number of columns of each J_i.
        seed: seeds the start vectors.

    Example:
        >>> import tensorflow as tf
        >>> a = tf.constant([[[3.0, 0.0], [0.0, 1.0]]])
        >>> step = lambda v: tf.linalg.matvec(a, tf.linalg.matvec(a, v), transpose_a=True)
        >>> round(float(lanczos_top(step, 1, 2)[0]), 6)
        3.0
    """
    steps = min(MAX_STEPS, n)
    start = np.random.default_rng([seed, 5]).standard_normal((batch, n))
    first = start / np.linalg.norm(start, axis=1, keepdims=True)
    basis = np.zeros((steps + 1, batch, n), np.float32)
    basis[0] = first
    state = tf.constant(basis)

    @tf.function
    def step(basis: Tensor, k: Tensor) -> Tensor:
        v = basis[k]
        w = tf.convert_to_tensor(gram_step(v))
        alpha = tf.reduce_sum(w * v, axis=1)
        earlier = basis[: k + 1]
        for _ in range(2):  # full reorthogonalization against every earlier direction, twice
            coefficients = tf.reduce_sum(earlier * w[None], axis=2)
            w -= tf.reduce_sum(coefficients[:, :, None] * earlier, axis=0)
        beta = tf.norm(w, axis=1)
        safe = tf.where(beta > 0, beta, 1.0)[:, None]
        following = tf.where(beta[:, None] > 0, w / safe, tf.zeros_like(w))
        return alpha, beta, tf.tensor_scatter_nd_update(basis, [[k + 1]], following[None])

    alphas: list[np.ndarray] = []
    betas: list[np.ndarray] = []
    for k in range(steps):
        alpha, beta, state = step(state, tf.constant(k))
        alphas.append(alpha.numpy().astype(np.float64))
        betas.append(beta.numpy().astype(np.float64))
        top, residual = _ritz(alphas, betas)
        if np.all(residual <= TOLERANCE * np.maximum(top, np.finfo(np.float64).tiny)):
            return np.sqrt(np.maximum(top, 0.0))
    return None


def direct(jac: Tensor) -> np.ndarray:
    """||J_i||_2 of a (B, m, n) tensor from the largest eigenvalue of the smaller Gram matrix
    (in float64 when that matrix is small, so rounding stays that of the entries)."""
    if min(int(jac.shape[1]), int(jac.shape[2])) <= DIRECT_FLOAT64:
        jac = tf.cast(jac, tf.float64)
    if jac.shape[1] <= jac.shape[2]:
        gram = tf.matmul(jac, jac, transpose_b=True)
    else:
        gram = tf.matmul(jac, jac, transpose_a=True)
    top = tf.linalg.eigvalsh(gram)[:, -1].numpy().astype(np.float64)
    return np.sqrt(np.maximum(top, 0.0))


def _ritz(alphas: list[np.ndarray], betas: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Largest eigenvalue of each tridiagonal T_k, and its residual |beta_k * last component|."""
    k = len(alphas)
    diag = np.stack(alphas, axis=1)  # (B, k)
    off = np.stack(betas[:-1], axis=1) if k > 1 else np.zeros((diag.shape[0], 0))
    tri = np.zeros((diag.shape[0], k, k))
    idx = np.arange(k)
    tri[:, idx, idx] = diag
    tri[:, idx[:-1], idx[1:]] = off
    tri[:, idx[1:], idx[:-1]] = off
    # numpy's batched eigh with vectors is slow on some BLAS builds
    values, vectors = (t.numpy() for t in tf.linalg.eigh(tf.constant(tri)))
    return values[:, -1], np.abs(betas[-1] * vectors[:, -1, -1])
