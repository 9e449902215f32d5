"""Render the `layers` listing: a rich table, JSON (`layergrad.layers/1`) or markdown."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from rich.console import RenderableType
from rich.text import Text

from layergrad.files.layer_listing import LayerListing, LayerRow, ModelInput, nonfinite_text
from layergrad.render.columns import html_rows, md_rows, name, text_table
from layergrad.render.common import Column, md_code, md_text, md_title, model_line, to_text
from layergrad.render.html_page import Html, badge, cell, definition_list, el, join, page

NONFINITE_STYLE = "bold magenta"
ZERO_STYLE = "bold yellow"


def table(listing: LayerListing, *, color: bool = False, width: int | None = 100) -> str:
    """The `layers` table: a header, one row per layer, weight problems, and the totals.

    The dtype and trainable columns are shown only when layers differ in them; when every
    layer has the same value the header says it (an input's dtype is in the header).
    """
    version = f"Keras {listing.keras_version}" if listing.keras_version else "unknown Keras"
    header = model_line(listing)
    header.append(f", saved by {version}")
    if listing.inputs:
        header.append(f"\ninputs: {', '.join(map(_input_text, listing.inputs))}")
    rows = listing.rows
    values: dict[str, set[str | bool]] = {
        "dtype": {r.dtype for r in rows if r.dtype is not None and r.class_name != "InputLayer"},
        "trainable": {r.trainable for r in rows if r.trainable is not None},
    }
    uniform = []
    if len(values["dtype"]) == 1:
        uniform.append(f"every layer's dtype policy is {next(iter(values['dtype']))}")
    if len(values["trainable"]) == 1:
        uniform.append(f"every layer is {'' if values['trainable'] == {True} else 'not '}trainable")
    header.append("\n" + "; ".join(uniform) if uniform else "")
    items: list[RenderableType] = [header]
    if not listing.graph_known:
        items.append(
            Text(
                "the config describes no layer graph (a subclassed model): the rows below are "
                "the weight file's groups, which --from/--to may not accept",
                style="yellow",
            )
        )
    columns = [c for c in _columns(listing) if len(values.get(c.header, "many")) > 1]
    items += text_table(columns, rows, width, compact=True, note=False)
    flagged = [r for r in listing.rows if r.problem]
    if flagged:
        items.append(_problems(flagged))
    items.append(Text(_footer(listing)))
    return to_text(items, color=color, width=width)


def _input_text(i: ModelInput) -> str:
    """`ids (None, 6) int32`."""
    parts = [i.name]
    if i.shape is not None:
        parts.append("(" + ", ".join("None" if d is None else str(d) for d in i.shape) + ")")
    if i.dtype:
        parts.append(i.dtype)
    return " ".join(parts)


def _columns(listing: LayerListing) -> list[Column]:
    """The columns of the listing: one row per layer (a functional operation in inbound is
    marked `(op)`)."""
    ops = {op.path for op in listing.operations}

    def inbound(r: LayerRow, show: Callable[[str], str] = str) -> str:
        return ", ".join(show(p) + (" (op)" if p in ops else "") for p in r.inbound)

    return [
        Column("#", "right", get=lambda r: ".".join(map(str, r.position)) or "?"),
        name("layer", lambda r: r, text=lambda r: Text(r.path, style="bold" if r.is_model else ""),
             md=lambda r: md_code(r.path), html=lambda r: cell(el("code", r.path), sort=r.path)),
        Column("class", drop=2, text=lambda r: Text.assemble(r.class_name, (_calls_text(r),
               "dim")), md=lambda r: md_text(r.class_name) + _calls_text(r),
               html=lambda r: cell(r.class_name)),
        name("inbound", lambda r: r, 3, text=inbound, md=lambda r: inbound(r, md_code),
             html=lambda r: cell(", ".join(r.inbound))),
        Column("params", "right", drop=4, text=_params_text, md=_params_text,
               html=lambda r: cell(f"{r.params:,}", sort=r.params, num=True)),
        Column("dtype", drop=5, get=lambda r: r.dtype or ""),
        Column("trainable", drop=6, get=lambda r: {True: "yes", False: "no"}.get(r.trainable, "")),
        Column("weights", drop=1, text=_health_cell, md=lambda r: f"**{health_text(r)}**"
               if r.problem else health_text(r), html=lambda r: cell(badge(health_text(r), "bad")
               if r.problem else health_text(r))),
    ]  # fmt: skip


def _calls_text(r: LayerRow) -> str:
    return f" ({r.calls} calls)" if r.calls > 1 else ""


def _params_text(r: LayerRow) -> str:
    return f"{r.params:,}" if r.params or r.weights is not None or r.is_model else ""


def health_text(r: LayerRow) -> str:
    """`ok`, `3 NaN, 2 Inf`, `1/2 zero`, or "" for a layer that stores no weights."""
    return _health_cell(r).plain


def _health_cell(r: LayerRow) -> Text:
    w = r.weights
    if w is None:
        return Text("")
    parts = [nonfinite_text(w)] if w.nan or w.inf else []
    if w.zero_tensors:
        parts.append(f"{w.zero_tensors}/{w.tensors} zero")
    if w.unchecked:
        parts.append(f"{w.unchecked}/{w.tensors} not scanned")
    style = ""
    if w.nan or w.inf:
        style = NONFINITE_STYLE
    elif w.tensors and w.zero_tensors == w.tensors:
        style = ZERO_STYLE
    return Text(", ".join(parts) or "ok", style=style)


def _problems(rows: Iterable[LayerRow]) -> Text:
    text = Text("weights that need a look:", style="bold")
    for r in rows:
        w = r.weights
        style = NONFINITE_STYLE if w is not None and (w.nan or w.inf) else ZERO_STYLE
        text.append(f"\n  {r.path}: ")
        text.append(str(r.problem), style=style)
    return text


def _footer(listing: LayerListing) -> str:
    stored = sum(1 for r in listing.rows if r.weights is not None)
    lines = [
        f"{len(listing.rows)} layers, {stored} with stored weights; "
        f"total params {listing.total_params:,} (from the stored weight shapes)"
    ]
    ops = listing.operations
    if ops:
        shown = ", ".join(f"{op.path} ({', '.join(op.inbound)})" for op in ops[:5])
        more = f" and {len(ops) - 5} more (see --json)" if len(ops) > 5 else ""
        lines.append(
            f"{len(ops)} functional operations are not layers, so --from/--to cannot address "
            f"them; inbound marks them (op). Each with its inputs: {shown}{more}"
        )
    lines += [f"weights not scanned: {note}" for note in listing.notes]
    return "\n".join(lines)


def markdown(listing: LayerListing, **_: object) -> str:
    """The listing as a markdown table, for a pull-request comment."""
    version = listing.keras_version or "unknown"
    what = f"{md_text(listing.class_name)} {md_code(listing.name)}, {listing.format}"
    head = md_title("layers", listing.path, f"{what}, Keras {md_text(version)}")
    out = head + md_rows(_columns(listing), listing.rows) + "\n"
    out += "".join(
        f"- {md_code(r.path)}: **{md_text(str(r.problem))}**\n" for r in listing.rows if r.problem
    )
    return out + "".join(f"{md_text(line)}\n" for line in _footer(listing).splitlines())


def html(listing: LayerListing, **_: object) -> str:
    """The `layers` page: the file's header, then one row per layer and its weight health."""
    head = definition_list(
        [
            ("model", join([el("code", listing.path), f"  {listing.class_name} {listing.name!r}"])),
            ("format", f"{listing.format}, saved by Keras {listing.keras_version or 'unknown'}"),
            ("inputs", ", ".join(i.name for i in listing.inputs) or "-"),
            ("layers", f"{len(listing.rows)}, {listing.total_params:,} stored parameters"),
        ]
    )
    flagged = [r for r in listing.rows if r.problem]
    verdict = (
        el("p", f"{len(flagged)} layers have weights that need a look", class_="verdict warn")
        if flagged
        else el("p", "every stored weight is finite", class_="verdict ok")
    )
    body: list[Html | None] = [
        verdict,
        head,
        el("h2", "Layers"),
        html_rows(_columns(listing), listing.rows),
    ]
    body += [el("p", f"{r.path}: {r.problem}", class_="note") for r in flagged]
    return page("layers", listing.path, body)
