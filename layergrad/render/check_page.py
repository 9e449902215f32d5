"""The `check` page: the verdict, a summary row per file, then a section per file, as one
self-contained HTML page (the parts of `html_page.py`). Names from model files are escaped.
"""

from __future__ import annotations

from collections.abc import Sequence

from layergrad.core.results import CheckItem, FileVerdict, warned
from layergrad.render.check import checks_line
from layergrad.render.html_page import Html, badge, cell, definition_list, el, join, page, table


def check_html(verdicts: Sequence[FileVerdict], **_: object) -> str:
    """The `check` page: the verdict, a summary row per file, then a section per file.

    Failed files come first, and within a file its failed checks come first.
    """
    failed = [i for i, v in enumerate(verdicts) if not v.passed]
    passed, warnings = len(verdicts) - len(failed), sum(len(v.warnings) for v in verdicts)
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
        definition_list(
            [
                ("files", str(len(verdicts))),
                ("passed", str(passed)),
                ("failed", str(len(failed))),
                ("warnings", str(warnings)),
            ]
        ),
        el("h2", "Files"),
        table(["file", "verdict", "checks", "findings"], rows, row_classes=classes),
    ]
    body += [_file_section(i, verdicts[i]) for i in order]
    return page("check", None, body)


def _check_summary_row(index: int, v: FileVerdict) -> list[Html]:
    failures = [badge(f, "bad") for f in dict.fromkeys(v.failures)]
    warnings = [badge(f"{f} (warning)", "warn") for f in dict.fromkeys(v.warnings)]
    return [  # a file name never breaks; what each finding says is in the file's section
        cell(el("a", el("code", v.path), href=f"#file-{index}"), sort=v.path, cls="name"),
        cell(_verdict_badge(v), sort=0 if not v.passed else 1 if v.warnings else 2),
        cell(checks_line(v, "failed:"), sort=sum(not c.passed for c in v.checks)),
        cell(join([*failures, *warnings])),
    ]


def _verdict_badge(v: FileVerdict) -> Html:
    """PASS (green), PASS with warnings (yellow) or FAIL (red), with the warnings counted."""
    kind = "bad" if not v.passed else "warn" if v.warnings else "ok"
    return badge(v.verdict, kind)


def _file_section(index: int, v: FileVerdict) -> Html:
    checks = sorted(v.checks, key=lambda c: c.passed)  # stable: failed first, in check order
    rows = [_check_row(c) for c in checks]
    title = el("h2", _verdict_badge(v), " ", el("code", v.path, class_="name"))
    return el(
        "section",
        title,
        table(["check", "result", "message", "findings"], rows),
        id=f"file-{index}",
    )


def _check_row(c: CheckItem) -> list[Html]:
    failures = [badge(f, "bad") for f in c.failures]
    warnings = [badge(f"{f} (warning)", "warn") for f in c.warnings]
    return [
        cell(c.name),
        cell(badge("pass", "ok") if c.passed else badge("fail", "bad"), sort=int(c.passed)),
        cell(c.message),
        cell(join([*failures, *warnings])),
    ]
