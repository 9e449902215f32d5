"""Classify each gradient (ok / none / zero / nonfinite) and name its likely causes."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from layergrad.graph import ModelGraph
from layergrad.probe import Activation, ProbeRun
from layergrad.results import Cause, Endpoint, Result
from layergrad.stats import gradient_stats, status_of


def endpoint(act: Activation) -> Endpoint:
    """The report's view of a captured activation."""
    return Endpoint(layer=act.site.ref, shape=act.shape, dtype=act.dtype)


Explain = Callable[[str, Activation, Activation], list[Cause]]
CHECKED = (
    "graph connectivity, dtypes on the path, the ops of the layer where the gradient is lost, "
    "ReLU/sigmoid/tanh/softmax activations, forward and backward NaN/Inf, float16, training mode"
)


def build_results(
    run: ProbeRun, graph: ModelGraph | None, explain: Explain | None = None
) -> tuple[Result, ...]:
    """One Result per (target, first source) pair of a probe run, with causes for non-ok ones.

    `explain(status, source, target)` is called for a non-ok result that the graph and dtypes
    do not already explain (it runs another pass, so the ok path never pays for it).
    """
    source = run.sources[0]
    results = []
    for target, grads in zip(run.targets, run.gradients, strict=True):
        grad = grads[0]
        status = status_of(grad)
        causes: tuple[Cause, ...] = ()
        if status != "ok":
            causes = static_causes(source, target, graph)
            if explain is not None and not any(c.code == "not_downstream" for c in causes):
                causes = _dedupe([*causes, *explain(status, source, target)])
            if not causes:
                causes = (unknown_cause(CHECKED),)
        results.append(
            Result(
                source=endpoint(source),
                target=endpoint(target),
                status=status,
                gradient=None if grad is None else gradient_stats(grad),
                causes=causes,
                warnings=()
                if status != "ok" or grad is None
                else warnings_for(grad, source, target),
                array=grad,
            )
        )
    return tuple(results)


def static_causes(
    source: Activation, target: Activation, graph: ModelGraph | None
) -> tuple[Cause, ...]:
    """Causes visible without another pass: the graph's connectivity and integer dtypes."""
    causes: list[Cause] = []
    connected = _depends(graph, target, source)
    if connected is False:
        causes.append(_not_downstream(source, target, graph))
    for act in (source, target):
        if not act.is_float:
            causes.append(integer_cause(act))
    return tuple(causes)


def unknown_cause(checked: str) -> Cause:
    """The cause to report when no check explains a non-ok result: say what was checked."""
    return Cause(
        code="unknown",
        layer=None,
        message=f"no known cause found; checked: {checked}",
        hint="save the gradient with --save-gradient and inspect the layers between the two",
    )


def _depends(graph: ModelGraph | None, target: Activation, source: Activation) -> bool | None:
    if graph is None:
        return None
    return graph.depends(
        target.site.path, source.site.path, to_call=target.site.call, frm_call=source.site.call
    )


def _not_downstream(source: Activation, target: Activation, graph: ModelGraph | None) -> Cause:
    src, dst = source.site.ref, target.site.ref
    if _depends(graph, source, target):
        message = f"{dst!r} comes before {src!r}: {src!r} depends on {dst!r}, not the reverse"
        hint = f"swap them: --from {dst} --to {src}"
    else:
        message = (
            f"{dst!r} does not depend on {src!r}: no chain of layers leads from one to the "
            "other (a sibling branch or an unrelated output)"
        )
        hint = (
            "pick a --to layer after --from on the same path; `layergrad layers MODEL` shows "
            "each layer's inbound layers"
        )
    return Cause(code="not_downstream", layer=dst, message=message, hint=hint)


def integer_cause(act: Activation) -> Cause:
    """`integer_path` at an activation whose dtype is not floating-point."""
    return Cause(
        code="integer_path",
        layer=act.site.ref,
        message=(
            f"{act.site.ref!r} is {act.dtype}: gradients are only defined for floating-point "
            "tensors, so the tape returns None"
        ),
        hint=(
            "take the gradient from the first floating-point layer instead (e.g. the Embedding "
            "output rather than the integer ids)"
        ),
    )


def _dedupe(causes: list[Cause]) -> tuple[Cause, ...]:
    seen: set[tuple[str, str | None]] = set()
    out = []
    for cause in causes:
        if (cause.code, cause.layer) not in seen:
            seen.add((cause.code, cause.layer))
            out.append(cause)
    return tuple(out)


VANISHING, EXPLODING, MOSTLY_ZERO = 1e-7, 1e6, 0.5


def warnings_for(grad: np.ndarray, source: Activation, target: Activation) -> tuple[str, ...]:
    """Warnings for an `ok` gradient that still looks wrong.

    Vanishing: max |g| below 1e-7 per unit of the `from` activation's mean size (a change of
    `from` by its own size moves sum(to) by less than that). Exploding: above 1e6. Mostly
    zero: more than half of the values are exactly 0.
    """
    out = []
    zeros = float(np.mean(grad == 0))
    if zeros > MOSTLY_ZERO:
        out.append(
            f"{zeros:.0%} of the gradient is exactly zero: dead units or inactive paths "
            "between the two layers"
        )
    size = float(np.mean(np.abs(source.value.astype(np.float64))))
    gain = float(np.max(np.abs(grad.astype(np.float64)))) * (size if size > 0 else 1.0)
    if gain < VANISHING:
        out.append(
            f"vanishing: max |g| x mean |{source.site.ref}| = {gain:.1e}; moving "
            f"{source.site.ref} barely moves {target.site.ref}"
        )
    elif gain > EXPLODING:
        out.append(
            f"exploding: max |g| x mean |{source.site.ref}| = {gain:.1e}; a small change of "
            f"{source.site.ref} moves {target.site.ref} enormously"
        )
    return tuple(out)
