"""Dense chains with weights set from numpy, saved as real .keras files, and their gradient
profile computed by hand in numpy (float64): the independent side of the diff tests.

A chain is x(6) -> l0 .. l4 (Dense 6, one activation) -> head (Dense 3, linear). The default
scan target is sum(head(x) * R) with R as layergrad/engine/projection.py defines it (helpers),
as documented; the gradient of that with respect to each layer's output is backpropagated here
layer by layer without TensorFlow.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from helpers import keras

WIDTH, OUT = 6, 3
NAMES = ("l0", "l1", "l2", "l3", "l4", "head")
ROWS = ("x", *NAMES)  # the scan's rows, in order

Weights = dict[str, tuple[np.ndarray, np.ndarray]]


def chain_weights(seed: int = 0) -> Weights:
    """Kernels and biases of a chain, float32, scaled so tanh stays away from saturation."""
    rng = np.random.default_rng(seed)
    out = {}
    for name in NAMES:
        units = OUT if name == "head" else WIDTH
        kernel = rng.standard_normal((WIDTH, units)) / np.sqrt(WIDTH)
        out[name] = (kernel.astype("float32"), (0.1 * rng.standard_normal(units)).astype("float32"))
    return out


def save_chain(
    path: Path,
    weights: Weights,
    activation: str | None = "tanh",
    extra_after: str | None = None,
    name: str = "chain",
) -> str:
    """Save the chain; `extra_after` inserts a linear identity Dense `extra` after that layer."""
    x = keras.Input((WIDTH,), name="x")
    h = x
    for layer_name, (kernel, bias) in weights.items():
        act = None if layer_name == "head" else activation
        layer = keras.layers.Dense(kernel.shape[1], activation=act, name=layer_name)
        h = layer(h)
        layer.set_weights([kernel, bias])
        if layer_name == extra_after:
            extra = keras.layers.Dense(WIDTH, name="extra")
            h = extra(h)
            extra.set_weights([np.eye(WIDTH, dtype="float32"), np.zeros(WIDTH, "float32")])
    keras.Model(x, h, name=name).save(path)
    return str(path)


def scaled(weights: Weights, name: str, factor: float) -> Weights:
    """The weights with one layer's kernel multiplied by `factor`."""
    out = dict(weights)
    kernel, bias = out[name]
    out[name] = ((kernel * np.float32(factor)).astype("float32"), bias)
    return out


def with_nan(weights: Weights, name: str) -> Weights:
    """The weights with kernel[0, 0] of one layer set to NaN."""
    out = dict(weights)
    kernel, bias = out[name]
    kernel = kernel.copy()
    kernel[0, 0] = np.nan
    out[name] = (kernel, bias)
    return out


def projection(batch: int, seed: int = 0) -> np.ndarray:
    """The documented default scan target's R for one (batch, 3) output."""
    from helpers import projection_r

    return projection_r(seed, 0, (batch, OUT)).numpy().astype(np.float64)


def gradients(weights: Weights, x: np.ndarray, activation: str | None = "tanh") -> dict:
    """d sum(head * R) / d (each row's activation), by hand: forward, then back layer by layer."""
    acts = {"x": np.asarray(x, np.float64)}
    pre = {}
    h = acts["x"]
    for name, (kernel, bias) in weights.items():
        pre[name] = h @ kernel.astype(np.float64) + bias
        linear = name == "head" or activation is None
        h = pre[name] if linear else _act(activation, pre[name])
        acts[name] = h
    grads = {"head": projection(len(x))}
    for i in range(len(NAMES) - 1, -1, -1):
        name = NAMES[i]
        g = grads[name]
        if name != "head" and activation is not None:
            g = g * _act_grad(activation, pre[name])
        below = ROWS[i]  # the activation feeding layer `name`
        grads[below] = g @ weights[name][0].astype(np.float64).T
    return grads


def _act(activation: str, z: np.ndarray) -> np.ndarray:
    return np.tanh(z) if activation == "tanh" else np.maximum(z, 0)


def _act_grad(activation: str, z: np.ndarray) -> np.ndarray:
    return 1 - np.tanh(z) ** 2 if activation == "tanh" else (z > 0).astype(np.float64)


def mean_abs(grads: dict) -> dict[str, float]:
    """mean |g| of each row (NaN where the gradient has a NaN)."""
    return {name: float(np.mean(np.abs(g))) for name, g in grads.items()}


def save_compiled(path: Path, weights: Weights, loss: str = "mse") -> str:
    """A linear chain compiled with `loss` (so `check` and `scan --wrt weights` use it)."""
    x = keras.Input((WIDTH,), name="x")
    h = x
    layers = []
    for layer_name, (kernel, _) in weights.items():
        layer = keras.layers.Dense(kernel.shape[1], name=layer_name)
        h = layer(h)
        layers.append(layer)
    model = keras.Model(x, h, name="compiled")
    for layer, (kernel, bias) in zip(layers, weights.values(), strict=True):
        layer.set_weights([kernel, bias])
    model.compile(optimizer="sgd", loss=loss)
    model.save(path)
    return str(path)


def mse_weight_gradients(weights: Weights, x: np.ndarray, y: np.ndarray) -> dict[str, float]:
    """mean |d mse / d v| of every variable `layer/kernel`, `layer/bias` of a linear chain, by
    hand: mse = mean((pred - y)^2) over every element, then back layer by layer."""
    hs = [np.asarray(x, np.float64)]
    for kernel, bias in weights.values():
        hs.append(hs[-1] @ kernel.astype(np.float64) + bias)
    g = 2 * (hs[-1] - y) / y.size
    out = {}
    for i in range(len(NAMES) - 1, -1, -1):
        name = NAMES[i]
        out[f"{name}/kernel"] = float(np.mean(np.abs(hs[i].T @ g)))
        out[f"{name}/bias"] = float(np.mean(np.abs(g.sum(axis=0))))
        g = g @ weights[name][0].astype(np.float64).T
    return out
