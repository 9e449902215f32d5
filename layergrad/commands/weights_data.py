"""`scan --wrt weights --data`: the training gradient over every sample of a data set.

The gradient of the loss averaged over all samples (one full-batch `tape.gradient`, streamed:
`engine/weight_stream.py`), each variable's update ratio and flags exactly as for one probe
batch (`weight_scan.py`), and per layer the gradient's signal-to-noise ratio across batches.
Labels are the data's own, read with the inputs from the same rows (`data/label_stream.py`:
`y` or `y:NAME` in a `.npz`, an image folder's class sub-folders, `y` of a data function's
`(x, y)`), else drawn at random per batch to fit each output, seeded. A variable that is
not ok gets its causes from one batch, the first, read again (with its labels) and scanned
as `scan --wrt weights` scans its probe batch. Nothing here prints.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from layergrad.core.errors import InputError
from layergrad.core.probe_options import OneBatch, PathLike, ProbeOptions, Progress
from layergrad.core.results import LossMeta, ProbeMeta, VariableRow, WeightScanReport
from layergrad.core.tf_types import Strategy, Tensor, TensorTree
from layergrad.core.vocab import Status

if TYPE_CHECKING:
    from layergrad.data.label_stream import Labelled
    from layergrad.data.sources import DataStream
    from layergrad.engine.loader import LoadedModel


def scan_weights_data(
    path: PathLike,
    options: ProbeOptions,
    *,
    loss: str | None = None,
    imports: Sequence[str] = (),
    unsafe: bool = False,
    on_progress: Progress | None = None,
) -> WeightScanReport:
    """`api.scan_weights_model` over every sample of `options.data`.

    Raises:
        InputError: no loss, labels that do not fit the outputs, a batch the model fails on.
    """
    from layergrad.commands import session

    loaded, warnings, strategy = session.load(path, options, imports=imports, unsafe=unsafe)
    return weights_over(loaded, warnings, strategy, options, loss, on_progress, path)


def weights_over(
    loaded: LoadedModel,
    warnings: Sequence[str],
    strategy: Strategy,
    options: ProbeOptions,
    loss: str | None = None,
    on_progress: Progress | None = None,
    path: PathLike | None = None,
    given: Labelled | None = None,
) -> WeightScanReport:
    """`scan_weights_data` of a model loaded already (`session.load`, under `strategy`).

    `given` is the data as `check` read it with its labels (`open_labelled` without
    `strict`; `Labelled(None)` for random labels, which the outputs can take); without it
    the labels are read here, strictly."""
    from layergrad.commands import data_meta, over_data, weight_scan
    from layergrad.core.keras_backend import quiet_import
    from layergrad.data.fingerprint import data_sha256
    from layergrad.data.label_stream import open_labelled
    from layergrad.engine.compiled_loss import (
        compile_loss,
        find_loss,
        label_kind,
        label_request,
        output_keys,
        output_losses,
    )
    from layergrad.engine.weight_stream import stream_weight_gradients

    tf, _ = quiet_import()
    path = loaded.info.path if path is None else path
    model = loaded.model
    spec = find_loss(loaded.info.compile_config, loss)
    if spec is None:
        raise InputError(
            f"{os.fspath(path)} has no compiled loss (it was saved without model.compile); pass "
            "--loss NAME, e.g. --loss sparse_categorical_crossentropy or --loss mse"
        )
    with strategy.scope():
        compile_loss(model, spec)
    names = list(getattr(model, "output_names", None) or [])
    # the labels come with the inputs from the same rows, cut into the same shard
    request = label_request(model, spec)
    data = options.data_set
    assert data is not None
    labelled = given or open_labelled(
        data.path, over_data.data_specs(model), request, options.rows, data.limit,
        over_data.shard_of(options), first_sample=data.first_sample,
    )  # fmt: skip
    labels = labelled.stream is not None
    batches = labelled.stream or over_data.open_stream(model, options)
    kinds = [
        label_kind(n) for n in output_losses(spec, names or [""], output_keys(model, len(names)))
    ]

    def objective(outputs: TensorTree, given: TensorTree | None, samples: Tensor) -> Tensor:
        flat = tf.nest.flatten(outputs)
        if given:
            ys = list(given)
        else:
            each = [
                label_kind(n)
                for n in output_losses(
                    spec, names or [""] * len(flat), output_keys(model, len(flat))
                )
            ]
            ys = random_labels(flat, each, options.seed, samples)
        y = tf.nest.pack_sequence_as(outputs, ys[: len(flat)])
        loss = model.compute_loss(y=y, y_pred=outputs, training=options.training)
        # under a strategy of R replicas Keras divides each replica's loss by R (its
        # gradients are summed across replicas by `fit`); the step weights each replica's
        # gradient by its own samples instead, so it takes the replica's loss unscaled
        replicas = tf.distribute.get_strategy().num_replicas_in_sync
        return loss * tf.cast(replicas, loss.dtype) if replicas > 1 else loss

    # each sample's index in the data seeds its random labels; the labels follow the inputs
    owned = weight_scan.variable_owners(model)
    totals = stream_weight_gradients(
        model,
        [getattr(v, "value", v) for v, _ in owned],
        [layer for _, layer in owned],
        objective,
        batches,
        strategy,
        training=options.training,
        on_progress=on_progress,
    )
    rows = [
        weight_scan.variable_row(v, layer, grad, ())
        for (v, layer), grad in zip(owned, totals.gradients, strict=True)
    ]
    if any(r.status != Status.OK for r in rows):
        rows = _with_batch_causes(loaded, warnings, batches, options, loss, rows)
    notes = []
    if not labels:
        notes.append(
            f"labels are random ({', '.join(sorted(set(kinds)))}), drawn per batch to fit each "
            f"output, seed {options.seed}: give your own with --data as `y` (one output) or "
            "`y:NAME` in a .npz, class sub-folders of an image folder, or (x, y) from a data "
            "function"
        )
    if labelled.classes:
        notes.append(labelled.classes_note())
    return WeightScanReport(
        model=data_meta.model_meta(path, loaded, warnings),
        probe=ProbeMeta(
            source=batches.source,
            seed=None if labels else options.seed,
            batch_size=options.rows,
            training=options.training,
            reduce=options.reduce,
            samples=totals.samples,
            replicas=totals.replicas,
            data_sha256=data_sha256(batches.source),
        ),
        loss=LossMeta(spec.name, spec.source, "data" if labels else "random"),
        frozen=len(model.non_trainable_variables),
        variables=tuple(weight_scan.flag_update_ratio_trend(rows)),
        notes=tuple(notes),
        noise=totals.noise,
    )


def random_labels(
    outputs: Sequence[Tensor], kinds: Sequence[str], seed: int, samples: Tensor
) -> list[Tensor]:
    """Labels that fit each output and its loss (as `loss.random_labels`), drawn in the graph
    from `seed` and the batch's first sample index, so every batch gets its own."""
    from layergrad.core.keras_backend import quiet_import

    tf, _ = quiet_import()
    base = tf.stack([tf.constant(seed + 1, tf.int64), tf.cast(samples[0], tf.int64)])
    labels = []
    for k, (out, kind) in enumerate(zip(outputs, kinds, strict=True)):
        key = base + tf.constant([0, 1 << 40], tf.int64) * k
        shape = tf.shape(out)
        classes = out.shape[-1] if out.shape.rank and out.shape[-1] is not None else 1
        if kind in ("ids", "one_hot"):
            ids = tf.random.stateless_uniform(
                shape[:-1], key, minval=0, maxval=max(int(classes), 1), dtype=tf.int32
            )
            labels.append(ids if kind == "ids" else tf.one_hot(ids, int(classes)))
        elif kind == "bits":
            bits = tf.random.stateless_uniform(shape, key, minval=0, maxval=2, dtype=tf.int32)
            labels.append(tf.cast(bits, tf.float32))
        elif kind == "positive":
            labels.append(tf.random.stateless_uniform(shape, key))
        else:
            labels.append(tf.random.stateless_normal(shape, key))
    return labels


def _with_batch_causes(
    loaded: LoadedModel,
    warnings: Sequence[str],
    batches: DataStream,
    options: ProbeOptions,
    loss: str | None,
    rows: list[VariableRow],
) -> list[VariableRow]:
    """The causes of the rows that are not ok, from `scan --wrt weights` of the first batch."""
    from layergrad.commands import weight_scan
    from layergrad.commands.session import Session
    from layergrad.diagnose.diagnoser import Diagnoser

    batch = batches.batch(0)  # with its labels when the stream has them
    one = replace(options, source=OneBatch())
    diagnoser = Diagnoser(loaded.model, batch, loaded.info.graph, one.training, one.reduce)
    session = Session(
        loaded.info.path, loaded.model, loaded.info, batch, one, diagnoser, tuple(warnings)
    )
    found = {r.variable: r for r in weight_scan.scan_weights(session, loss).variables}
    out = []
    for row in rows:
        if row.status != Status.OK:
            seen = found.get(row.variable)
            causes = seen.causes if seen is not None and seen.causes else row.causes
            if not causes:
                from layergrad.diagnose import causes as why

                causes = (why.variable_not_used(row.layer, row.name, row.status),)
            row = replace(row, causes=causes)
        out.append(row)
    return out
