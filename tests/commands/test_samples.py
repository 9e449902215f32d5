"""Every sample model loads safely and shows the behaviour README.md and sample_models promise.

Independent of layergrad: each check loads the file with
``keras.saving.load_model(path, safe_mode=True)`` (after importing custom_layers.py) and runs
the seeds' recipe by hand -- call the loaded model's layers one by one inside a GradientTape,
``tape.watch`` the earlier activation as it is produced, then ``tape.gradient(later, earlier)``
(d sum(later) / d earlier). Healthy models are also compared with central finite differences,
and every file is compared with a fresh in-memory rebuild from make_samples.py (same weights,
bit for bit). These are the oracle the other tests and the docs cite.
"""

from __future__ import annotations

import os
import sys
import zipfile

import numpy as np
import pytest
from helpers import SAMPLES, keras, tf

if str(SAMPLES) not in sys.path:
    sys.path.insert(0, str(SAMPLES))

import custom_layers  # noqa: F401  (registers the custom classes)
import make_samples

HERE = str(SAMPLES)

BATCH = 8
SEEDS = (0, 1, 2, 3, 4)  # probe seeds; every expectation must hold for all of them


def check(ok: bool, label: str, detail: str = "") -> bool:
    assert ok, label + (f"  [{detail}]" if detail else "")
    return True


def load(directory: str, filename: str):
    return keras.saving.load_model(os.path.join(directory, filename), safe_mode=True)


def normal(seed: int, *shape: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((BATCH, *shape)).astype("float32")


class Mark:
    """Marks the earlier activation as it is produced inside the forward code.

    With a tape it is watched (the seeds' recipe); with `override` the value is
    replaced (used by the finite-difference check).
    """

    def __init__(self, tape=None, override=None):
        self.tape, self.override, self.earlier = tape, override, None

    def __call__(self, t):
        if self.override is not None:
            t = tf.constant(self.override, dtype=t.dtype)
        if self.tape is not None:
            self.tape.watch(t)
        self.earlier = t
        return t


def probe(forward, inputs, training=False):
    """forward(mark, inputs, training) -> later activation; returns (earlier, later, grad)."""
    with tf.GradientTape() as tape:
        mark = Mark(tape)
        later = forward(mark, inputs, training)
    grad = tape.gradient(later, mark.earlier)
    return mark.earlier, later, grad


def status_of(grad) -> str:
    if grad is None:
        return "none"
    g = np.asarray(grad, dtype="float64")
    if not np.all(np.isfinite(g)):
        return "nonfinite"
    if np.all(g == 0):
        return "zero"
    return "ok"


def describe(grad) -> str:
    if grad is None:
        return "grad=None"
    g = np.asarray(grad, dtype="float64")
    fin = g[np.isfinite(g)]
    mx = float(np.max(np.abs(fin))) if fin.size else float("nan")
    text = f"shape={list(g.shape)} dtype={grad.dtype.name} max|g|={mx:.3g}"
    bad = int(np.sum(~np.isfinite(g)))
    if bad:
        nan, inf = int(np.isnan(g).sum()), int(np.isinf(g).sum())
        text += f" nonfinite={bad}/{g.size} (nan={nan}, inf={inf})"
    elif np.all(g == 0):
        text += " (all exactly 0)"
    return text


def finite_difference(forward, inputs, earlier, training=False, eps=1e-2):
    """Central differences of sum(later) w.r.t. the earlier activation.

    Every move (one element, one sign) is its own copy of the batch, and all copies go
    through the forward code in one call: the inputs repeated once per move, the earlier
    activation replaced by the moved copies stacked in the same order. Copy k's rows of
    `later` depend on copy k's rows alone (every model checked this way computes each sample
    on its own at inference), so their float64 sum is the total the move gives.
    """
    assert not training, "copies of a batch are independent only at inference"
    h = np.array(earlier, dtype="float32")
    moves = []
    for idx in np.ndindex(h.shape):
        for sign in (1.0, -1.0):
            moved = h.copy()
            moved[idx] += sign * eps
            moves.append(moved)
    copies = len(moves)
    repeated = tf.nest.map_structure(lambda a: np.concatenate([a] * copies), inputs)
    later = forward(Mark(override=np.concatenate(moves)), repeated, training)
    totals = np.asarray(tf.reduce_sum(tf.reshape(tf.cast(later, tf.float64), (copies, -1)), axis=1))
    return ((totals[0::2] - totals[1::2]) / (2 * eps)).reshape(h.shape).astype("float32")


def expect(label, forward, make_input, want, *, training=False, fd=False, extra=None):
    """Run the probe for every seed; the status must equal `want` each time."""
    statuses, last, fd_err = [], None, 0.0
    for seed in SEEDS:
        inputs = make_input(seed)
        earlier, later, grad = probe(forward, inputs, training)
        statuses.append(status_of(grad))
        if fd and grad is not None:
            approx = finite_difference(forward, inputs, earlier, training)
            g = np.asarray(grad, dtype="float64")
            fd_err = max(fd_err, float(np.max(np.abs(g - approx)) / (1.0 + np.max(np.abs(g)))))
        if extra is not None:
            extra(seed, earlier, later, grad)
        last = grad
    ok = all(s == want for s in statuses)
    detail = f"got {statuses[0] if ok else statuses}; {describe(last)}"
    if fd:
        ok = ok and fd_err < 2e-2
        detail += f"; finite-diff rel err {fd_err:.1e}"
    return check(ok, f"{label}: expect {want}", detail)


def normal_input(*shape: int):
    def make(seed: int) -> np.ndarray:
        return normal(seed, *shape)

    return make


def chain(model, from_name, names):
    """forward: mark(from_name(x)) then the named (loaded) layers in order."""
    start = model.get_layer(from_name)
    rest = [model.get_layer(n) for n in names]

    def forward(mark, x, training):
        h = mark(start(x, training=training))
        for layer in rest:
            h = layer(h, training=training)
        return h

    return forward


def probe_inputs(model):
    """Random batch from the model's input spec (ints: [0, 20), the Embedding range)."""
    rng = np.random.default_rng(0)
    batch = []
    for spec in model.inputs:
        shape = (BATCH, *tuple(spec.shape)[1:])
        if "int" in str(spec.dtype):
            batch.append(rng.integers(0, 20, size=shape).astype(str(spec.dtype)))
        else:
            batch.append(rng.standard_normal(shape).astype("float32"))
    return batch[0] if len(batch) == 1 else batch


def weights_match(model, rebuilt) -> bool:
    a, b = model.get_weights(), rebuilt.get_weights()
    if len(a) != len(b):
        return False
    try:
        for u, v in zip(a, b, strict=True):
            np.testing.assert_array_equal(u, v)  # NaN == NaN here
    except AssertionError:
        return False
    return [w.name for w in model.layers] == [w.name for w in rebuilt.layers]


# --------------------------------------------------------------------------- checks


def verify_files(directory: str) -> None:
    total = 0
    for filename, build in make_samples.BUILDERS.items():
        path = os.path.join(directory, filename)
        if not check(os.path.exists(path), f"{filename}: exists"):
            continue
        total += os.path.getsize(path)
        model = load(directory, filename)
        check(
            weights_match(model, build()),
            f"{filename}: loads safe_mode=True, same layer names and weights as a fresh rebuild",
            f"{model.__class__.__name__} '{model.name}' layers={[x.name for x in model.layers]}",
        )
        out = model(probe_inputs(model))
        outs = out if isinstance(out, (list, tuple)) else [out]
        check(
            all(o.shape[0] == BATCH for o in outs),
            f"{filename}: whole-model call runs",
            f"output shapes {[tuple(o.shape) for o in outs]}",
        )
        if filename.endswith(".keras"):
            with zipfile.ZipFile(path) as z:
                config = z.read("config.json").decode()
            classes = {c for c in ("Lambda", "TFSMLayer") if f'"class_name": "{c}"' in config}
            check(not classes, f"{filename}: no Lambda/TFSMLayer in config")
    check(total < 2_000_000, "total size of sample files < 2 MB", f"{total} bytes")


def verify_healthy(d: str) -> None:
    m = load(d, "seed.keras")
    expect(
        "seed.keras dense -> dense_1",
        chain(m, "dense", ["dense_1"]),
        normal_input(5),
        "ok",
        fd=True,
    )
    expect(
        "seed.keras dense -> dense_2",
        chain(m, "dense", ["dense_1", "dense_2"]),
        normal_input(5),
        "ok",
        fd=True,
    )

    h5 = load(d, "seed.h5")
    check(
        weights_match(h5, m),
        "seed.h5: legacy HDF5 loads, same names and weights as seed.keras",
        f"{h5.__class__.__name__} '{h5.name}' layers={[x.name for x in h5.layers]}",
    )
    x = normal(0, 5)
    check(
        np.array_equal(np.asarray(h5(x)), np.asarray(m(x))), "seed.h5: same outputs as seed.keras"
    )
    expect("seed.h5 dense -> dense_1", chain(h5, "dense", ["dense_1"]), normal_input(5), "ok")

    m = load(d, "sequential_add.keras")
    expect(
        "sequential_add.keras dense -> dense_2",
        chain(m, "dense", ["dense_1", "dense_2"]),
        normal_input(5),
        "ok",
        fd=True,
    )

    verify_residual(load(d, "residual.keras"))
    verify_nested(load(d, "nested.keras"))
    verify_shared(load(d, "shared.keras"))
    verify_two_input(load(d, "two_input.keras"))
    verify_embedding(load(d, "embedding.keras"))

    m = load(d, "hand_set.keras")

    def hand_exact(seed, earlier, later, grad):
        np.testing.assert_array_equal(np.asarray(grad), np.tile([[5.0, 6.0]], (BATCH, 1)))

    expect(
        "hand_set.keras a -> b (exactly [5, 6] per sample)",
        chain(m, "a", ["b"]),
        normal_input(2),
        "ok",
        fd=True,
        extra=hand_exact,
    )


def verify_residual(m) -> None:
    names = ("stem", "block", "add", "head", "side")
    stem, block, add, head, side = (m.get_layer(n) for n in names)
    shapes = [tuple(t.shape) for t in m.outputs]
    check(
        shapes == [(None, 2), (None, 4)],
        "residual.keras: two outputs [head (2), side (4)]",
        f"output shapes {shapes}",
    )

    def stem_to_head(mark, x, training):
        h = mark(stem(x))
        return head(add([h, block(h)]))

    def side_to_head(mark, x, training):
        h = stem(x)
        mark(side(h))  # computed, but head never uses it
        return head(add([h, block(h)]))

    def block_to_head(mark, x, training):
        h = stem(x)
        return head(add([h, mark(block(h))]))

    def exact(seed, earlier, later, grad):
        # linear after stem: grad = (I + W_block) @ W_head @ 1 for every sample
        wb, wh = block.get_weights()[0], head.get_weights()[0]
        want = (np.eye(8, dtype="float32") + wb) @ wh.sum(axis=1)
        np.testing.assert_allclose(
            np.asarray(grad), np.broadcast_to(want, grad.shape), rtol=1e-5, atol=1e-6
        )

    expect(
        "residual.keras stem -> head (skip path counted: (I + W_block) W_head 1)",
        stem_to_head,
        normal_input(8),
        "ok",
        fd=True,
        extra=exact,
    )
    expect("residual.keras block -> head", block_to_head, normal_input(8), "ok", fd=True)
    expect(
        "residual.keras side -> head (sibling branch, not downstream)",
        side_to_head,
        normal_input(8),
        "none",
    )


def verify_nested(m) -> None:
    enc = m.get_layer("encoder")
    d0, d1, head = enc.get_layer("dense"), enc.get_layer("dense_1"), m.get_layer("head")
    check(
        [x.name for x in m.layers][-2:] == ["encoder", "head"]
        and [x.name for x in enc.layers] == ["dense", "dense_1"],
        "nested.keras: top level encoder, head; encoder holds dense, dense_1",
        f"{[x.name for x in m.layers]} / encoder {[x.name for x in enc.layers]}",
    )

    def enc_dense_to_head(mark, x, training):
        return head(d1(mark(d0(x))))

    def enc_dense1_to_head(mark, x, training):
        return head(mark(d1(d0(x))))

    expect("nested.keras encoder/dense -> head", enc_dense_to_head, normal_input(6), "ok", fd=True)
    expect(
        "nested.keras encoder/dense_1 -> head", enc_dense1_to_head, normal_input(6), "ok", fd=True
    )


def verify_shared(m) -> None:
    pre, shared, head = m.get_layer("pre"), m.get_layer("shared"), m.get_layer("head")
    check(
        len(shared._inbound_nodes) == 2,
        "shared.keras: layer 'shared' is called twice",
        f"{len(shared._inbound_nodes)} inbound nodes",
    )

    def pre_to_head(mark, x, training):
        return head(shared(shared(mark(pre(x)))))

    def s0_to_s1(mark, x, training):
        return shared(mark(shared(pre(x))))

    def s0_to_head(mark, x, training):
        return head(shared(mark(shared(pre(x)))))

    def s1_to_head(mark, x, training):
        return head(mark(shared(shared(pre(x)))))

    expect(
        "shared.keras pre -> head (through shared twice)",
        pre_to_head,
        normal_input(6),
        "ok",
        fd=True,
    )
    expect("shared.keras shared@0 -> shared@1", s0_to_s1, normal_input(6), "ok", fd=True)
    expect("shared.keras shared@0 -> head", s0_to_head, normal_input(6), "ok", fd=True)
    expect("shared.keras shared@1 -> head", s1_to_head, normal_input(6), "ok", fd=True)


def verify_two_input(m) -> None:
    names = [t.name for t in m.inputs]
    check(sorted(names) == ["a", "b"], "two_input.keras: inputs named a, b", str(names))
    da, db, concat, head = (m.get_layer(n) for n in ("da", "db", "concat", "head"))

    def two(seed):
        rng = np.random.default_rng(seed)
        return (
            rng.standard_normal((BATCH, 4)).astype("float32"),
            rng.standard_normal((BATCH, 3)).astype("float32"),
        )

    def da_to_head(mark, ab, training):
        return head(concat([mark(da(ab[0])), db(ab[1])]))

    def db_to_head(mark, ab, training):
        return head(concat([da(ab[0]), mark(db(ab[1]))]))

    def da_to_db(mark, ab, training):
        mark(da(ab[0]))
        return db(ab[1])

    expect("two_input.keras da -> head", da_to_head, two, "ok", fd=True)
    expect("two_input.keras db -> head", db_to_head, two, "ok", fd=True)
    expect("two_input.keras da -> db (parallel branch, not downstream)", da_to_db, two, "none")


def verify_embedding(m) -> None:
    emb, pool, head = m.get_layer("embedding"), m.get_layer("pool"), m.get_layer("head")
    check(
        m.inputs[0].dtype == "int32",
        "embedding.keras: input 'ids' is int32",
        f"{m.inputs[0].name} {m.inputs[0].dtype} {tuple(m.inputs[0].shape)}",
    )

    def ids(seed):
        return np.random.default_rng(seed).integers(0, 20, size=(BATCH, 6)).astype("int32")

    def emb_to_head(mark, x, training):
        return head(pool(mark(emb(x))))

    def exact(seed, earlier, later, grad):
        want = head.get_weights()[0].sum(axis=1) / 6.0  # mean over 6 positions, then head
        np.testing.assert_allclose(
            np.asarray(grad), np.broadcast_to(want, grad.shape), rtol=1e-5, atol=1e-7
        )

    expect(
        "embedding.keras embedding -> head (= W_head 1 / 6 everywhere)",
        emb_to_head,
        ids,
        "ok",
        fd=True,
        extra=exact,
    )


def verify_causes(d: str) -> None:
    for filename, mid in [
        ("cause_argmax.keras", "argmax"),
        ("cause_round.keras", "round"),
        ("cause_cast_int.keras", "cast"),
        ("cause_stop_gradient.keras", "stop"),
        ("cause_numpy_function.keras", "numpy_fn"),
    ]:
        m = load(d, filename)
        expect(
            f"{filename} dense -> head", chain(m, "dense", [mid, "head"]), normal_input(6), "none"
        )
        # the break is local: from the custom layer's output on, the gradient is fine
        expect(f"{filename} {mid} -> head", _after(m, mid), normal_input(6), "ok")

    m = load(d, "cause_dead_relu.keras")
    dead = m.get_layer("dead")

    def dead_extra(seed, earlier, later, grad):
        assert np.all(np.asarray(dead(earlier)) == 0), "'dead' outputs are not all 0"

    expect(
        "cause_dead_relu.keras dense -> head (every 'dead' output is 0)",
        chain(m, "dense", ["dead", "head"]),
        normal_input(6),
        "zero",
        extra=dead_extra,
    )

    m = load(d, "cause_saturated.keras")
    squash = m.get_layer("squash")
    pre_min = []

    def sat_extra(seed, earlier, later, grad):
        k, b = squash.get_weights()
        pre_min.append(float(np.min(np.abs(np.asarray(earlier) @ k + b))))
        y = np.asarray(squash(earlier))
        assert np.all((y == 0.0) | (y == 1.0)), "sigmoid not saturated to exactly 0/1"

    expect(
        "cause_saturated.keras dense -> head (float32 sigmoid is exactly 0 or 1)",
        chain(m, "dense", ["squash", "head"]),
        normal_input(6),
        "zero",
        extra=sat_extra,
    )
    check(
        min(pre_min) > 200,
        "cause_saturated.keras: squash pre-activations are ~+-1e3",
        f"min |pre-activation| = {min(pre_min):.1f}",
    )

    m = load(d, "cause_nan_weights.keras")
    k = m.get_layer("broken").get_weights()[0]
    check(
        int(np.isnan(k).sum()) == 1,
        "cause_nan_weights.keras: 'broken' kernel has one NaN",
        f"NaN at {[tuple(int(i) for i in ix) for ix in np.argwhere(np.isnan(k))]}",
    )

    def nan_fwd(seed, earlier, later, grad):
        assert np.all(np.isfinite(np.asarray(earlier))), "'dense' output should be finite"
        assert np.isnan(np.asarray(m.get_layer("broken")(earlier))).any()
        assert np.isnan(np.asarray(later)).any(), "'head' output should contain NaN"

    expect(
        "cause_nan_weights.keras dense -> head (NaN from 'broken' on in the forward pass)",
        chain(m, "dense", ["broken", "head"]),
        normal_input(6),
        "nonfinite",
        extra=nan_fwd,
    )

    m = load(d, "cause_sqrt.keras")
    zero_cols = []

    def sqrt_fwd(seed, earlier, later, grad):
        relu_out = np.asarray(m.get_layer("relu")(earlier))
        zero_cols.append(bool(np.all(relu_out[:, 0] == 0)))
        assert np.all(np.isfinite(np.asarray(later))), "forward must stay finite"

    expect(
        "cause_sqrt.keras dense -> head (forward finite; relu grad 0 * inf = NaN)",
        chain(m, "dense", ["relu", "sqrt", "head"]),
        normal_input(6),
        "nonfinite",
        extra=sqrt_fwd,
    )
    check(all(zero_cols), "cause_sqrt.keras: relu output column 0 is exactly 0 (bias -100)")
    expect(
        "cause_sqrt.keras relu -> head (sqrt'(0) = inf)",
        _after(m, "relu"),
        normal_input(6),
        "nonfinite",
    )
    expect("cause_sqrt.keras sqrt -> head", _after(m, "sqrt"), normal_input(6), "ok")

    m = load(d, "cause_training.keras")
    expect("cause_training.keras dense -> bn", chain(m, "dense", ["bn"]), normal_input(6), "ok")
    expect(
        "cause_training.keras dense -> bn --training (batch sum of bn is constant)",
        chain(m, "dense", ["bn"]),
        normal_input(6),
        "zero",
        training=True,
    )
    # Exactness depends on the batch size: 1/n is exact only for powers of two.
    noise = {}
    for n in (1, 2, 3, 4, 5, 6, 7, 8, 16, 32):
        worst = 0.0
        for seed in SEEDS:
            x = np.random.default_rng(seed).standard_normal((n, 6)).astype("float32")
            _, _, grad = probe(chain(m, "dense", ["bn"]), x, training=True)
            worst = max(worst, float(np.max(np.abs(np.asarray(grad)))))
        noise[n] = worst
    exact = [n for n, w in noise.items() if w == 0.0]
    check(
        exact == [1, 2, 4, 8, 16, 32] and max(noise.values()) < 1e-5,
        "cause_training.keras --training: exactly 0 for batch sizes 1, 2, 4, 8, 16, 32; "
        "rounding noise otherwise",
        ", ".join(f"batch {n}: {w:.2g}" for n, w in noise.items()),
    )

    verify_float16(load(d, "cause_float16.keras"))


def _after(m, name):
    """forward: run the model's chain up to `name`, mark its output, then the rest."""
    order = [x.name for x in m.layers if not isinstance(x, keras.layers.InputLayer)]
    before, after = order[: order.index(name) + 1], order[order.index(name) + 1 :]

    def forward(mark, x, training):
        h = x
        for n in before:
            h = m.get_layer(n)(h, training=training)
        h = mark(h)
        for n in after:
            h = m.get_layer(n)(h, training=training)
        return h

    return forward


def verify_float16(m) -> None:
    policies = {
        x.name: x.dtype_policy.name for x in m.layers if not isinstance(x, keras.layers.InputLayer)
    }
    check(
        all(p == "mixed_float16" for p in policies.values()),
        "cause_float16.keras: path layers use mixed_float16",
        str(policies),
    )

    def f16_extra(seed, earlier, later, grad):
        assert earlier.dtype == tf.float16 and later.dtype == tf.float16

    expect(
        "cause_float16.keras dense -> head (float16 activations and gradient)",
        chain(m, "dense", ["tiny", "head"]),
        normal_input(6),
        "zero",
        extra=f16_extra,
    )
    smallest = min(
        float(
            np.min(np.abs(np.asarray(m.get_layer(n).get_weights()[0], "float16").astype("float64")))
        )
        for n in ("tiny", "head")
    )
    check(
        smallest > 0,
        "cause_float16.keras: every tiny/head kernel entry is non-zero in "
        "float16 (the gradient underflows, not the weights)",
        f"smallest |w| = {smallest:.3g}",
    )

    # Control: the same layers and weights under a float32 policy.
    clones = {}
    for name in ("dense", "tiny", "head"):
        layer = m.get_layer(name)
        clone = keras.layers.Dense.from_config({**layer.get_config(), "dtype": "float32"})
        clone.build((None, layer.get_weights()[0].shape[0]))
        clone.set_weights(layer.get_weights())
        clones[name] = clone
    grads32 = []

    def f32(mark, x, training):
        return clones["head"](clones["tiny"](mark(clones["dense"](x))))

    def f32_extra(seed, earlier, later, grad):
        assert grad.dtype == tf.float32
        grads32.append(float(np.max(np.abs(np.asarray(grad)))))

    expect(
        "cause_float16.keras control: same weights with float32 policy",
        f32,
        normal_input(6),
        "ok",
        extra=f32_extra,
    )
    check(
        max(grads32) < 2.98e-8,
        "cause_float16.keras: float32 gradient magnitude is below "
        "half float16's smallest subnormal (2.98e-8)",
        f"max |g| in float32 = {max(grads32):.3g}",
    )


@pytest.mark.parametrize("verify", [verify_files, verify_healthy, verify_causes])
def test_samples(verify):
    verify(HERE)
