"""One column list renders the same cells in the text table, markdown and HTML.

Rows are made by hand (no TensorFlow) with numbers whose 4-significant-digit text is known:
0.5, 0.001, 2 and 2.5e-07; the page is read back with the standard library's parser
(tests/pagecheck.py), the text table by splitting its lines on runs of spaces.
"""

from __future__ import annotations

import re

from pagecheck import read_page

from layergrad.core.results import GradientStats, VariableRow
from layergrad.core.vocab import Finding, Status
from layergrad.render.columns import WEIGHT_COLUMNS, html_rows, md_rows, text_table
from layergrad.render.common import to_text

ROWS = (
    VariableRow("dense/kernel", "dense", "kernel", (4, 2), "float32", Status.OK,
                GradientStats((4, 2), 2.0, 0.5, 1.0, 0.0, 0), 0.001),
    VariableRow("dense/bias", "dense", "bias", (2,), "float32", Status.NONE, None, None,
                (Finding.BLOCKED,)),
    VariableRow("head/kernel", "head", "kernel", (2, 1), "float32", Status.OK,
                GradientStats((2, 1), 5e-7, 2.5e-7, 4e-7, 0.5, 0), None, (Finding.VANISHING,)),
)  # fmt: skip
# variable, shape, status, L2, mean |g|, ||g|| / ||w||, flags: worked out from ROWS by hand
EXPECTED = [
    ["dense/kernel", "(4, 2)", "ok", "2", "0.5", "0.001", ""],
    ["dense/bias", "(2)", "none", "-", "-", "-", "blocked"],
    ["head/kernel", "(2, 1)", "ok", "5.000e-07", "2.500e-07", "-", "vanishing"],
]


def _text_rows(text: str) -> list[list[str]]:
    names = {r.variable for r in ROWS}
    return [
        re.split(r"\s{2,}", ln.strip())
        for ln in text.splitlines()
        if ln.split()[:1] and ln.split()[0] in names
    ]


def test_the_text_table_the_markdown_and_the_page_hold_the_same_cells():
    text = to_text(text_table(WEIGHT_COLUMNS, ROWS, None), color=False, width=None)
    assert [row + [""] * (7 - len(row)) for row in _text_rows(text)] == EXPECTED
    page = read_page(html_rows(WEIGHT_COLUMNS, ROWS))
    assert page.tables == [EXPECTED]
    markdown = md_rows(WEIGHT_COLUMNS, ROWS).splitlines()
    # L2 is shown in the table and on the page, not in a comment; names are code spans there
    assert (
        markdown[0]
        == "| variable | shape | status | mean \\|g\\| | \\|\\|g\\|\\| / \\|\\|w\\|\\| | flags |"
    )
    assert markdown[3] == "| `dense/bias` | (2) | **none** | - | - | blocked |"
    assert markdown[2] == "| `dense/kernel` | (4, 2) | ok | 0.5 | 0.001 |  |"


def test_a_narrow_table_leaves_out_the_highest_ranked_columns_and_says_which():
    # drop ranks: flags 1, ||g|| / ||w|| 2, shape 3, L2 4 (the highest goes first); the
    # names, the status and mean |g| never go
    text = to_text(text_table(WEIGHT_COLUMNS, ROWS, 48), color=False, width=48)
    header = next(ln for ln in text.splitlines() if "variable" in ln).split()
    assert header == ["variable", "status", "mean", "|g|", "flags"]
    note = " ".join(text.split("columns left out to fit 48 columns:")[1].split())
    assert note.startswith("shape, L2, ||g|| / ||w||; a wider terminal")


def test_the_page_marks_flagged_rows_and_sorts_numbers_by_value():
    page = read_page(html_rows(WEIGHT_COLUMNS, ROWS))
    rows = [attrs.get("class") for tag, attrs in page.tags if tag == "tr"][1:]  # after the header
    assert rows == [None, "flagged", "flagged"]
    sorts = [attrs.get("data-sort") for tag, attrs in page.tags if tag == "td"]
    assert sorts[4] == "0.5" and sorts[11] == "-Infinity"  # mean |g| of the first two rows
