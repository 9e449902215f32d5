"""The training gradient: d loss / d every trainable variable, in one forward and backward pass.

Answers Keras's "Gradients do not exist for variables [...] when minimizing the loss" before
anyone trains: which variables get None, zero or NaN from the loss, and why. The loss is the
one compiled in the file (`model.compute_loss`, regularization included) or `--loss NAME`;
the labels come from the probe data (`y`) or are drawn at random to fit each output.

The same backward pass watches every layer's output, so a variable whose gradient is missing
gets the causes the diagnosis engine finds on the path from its layer to the loss.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from layergrad.commands.session import Session
from layergrad.core.errors import InputError
from layergrad.core.gradient_stats import DEAD_FRACTION, dead_fraction, gradient_stats, status_of
from layergrad.core.results import Cause, LossMeta, ScanRow, VariableRow, WeightScanReport
from layergrad.core.vocab import Flag, Status
from layergrad.diagnose import causes as why
from layergrad.engine.compiled_loss import (
    compile_loss,
    find_loss,
    label_kind,
    output_losses,
    random_labels,
)
from layergrad.engine.trace import run_trace
from layergrad.model.layer_refs import iter_layers

SCALE_RATIO = 1e6  # an update ratio this far below / above the median: vanishing / exploding


def scan_weights(session: Session, loss: str | None = None) -> WeightScanReport:
    """Gradient of the loss with respect to every trainable variable of the session's model.

    Args:
        session: an opened model and probe batch (`pipeline.open_session`).
        loss: a `keras.losses` name overriding the compiled loss; None uses the file's.

    Raises:
        InputError: the file has no compiled loss and `loss` is None, or the loss is unknown.
    """
    model, options = session.model, session.options
    spec = find_loss(session.info.compile_config, loss)
    if spec is None:
        raise InputError(
            f"{session.path} has no compiled loss (it was saved without model.compile); pass "
            "--loss NAME, e.g. --loss sparse_categorical_crossentropy or --loss mse"
        )
    compile_loss(model, spec)
    names = list(getattr(model, "output_names", None) or [])
    given = session.batch.labels
    kinds: list[str] = []

    def objective(outputs: Any) -> Any:
        from layergrad.core.keras_backend import quiet_import

        tf, _ = quiet_import()
        flat = tf.nest.flatten(outputs)
        kinds[:] = [label_kind(n) for n in output_losses(spec, names or [""] * len(flat))]
        labels = _labels_from_data(given, names, len(flat)) if given else None
        labels = labels or random_labels(flat, kinds, options.seed)
        y = tf.nest.pack_sequence_as(outputs, [tf.convert_to_tensor(a) for a in labels])
        return model.compute_loss(y=y, y_pred=outputs, training=options.training)

    owned = _owners(model)
    trace = run_trace(
        model,
        session.batch,
        training=options.training,
        reduce=options.reduce,
        objective=objective,
        variables=[getattr(v, "value", v) for v, _ in owned],
    )
    from layergrad.commands.scan import scan_report

    activations = scan_report(session, trace, None)
    rows = [
        _row(v, path, grad, activations.rows)
        for (v, path), grad in zip(owned, trace.variable_gradients, strict=True)
    ]
    notes = []
    if not given:
        notes.append(
            f"labels are random ({', '.join(sorted(set(kinds)))}), drawn to fit each output, "
            f"seed {options.seed}: pass --input with a `y` array for your own"
        )
    return WeightScanReport(
        model=session.model_meta,
        probe=session.probe_meta,
        loss=LossMeta(spec.name, spec.source, "data" if given else "random"),
        frozen=len(model.non_trainable_variables),
        variables=tuple(_flag_scale(rows)),
        notes=tuple(notes),
        activations=replace(activations, target="loss"),
    )


def _owners(model: Any) -> list[tuple[Any, str]]:
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


def _row(variable: Any, path: str, grad: np.ndarray | None, layer_rows: Any) -> VariableRow:
    status = status_of(grad)
    weight = np.asarray(variable.numpy(), dtype=np.float64)
    stats = None if grad is None else gradient_stats(grad, top=0)
    norm = float(np.sqrt(np.sum(weight * weight)))
    ratio = None if stats is None or not norm else stats.l2 / norm
    flags: tuple[Flag, ...] = ()
    if status == Status.NONE:
        flags = (Flag.BLOCKED,)
    elif status == Status.NONFINITE:
        flags = (Flag.NONFINITE,)
    elif grad is not None and grad.ndim and dead_fraction(grad) > DEAD_FRACTION:
        flags = (Flag.DEAD,)
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


def _flag_scale(rows: list[VariableRow]) -> list[VariableRow]:
    """Vanishing / exploding: an update ratio 1e6 below / above the median of the model's."""
    ratios = [r.update_ratio for r in rows if r.update_ratio and r.status == Status.OK]
    if len(ratios) < 3:
        return rows
    median = float(np.median(ratios))
    out = []
    for r in rows:
        ratio = r.update_ratio
        if ratio and r.status == Status.OK and not r.flags:
            if ratio < median / SCALE_RATIO:
                r = replace(r, flags=(Flag.VANISHING,))
            elif ratio > median * SCALE_RATIO:
                r = replace(r, flags=(Flag.EXPLODING,))
        out.append(r)
    return out
