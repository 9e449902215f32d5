"""The training gradient: d loss / d every trainable variable, in one forward and backward pass.

Answers Keras's "Gradients do not exist for variables [...] when minimizing the loss" before
anyone trains: which variables get None, zero or NaN from the loss, and why. The loss is the
one compiled in the file (`model.compute_loss`, regularization included) or `--loss NAME`;
the labels come from the probe data (`y`) or are drawn at random to fit each output.

The same backward pass watches every layer's output, so a variable whose gradient is missing
gets the causes the diagnosis engine finds on the path from its layer to the loss.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np

from layergrad.commands.session import Session
from layergrad.core.errors import InputError
from layergrad.core.gradient_stats import (
    DEAD_FRACTION,
    dead_fraction,
    gradient_stats,
    status_flags,
    status_of,
)
from layergrad.core.results import Cause, LossMeta, ScanRow, VariableRow, WeightScanReport
from layergrad.core.tf_types import KerasLayer, KerasModel, KerasVariable, Tensor, TensorTree
from layergrad.core.vocab import Flag, Status
from layergrad.diagnose import causes as why
from layergrad.engine.compiled_loss import (
    compile_loss,
    label_kind,
    output_keys,
    output_losses,
    random_labels,
)
from layergrad.engine.trace import Trace, run_trace
from layergrad.model.layer_refs import iter_layers
from layergrad.model.loss_forms import LossSpec, find_loss

# Vanishing / exploding: the update ratios of the layers near the input this many decades
# below / above those near the output (see `scale_flags`). Calibrated on untrained healthy
# architectures (keras.applications, RNNs, a Transformer, deep He ReLU MLPs), whose trend lies
# within -1.8 and +0.2 decades; an 8-layer sigmoid stack has +4.6, a 20-layer tanh stack with
# kernels 11 times the Glorot scale -4.9 (docs/verdicts.md).
TREND_DECADES, MIN_LAYERS = 3.0, 3
# The variables whose update ratio says how fast a layer learns (biases and normalization
# scales are left out: they start at 0 or 1 whatever the layer).
KERNELS = ("kernel", "embeddings", "depthwise_kernel", "pointwise_kernel")


def scan_weights(
    session: Session, loss: str | None = None, projection: bool = False
) -> WeightScanReport:
    """Gradient of the loss with respect to every trainable variable of the session's model.

    Args:
        session: an opened model and probe batch (`pipeline.open_session`).
        loss: a `keras.losses` name overriding the compiled loss; None uses the file's.
        projection: without any loss, differentiate the seeded random projection of the
            outputs instead (what `check` judges update ratios on; loss name "projection").

    Raises:
        InputError: the file has no compiled loss and `loss` is None, or the loss is unknown.
    """
    model = session.model
    spec = find_loss(session.info.compile_config, loss)
    if spec is None and projection:
        return _scan(session, None, None, [])
    if spec is None:
        raise InputError(
            f"{session.path} has no compiled loss (it was saved without model.compile); pass "
            "--loss NAME, e.g. --loss sparse_categorical_crossentropy or --loss mse"
        )
    compile_loss(model, spec)
    return _scan(session, spec, session.batch.labels, [])


def _scan(
    session: Session, spec: LossSpec | None, given: dict[str, np.ndarray] | None, kinds: list[str]
) -> WeightScanReport:
    """The weight scan of `spec`'s loss, or of the outputs' random projection (spec None)."""
    model, options = session.model, session.options
    names = list(getattr(model, "output_names", None) or [])

    def objective(outputs: TensorTree) -> Tensor:
        from layergrad.core.keras_backend import quiet_import

        tf, _ = quiet_import()
        flat = tf.nest.flatten(outputs)
        assert spec is not None  # the objective only of a scan with a loss
        kinds[:] = [
            label_kind(n)
            for n in output_losses(spec, names or [""] * len(flat), output_keys(model, len(flat)))
        ]
        labels = _labels_from_data(given, names, len(flat)) if given else None
        labels = labels or random_labels(flat, kinds, options.seed)
        y = tf.nest.pack_sequence_as(outputs, [tf.convert_to_tensor(a) for a in labels])
        return model.compute_loss(y=y, y_pred=outputs, training=options.training)

    owned = variable_owners(model)
    trace = run_trace(
        model,
        session.batch,
        training=options.training,
        reduce=options.reduce,
        seed=options.seed,
        objective=objective if spec is not None else None,
        variables=[getattr(v, "value", v) for v, _ in owned],
    )
    from layergrad.commands.scan import scan_report

    activations = scan_report(session, trace, None)
    rows = [
        variable_row(v, path, grad, activations.rows)
        for (v, path), grad in zip(owned, trace.variable_gradients, strict=True)
    ]
    notes = []
    if spec is None:
        notes.append("no loss: the gradient is that of a seeded random projection of the outputs")
    elif not given:
        notes.append(
            f"labels are random ({', '.join(sorted(set(kinds)))}), drawn to fit each output, "
            f"seed {options.seed}: pass --input with a `y` array for your own"
        )
    return WeightScanReport(
        model=session.model_meta,
        probe=session.probe_meta,
        loss=LossMeta("projection", "random", "none")
        if spec is None
        else LossMeta(spec.name, spec.source, "data" if given else "random"),
        frozen=len(frozen_variables(model)),
        variables=tuple(flag_update_ratio_trend(rows)),
        notes=tuple(notes),
        dead_layers=dead_layers(trace, dict(iter_layers(model))),
        activations=replace(activations, target="loss" if spec is not None else None),
    )


def dead_layers(trace: Trace, layers: Mapping[str, KerasLayer]) -> tuple[tuple[str, float], ...]:
    """ReLU layers with more than DEAD_FRACTION of their units (last axis) exactly zero for
    every sample of the batch: (layer reference, that share)."""
    from layergrad.diagnose.activations import activation_name

    found = []
    for act in trace.activations:
        if not act.is_float or act.value.size == 0:
            continue
        if activation_name(layers.get(act.site.path)) != "relu":
            continue
        share = dead_fraction(act.value)
        if share > DEAD_FRACTION:
            found.append((act.site.ref, share))
    return tuple(found)


def variable_owners(model: KerasModel) -> list[tuple[KerasVariable, str]]:
    """Each trainable variable once, with the path of the layer that holds it."""
    seen: set[int] = set()
    out = []
    for path, layer in iter_layers(model):
        if isinstance(getattr(layer, "layers", None), list):
            continue  # a nested model: its own layers are listed after it
        for v in layer.trainable_variables:
            if id(v) not in seen:
                seen.add(id(v))
                out.append((v, path))
    return out


def frozen_variables(model: KerasModel) -> list[KerasVariable]:
    """The weights a user froze: variables a layer made to be trained (its kernel, a
    BatchNormalization's gamma and beta) that are not trainable now (`layer.trainable = False`).

    State that is never trained is not frozen: BatchNormalization's moving mean and variance,
    the `seed_generator_state` of Dropout, LSTM or a random augmentation layer, a metric's
    totals. Keras keeps a layer's trainable-by-design variables in `_trainable_variables`
    whatever its `trainable` flag says (public Keras has no other way to tell them apart).
    """
    seen: set[int] = set()
    out = []
    for _path, layer in iter_layers(model):
        for v in getattr(layer, "_trainable_variables", []):
            if not v.trainable and id(v) not in seen:
                seen.add(id(v))
                out.append(v)
    return out


def _labels_from_data(
    given: dict[str, np.ndarray], names: list[str], count: int
) -> list[np.ndarray]:
    """`y` (one output) or `y:NAME` per output, in output order."""
    if "y" in given and count == 1:
        return [given["y"]]
    missing = [n for n in names if f"y:{n}" not in given]
    if missing or len(names) != count:
        raise InputError(
            f"the labels in --input are {sorted(given)}, but the model has {count} outputs "
            f"({', '.join(names)}); save one array per output as `y:NAME` (or `y` for one output)"
        )
    return [given[f"y:{n}"] for n in names]


def variable_row(
    variable: KerasVariable, path: str, grad: np.ndarray | None, layer_rows: tuple[ScanRow, ...]
) -> VariableRow:
    status = status_of(grad)
    weight = np.asarray(variable.numpy(), dtype=np.float64)
    stats = None if grad is None else gradient_stats(grad, top=0)
    norm = float(np.sqrt(np.sum(weight * weight)))
    ratio = None if stats is None or not norm else stats.l2 / norm
    flags = status_flags(status, dead_fraction(grad) if grad is not None and grad.ndim else None)
    name = variable.name
    row = VariableRow(
        variable=f"{path}/{name}",
        layer=path,
        name=name,
        shape=tuple(int(d) for d in variable.shape),
        dtype=str(variable.dtype),
        status=status,
        gradient=stats,
        update_ratio=ratio,
        flags=flags,
    )
    if status == Status.OK:
        return row
    return replace(row, causes=_causes(row, path, layer_rows))


def _causes(row: VariableRow, path: str, layer_rows: tuple[ScanRow, ...]) -> tuple[Cause, ...]:
    """The causes of the layer's output rows when they share the variable's problem, else say
    that the layer's own call loses it."""
    calls = [r for r in layer_rows if r.layer.split("@")[0] == path]
    broken = [r for r in calls if r.status == row.status and r.causes]
    if broken:
        return broken[0].causes
    if calls and all(r.status == Status.NONE for r in calls):
        return tuple(c for r in calls for c in r.causes)[:3] or (why.unknown(),)
    return (why.variable_not_used(path, row.name, row.status),)


def layer_ratios(rows: Sequence[VariableRow]) -> dict[str, float]:
    """Each layer's update ratio: ||d loss / d W|| / ||W|| over all its trainable variables.

    Only layers whose every variable has a finite gradient and that hold a non-zero weight.
    """
    grads: dict[str, float] = {}
    norms: dict[str, float] = {}
    broken: set[str] = set()
    for r in rows:
        if r.status not in (Status.OK, Status.ZERO) or r.gradient is None:
            broken.add(r.layer)
            continue
        ratio = r.update_ratio
        grads[r.layer] = grads.get(r.layer, 0.0) + r.gradient.l2**2
        weight = r.gradient.l2 / ratio if ratio else 0.0
        norms[r.layer] = norms.get(r.layer, 0.0) + weight**2
    return {
        layer: math.sqrt(grads[layer] / norms[layer])
        for layer in grads
        if layer not in broken and norms[layer] > 0 and grads[layer] > 0
    }


def scale_flags(rows: Sequence[VariableRow]) -> dict[str, tuple[Flag, float]]:
    """Vanishing / exploding layers: {layer: (flag, decades below / above the output end)}.

    Only layers with a kernel (Dense, Conv, Embedding, recurrent layers...) take part, in
    execution order; a layer without weights is never flagged. The trend is the median
    log10 update ratio of the last quarter of them minus that of the first quarter. When it
    is at least TREND_DECADES (the layers near the input would learn that many decades slower
    than those near the output), every layer of the first half at least TREND_DECADES below
    the last quarter's median is vanishing; at most -TREND_DECADES, every layer of the first
    half that far above it is exploding. Needs MIN_LAYERS such layers.
    """
    ratios = layer_ratios([r for r in rows if r.name in KERNELS])
    if len(ratios) < MIN_LAYERS:
        return {}
    logs = [(layer, math.log10(ratio)) for layer, ratio in ratios.items()]
    quarter = max(1, round(len(logs) / 4))
    end = float(np.median([v for _, v in logs[-quarter:]]))
    start = float(np.median([v for _, v in logs[:quarter]]))
    trend = end - start
    found: dict[str, tuple[Flag, float]] = {}
    for layer, value in logs[: max(1, len(logs) // 2)]:
        if trend >= TREND_DECADES and value <= end - TREND_DECADES:
            found[layer] = (Flag.VANISHING, value - end)
        elif trend <= -TREND_DECADES and value >= end + TREND_DECADES:
            found[layer] = (Flag.EXPLODING, value - end)
    return found


def flag_update_ratio_trend(rows: list[VariableRow]) -> list[VariableRow]:
    """Vanishing / exploding by the trend of the update ratios from the input end to the output
    end: the ok, not yet flagged variables of each layer `scale_flags` finds."""
    flagged = scale_flags(rows)
    out = []
    for r in rows:
        if r.layer in flagged and r.status == Status.OK and not r.flags:
            r = replace(r, flags=(flagged[r.layer][0],))
        out.append(r)
    return out
