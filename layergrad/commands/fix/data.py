"""What `fix` reads from `--data` before it plans: each output's labels, each input's range.

One pass over the labels (`target_fit.LabelSummary`, for the head's units and loss) and one
over the inputs (min, max, mean |x|, per-feature mean and variance, for `Rescaling` or an
adapted `Normalization`), both bounded by `limit` samples and streamed batch by batch.
"""

from __future__ import annotations

import os

import numpy as np

from layergrad.commands.check.steps import output_ranks
from layergrad.commands.fix.weights import InputStats
from layergrad.core.errors import InputError, LayergradError
from layergrad.core.probe_options import PathLike
from layergrad.core.tf_types import KerasModel
from layergrad.files.file_info import FileInfo
from layergrad.model.target_fit import LabelSummary

READ_LIMIT = 100_000  # samples read for the statistics when no --limit is given


def data_facts(
    model: KerasModel, info: FileInfo, data: PathLike, limit: int | None, batch_size: int
) -> tuple[dict[str, LabelSummary], list[InputStats]]:
    """(labels per output name, statistics per float input) of `data` for this model.

    Raises:
        InputError: data without labels (nothing could be trained on it).
    """
    from layergrad.commands.over_data import data_specs
    from layergrad.data.label_stream import open_labelled
    from layergrad.data.labels import summarise_batches
    from layergrad.engine.compiled_loss import label_request
    from layergrad.model.loss_forms import find_loss

    specs = data_specs(model)
    request = label_request(model, find_loss(info.compile_config, None))
    rows = min(limit or READ_LIMIT, READ_LIMIT)
    labelled = open_labelled(os.fspath(data), specs, request, batch_size, rows, strict=False)
    if labelled.stream is None:  # the evidence needs labels, as `fit` does
        raise InputError(f"layergrad fix --data needs labels: {labelled.missing}")
    names, ranks = output_ranks(model)
    labels = summarise_batches(labelled.label_batches(), names, ranks)
    stats = _input_stats(labelled, [s.name for s in specs], len(specs))
    return labels, stats


def _input_stats(labelled: object, names: list[str], n: int) -> list[InputStats]:
    stream = getattr(labelled, "stream", None)
    if stream is None:
        return []
    sums: list[dict[str, object]] = [{} for _ in range(n)]
    try:
        for batch in stream.dataset:
            for i, tensor in enumerate(tuple(batch)[:n]):
                x = np.asarray(tensor.numpy())
                if x.dtype.kind != "f" or not x.size:
                    continue
                _add(sums[i], x.astype(np.float64))
    except LayergradError:
        raise
    except Exception as exc:
        from layergrad.data.value_checks import reader_refusal

        refusal = reader_refusal(exc)  # NaN ids, values outside the input's dtype
        if refusal is not None:
            raise refusal from None
        return []
    out = []
    for name, s in zip(names, sums, strict=True):
        if not s:
            continue
        count = float(s["count"])  # type: ignore[arg-type]
        mean = np.asarray(s["sum"]) / count
        variance = np.maximum(np.asarray(s["squares"]) / count - mean**2, 1e-12)
        out.append(
            InputStats(
                name,
                float(s["low"]),  # type: ignore[arg-type]
                float(s["high"]),  # type: ignore[arg-type]
                float(s["abs"]) / float(s["size"]),  # type: ignore[arg-type]
                tuple(float(v) for v in np.atleast_1d(mean)),
                tuple(float(v) for v in np.atleast_1d(variance)),
            )
        )
    return out


def _add(s: dict[str, object], x: np.ndarray) -> None:
    finite = x[np.isfinite(x)]
    if not finite.size:
        return
    rows = x.reshape(-1, x.shape[-1]) if x.ndim > 1 else x.reshape(-1, 1)
    s["low"] = min(float(s.get("low", np.inf)), float(finite.min()))  # type: ignore[arg-type]
    s["high"] = max(float(s.get("high", -np.inf)), float(finite.max()))  # type: ignore[arg-type]
    s["abs"] = float(s.get("abs", 0.0)) + float(np.abs(finite).sum())  # type: ignore[arg-type]
    s["size"] = int(s.get("size", 0)) + int(finite.size)  # type: ignore[call-overload]
    s["count"] = int(s.get("count", 0)) + rows.shape[0]  # type: ignore[call-overload]
    s["sum"] = np.asarray(s.get("sum", 0.0)) + np.nansum(rows, axis=0)
    s["squares"] = np.asarray(s.get("squares", 0.0)) + np.nansum(rows**2, axis=0)
