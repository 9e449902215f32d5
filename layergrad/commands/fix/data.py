"""What `fix` reads from `--data` before it plans: each output's labels, each input's range.

One pass over the labels (`target_fit.LabelSummary`, for the head's units and loss) and one
over the inputs (min, max, mean |x|, per-feature mean and variance, for `Rescaling` or an
adapted `Normalization`), both bounded by `limit` samples and streamed batch by batch.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import numpy as np

from layergrad.commands.check.steps import output_ranks
from layergrad.commands.fix.weights import InputStats
from layergrad.core.errors import InputError, LayergradError
from layergrad.core.probe_options import PathLike
from layergrad.core.tf_types import KerasModel
from layergrad.data.stats import aggregates
from layergrad.files.file_info import FileInfo
from layergrad.model.target_fit import LabelSummary

if TYPE_CHECKING:
    from layergrad.data.sources import DataStream

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
    stats = _input_stats(labelled.stream, [s.name for s in specs], len(specs))
    return labels, stats


# how each of an input's totals adds up over batches (as the step's summaries do)
_KINDS = {
    "low": aggregates.MIN,
    "high": aggregates.MAX,
    "abs": aggregates.SUM,
    "size": aggregates.SUM,
    "count": aggregates.SUM,
    "sum": aggregates.SUM,
    "squares": aggregates.SUM,
}


def _input_stats(stream: DataStream, names: list[str], n: int) -> list[InputStats]:
    totals: list[dict[str, np.ndarray]] = [{} for _ in range(n)]
    try:
        for batch in stream.dataset:
            for i, tensor in enumerate(tuple(batch)[:n]):
                x = np.asarray(tensor.numpy())
                if x.dtype.kind != "f" or not x.size:
                    continue
                one = _batch_totals(x.astype(np.float64))
                if one is not None:
                    old = totals[i]
                    totals[i] = {
                        k: aggregates.combine([old[k], v], _KINDS[k]) if old else v
                        for k, v in one.items()
                    }
    except LayergradError:
        raise
    except Exception as exc:
        from layergrad.data.value_checks import reader_refusal

        refusal = reader_refusal(exc)  # NaN ids, values outside the input's dtype
        if refusal is not None:
            raise refusal from None
        return []
    out = []
    for name, s in zip(names, totals, strict=True):
        if not s:
            continue
        count = float(s["count"])
        mean = s["sum"] / count
        variance = np.maximum(s["squares"] / count - mean**2, 1e-12)
        out.append(
            InputStats(
                name,
                float(s["low"]),
                float(s["high"]),
                float(s["abs"]) / float(s["size"]),
                tuple(float(v) for v in np.atleast_1d(mean)),
                tuple(float(v) for v in np.atleast_1d(variance)),
            )
        )
    return out


def _batch_totals(x: np.ndarray) -> dict[str, np.ndarray] | None:
    """One batch's share of each total (`_KINDS`); None when it holds no finite value."""
    finite = x[np.isfinite(x)]
    if not finite.size:
        return None
    rows = x.reshape(-1, x.shape[-1]) if x.ndim > 1 else x.reshape(-1, 1)
    batch = {
        "low": finite.min(),
        "high": finite.max(),
        "abs": np.abs(finite).sum(),
        "size": finite.size,
        "count": rows.shape[0],
        "sum": np.nansum(rows, axis=0),
        "squares": np.nansum(rows**2, axis=0),
    }
    return {k: np.asarray(v, np.float64) for k, v in batch.items()}
