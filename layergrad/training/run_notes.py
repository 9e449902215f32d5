"""What `GradientMonitor` says of a run it could not watch in full, and how it reads its
arguments: a model Keras built at its first step, a custom `train_step` whose loss or
gradients it cannot see (loss-only), Keras's logged loss, `every` as a whole number."""

from __future__ import annotations

import math
import numbers

from layergrad.core.results import Reason
from layergrad.core.vocab import Finding


def built_note(unmonitored: int) -> str:
    """What the report says when Keras's own first execution (`unmonitored` steps) built
    the model."""
    steps = "step 1" if unmonitored == 1 else f"steps 1-{unmonitored}"
    return (
        "Keras built the model during its first training step (a subclassed model, or a "
        f"Sequential without an Input): {steps} ran unmonitored, with Keras's logged loss; "
        f"the monitor starts at step {unmonitored + 1}"
    )


def blind_note(model: object, sees_gradients: bool | None) -> str:
    """Why the record of a custom train_step is partial."""
    name = type(model).__name__
    if not sees_gradients:
        return (
            f"loss-only: the train_step of {name} applies its gradients where the monitor "
            "cannot see them (not through model.optimizer's apply or apply_gradients); only "
            "the loss Keras logs was recorded, no gradient, no checkpoint"
        )
    return (
        f"the train_step of {name} computes its loss without model.compute_loss: the loss "
        "of each step is the one Keras logs (with steps_per_execution > 1, only the last "
        "step of each execution has one)"
    )


def loss_only_nonfinite(step: int, epoch: int, batch: int) -> Reason:
    """The first NaN/Inf loss of a run whose gradients the monitor cannot see (`step` from 0)."""
    return Reason(
        Finding.NONFINITE,
        f"step {step + 1} (epoch {epoch}, batch {batch}): the loss is "
        "NaN/Inf; the monitor cannot see this train_step's gradients, so it cannot name "
        "the layer",
        layer=None,
        step=step + 1,
    )


def logged_loss(logs: dict[str, object] | None) -> float | None:
    """The loss in Keras's logs after an execution, if it has one."""
    value = (logs or {}).get("loss")
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def whole_steps(every: object, name: str = "every") -> int:
    """`every` (or the argument `name`) as a whole number of steps, at least 1 (never
    rounded)."""
    ok = isinstance(every, numbers.Integral) and not isinstance(every, bool)
    if not ok and isinstance(every, float) and math.isfinite(every) and every == int(every):
        ok = True
    if not ok or int(every) < 1:  # type: ignore[call-overload]
        raise ValueError(f"{name} must be at least 1, a whole number of steps: {name}={every!r}")
    return int(every)  # type: ignore[call-overload]
