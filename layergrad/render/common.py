"""What every renderer shares: rich text output, the table column, numbers, markdown, causes.

Renderers are pure functions of result objects returning a string. A table renderer takes
`color` and `width`; `width=None` means as wide as the content needs (output to a pipe or a
file), so nothing is ever cut.
"""

from __future__ import annotations

import io
import json
import math
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from rich import box
from rich.console import Console, Group, RenderableType
from rich.measure import Measurement
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from layergrad.core.results import ModelMeta, ProbeMeta, Reason, ScanReport
from layergrad.core.vocab import Status
from layergrad.diagnose.regressions import DiffReport
from layergrad.files.layer_listing import LayerListing
from layergrad.files.report_json import to_json
from layergrad.render.escape import visible

MIN_WIDTH = 100  # the narrowest a report is laid out when the width is free
STATUS_STYLE = {
    Status.OK: "green",
    Status.NONE: "bold red",
    Status.ZERO: "bold yellow",
    Status.NONFINITE: "bold magenta",
    Status.INTEGER: "dim",
    Status.STRING: "dim",
}


def to_text(renderables: Iterable[RenderableType], *, color: bool, width: int | None) -> str:
    """Render rich objects to a string (no colour codes unless `color`).

    With `width=None` the page is as wide as its widest table (at least MIN_WIDTH).
    """
    items = list(renderables)
    if width is None:
        width = max([MIN_WIDTH, *(natural_width(t) for t in _tables(items))])
    buffer = io.StringIO()
    console = Console(
        file=buffer,
        width=width,
        color_system="standard" if color else None,
        force_terminal=color,
        no_color=not color,
        highlight=False,
        emoji=False,
    )
    for item in items:
        console.print(item)
    return buffer.getvalue()


def _tables(items: Iterable[RenderableType]) -> Iterator[Table]:
    """The tables among `items`, inside groups too."""
    for item in items:
        if isinstance(item, Table):
            yield item
        elif isinstance(item, Group):
            yield from _tables(item.renderables)


def natural_width(renderable: RenderableType) -> int:
    """The width a renderable takes when nothing constrains it."""
    console = Console(width=100_000)
    return Measurement.get(console, console.options, renderable).maximum


@dataclass(frozen=True)
class Column:
    """A table column. `name_like` columns hold layer names: they wrap, never get cut.

    `drop` ranks optional columns: when the table is wider than the page, the highest rank
    goes first; 0 is never dropped.
    """

    header: str
    justify: str = "left"
    name_like: bool = False
    drop: int = 0
    # how `render.columns` gets the cell from a row (the row itself when None) and shows it in
    # each format (None: the value as text; a name as code), and which formats show it
    get: Callable[..., object] | None = None
    text: Callable[..., RenderableType] | None = None
    md: Callable[..., str] | None = None
    html: Callable[..., str] | None = None
    where: str = "tmh"


def number(value: float | None) -> str:
    """A number in 4 significant digits: fixed for ordinary sizes, scientific otherwise (`-`
    when there is none)."""
    if value is None:
        return "-"
    if value == 0:
        return "0"
    if not math.isfinite(value):
        return str(value)
    if 1e-3 <= abs(value) < 1e5:
        return f"{value:.4g}"
    return f"{value:.3e}"


def count(n: int, word: str) -> str:
    """`1 step`, `3 steps`."""
    return f"{n} {word}{'' if n == 1 else 's'}"


def ranked_units_table(
    title: str,
    value_header: str,
    columns: Sequence[tuple[str, Sequence[tuple[int, float]]]],
    item: str = "unit",
) -> Group:
    """Side-by-side rankings of units (or samples: `item`): per (target label, [(unit,
    value), ...] best first)."""
    table = Table(box=box.SIMPLE, pad_edge=False)
    table.add_column("rank", justify="right")
    for label, _ in columns:
        table.add_column(Text(f"→ {label}"), justify="right", overflow="fold")
        table.add_column(value_header, justify="right", no_wrap=True)
        table.add_column("", justify="left", no_wrap=True)
    for rank in range(max((len(units) for _, units in columns), default=0)):
        cells: list[RenderableType] = [str(rank + 1)]
        for _, units in columns:
            if rank < len(units):
                unit, value = units[rank]
                bar = "█" * max(1, round(10 * value / (units[0][1] or 1.0)))
                cells += [Text(f"{item} {unit}"), number(value), bar]
            else:
                cells += ["", "", ""]
        table.add_row(*cells)
    return Group(Text(title, style="bold"), table)


def probe_line(p: ProbeMeta, what: str) -> str:
    """`probe: random (seed 0), batch 8, inference, <what>`."""
    mode = "training" if p.training else "inference"
    source = f"random (seed {p.seed})" if p.source == "random" else p.source
    if p.drawn:
        source = f"random (seed {p.seed}; {p.drawn})"
    shards = p.shards or 1
    if p.samples is not None:  # --data
        merged = f" in {shards} shards" if shards > 1 else ""
        source += f" ({p.samples:,} samples{merged})"
    # a merge sums its shards' devices: one each is no more than its shards
    replicas = f", {p.replicas} replicas" if p.replicas and p.replicas > shards else ""
    return f"probe: {source}, batch {p.batch_size}{replicas}, {mode}, {what}"


def model_line(m: ModelMeta | LayerListing) -> Text:
    """`model.keras  Functional 'name', keras`: the file in bold, then what it holds."""
    return Text.assemble((m.path, "bold"), f"  {m.class_name} {m.name!r}, {m.format}")


def model_header(m: ModelMeta, p: ProbeMeta, what: str) -> Text:
    """Two header lines: the model file, then how it was probed."""
    return Text.assemble(model_line(m), "\n", probe_line(p, what))


def causes_lines(causes: Iterable[Reason]) -> list[RenderableType]:
    """Numbered causes, each with its evidence and a `fix:` line (indented, wrapped lines
    too)."""
    lines: list[RenderableType] = []
    for rank, cause in enumerate(causes, 1):
        where = f" at {cause.layer}" if cause.layer else ""
        op = f" (op {cause.op})" if cause.op else ""
        head = (f"{rank}. {cause.code}", "bold")
        lines.append(Text.assemble(head, f"{where}{op}: {cause.message}"))
        lines.append(Padding(Text(f"fix: {cause.hint}", style="cyan"), (0, 0, 0, 3), expand=False))
    return lines


def json_document(doc: object, **_: object) -> str:
    """Any report as strict JSON, from its dataclass fields: every NaN or infinity is `null`.

    One encoding for every schema (see docs/json.md): a number that is not finite is written
    as `null` (`report_json.to_json`), and the counts beside it (`nonfinite`, the status) say
    that it was. Readers (`diff`, `check --baseline`) take `null` back as "not a finite number".
    """
    return json.dumps(to_json(doc), indent=2, allow_nan=False)


def md_table(header: Sequence[str], rows: Sequence[Sequence[str]], rule: str = "|---") -> str:
    """A GitHub-flavoured markdown table (pipes escaped); `rule` starts each cell of the line
    under the header."""
    lines = ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    head = "| " + " | ".join(h.replace("|", "\\|") for h in header) + " |"
    return "\n".join([head, rule * len(header) + "|", *lines]) + "\n"


def md_head(command: str, verdict: str, facts: Iterable[tuple[str, str]]) -> list[str]:
    """The opening lines of a comment: `### layergrad COMMAND: VERDICT`, then its facts."""
    said = [f"- {k}: {md_text(v)}" for k, v in facts]
    return [f"### layergrad {command}: {md_text(verdict)}", "", *said, ""]


def md_title(command: str, path: str, what: str) -> str:
    """A report's opening line: `**layergrad COMMAND** `PATH`: WHAT`, then a blank line."""
    return f"**layergrad {command}** {md_code(path)}: {what}\n\n"


def md_lines(lines: Sequence[str]) -> str:
    """Lines after a markdown table: each on its own line, a blank line before them."""
    return "".join(f"\n{line}" for line in lines) + ("\n" if lines else "")


def md_code(text: str) -> str:
    """Inline code for markdown; a name read from a model file never becomes markup.

    The text is made one line (`escape.visible`), and the fence is one backtick longer than
    the longest run of backticks inside, so no run can close the span early.
    """
    text = visible(text)
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith(("`", " ")) or text.endswith(("`", " ")) else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def md_text(text: str) -> str:
    """Plain text for markdown: every character that could become markup is escaped, and a
    word GitHub would turn into a link or a notification (`@name`, `www.site`, `scheme://`,
    `#12`) is shown in a code span, where it stays text."""
    return "".join(
        md_code(part) if _LINKISH.search(part) else _escaped(part)
        for part in re.split(r"(\S+)", visible(text))
    )


# What GitHub links in plain text: an @mention (or an e-mail address), a bare www. link, a URL
# (http://, https://, ftp://...), an issue reference (#12). None of it is linked in code.
_LINKISH = re.compile(r"@\w|www\.|://|#\d", re.IGNORECASE)


def _escaped(text: str) -> str:
    out = text.replace("\\", "\\\\").replace("&", "&amp;")
    for ch in "`*_[]<>|#~":
        out = out.replace(ch, "\\" + ch)
    return out


def md_cause(c: Reason) -> str:
    """One cause as a markdown sentence pair: what was found, then the fix."""
    where = f" at {md_code(c.layer)}" if c.layer else ""
    op = f" (op {c.op})" if c.op else ""
    fix = md_text(sentence(c.hint))
    return f"**{c.code}**{where}{op}: {md_text(sentence(c.message))} Fix: {fix}"


def sentence(text: str) -> str:
    """`text` ending in a full stop (causes are written without one)."""
    text = text.rstrip()
    return text if text.endswith((".", "!", "?")) else text + "."


def flow_text(report: ScanReport | DiffReport) -> str:
    """What a scan differentiates: `d sum(dense_1) / d each layer`, or without a target the
    projection of the model's outputs, `d sum(outputs · R) / d each layer`."""
    target = "outputs · R" if report.target is None else report.target
    return f"d {report.probe.reduce}({target}) / d each layer"
