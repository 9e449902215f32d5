"""Render check verdicts: a summary table, JSON, markdown, JUnit XML and one self-contained
HTML page (the parts of `html_page.py`; names from model files are escaped)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from xml.etree import ElementTree as ET

from rich.console import Group, RenderableType
from rich.padding import Padding
from rich.text import Text

from layergrad.core.results import CheckItem, CheckReport, FileVerdict, warned
from layergrad.render.columns import text_table
from layergrad.render.common import (
    Column,
    json_document,
    md_code,
    md_table,
    md_text,
    natural_width,
    to_text,
)
from layergrad.render.escape import scrubbed
from layergrad.render.html_page import Html, badge, cell, definition_list, el, join, page
from layergrad.render.html_page import table as html_table

STYLES = {"bad": "bold red", "warn": "yellow", "ok": "green"}  # a file's verdict in the table
COLUMNS = (  # a path is never broken: what the findings say goes under the table
    Column("file", get=lambda v: v.path),
    Column("verdict", text=lambda v: Text(v.verdict, style=STYLES[_standing(v)])),
    Column("checks", drop=2, get=lambda v: checks_line(v, "✗")),
    Column("findings", drop=1,
           get=lambda v: ", ".join(dict.fromkeys(f for c in v.checks for f in c.findings))),
)  # fmt: skip


def table(verdicts: Sequence[FileVerdict], *, color: bool = False, width: int | None = 100) -> str:
    """One row per file (verdict, checks passed, the findings' names), then what each says.

    File names are never broken: when the table does not fit, the checks and findings
    columns go (a line under the table says which), and a name longer than the page makes
    the page wider.
    """
    items = text_table(COLUMNS, verdicts, width)
    for v in verdicts:
        notes = _note_lines(v)
        if notes:
            items.append(Group(Text(v.path, style="bold"), *notes))
    failed, warns = not all(v.passed for v in verdicts), any(v.warnings for v in verdicts)
    style = "bold red" if failed else "bold yellow" if warns else "bold green"
    items.append(Text(CheckReport(tuple(verdicts)).summary, style=style))
    wide = None if width is None else max(width, natural_width(items[0]))
    return to_text(items, color=color, width=wide)


def _note_lines(v: FileVerdict) -> list[RenderableType]:
    """A paragraph per check that failed (✗) or warns (!), indented under the file's name."""
    lines: list[RenderableType] = []
    for c in v.checks:
        if c.passed and not c.findings:
            continue
        mark, style = ("✗", "red") if not c.passed else ("!", "yellow")
        line = Text(f"{mark} {c.name}{_kind(c)}: ", style=style)
        line.append(c.message, style="")
        lines.append(Padding(line, (0, 0, 0, 2), expand=False))
    return lines


def checks_line(v: FileVerdict, failed: str) -> str:
    """`3/4 ok`, then `failed` and the names of the checks that failed."""
    names = [c.name for c in v.checks if not c.passed]
    said = f", {failed} {', '.join(names)}" if names else ""
    return f"{len(v.checks) - len(names)}/{len(v.checks)} ok{said}"


def _standing(v: FileVerdict) -> str:
    """`bad` (failed), `warn` (passed with warnings) or `ok`: how every format colours a file."""
    return "bad" if not v.passed else "warn" if v.warnings else "ok"


def _notes(v: FileVerdict) -> str:
    """What the checks that found something or failed say; warnings are marked as such."""
    return "; ".join(
        f"{c.name}{_kind(c)}: {c.message}" for c in v.checks if c.findings or not c.passed
    )


def _kind(c: CheckItem) -> str:
    """` (warning)` for a check whose every finding is a warning, else nothing."""
    return " (warning)" if c.findings and not c.failures and c.passed else ""


def as_json(verdicts: Sequence[FileVerdict], **_: object) -> str:
    """The `layergrad.check/1` JSON document: the JSON of every report, of a `CheckReport`."""
    return json_document(CheckReport(tuple(verdicts)))


def markdown(verdicts: Sequence[FileVerdict], **_: object) -> str:
    """A markdown summary for a pull-request comment."""
    head = f"**layergrad check**: {CheckReport(tuple(verdicts)).summary}\n\n"
    rows = [[md_code(v.path), _md_verdict(v), md_text(_notes(v))] for v in verdicts]
    return head + md_table(["file", "verdict", "findings"], rows)


def _md_verdict(v: FileVerdict) -> str:
    if not v.passed:
        return f"❌ **fail**{warned(len(v.warnings))}"
    return f"⚠️ pass{warned(len(v.warnings))}" if v.warnings else "✅ pass"


def junit(verdicts: Sequence[FileVerdict], **_: object) -> str:
    """JUnit XML, for CI systems: one testcase per file and check; a failed check carries its
    message, a check that passed with findings says `warning (FINDINGS): message` in its
    system-out.

    Every string is made `escape.visible` first: raw control characters would make the XML
    ill-formed, and a CI system would then lose every file's result.
    """
    verdicts = scrubbed(tuple(verdicts))
    suite = ET.Element(
        "testsuite",
        name="layergrad.check",
        tests=str(sum(len(v.checks) for v in verdicts)),
        failures=str(sum(1 for v in verdicts for c in v.checks if not c.passed)),
        errors="0",
    )
    for v in verdicts:
        for c in v.checks:
            case = ET.SubElement(suite, "testcase", classname=v.path, name=c.name)
            if not c.passed:
                ET.SubElement(case, "failure", message=c.message, type=",".join(c.findings))
            elif c.findings:
                said = ", ".join(c.warnings)
                ET.SubElement(case, "system-out").text = f"warning ({said}): {c.message}"
    ET.indent(suite)
    return (
        '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suite, encoding="unicode") + "\n"
    )


def html(verdicts: Sequence[FileVerdict], **_: object) -> str:
    """The `check` page: the verdict, a summary row per file, then a section per file.

    Failed files come first, and within a file its failed checks come first.
    """
    failed = [i for i, v in enumerate(verdicts) if not v.passed]
    warnings = sum(len(v.warnings) for v in verdicts)
    counts = {"files": len(verdicts), "passed": len(verdicts) - len(failed), "failed": len(failed)}
    counts["warnings"] = warnings
    if failed:
        said, kind = f"FAIL: {len(failed)} of {len(verdicts)} files failed", "bad"
    else:
        said = f"PASS: all {len(verdicts)} files passed{warned(warnings)}"
        kind = "warn" if warnings else "ok"
    rows = [_check_summary_row(i, v) for i, v in enumerate(verdicts)]
    classes = [None if v.passed else "failed" for v in verdicts]
    order = failed + [i for i, v in enumerate(verdicts) if v.passed]
    body: list[Html | None] = [
        el("p", said, class_=f"verdict {kind}"),
        definition_list((k, str(n)) for k, n in counts.items()),
        el("h2", "Files"),
        html_table(["file", "verdict", "checks", "findings"], rows, row_classes=classes),
    ]
    body += [_file_section(i, verdicts[i]) for i in order]
    return page("check", None, body)


def _badges(failures: Iterable[str], warnings: Iterable[str]) -> Html:
    """A cell of findings: the failures red, then the warnings yellow."""
    bad = [badge(f, "bad") for f in failures]
    return cell(join([*bad, *(badge(f"{f} (warning)", "warn") for f in warnings)]))


def _check_summary_row(index: int, v: FileVerdict) -> list[Html]:
    return [  # a file name never breaks; what each finding says is in the file's section
        cell(el("a", el("code", v.path), href=f"#file-{index}"), sort=v.path, cls="name"),
        cell(badge(v.verdict, _standing(v)), sort=("bad", "warn", "ok").index(_standing(v))),
        cell(checks_line(v, "failed:"), sort=sum(not c.passed for c in v.checks)),
        _badges(dict.fromkeys(v.failures), dict.fromkeys(v.warnings)),
    ]


def _file_section(index: int, v: FileVerdict) -> Html:
    rows = [
        [
            cell(c.name),
            cell(badge("pass", "ok") if c.passed else badge("fail", "bad"), sort=int(c.passed)),
            cell(c.message),
            _badges(c.failures, c.warnings),
        ]
        for c in sorted(v.checks, key=lambda c: c.passed)  # stable: failed first, in check order
    ]
    title = el("h2", badge(v.verdict, _standing(v)), " ", el("code", v.path, class_="name"))
    return el(
        "section",
        title,
        html_table(["check", "result", "message", "findings"], rows),
        id=f"file-{index}",
    )
