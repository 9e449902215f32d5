"""Building blocks of layergrad's HTML pages: escaped elements, the parts every report's page
has, and one self-contained skeleton. A page states its verdict first, then the header (model,
format, probe, target, mode), the chart (matplotlib SVG, inline), and every row of the text
report in tables that sort when script runs and read the same without it.

Every string is escaped unless it is `Html` (markup this package built), so a layer or file
name read from a model can never become markup. The page fetches nothing: the style sheet and
the table-sorting script are inline, and a Content-Security-Policy forbids every external
source and every script but this package's own (allowed by its hash).
"""

from __future__ import annotations

import base64
import hashlib
import html
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

from layergrad import __version__

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from layergrad.core.results import ModelMeta, ProbeMeta, Reason

CHART_SCALE = 1.25  # inline charts are drawn up to this times their size in a paper figure


class Html(str):
    """Markup built by this module: inserted as is, never escaped again."""

    __slots__ = ()


Child = str | Html | None


def text(value: object) -> Html:
    """Escape any value for use as element text or an attribute value."""
    return value if isinstance(value, Html) else Html(html.escape(str(value), quote=True))


def el(tag: str, *children: Child | Iterable[Child], **attrs: object) -> Html:
    """`<tag attrs>children</tag>`; plain strings are escaped, `Html` is kept.

    Attribute names come from the code (`class_` and `data_sort` become `class` and
    `data-sort`); a value of None or False leaves the attribute out, True writes it bare.
    """
    said = "".join(
        f" {name.rstrip('_').replace('_', '-')}" + ("" if value is True else f'="{text(value)}"')
        for name, value in attrs.items()
        if value is not None and value is not False
    )
    return Html(f"<{tag}{said}>{join(_flatten(children))}</{tag}>")


def join(items: Iterable[Child]) -> Html:
    """Concatenate elements (plain strings escaped)."""
    return Html("".join(text(c) for c in items if c is not None))


def _flatten(children: tuple[Child | Iterable[Child], ...]) -> Iterator[Child]:
    for child in children:
        yield from (child,) if isinstance(child, str | None) else child


def table(
    header: list[str],
    rows: Iterable[list[Html]],
    *,
    numeric: Iterable[int] = (),
    row_classes: Sequence[str | None] = (),
) -> Html:
    """A sortable table: header names, rows of cells made with `cell`, a class per row."""
    right = set(numeric)
    head = el(
        "tr", (el("th", h, class_="num" if i in right else None) for i, h in enumerate(header))
    )
    body = join(
        el("tr", row, class_=row_classes[i] if i < len(row_classes) else None)
        for i, row in enumerate(rows)
    )
    return el(
        "div",
        el("table", el("thead", head), el("tbody", body), class_="sortable"),
        class_="table-wrap",
    )


def cell(content: Child, *, sort: object = None, num: bool = False, cls: str = "") -> Html:
    """A table cell; `sort` is the key the sorting script uses instead of the text."""
    classes = " ".join(c for c in ("num" if num else "", cls) if c)
    return el("td", content, data_sort=sort, class_=classes or None)


def badge(word: str, kind: str) -> Html:
    """A coloured word: kind is one of ok, bad, warn, info, muted."""
    return el("span", word, class_=f"badge {kind}")


def definition_list(items: Iterable[tuple[str, Child]]) -> Html:
    """The header's `name: value` grid."""
    return el("dl", (join([el("dt", k), el("dd", v)]) for k, v in items))


def svg(parts: Iterable[Child], width: int, height: int, label: str) -> Html:
    """An inline `<svg>` of `parts` on a `width` x `height` view; `label` is its accessible name."""
    return el("svg", join(parts), xmlns="http://www.w3.org/2000/svg",
              viewBox=f"0 0 {width} {height}", role="img", aria_label=label)  # fmt: skip


def report_head(verdict: str, ok: bool, facts: Iterable[tuple[str, Child]]) -> list[Html]:
    """The opening of a training report's page (fit, fix): its verdict line, its facts."""
    return [el("div", verdict, class_=f"verdict {'ok' if ok else 'bad'}"), definition_list(facts)]


def page_facts(model: ModelMeta, probe: ProbeMeta, target: str) -> Html:
    """The header of a report's page: the model, its format, the probe, the target, the mode."""
    source = f"random (seed {probe.seed})" if probe.source == "random" else f"file {probe.source}"
    return definition_list(
        [
            ("model", join([el("code", model.path), f"  {model.class_name} {model.name!r}"])),
            ("format", model.format),
            ("probe", f"{source}, batch {probe.batch_size}"),
            ("target", target),
            ("mode", "training" if probe.training else "inference"),
        ]
    )


def chart(fig: Figure, label: str) -> Html:
    """A figure inlined as SVG, drawn a little larger than its natural size where room allows."""
    width = round(fig.get_figwidth() * 96 * CHART_SCALE)
    from layergrad.render.chart_files import figure_svg

    # matplotlib writes the SVG and escapes every text in it; it is inserted as markup.
    svg = Html(figure_svg(fig))
    return el(
        "figure", svg, class_="chart", role="img", aria_label=label, style=f"max-width:{width}px"
    )


def causes_panel(title: str, causes: Sequence[Reason]) -> Html:
    """Numbered causes with code, layer (and op), evidence and fix."""
    items = [
        el(
            "li",
            badge(c.code, "bad"),
            join([" at ", el("code", c.layer)]) if c.layer else None,
            join([" (op ", el("code", c.op), ")"]) if c.op else None,
            ": ",
            c.message,
            el("div", el("strong", "fix: "), c.hint, class_="fix"),
        )
        for c in causes
    ]
    content = el("ol", items) if items else el("p", "no cause found", class_="muted")
    return el("section", el("h3", title), content, class_="panel")


def page(command: str, subject: str | None, body: Iterable[Child]) -> str:
    """A command's page, a complete self-contained HTML document: titled `layergrad COMMAND:
    SUBJECT` (escaped), headed `layergrad COMMAND`, then `body`, the elements of `<main>`."""
    name = f"layergrad {command}"
    title = el("title", f"{name}: {subject}" if subject else name)
    script_hash = base64.b64encode(hashlib.sha256(SCRIPT.encode()).digest()).decode()
    policy = (
        "default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
        f"script-src 'sha256-{script_hash}'; base-uri 'none'; form-action 'none'"
    )
    main = el("main", el("h1", name), body)
    footer = el("footer", f"layergrad {__version__}")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{policy}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<meta name="generator" content="layergrad">{title}<style>{CSS}</style></head>'
        f"<body>{main}{footer}<script>{SCRIPT}</script></body></html>\n"
    )


CSS = """
:root{--ok:#1a7f37;--bad:#c62828;--warn:#9a6700;--info:#0b5cad;--muted:#6e7781;--line:#d8dee4;
--bg:#ffffff;--soft:#f6f8fa;--text:#1f2328}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--text);
font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif}
main{max-width:1240px;margin:0 auto;padding:24px 20px 8px}
h1{font-size:1.5rem;margin:0 0 4px}
h2{font-size:1.15rem;margin:28px 0 8px;padding-bottom:4px;border-bottom:1px solid var(--line)}
h3{font-size:1rem;margin:0 0 6px}
code,.mono{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,"DejaVu Sans Mono",monospace;
font-size:.9em;overflow-wrap:anywhere}
.verdict{font-size:1.1rem;font-weight:600;padding:10px 14px;border-radius:6px;margin:12px 0;
border-left:6px solid}
.verdict.ok{background:#dafbe1;border-color:var(--ok)}
.verdict.bad{background:#ffebe9;border-color:var(--bad)}
.verdict.warn{background:#fff8c5;border-color:var(--warn)}
dl{display:grid;grid-template-columns:max-content 1fr;gap:2px 16px;margin:8px 0}
dt{color:var(--muted)}dd{margin:0;overflow-wrap:anywhere}
.table-wrap{overflow-x:auto}
table{border-collapse:collapse;width:100%;font-size:.9rem}
th,td{padding:4px 8px;border-bottom:1px solid var(--line);text-align:left;vertical-align:top}
thead th{position:sticky;top:0;background:var(--soft);white-space:nowrap}
tbody tr:nth-child(even){background:#fbfcfd}
tbody tr:hover{background:#eef4fb}
.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.name,.name code{white-space:nowrap;overflow-wrap:normal}
th button{all:unset;cursor:pointer;font-weight:600}
th button:focus-visible{outline:2px solid var(--info)}
th[aria-sort=ascending] button::after{content:" \\25B2";font-size:.7em}
th[aria-sort=descending] button::after{content:" \\25BC";font-size:.7em}
.badge{display:inline-block;padding:0 7px;border-radius:10px;font-size:.8rem;font-weight:600;
white-space:nowrap;border:1px solid}
.badge.ok{color:var(--ok);background:#dafbe1}.badge.bad{color:var(--bad);background:#ffebe9}
.badge.warn{color:var(--warn);background:#fff8c5}.badge.info{color:var(--info);background:#ddf4ff}
.badge.muted{color:var(--muted);background:var(--soft)}
.bar{display:inline-block;height:.7em;background:#8fa7bf;border-radius:2px;margin-right:6px;
vertical-align:middle}
tr.flagged td:first-child{box-shadow:inset 4px 0 0 var(--warn)}
tr.failed td:first-child{box-shadow:inset 4px 0 0 var(--bad)}
.chart{margin:8px 0;overflow:auto;border:1px solid var(--line);border-radius:6px;padding:8px;
max-height:90vh;background:#fff}
.chart svg{display:block;width:100%;height:auto}
.panel{border:1px solid var(--line);border-left:6px solid var(--bad);border-radius:6px;
padding:10px 14px;margin:12px 0;background:var(--soft)}
.panel.warn{border-left-color:var(--warn)}
.panel ol{margin:4px 0 0;padding-left:22px}.panel li{margin:6px 0}
.fix{color:var(--info)}
.note{color:var(--warn)}
.muted{color:var(--muted)}
footer{max-width:1240px;margin:0 auto;padding:16px 20px 24px;color:var(--muted);font-size:.8rem}
@media print{.chart{max-height:none;overflow:visible}thead th{position:static}}
"""

# Sorts tables by clicking a header; cells may carry data-sort (a number or text). Without
# script the tables read the same, in execution order.
SCRIPT = """
(function () {
  function key(cell) {
    var raw = cell.hasAttribute("data-sort") ? cell.getAttribute("data-sort") : cell.textContent;
    var n = Number(raw);
    return raw !== "" && !isNaN(n) ? n : raw.trim().toLowerCase();
  }
  function compare(a, b) {
    if (typeof a === typeof b) { return a < b ? -1 : a > b ? 1 : 0; }
    return typeof a === "number" ? -1 : 1;
  }
  document.querySelectorAll("table.sortable").forEach(function (table) {
    var heads = table.tHead.rows[0].cells;
    Array.prototype.forEach.call(heads, function (th, column) {
      var button = document.createElement("button");
      button.type = "button";
      button.textContent = th.textContent;
      button.title = "sort by " + th.textContent;
      th.textContent = "";
      th.appendChild(button);
      button.addEventListener("click", function () {
        var up = th.getAttribute("aria-sort") !== "ascending";
        Array.prototype.forEach.call(heads, function (h) { h.removeAttribute("aria-sort"); });
        th.setAttribute("aria-sort", up ? "ascending" : "descending");
        var body = table.tBodies[0];
        var rows = Array.prototype.slice.call(body.rows);
        rows.sort(function (a, b) {
          var c = compare(key(a.cells[column]), key(b.cells[column]));
          return up ? c : -c;
        });
        rows.forEach(function (row) { body.appendChild(row); });
      });
    });
  });
})();
"""
