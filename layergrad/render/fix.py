"""Render a `layergrad fix` report: the changes, then the verdicts.

The JSON is `layergrad.fix/1`; the markdown is a pull-request comment whose code changes are a
```suggestion block; the page draws the original's and the repaired copy's loss curves
against the trivial loss as inline SVG, and fetches nothing.
"""

from __future__ import annotations

import re

from rich.console import RenderableType
from rich.text import Text

from layergrad.core.fix_results import FixReport, Run
from layergrad.render.columns import html_rows, md_rows, name
from layergrad.render.common import Column, count, md_code, md_head, md_text, number, to_text
from layergrad.render.escape import visible
from layergrad.render.fit import BLUE, RED, loss_chart
from layergrad.render.html_page import Html, badge, cell, el, page, report_head


def _verdict(where: str) -> Column:
    """A repair's verdict: a badge on the page (first there), words in markdown (third)."""
    return Column("verdict", get=lambda r: str(r.verdict), md=md_text, where=where,
                  html=lambda v: cell(badge(v, "ok" if v == "verified" else "bad")))  # fmt: skip


VERDICT_COLUMNS = (  # one row per repair
    _verdict("h"),
    name("finding", lambda r: r.finding),
    name("layer", lambda r: r.layer or "-"),
    _verdict("m"),
    Column("why", get=lambda r: r.why or "-", md=md_text),
)


def verdict_line(report: FixReport) -> str:
    """One sentence: nothing to fix, or how many repairs and how many verified."""
    if not report.before:
        return "nothing to fix: check finds nothing" + (" and training finds nothing"
                                                         if report.data else "")  # fmt: skip
    done = sum(r.verdict == "verified" for r in report.repairs)
    text = f"{count(len(report.repairs), 'repair')} for {count(len(report.before), 'finding')}"
    if report.data:
        text += f", {done} verified"
    if report.unrepaired:
        text += f"; {len(report.unrepaired)} without a mechanical repair"
    return text


def _run_text(run: Run | None) -> str:
    """The run's numbers, the ones its verdict quotes: the loss of its predictions and its
    trivial loss; the training loss `fit` shows when it differs clearly (Keras trained the
    head through its logits); the original's predictions scored by the same loss (the
    copy's `baseline`); a classifier's accuracy and the prior's."""
    if run is None:
        return "-"
    if run.error is not None:
        return f"not trained: {run.error}"
    final = "NaN/Inf" if run.final is None else number(run.final)
    trivial = "" if run.trivial is None else f" (trivial {number(run.trivial)})"
    text = f"{run.loss_name} ends at {final}{trivial}"
    trained = run.trained_loss
    if trained is not None and run.final is not None and not _close(trained, run.final):
        text += f"; in training, as fit shows it: {number(trained)}"
    if run.baseline is not None:
        text += f"; the original's predictions by the same loss: {number(run.baseline)}"
    if run.accuracy is not None and run.prior_accuracy is not None:
        text += f"; accuracy {run.accuracy:.1%} (the prior's {run.prior_accuracy:.1%})"
    return text


def _close(a: float, b: float) -> bool:
    """Within 10% of each other (the served loss and the training loss of a sound head)."""
    return abs(a - b) <= 0.1 * max(abs(a), abs(b))


def _facts(report: FixReport) -> list[tuple[str, str]]:
    facts = [("model", f"{report.path} ({report.model_class})")]
    found = ", ".join(report.before) or "none"
    if report.repairs:
        found += f"; after the repairs: {', '.join(report.after) or 'none'}"
    facts.append(("findings", found))
    facts.append(("repaired copy", report.output or "not written"))
    if report.data:
        facts.append(("trained", f"{report.steps} steps on {report.data}, same batches"))
        facts.append(("original", _run_text(report.original)))
        facts.append(("repaired", _run_text(report.together)))
    return facts


def table(report: FixReport, *, color: bool = False, width: int | None = 100) -> str:
    """The facts, the changes (code lines), then the verdicts."""
    items: list[RenderableType] = [Text(f"{k}: {v}") for k, v in _facts(report)]
    if report.repairs:
        items.append(Text("changes:", style="bold"))
        for r in report.repairs:
            where = f" at {r.layer}" if r.layer else ""
            items.append(Text(f"  {r.finding}{where}: {r.change}"))
            items += [Text(f"    {line}", style="cyan") for line in r.code]
        items.append(Text("verdicts:", style="bold"))
        for r in report.repairs:
            why = f": {r.why}" if r.why else ""
            if not why and r.verdict == "not run":
                why = ": no --data, nothing was trained"
            style = {"verified": "green", "not verified": "red"}.get(str(r.verdict), "yellow")
            items.append(Text(f"  {r.verdict:<13} {r.finding}{why}", style=style))
    for u in report.unrepaired:
        hint = f" Fix by hand: {u.hint}" if u.hint else ""
        gone = " (gone after the repairs)" if u.code not in report.after else ""
        items.append(Text(f"no mechanical repair for {u.code}{gone}: {u.message}.{hint}"))
    items.append(Text(verdict_line(report), style="green" if report.ok else "bold red"))
    items += [Text(f"note: {n}") for n in report.notes]
    return to_text(items, color=color, width=width)


def _after(line: str) -> str:
    """The new code of a `before -> after at "LAYER"` line: `after  # "LAYER"`. The arrow and
    the `at` are found outside the line's string literals (every name is one), so a name that
    holds ` -> ` or ` at ` does not move them."""
    arrows = _unquoted(line, " -> ")
    after = line[arrows[0] + 4 :] if arrows else line
    ats = _unquoted(after, " at ")
    if ats and "(" in after[: ats[-1]]:
        return f"{after[: ats[-1]]}  # {after[ats[-1] + 4 :]}"
    return after


def _unquoted(line: str, mark: str) -> list[int]:
    """Where `mark` starts in `line`, outside string literals."""
    found: list[int] = []
    quote, escaped = "", False
    for i, ch in enumerate(line):
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
        elif line.startswith(mark, i):
            found.append(i)
    return found


def markdown(report: FixReport, **_: object) -> str:
    """A pull-request comment: the verdict, the changes as a suggestion block, the verdicts."""
    lines = md_head("fix", verdict_line(report), _facts(report))
    for r in report.repairs:
        where = f" at {md_code(r.layer)}" if r.layer else ""
        lines += [f"**{md_text(r.finding)}**{where}: {md_text(r.change)}", ""]
        if r.code:
            lines += [f"- {md_code(line)}" for line in r.code] + [""]
        code = [_after(visible(line)) for line in r.code]
        longest = max((len(run) for line in code for run in re.findall(r"`+", line)), default=0)
        fence = "`" * max(3, longest + 1)  # longer than any run of backticks in the code
        lines += [f"{fence}suggestion", *code, fence, ""]
    if report.repairs:
        lines.append(md_rows(VERDICT_COLUMNS, report.repairs))
    for u in report.unrepaired:
        hint = f" Fix by hand: {md_text(u.hint)}" if u.hint else ""
        lines.append(f"- no mechanical repair for {md_code(u.code)}: {md_text(u.message)}.{hint}")
    lines += [f"- note: {md_text(n)}" for n in report.notes]
    return "\n".join(lines)


def html(report: FixReport, **_: object) -> str:
    """One self-contained page: verdict, facts, changes, verdicts, the two loss curves."""
    body: list[Html | None] = [*report_head(verdict_line(report), report.ok, _facts(report))]
    if report.repairs:
        body.append(el("h2", "Changes"))
        for r in report.repairs:
            body.append(el("p", el("strong", r.finding), " at ", el("code", r.layer or "-"),
                           ": ", r.change))  # fmt: skip
            body.append(el("pre", el("code", "\n".join(r.code))))
        body += [el("h2", "Verdicts"), html_rows(VERDICT_COLUMNS, report.repairs)]
    if report.unrepaired:
        body.append(el("h2", "No mechanical repair"))
        body += [el("p", el("code", u.code), ": ", u.message, ". ", u.hint)
                 for u in report.unrepaired]  # fmt: skip
    if report.original is not None or report.together is not None:
        body.append(el("h2", "Loss, original (red) and repaired (blue)"))
        body.append(el("p", "each divided by its trivial loss (dashed line at 1) when it has "
                       "one", class_="muted"))  # fmt: skip
        curves = [(_scaled(report.original), RED), (_scaled(report.together), BLUE)]
        label = "loss per step, original and repaired"
        chart = loss_chart(curves, label=label, reference=1.0, height=240)
        body.append(el("div", chart, class_="chart"))
    body += [el("p", n, class_="muted") for n in report.notes]
    return page("fix", report.path, body)


def _scaled(run: Run | None) -> list[float | None]:
    if run is None:
        return []
    scale = run.trivial or 1.0
    return [v / scale if v is not None else None for v in run.losses]
