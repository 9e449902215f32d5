"""Classify each gradient (ok / none / zero / nonfinite) and name its likely causes."""

from __future__ import annotations

from layergrad.graph import ModelGraph
from layergrad.probe import Activation, ProbeRun
from layergrad.results import Cause, Endpoint, Result
from layergrad.stats import gradient_stats, status_of


def endpoint(act: Activation) -> Endpoint:
    """The report's view of a captured activation."""
    return Endpoint(layer=act.site.ref, shape=act.shape, dtype=act.dtype)


def build_results(run: ProbeRun, graph: ModelGraph | None) -> tuple[Result, ...]:
    """One Result per (target, first source) pair of a probe run, with causes for non-ok ones."""
    source = run.sources[0]
    results = []
    for target, grads in zip(run.targets, run.gradients, strict=True):
        grad = grads[0]
        status = status_of(grad)
        causes = () if status == "ok" else static_causes(source, target, graph)
        if status != "ok" and not causes:
            causes = (unknown_cause("graph connectivity and dtypes"),)
        results.append(
            Result(
                source=endpoint(source),
                target=endpoint(target),
                status=status,
                gradient=None if grad is None else gradient_stats(grad),
                causes=causes,
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
            causes.append(_integer_end(act))
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


def _integer_end(act: Activation) -> Cause:
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
