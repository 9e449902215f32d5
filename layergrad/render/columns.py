"""One definition per table column, rendered to the text table, markdown and HTML alike.

A `Column` says its header, how to get the cell's value from a row, and how that value reads
in each format; the presets here (`name`, `num`, `status`, `flags`, `percent`) cover the
cells reports share. `text_table`, `md_rows` and `html_rows` render a list of columns over a
list of rows; a column's `where` names the formats that show it (`t`able, `m`arkdown, `h`tml).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from rich import box
from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from layergrad.core.results import Result, ScanRow
from layergrad.render.common import (
    STATUS_STYLE,
    Column,
    md_code,
    md_table,
    natural_width,
    number,
)
from layergrad.render.html_page import Html, badge, cell, el, join, table
from layergrad.render.plot import jacobian_mean

STATUS_KIND = {
    "ok": "ok", "none": "bad", "nonfinite": "bad", "zero": "warn", "integer": "muted",
    "string": "muted",
}  # fmt: skip
SEVERE_FLAGS = ("blocked", "nonfinite")
SEVERE = dict.fromkeys(SEVERE_FLAGS, "bad")  # a flag's badge: these red, the rest yellow


def _get(c: Column, row: object) -> object:
    return row if c.get is None else c.get(row)


def text_table(
    columns: Sequence[Column],
    rows: Sequence[object],
    width: int | None,
    *,
    compact: bool = False,
    note: bool = True,
) -> list[RenderableType]:
    """The rows as a text table that fits `width`, and (if `note`) the line naming the columns
    it left out to fit: optional columns go first (highest `drop` first), then names wrap.

    Numbers and words are never cut or wrapped; layer names wrap as a last resort. `compact`
    collapses the padding between columns.
    """
    cols = [c for c in columns if "t" in c.where]
    cells = [[(c.text or str)(_get(c, r)) for c in cols] for r in rows]
    keep = list(range(len(cols)))

    def build() -> Table:
        table = Table(box=box.SIMPLE_HEAVY, pad_edge=False, collapse_padding=compact)
        for i in keep:
            table.add_column(
                Text(cols[i].header),
                justify=cols[i].justify,  # type: ignore[arg-type]
                no_wrap=not cols[i].name_like,
                overflow="fold",
            )
        for row in cells:  # a plain string would be read as rich markup: names are data
            table.add_row(*(Text(c) if isinstance(c, str) else c for c in (row[i] for i in keep)))
        return table

    table = build()
    droppable = sorted((c.drop, i) for i, c in enumerate(cols) if c.drop)
    while width is not None and droppable and natural_width(table) > width:
        keep.remove(droppable.pop()[1])
        table = build()
    dropped = ", ".join(c.header for i, c in enumerate(cols) if i not in keep)
    if not (dropped and note):
        return [table]
    said = f"columns left out to fit {width} columns: {dropped}"
    return [table, Text(f"{said}; a wider terminal or --json shows them", style="dim")]


def md_rows(columns: Sequence[Column], rows: Sequence[object]) -> str:
    """The rows as a markdown table."""
    cols = [c for c in columns if "m" in c.where]
    cells = [[(c.md or (_code if c.name_like else str))(_get(c, r)) for c in cols]
             for r in rows]  # fmt: skip
    return md_table([c.header for c in cols], cells)


def html_rows(
    columns: Sequence[Column],
    rows: Sequence[object],
    *,
    numbered: bool = False,
    failed: Callable[..., bool] | None = None,
) -> Html:
    """The rows as a sortable HTML table (`numbered`: a `#` column first); a row with flags is
    marked `flagged`, or with `failed`, a row it says failed is marked `failed`."""
    cols = [c for c in columns if "h" in c.where]
    head = ["#"] * numbered + [c.header for c in cols]
    cells = [[cell(str(i + 1), sort=i, num=True)] * numbered + [_html_cell(c, _get(c, r))
              for c in cols] for i, r in enumerate(rows)]  # fmt: skip
    right = [True] * numbered + [c.justify == "right" for c in cols]
    if failed is not None:
        classes = ["failed" if failed(r) else None for r in rows]
    else:
        classes = ["flagged" if getattr(r, "flags", None) else None for r in rows]
    return table(head, cells, numeric=[i for i, r in enumerate(right) if r], row_classes=classes)


def _html_cell(c: Column, value: object) -> Html:
    if c.html is not None:
        return Html(c.html(value))
    if c.name_like:
        return cell(el("code", str(value)))
    return cell(str(value), num=c.justify == "right")


def _code(value: object) -> str:
    return md_code(str(value))


def name(
    header: str,
    get: Callable[..., object],
    drop: int = 0,
    *,
    text: Callable[..., RenderableType] | None = None,
    md: Callable[..., str] | None = None,
    html: Callable[..., str] | None = None,
) -> Column:
    """A column of names from the model file: they wrap, and read as code in markdown, HTML."""
    return Column(header, name_like=True, drop=drop, get=get, text=text, md=md, html=html)


def num(header: str, get: Callable[..., float | None], drop: int = 0, where: str = "tmh") -> Column:
    """A number in 4 significant digits (`-` when there is none), right-aligned."""
    return Column(header, "right", drop=drop, get=get, text=number, md=number, html=number_cell,
                  where=where)  # fmt: skip


def number_cell(value: float | None) -> Html:
    """A right-aligned number cell that sorts by value ('-' sorts below every number)."""
    if value is None:
        return cell("-", sort="-Infinity", num=True)
    return cell(number(value), sort=repr(value) if math.isfinite(value) else "Infinity", num=True)


def percent(
    header: str, get: Callable[..., float | None], digits: int, drop: int, where: str = "tmh"
) -> Column:
    """A fraction as a percentage with `digits` decimals (`-` when there is none)."""

    def words(v: float | None) -> str:
        return "-" if v is None else f"{v:.{digits}%}"

    def html(v: float | None) -> Html:
        return cell(words(v), sort=-1 if v is None else v, num=True)

    return Column(header, "right", drop=drop, get=get, text=words, md=words, html=html, where=where)


def status(get: Callable[..., str], *, bold: bool = True) -> Column:
    """A result's status, coloured; in markdown in bold when not ok (unless not `bold`)."""
    return Column(
        "status",
        get=get,
        text=lambda s: Text(str(s), style=STATUS_STYLE.get(s, "")),
        md=lambda s: f"**{s}**" if bold and s != "ok" else str(s),
        html=lambda s: cell(badge(s, STATUS_KIND.get(s, "muted")), sort=s),
    )


FLAGS = Column(  # a row's flags: yellow in the table, badges on the page (the severe ones red)
    "flags",
    drop=1,
    get=lambda r: r.flags,
    text=lambda f: Text(", ".join(f), style="yellow" if f else ""),
    md=", ".join,
    html=lambda f: cell(join(badge(x, SEVERE.get(x, "warn")) for x in f), sort=",".join(f)),
)


def shape(
    header: str, get: Callable[..., tuple[int, ...]], drop: int, where: str = "tmh"
) -> Column:
    """An activation's shape, `(8, 4)`."""
    return Column(header, drop=drop, get=lambda r: f"({', '.join(map(str, get(r)))})", where=where)


def _grad(field: str) -> Callable[..., float | None]:
    return lambda r: None if r.gradient is None else getattr(r.gradient, field)


def _count(n: float | None) -> str:
    return "-" if n is None else str(int(n))


RESULT_COLUMNS = (  # inspect: one row per result
    name("from", lambda r: r.source.layer),
    name("to", lambda r: r.target.layer),
    shape("from shape", lambda r: r.source.shape, 2, "th"),
    shape("to shape", lambda r: r.target.shape, 3, "th"),
    status(lambda r: r.status),
    num("L2", _grad("l2"), drop=4),
    num("mean |g|", _grad("mean_abs")),
    num("max |g|", _grad("max_abs"), drop=5),
    percent("zeros", _grad("zero_fraction"), 1, 6),
    Column("non-finite", "right", drop=1, get=_grad("nonfinite"), text=_count, md=_count,
           html=lambda n: cell(_count(n), sort=-1 if n is None else n, num=True)),
)  # fmt: skip


def _causes(row: ScanRow) -> str:
    return "; ".join(f"{c.code} at {md_code(c.layer or '?')}" for c in row.causes)


def stderr_column(drop: int) -> Column:
    """`±1.2%`: the largest relative standard error of a sample's ‖J‖F; `-` when exact, empty
    when not measured."""

    def text(r: Result | ScanRow) -> str:
        if r.jacobian is None:
            return ""
        e = r.jacobian.frobenius.rel_stderr
        return "-" if e is None else f"±{e:.1%}"

    return Column("± s.e.", "right", drop=drop, get=text)


BAR_DECADES = 6  # a log10 bar spans at least this many decades below the top one
BAR_WIDTH = 16  # characters of a full log10 bar in a text table


def log_bar_column(
    header: str, value: Callable[..., float], rows: Sequence[object], drop: int
) -> Column:
    """log10 of `value` as a bar on the rows' common scale: blocks in the text table (at least
    one), a CSS bar of 1 to 120 px in HTML, then the exponent; none for a value that is not
    positive and finite.

    The scale runs from the whole decade at or above the largest value down at least
    BAR_DECADES, and below the smallest: fixed decades, not the rows' min and max, so equal
    values get equal bars and a small spread gives no long bars.
    """
    logs = [math.log10(v) for r in rows if (v := value(r)) > 0 and math.isfinite(v)]
    top = math.ceil(max(logs, default=0.0) + 1e-9)
    lo, hi = min(math.floor(min(logs, default=0.0)), top - BAR_DECADES), float(top)

    def log(v: float) -> float | None:
        return math.log10(v) if math.isfinite(v) and v > 0 else None

    def text(v: float) -> str:
        if (at := log(v)) is None:
            return ""
        blocks = max(1, min(BAR_WIDTH, round(BAR_WIDTH * (at - lo) / (hi - lo))))
        return "█" * blocks + f" {at:+.1f}"

    def html(v: float) -> Html:
        if (at := log(v)) is None:
            return cell("", sort="-Infinity")
        width = max(1.0, min(120.0, 120 * (at - lo) / (hi - lo)))
        bar = el("span", "", class_="bar", style=f"width:{width:.0f}px")
        return cell(join([bar, f"{at:+.1f}"]), sort=at, cls="mono")

    return Column(header, drop=drop, get=value, text=text, html=html, where="th")


def scan_columns(rows: Sequence[ScanRow], jacobian: bool = False) -> list[Column]:
    """The columns of a scan (one row per layer call); with `jacobian`, its ‖J‖F profile."""
    d = 1 if jacobian else 0  # the Jacobian's columns leave the class and shape sooner
    head = [
        name("layer", lambda r: r.layer),
        Column("class", drop=3 + d, get=lambda r: r.class_name, md=md_code),
        shape("shape", lambda r: r.shape, 4 + d),
        status(lambda r: str(r.status), bold=False),
    ]
    tail = [FLAGS, Column("causes", get=_causes, where="m")]
    if not jacobian:
        mean = num("mean |g|", _grad("mean_abs"))
        zeros = percent("zeros", _grad("zero_fraction"), 0, 6, where="th")
        bar = log_bar_column("log10 mean |g|", lambda r: _grad("mean_abs")(r) or 0.0, rows, 2)
        return [*head, num("L2", _grad("l2"), drop=5, where="th"), mean, zeros, bar, *tail]
    return [
        *head,
        num("mean |g|", _grad("mean_abs"), drop=6),
        num("‖J‖F mean", jacobian_mean),
        stderr_column(3),
        log_bar_column("log10 ‖J‖F", lambda r: jacobian_mean(r) or 0.0, rows, 2),
        *tail,
    ]


WEIGHT_COLUMNS = (  # scan --wrt weights: one row per trainable variable
    name("variable", lambda r: r.variable),
    shape("shape", lambda r: r.shape, 3),
    status(lambda r: str(r.status)),
    num("L2", _grad("l2"), drop=4, where="th"),
    num("mean |g|", _grad("mean_abs")),
    num("||g|| / ||w||", lambda r: r.update_ratio, drop=2),
    FLAGS,
)


def jacobian_columns(items: Sequence[object]) -> list[Column]:
    """The pages' column of the Jacobian norm, when any row or result carries one."""
    if any(jacobian_mean(i) is not None for i in items):
        return [num("||J||_F mean", jacobian_mean)]
    return []
