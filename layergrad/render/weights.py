"""Render `scan --wrt weights`: the loss's gradient for every trainable variable."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.text import Text

from layergrad.core.results import Reason, VariableRow, WeightScanReport
from layergrad.render.columns import WEIGHT_COLUMNS
from layergrad.render.common import (
    STATUS_STYLE,
    Column,
    causes_lines,
    md_cause,
    md_code,
    md_table,
    md_text,
    model_header,
    number,
    shape_text,
    table_with_note,
    to_text,
)

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
    rows = [_cells(r) for r in report.variables]
    items: list[RenderableType] = [
        model_header(report.model, report.probe, _what(report)),
        *table_with_note(WEIGHT_COLUMNS, rows, width),
        Text(_summary(report)),
    ]
    if report.noise:
        title = Text(SNR_TITLE, style="bold")
        items.append(Group(title, *table_with_note(SNR_COLUMNS, _noise_cells(report), width)))
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
    Column("layer", name_like=True),
    Column("||mean g||^2", "right"),
    Column("variance", "right"),
    Column("SNR", "right"),
)


def _noise_cells(report: WeightScanReport) -> list[list[RenderableType]]:
    return [
        [
            n.layer,
            number(n.signal),
            "-" if n.variance is None else number(n.variance),
            "-" if n.snr is None else number(n.snr),
        ]
        for n in report.noise
    ]


def _summary(report: WeightScanReport) -> str:
    bad = sum(1 for r in report.variables if r.status != "ok")
    return (
        f"{len(report.variables)} trainable variables, {bad} without a usable gradient; "
        f"{report.frozen} frozen variables (of layers with trainable=False) not listed"
    )


def _cells(row: VariableRow) -> list[RenderableType]:
    g = row.gradient
    return [
        row.variable,
        shape_text(row.shape),
        Text(row.status.value, style=STATUS_STYLE.get(row.status, "")),
        number(g.l2) if g else "-",
        number(g.mean_abs) if g else "-",
        "-" if row.update_ratio is None else number(row.update_ratio),
        Text(", ".join(row.flags), style="yellow" if row.flags else ""),
    ]


def markdown(report: WeightScanReport, **_: object) -> str:
    """A markdown table for a pull-request comment, then the causes."""
    path = md_code(report.model.path)
    head = f"**layergrad scan --wrt weights** {path}: {md_text(_what(report))}\n\n"
    rows = [
        [
            md_code(r.variable),
            shape_text(r.shape),
            f"**{r.status}**" if r.status != "ok" else "ok",
            number(r.gradient.mean_abs) if r.gradient else "-",
            "-" if r.update_ratio is None else number(r.update_ratio),
            ", ".join(r.flags),
        ]
        for r in report.variables
    ]
    header = [c.header for c in WEIGHT_COLUMNS if c.header != "L2"]
    notes = [
        f"- {', '.join(md_code(n) for n in names)}: {md_cause(c)}"
        for (_, _, causes), names in _cause_blocks(report).items()
        for c in causes
    ]
    notes += [f"> note: {md_text(n)}" for n in report.notes]
    tail = "".join(f"\n{n}" for n in notes) + ("\n" if notes else "")
    snr = ""
    if report.noise:
        cells = [[md_code(n.layer), *map(str, c[1:])] for n, c in zip(
            report.noise, _noise_cells(report), strict=True)]  # fmt: skip
        snr = f"\n{md_text(SNR_TITLE)}:\n\n" + md_table([c.header for c in SNR_COLUMNS], cells)
    return head + md_table(header, rows) + f"\n{md_text(_summary(report))}\n" + snr + tail


def html(report: WeightScanReport, **_: object) -> str:
    """The `scan --wrt weights` page: a verdict, every trainable variable, the causes."""
    from layergrad.render.html_page import Html, badge, cell, el, join, page, table
    from layergrad.render.html_report import (
        SEVERE_FLAGS,
        causes_panel,
        number_cell,
        page_facts,
        status_badge,
    )

    rows = report.variables
    bad = [r for r in rows if r.status != "ok"]
    verdict = (
        el("p", f"{len(bad)} of {len(rows)} variables get no usable gradient", class_="verdict bad")
        if bad
        else el("p", f"all {len(rows)} trainable variables get a gradient", class_="verdict ok")
    )
    cells = [
        [
            cell(el("code", r.variable), sort=r.variable),
            cell(shape_text(r.shape)),
            cell(status_badge(r.status), sort=r.status),
            number_cell(r.gradient.l2 if r.gradient else None),
            number_cell(r.gradient.mean_abs if r.gradient else None),
            number_cell(r.update_ratio),
            cell(join(badge(f, "bad" if f in SEVERE_FLAGS else "warn") for f in r.flags)),
        ]
        for r in rows
    ]
    header = ["variable", "shape", "status", "L2", "mean |g|", "||g|| / ||w||", "flags"]
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
    body += [
        el("h2", f"Trainable variables ({len(rows)})"),
        table(
            header,
            cells,
            numeric=[3, 4, 5],
            row_classes=["flagged" if r.flags else None for r in rows],
        ),
    ]
    if report.noise:  # --data: per layer, the gradient's signal-to-noise ratio
        noise = [
            [
                cell(el("code", n.layer), sort=n.layer),
                number_cell(n.signal),
                number_cell(n.variance),
                number_cell(n.snr),
            ]
            for n in report.noise
        ]
        body += [
            el("h2", "Gradient signal-to-noise per layer"),
            el("p", SNR_TITLE, class_="note"),
            table(["layer", "||mean g||^2", "variance", "SNR"], noise, numeric=[1, 2, 3]),
        ]
    if bad:
        body.append(el("h2", "Causes"))
        body += [
            causes_panel(f"{status}: {', '.join(names)}", causes)
            for (status, _, causes), names in _cause_blocks(report).items()
        ]
        body += [causes_panel(f"{r.status}: {r.variable}", ()) for r in bad if not r.causes]
    return page("scan --wrt weights", report.model.path, body)
