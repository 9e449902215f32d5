"""TensorBoard summaries of a monitored run (`GradientMonitor(log_dir=...)`): per layer
`layergrad/update_ratio/`, `layergrad/grad_l2/`, `layergrad/dead_fraction/` scalars and a
`layergrad/gradient/` histogram, at each checkpoint."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from layergrad.core.fit_results import Checkpoint
from layergrad.core.tf_runtime import tf
from layergrad.core.tf_types import SummaryWriter
from layergrad.training.step_hook import LayerVariables


def write_summaries(
    writer: SummaryWriter,
    checkpoint: Checkpoint,
    read: dict[str, np.ndarray],
    at: int,
    layers: Sequence[LayerVariables],
) -> None:
    """Write one checkpoint's scalars and gradient histograms (row `at` of `read`)."""
    from tensorboard.plugins.histogram import metadata as histogram_metadata

    counts, ranges = read["histogram"][at], read["ranges"][at]
    position = {e.path: i for i, e in enumerate(layers)}
    with writer.as_default():
        for row in checkpoint.layers:
            for name, value in (
                ("update_ratio", row.update_ratio),
                ("grad_l2", row.grad_l2),
                ("dead_fraction", row.dead_fraction),
            ):
                if value is not None:
                    tf.summary.scalar(f"layergrad/{name}/{row.layer}", value, checkpoint.step)
            index = position[row.layer]
            if not layers[index].variables:
                continue
            low, high = (float(v) for v in ranges[index])
            edges = np.linspace(low, high, counts.shape[1] + 1)
            buckets = np.stack([edges[:-1], edges[1:], counts[index]], axis=1)
            tag = f"layergrad/gradient/{row.layer}"
            tf.summary.write(
                tag,
                tf.constant(buckets, tf.float64),
                step=checkpoint.step,
                metadata=histogram_metadata.create_summary_metadata(tag, ""),
            )
