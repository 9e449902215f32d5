"""A cause's facts go into the JSON of inspect and scan and come back with the report."""

from __future__ import annotations

import json

import pytest
from helpers import sample

from layergrad.commands.api import inspect_model
from layergrad.core.errors import InputError
from layergrad.core.vocab import OutputFormat
from layergrad.files.report_json import report_from_json
from layergrad.render import render


def test_the_facts_of_a_cause_survive_the_json_and_an_older_report_has_none():
    # embedding.keras: integer ids feed an Embedding, so d head / d ids is None
    report = inspect_model(sample("embedding.keras"), "ids", ["head"])
    (cause, *_) = report.results[0].causes
    assert cause.code == "integer_path" and cause.fact("dtype") == "int32"
    doc = json.loads(render("inspect", OutputFormat.JSON, report))
    assert doc["results"][0]["causes"][0]["facts"] == {"dtype": "int32"}
    (read,) = report_from_json(doc).results
    assert read.causes[0].facts == cause.facts and read.causes[0].layer == cause.layer
    del doc["results"][0]["causes"][0]["facts"]  # a report written before causes kept facts
    assert report_from_json(doc).results[0].causes[0].facts == ()
    doc["results"][0]["causes"][0]["facts"] = {"dtype": ["int32"]}
    with pytest.raises(InputError, match=r"causes\[0\]\.facts\.dtype"):
        report_from_json(doc)
