"""Does the compiled loss fit the output it is applied to? Read from the file, no TensorFlow.

The most common single fault in Keras programs is the wrong activation for the loss: binary
cross-entropy on a softmax head, categorical cross-entropy on one unit, `from_logits=True` on
a head that already applies softmax. Each pairing below names what Keras users mean instead.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from layergrad.core.results import Reason
from layergrad.core.vocab import Finding, Severity, with_article
from layergrad.model.graph import ModelGraph
from layergrad.model.head_forms import Head, keyed_by_head, output_heads
from layergrad.model.head_rules import BY_NAME, HeadFacts, judge, loss_of
from layergrad.model.linear_stacks import LinearStack, redundant_pairs, whole_network
from layergrad.model.loss_forms import per_output, unknown_losses
from layergrad.model.observed_heads import Observed

# the rules that judge a network that is one linear map up to its head
WHOLE_NETWORK = (BY_NAME["linear_classifier"], BY_NAME["linear_regression"])


@dataclass(frozen=True)
class LossReading:
    """What the `loss` check reads in a file: the failures (`mismatches`), the linear stacks
    that only warn, the losses no rule knows and the heads whose activation the file does not
    show (judged on the probe's outputs when there is one)."""

    mismatches: tuple[Reason, ...] = ()
    stacks: tuple[Reason, ...] = ()
    unknown_losses: tuple[str, ...] = ()
    unread: tuple[Head, ...] = ()
    judged: int = 0  # outputs whose loss the rules know
    observed: tuple[Head, ...] = ()  # heads judged on their outputs on the probe
    described: bool = True  # False: the file describes no layers (a subclassed model)


@dataclass(frozen=True)
class LossVerdict:
    """The `loss` check's message, findings, the findings that only warn (every rule that found
    them warns: its evidence does not show that flagged models fail to train), and why;
    `has_loss`: whether there was a loss to judge (compiled in the file, or `--loss`)."""

    message: str
    findings: tuple[Finding, ...] = ()
    warned: tuple[Finding, ...] = ()
    reasons: tuple[Reason, ...] = ()
    has_loss: bool = False

    def add(
        self, add: Callable[..., bool], message: str | None = None, replace: bool = False
    ) -> None:
        """Record the verdict through the check's `add` (with `message` instead of its own,
        when given)."""
        add("loss", self.message if message is None else message, self.findings,
            replace=replace, warn=self.warned, reasons=self.reasons)  # fmt: skip


def read_file(
    config: Mapping[str, object],
    graph: ModelGraph,
    compiled: Mapping[str, object],
    observed: Mapping[str, Observed] | None = None,
) -> LossReading:
    """Judge each output's head against its compiled loss, and the network for linear stacks.

    `observed` maps an output name to what its values did on the probe batch: a head whose
    activation the file does not show is judged as that; without it, such a head is listed
    in `unread` and no rule judges it.
    """
    if not graph.known:
        return LossReading(described=False)
    loss = keyed_by_head(compiled.get("loss"), config)
    heads = output_heads(config, graph)
    names = [h.name for h in heads]
    specs = per_output(loss, names) if loss else [None] * len(heads)
    unknown = tuple(unknown_losses(loss, names)) if loss else ()
    seen = observed or {}
    judged = [_as_observed(h, seen.get(h.name)) for h in heads]
    # a network that is one linear map up to its one head (judged only with a loss: a model
    # saved for inference only has no stacks judged)
    stack = None
    if loss and len(heads) == 1 and all(h.known for h in heads):
        stack = whole_network(graph, judged[0].layer)
    linear = stack.layers if stack is not None else ()
    found, stacks, whole = _judge(zip(judged, specs, strict=True), linear)
    if not loss:
        return LossReading(tuple(found))
    if not whole:
        stacks += [_pair(p) for p in redundant_pairs(graph)]
    unread = tuple(h for h in judged if not h.known)
    known = sum(spec is not None for spec in specs)
    looked = tuple(h for h in judged if h.observed is not None)
    return LossReading(tuple(found), tuple(stacks), unknown, unread, known, looked)


def read_observed(
    compiled: Mapping[str, object], seen: Sequence[tuple[str, str, int | None, Observed | None]]
) -> LossReading:
    """Judge the outputs of a model whose file describes no layers (a subclassed model) from
    what each did on the probe: `seen` holds, per output in output order, its name, the layer
    that made it (its name, or "" when none is known), its units and what its values did
    (None: they said too little, and it is not judged)."""
    loss = compiled.get("loss")
    names = [name for name, _, _, _ in seen]
    if not loss or not names:
        return LossReading(described=False)
    specs = per_output(loss, names)
    looked = [(Head(name, layer or name, o.kind, units, layer_class=o.layer_class,
                    observed=o.describe()), spec)
              for (name, layer, units, o), spec in zip(seen, specs, strict=True)
              if o is not None]  # fmt: skip
    found, _, _ = _judge(pair for pair in looked if pair[1] is not None)
    judged = sum(spec is not None for spec in specs)
    unknown = tuple(unknown_losses(loss, names))
    heads = tuple(head for head, _ in looked)
    return LossReading(tuple(found), (), unknown, (), judged, heads, False)


def _judge(
    heads: Iterable[tuple[Head, tuple[str, bool] | None]], linear: tuple[str, ...] = ()
) -> tuple[list[Reason], list[Reason], bool]:
    """The failures and the linear stacks the rules find on each head with its loss (None:
    unknown), and whether a rule judged the whole network's stack (no pair is then listed)."""
    found: list[Reason] = []
    stacks: list[Reason] = []
    whole = False
    for head, spec in heads:
        facts = HeadFacts(head, *loss_of(spec), linear=linear)
        whole = whole or any(rule.applies(facts) for rule in WHOLE_NETWORK)
        problem = judge(facts)
        if problem is not None:
            (stacks if problem.code == Finding.LINEAR_STACK else found).append(problem)
    return found, stacks, whole


def _as_observed(head: Head, seen: Observed | None) -> Head:
    if head.known or seen is None:
        return head
    units = head.units or seen.units
    return replace(head, activation=seen.kind, units=units, observed=seen.describe())


def _pair(stack: LinearStack) -> Reason:
    first, second = stack.layers[0], stack.layers[-1]
    return Reason(
        Finding.LINEAR_STACK,
        f"layer '{first}' has no activation and feeds '{second}' directly, so the two compute "
        f"one linear map: '{first}' adds weights but nothing one layer could not do",
        f"an activation on '{first}' (e.g. activation='relu'), or drop it",
        first,
        rule="redundant_pair",
        severity=Severity.WARN,
    )


def loss_verdict(reading: LossReading, has_loss: bool, probe_follows: bool) -> LossVerdict:
    """The `loss` check's verdict for what was read (`has_loss`: the file or `--loss` names a
    loss; `probe_follows`: the heads the file does not show are judged on the probe next)."""
    findings: list[Finding] = []
    warned: list[Finding] = []
    reasons: list[Reason] = []
    for code, found in ((Finding.LOSS_MISMATCH, reading.mismatches),
                        (Finding.LINEAR_STACK, reading.stacks)):  # fmt: skip
        if not found:
            continue
        findings.append(code)
        if all(m.severity == Severity.WARN for m in found):
            warned.append(code)
        reasons += found
    parts = [str(r) for r in reasons]
    if not reading.described and reading.observed and not parts:
        parts.append(
            "the file describes no layers (a subclassed model): its outputs were judged on the "
            "probe, and the compiled loss fits them"
        )
    elif not reading.described and not reading.observed:
        parts.append(
            "the file describes no layers (a subclassed model), so no output's head can be "
            "read: loss rules skipped"
            if has_loss
            else "no compiled loss to check"
        )
    elif not parts and not has_loss:
        parts.append("no compiled loss to check")
    elif not parts and reading.judged:
        others = " it names" if reading.unknown_losses else ""
        parts.append(f"the compiled loss fits every output{others}")
    elif not parts and not reading.unknown_losses:
        parts.append("the compiled loss names none of the outputs")
    parts += [f"unknown loss `{name}`, loss rules skipped" for name in reading.unknown_losses]
    parts += [
        f"output '{h.name}': layer '{h.layer}' is {with_article(str(h.observed))}"
        for h in reading.observed
        if not any(m.output == h.name for m in reading.mismatches)
    ]
    for head in reading.unread:
        what = f"custom layer `{head.layer_class}`" if head.layer_class else "an unknown layer"
        if head.layer_class in ("Lambda", "TFOpLambda"):
            what = "a Lambda layer"
        then = (
            "judged on its outputs on the probe once the model runs"
            if probe_follows
            else "not judged (no probe ran: the file alone cannot decide)"
        )
        parts.append(
            f"output '{head.name}': layer '{head.layer}' ({what}) does not show its "
            f"activation in the file; {then}"
        )
    return LossVerdict("; ".join(parts), tuple(findings), tuple(warned), tuple(reasons), has_loss)
