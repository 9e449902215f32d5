"""Render a comparison of two scans: a table with a verdict line, JSON, markdown, HTML.

By default the table shows the rows that changed, regressions first; `show_all=True` shows
every row in the new scan's order. Rows are layers, or trainable variables with `--wrt
weights` (then the JSON says `variables` / `variable`, as `scan --wrt weights` does).
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import cast

from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from layergrad.core.vocab import Change, Status
from layergrad.diagnose.regressions import DiffReport, RowDiff
from layergrad.files.gradient_profile import ROW_KEYS, ProfileRow
from layergrad.files.report_json import to_json
from layergrad.render.columns import STATUS_KIND, html_rows, md_rows, text_table
from layergrad.render.common import (
    STATUS_STYLE,
    Column,
    count,
    flow_text,
    json_document,
    md_code,
    md_text,
    model_header,
    model_line,
    natural_width,
    number,
    probe_line,
    to_text,
)
from layergrad.render.escape import scrubbed
from layergrad.render.html_page import Html, badge, cell, definition_list, el, join, page

MAX_SHOWN = 2000  # rows a table, comment or page shows; the JSON holds every row
# The text formats escape names themselves (`escape.scrubbed`), on the rows they show: a diff
# may hold 700,000 rows.
SCRUBS_ITSELF = True
MIN_WHY = 24  # the narrowest the why column gets before layer names wrap


def table(
    report: DiffReport, *, color: bool = False, width: int | None = 100, show_all: bool = False
) -> str:
    """The header, the rows (changed ones, regressions first, or all), and the verdict."""
    safe, rows, cut = _view(report, show_all)
    new = model_header(safe.new, safe.probe, _what(safe))
    items: list[RenderableType] = [Text.assemble("base: ", model_line(safe.base), "\nnew:  ", new)]
    if rows:
        items.append(_table(safe, rows, width))
    verdict = Text(verdict_line(report), style="bold red" if report.regressions else "bold green")
    items.append(verdict)
    hidden = len(report.rows) - len(rows) - cut
    if hidden:
        items.append(Text(f"{count(hidden, 'unchanged row')} not shown; --all shows every row"))
    if cut:
        items.append(Text(_cut_line(cut)))
    return to_text(items, color=color, width=width)


def _view(report: DiffReport, show_all: bool) -> tuple[DiffReport, list[RowDiff], int]:
    """What a text format shows: the report's names escaped (without its rows), the rows
    shown (at most MAX_SHOWN, escaped: every row in order with `show_all`, else the rows that
    changed, regressions first), and how many more were cut."""
    rows = list(report.rows)
    if not show_all:
        changed = [r for r in rows if r.change != Change.SAME]
        rows = [r for r in changed if r.regression] + [r for r in changed if not r.regression]
    safe = scrubbed(replace(report, rows=()))
    return safe, scrubbed(rows[:MAX_SHOWN]), max(0, len(rows) - MAX_SHOWN)


def _cut_line(cut: int) -> str:
    return f"{cut} more rows not shown (at most {MAX_SHOWN} are); --json has every row"


def _columns(report: DiffReport) -> tuple[Column, ...]:
    """The rows' columns in every format (`render.columns`), the names headed by what a row
    is; on a narrow page the why sentence, which says what changed, outlasts the numbers."""
    return (
        Column("", get=lambda r: r.regression, where="th",
               text=lambda bad: Text("✗", style="bold red") if bad else "",
               html=lambda bad: cell(badge("regression", "bad") if bad else "")),
        Column(row_word(report), name_like=True, get=lambda r: r.name, text=Text,
               html=lambda name: cell(el("code", name), sort=name)),
        Column("base", drop=2, get=lambda r: r.base, text=_side, md=_md_side, html=_html_side),
        Column("new", drop=1, get=lambda r: r.new, text=_side, md=_md_side, html=_html_side),
        Column("decades", "right", drop=3, get=lambda r: r.decades, text=_decades, md=_decades,
               html=lambda v: cell(_decades(v), sort="" if v is None else repr(v), num=True)),
        Column("why", name_like=True, md=_md_why, html=lambda r: cell(r.why),
               text=lambda r: Text(r.why, style="red" if r.regression else "")),
    )  # fmt: skip


def _table(report: DiffReport, rows: list[RowDiff], width: int | None) -> Table:
    """The rows' table; the why sentences wrap before layer names do (down to MIN_WHY)."""
    table = cast(Table, text_table(_columns(report), rows, width, note=False)[0])
    excess = 0 if width is None else natural_width(table) - width
    if excess > 0:
        why = table.columns[-1]
        why.max_width = max(MIN_WHY, max(len(r.why) for r in rows) - excess)
    return table


def row_word(report: DiffReport) -> str:
    """What a row is: `layer`, or `variable` with `--wrt weights`."""
    return ROW_KEYS[report.wrt][1]


def verdict_line(report: DiffReport) -> str:
    """`FAIL: 2 regressions in 9 layers compared (tolerance 2 decades); 3 changed, 1 added`."""
    return ("FAIL: " if report.regressions else "PASS: ") + verdict(report)


def verdict(report: DiffReport) -> str:
    """`2 regressions in 9 layers compared (tolerance 2 decades); 3 changed, 1 added`."""
    bad = len(report.regressions)
    head = f"{count(bad, 'regression') if bad else 'no regression'} in "
    head += f"{count(report.compared, row_word(report))} compared (tolerance "
    head += f"{report.tolerance:g} decades)"
    return f"{head}; {', '.join(report.changes) or 'nothing changed'}"


def _what(report: DiffReport) -> str:
    """`d sum(outputs · R) / d each layer`, or `d loss (mse) / d each trainable variable`."""
    if report.loss is not None:
        return f"d loss ({report.loss}) / d each trainable variable"
    return flow_text(report)


def _side(side: ProfileRow | None) -> Text:
    if side is None:
        return Text("-")
    return Text.assemble((side.status.value, STATUS_STYLE.get(side.status, "")), _mean(side))


def _decades(decades: float | None) -> str:
    return "-" if decades is None else f"{decades:+.2f}"


def as_json(report: DiffReport, **_: object) -> str:
    """The `layergrad.diff/1` JSON document (`report_json` writes it), every row in order.

    A diff may hold 700,000 rows: json's C encoder writes each row on one line (the indenting
    encoder is pure Python, some 10 times slower).
    """
    doc = cast(dict[str, object], to_json(report))
    collection = ROW_KEYS[report.wrt][0]
    rows, doc[collection] = cast(list[object], doc[collection]), _ROWS
    head, tail = json_document(doc).split(f'"{_ROWS}"')
    body = ",\n    ".join(map(json.JSONEncoder(allow_nan=False).encode, rows))
    return f"{head}[\n    {body}\n  ]{tail}" if body else f"{head}[]{tail}"


_ROWS = "@@layergrad-diff-rows@@"  # where the rows go in the document's text


def markdown(report: DiffReport, *, show_all: bool = False, **_: object) -> str:
    """For a pull-request comment: the verdict, the regressions, the rest folded away."""
    said = md_text(verdict(report))
    safe, rows, cut = _view(report, show_all)
    what = _what(safe)
    head = (
        f"**layergrad diff** {md_code(safe.base.path)} → {md_code(safe.new.path)}: "
        + (f"❌ **{said}**" if report.regressions else f"✅ {said}")
        + f"\n\n{md_text(probe_line(safe.probe, what))}\n"
    )
    bad = [r for r in rows if r.regression]
    rest = [r for r in rows if not r.regression]
    out = head + (f"\n{md_text(_cut_line(cut))}\n" if cut else "")
    columns = _columns(report)
    if bad:
        out += "\n" + md_rows(columns, bad)
    if rest:
        summary = f"{len(rest)} other {'rows' if show_all else 'changes'}"
        out += f"\n<details><summary>{summary}</summary>\n\n{md_rows(columns, rest)}\n</details>\n"
    return out


def _md_why(r: RowDiff) -> str:
    # md_table escapes the pipes of "mean |g|"; md_text must not escape them twice
    return ("**regression**: " if r.regression else "") + md_text(r.why).replace("\\|", "|")


def _md_side(side: ProfileRow | None) -> str:
    return "-" if side is None else f"{side.status}{_mean(side)}"


def _mean(side: ProfileRow) -> str:
    """` 0.31`: an ok row's mean |g| (a non-finite row's is over its finite part: not shown)."""
    if side.status != Status.OK or side.mean_abs is None:
        return ""
    return f" {number(side.mean_abs)}"


def _html_side(side: ProfileRow | None) -> Html:
    if side is None:
        return cell("-", sort="")
    kind = STATUS_KIND.get(side.status, "muted")
    return cell(join([badge(side.status.value, kind), _mean(side)]))


def html(report: DiffReport, *, show_all: bool = False, **_: object) -> str:
    """One self-contained page: the verdict, both files and the probe, a sortable table of
    the rows (the changed ones, regressions first, or all with `show_all`)."""
    safe, rows, cut = _view(report, show_all)
    hidden = len(report.rows) - len(rows) - cut
    body = [
        el("p", verdict_line(report), class_=f"verdict {'bad' if report.regressions else 'ok'}"),
        definition_list(
            [
                (label, join([el("code", m.path), f"  {m.class_name} {m.name!r}, {m.format}"]))
                for label, m in (("base", safe.base), ("new", safe.new))
            ]
            + [("probe", probe_line(safe.probe, _what(safe)).removeprefix("probe: "))]
        ),
        html_rows(_columns(report), rows, failed=lambda r: r.regression) if rows else None,
        el(
            "p",
            f"{count(hidden, 'unchanged row')} not shown (--all shows every row)",
            class_="muted",
        )
        if hidden
        else None,
        el("p", _cut_line(cut), class_="muted") if cut else None,
    ]
    return page("diff", None, body)
