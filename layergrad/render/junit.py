"""JUnit XML for check verdicts: CI systems show one testcase per file and check."""

from __future__ import annotations

from collections.abc import Sequence
from xml.etree import ElementTree as ET

from layergrad.core.results import FileVerdict
from layergrad.render.escape import scrubbed


def check_junit(verdicts: Sequence[FileVerdict]) -> str:
    """One testcase per file and check; a failed check carries its message, a check that
    passed with findings says `warning (FINDINGS): message` in its system-out.

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
                warned = ", ".join(c.warnings)
                ET.SubElement(case, "system-out").text = f"warning ({warned}): {c.message}"
    ET.indent(suite)
    return (
        '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suite, encoding="unicode") + "\n"
    )
