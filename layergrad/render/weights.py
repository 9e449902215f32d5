"""Render `scan --wrt weights`: the loss's gradient for every trainable variable."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.text import Text

from layergrad.core.results import Reason, WeightScanReport
from layergrad.render.columns import WEIGHT_COLUMNS, html_rows, md_rows, name, num, text_table
from layergrad.render.common import (
    causes_lines,
    md_cause,
    md_code,
    md_lines,
    md_text,
    md_title,
    model_header,
    to_text,
)
from layergrad.render.html_page import Html, causes_panel, el, page, page_facts

RATIO_NOTE = (
    "||g|| / ||w|| is how far one gradient step of learning rate 1 would move a variable, "
    "relative to its size: multiply by your learning rate (with plain SGD, a step of about "
    "1e-3 of the weights is the usual healthy size). It is left out for a variable that is "
    "all zero (a fresh bias)."
)


def _what(report: WeightScanReport) -> str:
    loss = report.loss
    source = "compiled in the file" if loss.source == "compiled" else "from --loss"
    return f"d loss / d each trainable variable; loss {loss.name} ({source}), {loss.labels} labels"


def table(report: WeightScanReport, *, color: bool = False, width: int | None = 100) -> str:
    """One row per trainable variable, then notes and the causes of non-ok variables."""
    items: list[RenderableType] = [
        model_header(report.model, report.probe, _what(report)),
        *text_table(WEIGHT_COLUMNS, report.variables, width),
        Text(_summary(report)),
    ]
    if report.noise:
        title = Text(SNR_TITLE, style="bold")
        items.append(Group(title, *text_table(SNR_COLUMNS, report.noise, width)))
    items += [Text(f"note: {note}", style="yellow") for note in (*report.notes, RATIO_NOTE)]
    for (status, _, causes), names in _cause_blocks(report).items():
        title = Text(f"{status}: {', '.join(names)}", style="bold")
        items.append(Group(title, *causes_lines(causes)))
    return to_text(items, color=color, width=width)


def _cause_blocks(report: WeightScanReport) -> dict[tuple[str, str, tuple[Reason, ...]], list[str]]:
    """The variables of one layer share its causes (an unused input blocks the kernel and the
    bias alike): (status, layer, causes) -> the variables, to say each cause once per layer."""
    blocks: dict[tuple[str, str, tuple[Reason, ...]], list[str]] = {}
    for row in report.variables:
        if row.causes:
            blocks.setdefault((row.status, row.layer, row.causes), []).append(row.variable)
    return blocks


SNR_TITLE = (
    "gradient signal-to-noise per layer across batches: ||mean g||^2 / variance of the batch "
    "gradients"
)
SNR_COLUMNS = (
    name("layer", lambda n: n.layer),
    num("||mean g||^2", lambda n: n.signal),
    num("variance", lambda n: n.variance),
    num("SNR", lambda n: n.snr),
)


def _summary(report: WeightScanReport) -> str:
    bad = sum(1 for r in report.variables if r.status != "ok")
    return (
        f"{len(report.variables)} trainable variables, {bad} without a usable gradient; "
        f"{report.frozen} frozen variables (of layers with trainable=False) not listed"
    )


def markdown(report: WeightScanReport, **_: object) -> str:
    """A markdown table for a pull-request comment, then the causes."""
    head = md_title("scan --wrt weights", report.model.path, md_text(_what(report)))
    notes = [
        f"- {', '.join(md_code(n) for n in names)}: {md_cause(c)}"
        for (_, _, causes), names in _cause_blocks(report).items()
        for c in causes
    ]
    notes += [f"> note: {md_text(n)}" for n in report.notes]
    snr = f"\n{md_text(SNR_TITLE)}:\n\n{md_rows(SNR_COLUMNS, report.noise)}" if report.noise else ""
    summary = f"\n{md_text(_summary(report))}\n"
    return head + md_rows(WEIGHT_COLUMNS, report.variables) + summary + snr + md_lines(notes)


def html(report: WeightScanReport, **_: object) -> str:
    """The `scan --wrt weights` page: a verdict, every trainable variable, the causes."""
    rows = report.variables
    bad = [r for r in rows if r.status != "ok"]
    verdict = (
        el("p", f"{len(bad)} of {len(rows)} variables get no usable gradient", class_="verdict bad")
        if bad
        else el("p", f"all {len(rows)} trainable variables get a gradient", class_="verdict ok")
    )
    body: list[Html | None] = [
        verdict,
        page_facts(report.model, report.probe, _what(report)),
        el(
            "p",
            f"{report.frozen} frozen variables (of layers with trainable=False) are not listed.",
            class_="note",
        ),
    ]
    body += [el("p", "note: ", note, class_="note") for note in (*report.notes, RATIO_NOTE)]
    body += [el("h2", f"Trainable variables ({len(rows)})"), html_rows(WEIGHT_COLUMNS, rows)]
    if report.noise:  # --data: per layer, the gradient's signal-to-noise ratio
        body += [
            el("h2", "Gradient signal-to-noise per layer"),
            el("p", SNR_TITLE, class_="note"),
            html_rows(SNR_COLUMNS, report.noise),
        ]
    if bad:
        body.append(el("h2", "Causes"))
        body += [
            causes_panel(f"{status}: {', '.join(names)}", causes)
            for (status, _, causes), names in _cause_blocks(report).items()
        ]
        body += [causes_panel(f"{r.status}: {r.variable}", ()) for r in bad if not r.causes]
    return page("scan --wrt weights", report.model.path, body)
