"""A committed `layergrad scan --json` document read as a gradient profile: at most
MAX_PROFILE_BYTES, checked against the schema member by member, so a malformed or foreign file
is a clear error and never a false regression.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Mapping
from dataclasses import replace

from layergrad.core.errors import InputError
from layergrad.core.results import ModelMeta, ProbeMeta, ScanReport, WeightScanReport
from layergrad.core.vocab import Status
from layergrad.files.gradient_profile import ACTIVATIONS, ROW_KEYS, Profile, ProfileRow
from layergrad.files.report_json import MAX_MEASURE, SCAN_SCHEMA, Reader, read_document, to_json

# A scan JSON holds a few hundred bytes per layer: 16 MiB is a model of some 50,000 layers
# (or 200,000 minimal rows), which `diff` reads, compares and prints in seconds.
MAX_PROFILE_BYTES = 16 * 2**20
REMAKE = "make it with `layergrad scan MODEL --json > FILE.json`"


def load_profile(path: str | os.PathLike[str], name: str | None = None) -> Profile:
    """Read a `layergrad scan --json` document (at most MAX_PROFILE_BYTES) as a profile.

    `name` is how errors call the file (default: its path), e.g. `--baseline b.json`.

    Raises:
        InputError: the file is missing, too large, not JSON, not a `layergrad.scan/1`
            document, or malformed; the message names the file and what is wrong.
    """
    where = name or os.fspath(path)
    doc = read_document(path, where, MAX_PROFILE_BYTES, "a scan JSON", REMAKE)
    profile = profile_from_json(doc, where)
    if not profile.rows:
        collection = ROW_KEYS[profile.wrt][0]
        raise InputError(
            f"{where} has no {collection}: a scan compares nothing, so it would pass any model; "
            f"{REMAKE}"
        )
    return profile


def profile_of(report: ScanReport | WeightScanReport) -> Profile:
    """The profile of a scan report, or of a `scan --wrt weights` report: that of its JSON, so
    a report and the file it prints compare alike (the model keeps its audit warnings)."""
    profile = profile_from_json(to_json(report), report.model.path)
    return replace(profile, model=report.model)


def profile_from_json(doc: object, where: str = "scan JSON") -> Profile:
    """The profile of a parsed `layergrad.scan/1` document; `where` names it in errors.

    Raises:
        InputError: another schema, or a member missing or of the wrong type.
    """
    fields = _Fields(where)
    if not isinstance(doc, dict):
        raise fields.error("the document", "a JSON object", doc)
    schema = doc.get("schema")
    if schema != SCAN_SCHEMA:
        raise InputError(_schema_message(where, schema))
    wrt = doc.get("wrt", ACTIVATIONS)
    if not isinstance(wrt, str) or wrt not in ROW_KEYS:
        raise fields.error("wrt", " or ".join(map(repr, ROW_KEYS)), wrt)
    collection, key = ROW_KEYS[wrt]
    listed = fields.listed(fields.member(doc, collection), collection)
    rows = tuple(fields.row(r, f"{collection}[{i}]", key) for i, r in enumerate(listed))
    twice = sorted(n for n, k in Counter(r.name for r in rows).items() if k > 1)
    if twice:
        raise InputError(f"{where}: {collection} name {', '.join(twice)} more than once")
    target: str | None = None
    loss = None
    if wrt == ACTIVATIONS:
        named = fields.member(doc, "target")
        target = None if named is None else fields.text(named, "target")
    else:
        loss_doc = fields.obj(fields.member(doc, "loss"), "loss")
        loss = fields.text(fields.member(loss_doc, "name", "loss"), "loss.name")
    return Profile(
        model=fields.read(ModelMeta, fields.obj(fields.member(doc, "model"), "model"), "model"),
        probe=fields.read(ProbeMeta, fields.obj(fields.member(doc, "probe"), "probe"), "probe"),
        target=target,
        rows=rows,
        wrt=wrt,
        loss=loss,
    )


def _schema_message(where: str, schema: object) -> str:
    if isinstance(schema, str) and schema.startswith("layergrad."):
        what = schema.split("/")[0].removeprefix("layergrad.")
        if what == "scan":
            return (
                f"{where} has schema {schema}; this version of layergrad reads {SCAN_SCHEMA}; "
                "make the baseline again with this version"
            )
        return f"{where} is a layergrad {what} document ({schema}), not a scan; {REMAKE}"
    return f"{where} is not a layergrad scan document (schema {schema!r}); {REMAKE}"


class _Fields(Reader):
    """Typed reads of a scan document's members, each error naming the member and the file."""

    def __init__(self, where: str) -> None:
        super().__init__(where, REMAKE, f"; {REMAKE}")

    def row(self, doc: object, at: str, key: str) -> ProfileRow:
        """One row. Each member that is exactly as `scan --json` writes it (ASCII names, a
        float mean |g|) is taken as it is (a diff reads 200,000 rows); any other goes through
        the reader, which checks it and names what is wrong."""
        row = doc if type(doc) is dict else self.obj(doc, at)
        status = row.get("status")
        word = _STATUSES.get(status) if type(status) is str else None
        if word is None:
            word = self.word(Status, self.member(row, "status", at), f"{at}.status")
        gradient = row["gradient"] if "gradient" in row else self.member(row, "gradient", at)
        mean_abs = gradient.get("mean_abs") if type(gradient) is dict else None
        if gradient is not None and not (type(mean_abs) is float and 0 <= mean_abs <= MAX_MEASURE):
            value = self.member(self.obj(gradient, f"{at}.gradient"), "mean_abs", f"{at}.gradient")
            # null: a number that was not finite (the one encoding of every JSON schema)
            mean_abs = None if value is None else self.measure(value, f"{at}.gradient.mean_abs")
        flags = row.get("flags")
        if type(flags) is not list or not all(type(f) is str and f.isascii() for f in flags):
            listed = self.listed(self.member(row, "flags", at), f"{at}.flags")
            flags = [self.text(f, f"{at}.flags[{i}]") for i, f in enumerate(listed)]
        name = row.get(key)
        if type(name) is not str or not name.isascii():
            name = self.text(self.member(row, key, at), f"{at}.{key}")
        return ProfileRow(name, word, mean_abs, tuple(flags), _first_cause(row), _input_shape(row))


def _first_cause(row: Mapping[str, object]) -> str | None:
    """The most likely cause of a row's status, `code at layer` (None without causes)."""
    causes = row.get("causes")
    first = causes[0] if isinstance(causes, list) and causes else None
    if isinstance(first, dict) and isinstance(first.get("code"), str):
        layer = first.get("layer")
        return f"{first['code']} at {layer}" if isinstance(layer, str) and layer else first["code"]
    return None


def _input_shape(row: Mapping[str, object]) -> tuple[int, ...] | None:
    """A model input's row: the shape of the probe batch it was fed."""
    shape = row.get("shape")
    if row.get("class") == "InputLayer" and isinstance(shape, list):
        return tuple(shape) if all(type(d) is int for d in shape) else None
    return None


_STATUSES = {word: Status(word) for word in Status.words()}
