"""Properties of what reaches a reader and of the `.npy` header reader, for any input.

The escapes are checked against definitions outside the code under test: Unicode categories
(`unicodedata`), CommonMark's rule that a code span ends at a run of backticks as long as its
fence, `xml.etree` parsing the report, and numpy writing the arrays read back.
"""

from __future__ import annotations

import io
import re
import unicodedata
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from layergrad.core.errors import InputError
from layergrad.core.results import CheckItem, FileVerdict
from layergrad.core.vocab import OutputFormat
from layergrad.files.array_files import read_arrays, read_header
from layergrad.render import render
from layergrad.render.check import junit
from layergrad.render.common import md_code, md_text
from layergrad.render.escape import visible

HIDDEN = {"Cc", "Cf", "Cs", "Zl", "Zp"}
names = st.text(st.characters(), max_size=40) | st.sampled_from(
    ["\x1b]8;;http://x\x07a\x1b]8;;\x07", "\u202eexe.gnp", "a\nb", "`` ` ```", "\x1b[2J\x1b[H"]
)


def hidden(text: str) -> list[str]:
    return [c for c in text if unicodedata.category(c) in HIDDEN]


@given(names)
def test_visible_leaves_nothing_a_terminal_acts_on(text: str) -> None:
    out = visible(text)
    assert not hidden(out)
    assert visible(out) == out  # already safe text stays as it is
    if text.isprintable() and text.isascii():
        assert out == text


@given(names)
def test_markdown_code_spans_cannot_be_left(text: str) -> None:
    out = md_code(text)
    assert "\n" not in out and not hidden(out)
    fence = re.match(r"`+", out)
    assert fence is not None and out.endswith(fence.group())
    inner = out[len(fence.group()) : -len(fence.group())]
    # CommonMark: the span closes at the first run exactly as long as the fence
    assert all(len(run) < len(fence.group()) for run in re.findall(r"`+", inner))


# a code span md_text makes: a whole word, from a run of backticks to a run as long
CODE_WORD = re.compile(r"(?:^|(?<=\s))(`+)(?!`).*?(?<!`)\1(?!`)(?=\s|$)")


@given(names | st.sampled_from(["@octocat x", "see www.a.b", "(https://a.b/c)", "cc #12 a_b"]))
def test_markdown_text_escapes_every_markup_character(text: str) -> None:
    out = md_text(text)
    assert "\n" not in out and not hidden(out)
    prose = CODE_WORD.sub("", out)  # a word GitHub would link or mention is a code span
    # GitHub links or mentions none of these outside code
    assert not re.search(r"@\w|www\.|://|#\d", prose, re.IGNORECASE), out
    unescaped = re.sub(r"\\.", "", prose)  # drop every backslash escape
    assert not set(unescaped) & set("`*_[]<>|#~")


@settings(suppress_health_check=[HealthCheck.too_slow], max_examples=60)
@given(names, names, names)
def test_junit_xml_stays_well_formed(path: str, check: str, message: str) -> None:
    verdict = FileVerdict(path, False, (CheckItem(check, False, message, ()),))
    suite = ET.fromstring(junit([verdict]).split("\n", 1)[1])
    case = suite.find("testcase")
    assert case is not None
    assert case.get("classname") == visible(path) and case.get("name") == visible(check)
    failure = case.find("failure")
    assert failure is not None and failure.get("message") == visible(message)


@settings(suppress_health_check=[HealthCheck.too_slow], max_examples=40)
@given(names, names)
@pytest.mark.parametrize("fmt", [OutputFormat.TABLE, OutputFormat.MARKDOWN, OutputFormat.HTML])
def test_rendered_reports_hold_no_hidden_characters(fmt: OutputFormat, path: str, msg: str) -> None:
    verdict = FileVerdict(path, False, (CheckItem("loads", False, msg, ()),))
    out = render("check", fmt, [verdict], color=False, width=100)
    assert not [c for c in hidden(out) if c != "\n"]


# ----- the .npy header reader ---------------------------------------------------------------------


@settings(max_examples=60)
@given(st.binary(max_size=300))
def test_any_bytes_after_the_magic_are_read_or_refused_cleanly(tail: bytes) -> None:
    for version in (b"\x01\x00", b"\x02\x00", b"\x03\x00"):
        data = b"\x93NUMPY" + version + tail
        try:
            header = read_header(io.BytesIO(data), "x.npy", None, len(data))
        except InputError as exc:
            assert "\n" not in str(exc) and "allow_pickle" not in str(exc)
            continue
        assert all(d >= 0 for d in header.shape) and header.nbytes <= len(data)


@settings(max_examples=60)
@given(
    st.lists(st.integers(-(2**70), 2**70), max_size=4),
    st.sampled_from(["<f4", "<i8", "|b1", "|O", "<c16", ">f8"]),
    st.sampled_from(["True", "False", "1", "None"]),
)
def test_any_declared_header_is_read_or_refused_cleanly(
    shape: list[int], descr: str, fortran: str
) -> None:
    text = f"{{'descr': '{descr}', 'fortran_order': {fortran}, 'shape': {tuple(shape)!r}, }}"
    body = text.encode("latin1")
    body += b" " * (-(len(body) + 11) % 64) + b"\n"
    data = b"\x93NUMPY\x01\x00" + len(body).to_bytes(2, "little") + body + b"\0" * 64
    try:
        header = read_header(io.BytesIO(data), "x.npy", None, len(data))
    except InputError as exc:
        assert "\n" not in str(exc)
        return
    assert fortran in ("True", "False") and descr != "|O"
    assert all(d >= 0 for d in header.shape) and header.nbytes <= 64


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=40)
@given(hnp.arrays(hnp.scalar_dtypes(), hnp.array_shapes(min_dims=1, max_dims=3, max_side=5)))
def test_arrays_numpy_writes_are_read_back_exactly(tmp_path: Path, array: np.ndarray) -> None:
    path = tmp_path / "a.npy"
    np.save(path, array)
    headers, arrays = read_arrays(path)
    assert headers[0].shape == array.shape
    np.testing.assert_array_equal(arrays[0], array)
    npz = tmp_path / "a.npz"
    np.savez_compressed(npz, x=array)
    _, arrays = read_arrays(npz)
    np.testing.assert_array_equal(arrays[0], array)
