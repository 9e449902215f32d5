"""Never-trained BatchNormalization: its moving statistics are still the initial 0 and 1, so
in inference it does not normalize. The rule every command applies: `inspect` probes such a
model in training mode (and says so), `scan` leaves out the magnitude flags it causes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from layergrad.core.results import ConstantOutput, ScanRow
from layergrad.core.tf_types import KerasModel
from layergrad.core.vocab import Flag
from layergrad.model.layer_refs import iter_layers

SCALE_FLAGS = (Flag.DEAD, Flag.VANISHING, Flag.EXPLODING)  # flags that depend on magnitudes
STRUCTURAL = ("softmax_one_unit", "zero_weights")  # constant whatever the mode and the data


def training_mode_note(untrained: Sequence[str]) -> str:
    """What `inspect` says in each result's warnings when it probed the model in training mode
    because of its never-trained BatchNormalization layers (`untrained_batchnorm`)."""
    more = "..." if len(untrained) > 3 else ""
    return (
        f"probed in training mode (batch statistics): {len(untrained)} BatchNormalization "
        f"layers ({', '.join(untrained[:3])}{more}) hold their initial moving statistics, so "
        "the model was never trained and inference does not normalize; training runs them "
        "like this"
    )


def untrained_batchnorm(model: KerasModel) -> list[str]:
    """BatchNormalization layers whose moving statistics are still their initial 0 and 1."""
    found = []
    for path, layer in iter_layers(model):
        mean, var = getattr(layer, "moving_mean", None), getattr(layer, "moving_variance", None)
        if mean is None or var is None or "BatchNormalization" not in type(layer).__name__:
            continue
        if not np.any(np.asarray(mean.numpy())) and np.all(np.asarray(var.numpy()) == 1):
            found.append(path)
    return found


def untrained_rows(
    model: KerasModel,
    training: bool,
    rows: Sequence[ScanRow],
    constant: Sequence[ConstantOutput] = (),
) -> tuple[tuple[ScanRow, ...], tuple[str, ...]]:
    """The rows without the magnitude flags of never-trained BatchNormalization in inference
    (artifacts, as its constant outputs are), and the note that says so; as they are (and no
    note) in training mode, for a trained model, or when nothing is left out."""
    untrained = [] if training else untrained_batchnorm(model)
    artifacts = [c for c in constant if c.reason not in STRUCTURAL] if untrained else []
    if not untrained or not (artifacts or any(set(SCALE_FLAGS) & set(r.flags) for r in rows)):
        return tuple(rows), ()
    rows = [replace(r, flags=tuple(f for f in r.flags if f not in SCALE_FLAGS)) for r in rows]
    note = (
        f"{len(untrained)} BatchNormalization layers ({', '.join(untrained[:3])}"
        f"{'...' if len(untrained) > 3 else ''}) hold their initial moving statistics "
        "(mean 0, variance 1): the model was never trained, so in inference they do not "
        "normalize and activations shrink or grow through depth in a way training never "
        "sees. Dead / vanishing / exploding flags and outputs that stop varying for that "
        "reason are left out; scan with --training to see what training sees"
    )
    return tuple(rows), (note,)
