"""Reading rendered HTML pages in tests with the standard library's parser (not our builder).

`read_page` checks that every element is closed in order and collects what tests look at: the
start tags with their attributes, the cells of each table body, and the text of the body (a space between blocks).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from html.parser import HTMLParser

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
        "track", "wbr"}  # fmt: skip
URL_ATTRIBUTES = {"src", "href", "xlink:href", "action", "formaction", "data", "poster",
                  "srcset", "background", "ping", "manifest", "cite"}  # fmt: skip
BLOCK = {"p", "div", "h1", "h2", "h3", "li", "tr", "td", "th", "dt", "dd", "section", "figure",
         "table", "ol", "ul", "main", "footer", "dl", "svg"}  # fmt: skip
FETCHING_TAGS = {"link", "iframe", "frame", "object", "embed", "img", "audio", "video", "source",
                 "base", "track", "image", "use"}  # fmt: skip


@dataclass
class Page:
    """What a page holds, as the parser saw it."""

    doctype: str = ""
    tags: list[tuple[str, dict[str, str | None]]] = field(default_factory=list)
    tables: list[list[list[str]]] = field(default_factory=list)  # table body -> rows -> cells
    text: str = ""
    scripts: list[str] = field(default_factory=list)
    styles: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def count(self, tag: str) -> int:
        return sum(1 for t, _ in self.tags if t == tag)

    def ids(self, prefix: str) -> list[str]:
        return [a["id"] or "" for _, a in self.tags if (a.get("id") or "").startswith(prefix)]


class _Reader(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.page = Page()
        self.stack: list[str] = []
        self.row: list[str] | None = None
        self.cell: list[str] | None = None
        self.text: list[str] = []

    def handle_decl(self, decl: str) -> None:
        self.page.doctype = decl

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.page.tags.append((tag, dict(attrs)))
        if tag in BLOCK:
            self.text.append(" ")
        if tag in VOID:
            return
        self.stack.append(tag)
        if tag == "tbody":
            self.page.tables.append([])
        elif tag == "tr" and "tbody" in self.stack:
            self.row = []
            self.page.tables[-1].append(self.row)
        elif tag in ("td", "th") and self.row is not None:
            self.cell = []
        elif tag in ("script", "style"):
            getattr(self.page, tag + "s").append("")

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.page.tags.append((tag, dict(attrs)))  # `<path/>` in SVG: opened and closed

    def handle_endtag(self, tag: str) -> None:
        if tag in VOID:
            return
        if not self.stack or self.stack[-1] != tag:
            self.page.errors.append(f"</{tag}> closes <{self.stack[-1] if self.stack else ''}>")
            return
        self.stack.pop()
        if tag in BLOCK:
            self.text.append(" ")
        if tag in ("td", "th") and self.cell is not None and self.row is not None:
            self.row.append(" ".join("".join(self.cell).split()))
            self.cell = None
        elif tag == "tr":
            self.row = None

    def handle_data(self, data: str) -> None:
        if self.stack and self.stack[-1] in ("script", "style"):
            getattr(self.page, self.stack[-1] + "s")[-1] += data
            return
        if self.cell is not None:
            self.cell.append(data)
        if "head" not in self.stack:
            self.text.append(data)


def read_page(document: str) -> Page:
    """Parse a page; `errors` lists elements closed out of order or left open."""
    reader = _Reader()
    reader.feed(document)
    reader.close()
    page = reader.page
    page.text = " ".join("".join(reader.text).split())
    if reader.stack:
        page.errors.append(f"left open: {reader.stack}")
    return page


def external_references(page: Page) -> list[str]:
    """Everything that would make a browser fetch something or leave the page."""
    found = []
    for tag, attrs in page.tags:
        if tag in FETCHING_TAGS and not (tag == "use" and _local(attrs.get("xlink:href"))):
            found.append(f"<{tag}>")
        if tag == "script" and "src" in attrs:
            found.append("<script src>")
        if tag == "meta" and (attrs.get("http-equiv") or "").lower() == "refresh":
            found.append("<meta refresh>")
        for name, value in attrs.items():
            if name in URL_ATTRIBUTES and not _local(value):
                found.append(f"<{tag} {name}={value!r}>")
            if name == "style" and _css_fetches(value or ""):
                found.append(f"<{tag} style={value!r}>")
    found += [f"<style> {s[:60]!r}" for s in page.styles if _css_fetches(s)]
    return found


def _local(value: str | None) -> bool:
    """An in-page reference (`#id`)."""
    return value is not None and value.startswith("#")


def _css_fetches(css: str) -> bool:
    return "@import" in css or re.search(r"url\(\s*['\"]?(?!#)", css) is not None
