"""The training gradient: d loss / d every trainable variable, of the probe batch or `--data`.

Answers Keras's "Gradients do not exist for variables [...] when minimizing the loss" before
anyone trains: which variables get None, zero or NaN from the loss (the file's compiled one, or
`--loss NAME`), and why. The probe batch (a data source of one batch) or `--data` goes through
the one step over batches (`data_step.run_stream` with a `WeightPlan`); a variable that is not
ok gets its causes from a trace of the first batch, diagnosed as `scan` diagnoses.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from layergrad.commands.scan import scan_report
from layergrad.commands.session import Session, open_labels, open_stream, session_for
from layergrad.commands.weight_rows import (
    dead_layers,
    flag_update_ratio_trend,
    variable_row,
    with_causes,
)
from layergrad.core.errors import InputError
from layergrad.core.probe_options import PathLike, ProbeOptions, Progress
from layergrad.core.results import LossMeta, ScanReport, VariableRow, WeightScanReport
from layergrad.core.tf_runtime import tf
from layergrad.core.tf_types import KerasModel, KerasVariable, Strategy, Tensor, TensorTree
from layergrad.core.vocab import Status
from layergrad.data.sources import DataStream, ProbeStream
from layergrad.engine import compiled_loss as cl
from layergrad.engine.data_step import Plan, run_stream
from layergrad.engine.layer_calls import NONFINITE_LABELS
from layergrad.engine.projection import project
from layergrad.engine.trace import Trace, run_trace
from layergrad.engine.weight_gradients import WeightPlan, WeightTotals
from layergrad.model.layer_refs import iter_layers, variable_names
from layergrad.model.loss_forms import LossSpec, find_loss

if TYPE_CHECKING:
    from layergrad.data.label_stream import Labelled


def scan_weights(
    session: Session,
    loss: str | None = None,
    projection: bool = False,
    layers: bool = True,
    on_progress: Progress | None = None,
    given: Labelled | None = None,
) -> WeightScanReport:
    """Gradient of the loss with respect to every trainable variable, over the session's
    batches: the probe batch, or every sample of `--data` (with each layer's noise).

    Args:
        session: an opened model and its batches (`session.open_source`).
        loss: a `keras.losses` name overriding the compiled loss; None uses the file's.
        projection: without any loss, differentiate the seeded random projection of the
            outputs instead (what `check` judges update ratios on; loss name "projection").
        layers: trace the probe batch for the scan of every layer and the dead ReLU layers
            (what `check` reads); without it only for the causes of a variable that is not ok.
        given: over `--data`, the data as `check` read it with its labels (`open_labelled`
            without `strict`; `Labelled(None)` for random labels, which the outputs can
            take); without it the labels are read here, strictly.

    Raises:
        InputError: the file has no compiled loss and `loss` is None, or the loss is unknown.
    """
    model, options = session.model, session.options
    strategy = session.strategy or tf.distribute.get_strategy()
    spec = _loss(model, session.info.compile_config, loss, session.path, strategy, projection)
    labelled = None
    if session.probe is not None:
        read = session.batch.labels if spec is not None else None
        rows = session.batch.batch_size
        labels: Sequence[np.ndarray] = _labels_from_data(read, model, rows) if read else []
        own = bool(read)
        stream: DataStream = ProbeStream(session.batch.arrays, labels)
        first = lambda: (session, labels)  # noqa: E731
        drawn = "drawn to fit each output"
        yours = _your_labels(model)
    else:
        assert spec is not None  # a loss, or the error above
        labelled = given or open_labels(model, cl.label_request(model, spec), options)
        own = labelled.stream is not None
        # the data's own stream only when it has no labels: a data function is called once
        stream = labelled.stream or session.opened or open_stream(model, options, strategy)
        session = replace(session, opened=stream)
        first = lambda: _first_batch(session, stream)  # noqa: E731
        drawn = "drawn per sample to fit each output"
        yours = (
            "give your own with --data as `y` (one output) or `y:NAME` in a .npz, class "
            "sub-folders of an image folder, or (x, y) from a data function"
        )
    layers = layers and stream.probe  # over the data only the causes of rows not ok
    run = _run(model, spec, stream, strategy, options, first, layers, on_progress)
    notes = []
    if spec is None:
        notes.append("no loss: the gradient is that of a seeded random projection of the outputs")
    elif not own:
        kinds = ", ".join(sorted(set(run.kinds)))
        notes.append(f"labels are random ({kinds}), {drawn}, seed {options.seed}: {yours}")
    if labelled is not None and labelled.classes:
        notes.append(labelled.classes_note())
    return WeightScanReport(
        model=session.model_meta,
        probe=session.probe_meta_of(run.totals, seeded=spec is None or not own),
        loss=LossMeta("projection", "random", "none")
        if spec is None
        else LossMeta(spec.name, spec.source, "data" if own else "random"),
        frozen=len(frozen_variables(model)),
        variables=run.rows,
        notes=tuple(notes),
        dead_layers=run.dead_layers,
        activations=run.activations,
        noise=() if session.probe is not None or run.totals is None else run.totals.noise,
    )


@dataclass(frozen=True)
class _Run:
    """The rows, the label kinds, the stream's totals, the first batch's scan if traced."""

    rows: tuple[VariableRow, ...]
    kinds: tuple[str, ...]
    totals: WeightTotals | None = None  # None: the one batch's trace gave the gradients
    activations: ScanReport | None = None
    dead_layers: tuple[tuple[str, float], ...] = ()


def _run(
    model: KerasModel,
    spec: LossSpec | None,
    stream: DataStream,
    strategy: Strategy,
    options: ProbeOptions,
    first: Callable[[], tuple[Session, Sequence[np.ndarray]]],  # with labels in output order
    layers: bool,
    on_progress: Progress | None,
) -> _Run:
    """The variables' gradients over `stream`; the first batch traced for the causes of rows
    not ok, or with `layers` for its scan of the layers (then also a probe's gradients)."""
    owned = variable_owners(model)
    variables = [getattr(v, "value", v) for v, _ in owned]
    kinds: list[str] = []
    objective = _objective(model, spec, options, kinds)

    def trace(variables: Sequence[KerasVariable] = ()) -> tuple[Trace, Session]:
        session, labels = first()
        given = [tf.convert_to_tensor(a) for a in labels]
        samples = tf.range(session.batch.batch_size, dtype=tf.int64)
        return run_trace(
            session.model, session.batch, training=options.training, reduce=options.reduce,
            seed=options.seed, variables=variables,
            objective=lambda outputs: objective(outputs, given or None, samples),
        ), session  # fmt: skip

    totals, traced = None, None
    if layers and stream.probe:
        traced = trace(variables)
        gradients = traced[0].variable_gradients
    else:
        weights = WeightPlan(variables, [layer for _, layer in owned], objective)
        plan = Plan(targets=(), training=options.training, weights=weights)
        totals = run_stream(model, plan, stream, strategy, on_progress).weights
        assert totals is not None  # the plan asks for the weights
        gradients = totals.gradients
    names = variable_names(owned)
    rows = [
        variable_row(v, layer, g, name)
        for (v, layer), g, name in zip(owned, gradients, names, strict=True)
    ]
    if traced is None and (layers or any(r.status != Status.OK for r in rows)):
        traced = trace()
    if traced is None:
        return _Run(tuple(flag_update_ratio_trend(rows)), tuple(kinds), totals)
    report = scan_report(traced[1], traced[0], None)
    activations = replace(report, target="loss" if spec is not None else None)
    rows = [with_causes(r, activations.rows) for r in rows]
    dead = dead_layers(traced[0], dict(iter_layers(model)))
    return _Run(tuple(flag_update_ratio_trend(rows)), tuple(kinds), totals, activations, dead)


def _objective(
    model: KerasModel, spec: LossSpec | None, options: ProbeOptions, kinds: list[str]
) -> Callable[[TensorTree, TensorTree | None, Tensor], Tensor]:
    """A batch's loss from (outputs, labels or None, sample indices): `spec`'s, else the seeded
    projection of the outputs. Random labels fit each output (kinds into `kinds`), drawn for
    each sample (`compiled_loss.random_labels`)."""
    names = list(getattr(model, "output_names", None) or [])

    def objective(outputs: TensorTree, given: TensorTree | None, samples: Tensor) -> Tensor:
        if spec is None:
            reducer = {"sum": tf.reduce_sum, "mean": tf.reduce_mean}[options.reduce]
            return project(outputs, samples, options.seed, reducer)
        flat = tf.nest.flatten(outputs)
        keys = cl.output_keys(model, len(flat))
        kinds[:] = [
            cl.label_kind(n) for n in cl.output_losses(spec, names or [""] * len(flat), keys)
        ]
        if given:  # a NaN/Inf label makes the loss, and every gradient, NaN: said as such
            given = [tf.debugging.assert_all_finite(y, NONFINITE_LABELS) if y.dtype.is_floating
                     else y for y in tf.nest.flatten(given)]  # fmt: skip
        ys = list(given) if given else cl.random_labels(flat, kinds, options.seed, samples)
        y = tf.nest.pack_sequence_as(outputs, ys[: len(flat)])
        loss = model.compute_loss(y=y, y_pred=outputs, training=options.training)
        # under a strategy of R replicas Keras divides each replica's loss by R (its
        # gradients are summed across replicas by `fit`); the step weights each replica's
        # gradient by its own samples instead, so it takes the replica's loss unscaled
        replicas = tf.distribute.get_strategy().num_replicas_in_sync
        return loss * tf.cast(replicas, loss.dtype) if replicas > 1 else loss

    return objective


def _loss(
    model: KerasModel, config: Mapping[str, object], loss: str | None, path: PathLike,
    strategy: Strategy, projection: bool = False,
) -> LossSpec | None:  # fmt: skip
    """The loss to differentiate, compiled into `model`; None for the projection (an
    `InputError` when there is no loss in the file nor `loss`, and no `projection`)."""
    spec = find_loss(config, loss)
    if spec is None and not projection:
        raise InputError(
            f"{os.fspath(path)} has no compiled loss (it was saved without model.compile); pass "
            "--loss NAME, e.g. --loss sparse_categorical_crossentropy or --loss mse"
        )
    if spec is not None:
        with strategy.scope():
            cl.compile_loss(model, spec)
    return spec


def _first_batch(session: Session, batches: DataStream) -> tuple[Session, Sequence[np.ndarray]]:
    """The data's first batch (read again, with its labels) as a session of one batch."""
    batch = batches.batch(0)
    one = session_for(session, session.options, session.warnings, batch)
    return one, list((batch.labels or {}).values())


def variable_owners(model: KerasModel) -> list[tuple[KerasVariable, str]]:
    """Each trainable variable once, with the path of the layer that holds it."""
    owned: dict[int, tuple[KerasVariable, str]] = {}
    for path, layer in iter_layers(model):
        if not isinstance(getattr(layer, "layers", None), list):  # a nested model's layers follow
            for v in layer.trainable_variables:
                owned.setdefault(id(v), (v, path))
    return list(owned.values())


def frozen_variables(model: KerasModel) -> list[KerasVariable]:
    """The weights a user froze: variables a layer made to be trained (its kernel, a
    BatchNormalization's gamma and beta) that are not trainable now. State never trained (moving
    statistics, a `seed_generator_state`, a metric's totals) is not frozen: Keras keeps a layer's
    trainable-by-design variables in `_trainable_variables` whatever its `trainable` flag says."""
    layers = [layer for _, layer in iter_layers(model)]
    made = [v for layer in layers for v in getattr(layer, "_trainable_variables", [])]
    return list({id(v): v for v in made if not v.trainable}.values())


def _your_labels(model: KerasModel) -> str:
    """How to give `--input` labels for this model: `y`, or `y:NAME` per output (what
    `_labels_from_data` takes)."""
    names = list(getattr(model, "output_names", None) or [])
    if len(names) < 2:
        return "pass --input with a `y` array for your own"
    listed = ", ".join(f"`y:{n}`" for n in names)
    return f"pass --input with an array per output ({listed}) for your own"


def _labels_from_data(
    given: dict[str, np.ndarray], model: KerasModel, rows: int
) -> list[np.ndarray]:
    """`y` (one output) or `y:NAME` per output, in output order, each of the inputs' `rows`."""
    names = list(getattr(model, "output_names", None) or [])
    try:
        count = len(model.outputs)
    except (AttributeError, ValueError, TypeError):  # a subclassed model
        count = max(len(names), 1)
    if "y" in given and count == 1:
        chosen = {"y": given["y"]}
    else:
        missing = [n for n in names if f"y:{n}" not in given]
        if missing or len(names) != count:
            raise InputError(
                f"the labels in --input are {sorted(given)}, but the model has {count} outputs "
                f"({', '.join(names)}); save one array per output as `y:NAME` (or `y` for one "
                "output)"
            )
        chosen = {f"y:{n}": given[f"y:{n}"] for n in names}
    for key, labels in chosen.items():
        if (held := labels.shape[0] if labels.ndim else 1) != rows:
            raise InputError(
                f"the labels {key} in --input have {held} rows and the inputs {rows}; give "
                "every array the same number of samples"
            )
    return list(chosen.values())
