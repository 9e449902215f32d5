"""Never-trained BatchNormalization: its moving statistics are still the initial 0 and 1, so
in inference it does not normalize, and what a probe in inference finds is not what training
will see.

The rule, written once for every command (`inspect`, `scan`, `check`, each on one batch or
over `--data`): a model probed in inference whose BatchNormalization was never trained is
probed again in training mode when the probe finds something wrong (a result that is not ok,
a magnitude flag, an output that stops varying), and says so in the same words everywhere
(`in_right_mode`); a model that was trained, or a probe that found nothing wrong, is
judged as it is.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, TypeVar

import numpy as np

from layergrad.core.results import ConstantOutput, Result, ScanRow
from layergrad.core.tf_types import KerasModel
from layergrad.core.vocab import Finding, Status
from layergrad.model.layer_refs import iter_layers

if TYPE_CHECKING:
    from layergrad.commands.session import Session

T = TypeVar("T")
# flags that depend on magnitudes
SCALE_FLAGS = (Finding.DEAD, Finding.VANISHING, Finding.EXPLODING)
STRUCTURAL = ("softmax_one_unit", "zero_weights")  # constant whatever the mode and the data


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


def in_right_mode(
    session: Session, probe: Callable[[Session], T], wrong: Callable[[T], bool]
) -> tuple[Session, T, str | None]:
    """The rule applied to `probe(session)`, whatever its source (one batch or `--data`): made
    again in training mode when it found something `wrong` in inference and the model's
    BatchNormalization was never trained. Returns the session and what it found, kept, and the
    note every command says (None: the first probe is kept)."""
    found = probe(session)
    training = session.options.training
    untrained = [] if training or not wrong(found) else untrained_batchnorm(session.model)
    if not untrained:
        return session, found, None
    more = "..." if len(untrained) > 3 else ""
    said = (
        f"probed in training mode (batch statistics): {len(untrained)} BatchNormalization "
        f"layers ({', '.join(untrained[:3])}{more}) hold their initial moving statistics, so "
        "the model was never trained and inference does not normalize; training runs them "
        "like this"
    )
    session = replace(session, options=replace(session.options, training=True))
    return session, probe(session), said


def scan_wrong(rows: Sequence[ScanRow], constant: Sequence[ConstantOutput] = ()) -> bool:
    """Whether a scan found what a never-trained BatchNormalization makes in inference: a
    magnitude flag (dead, vanishing, exploding), or an output that stops varying for a reason
    other than the layer's own structure."""
    flagged = any(set(SCALE_FLAGS) & set(r.flags) for r in rows)
    return flagged or any(c.reason not in STRUCTURAL for c in constant)


def results_wrong(results: Sequence[Result]) -> bool:
    """Whether `inspect` found what a never-trained BatchNormalization makes in inference: a
    result that is not ok, or an ok one flagged dead, vanishing or exploding (as `scan_wrong`
    reads a scan's rows)."""
    from layergrad.diagnose.diagnoser import magnitude_flags

    return any(
        r.status != Status.OK or set(SCALE_FLAGS) & magnitude_flags(r.warnings) for r in results
    )
