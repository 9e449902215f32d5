"""A committed `layergrad scan --json` document read as a gradient profile: at most
MAX_PROFILE_BYTES, checked against the schema member by member, so a malformed or foreign file
is a clear error and never a false regression.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping

from layergrad.core.errors import InputError, UsageError
from layergrad.core.limits import MAX_BATCH_SIZE, MAX_SEED
from layergrad.core.results import ModelMeta, ProbeMeta
from layergrad.core.vocab import Reduce, Status
from layergrad.files.gradient_profile import (
    ACTIVATIONS,
    ROW_KEYS,
    Profile,
    ProfileRow,
    cause_text,
)
from layergrad.files.json_fields import JsonFields
from layergrad.files.report_json import read_document

SCAN_SCHEMA = "layergrad.scan/1"
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
    return profile_from_json(doc, where)


def _unicode_text(value: str, fields: _Fields, name: str) -> str:
    """A string from the document, refused when it holds a lone surrogate (an escape such as
    \\ud800 that is not half of a pair): it is not text and cannot be printed."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise fields.error(name, "text (it holds a lone surrogate escape such as \\ud800)",
                           "a broken string") from None  # fmt: skip
    return value


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
    if wrt not in ROW_KEYS:
        raise fields.error("wrt", " or ".join(map(repr, ROW_KEYS)), wrt)
    collection, key = ROW_KEYS[wrt]
    rows = tuple(
        fields.row(r, i, collection, key) for i, r in enumerate(fields.get(doc, collection, list))
    )
    if not rows:
        raise InputError(
            f"{where} has no {collection}: a scan compares nothing, so it would pass any model; "
            f"{REMAKE}"
        )
    names = [r.name for r in rows]
    if len(set(names)) != len(names):
        counts: dict[str, int] = {}
        for n in names:
            counts[n] = counts.get(n, 0) + 1
        twice = sorted(n for n, k in counts.items() if k > 1)
        raise InputError(f"{where}: {collection} name {', '.join(twice)} more than once")
    target, loss = None, None
    if wrt == ACTIVATIONS:
        target = fields.get(doc, "target", (str, type(None)))
    else:
        loss = fields.get(fields.get(doc, "loss", dict), "name", str, "loss.name")
    return Profile(
        model=fields.model(fields.get(doc, "model", dict)),
        probe=fields.probe(fields.get(doc, "probe", dict)),
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


class _Fields(JsonFields):
    """Typed reads of a scan document's members, each error naming the member and the file."""

    def __init__(self, where: str) -> None:
        super().__init__(where, REMAKE, f"; {REMAKE}")

    def text(self, value: str, name: str) -> str:
        return _unicode_text(value, self, name)

    def number(self, obj: Mapping[str, object], key: str, name: str) -> float:
        """A finite number (an integer of 401 digits does not fit a float)."""
        value = self.get(obj, key, (int, float), name)
        try:
            number = float(value)
        except OverflowError:
            number = math.inf
        if not math.isfinite(number):
            raise self.error(name, "a finite number", f"a number of {len(str(value))} digits")
        return number

    def model(self, obj: Mapping[str, object]) -> ModelMeta:
        get = lambda key: self.get(obj, key, str, f"model.{key}")  # noqa: E731
        return ModelMeta(
            path=get("path"), format=get("format"), class_name=get("class"), name=get("name")
        )

    def probe(self, obj: Mapping[str, object]) -> ProbeMeta:
        batch = self.get(obj, "batch_size", int, "probe.batch_size")
        if not 1 <= batch <= MAX_BATCH_SIZE:
            raise self.error("probe.batch_size", f"1 to {MAX_BATCH_SIZE:,}", _short_int(batch))
        seed = self.get(obj, "seed", (int, type(None)), "probe.seed")
        if isinstance(seed, bool):
            raise self.error("probe.seed", "an integer or null", seed)
        if seed is not None and not 0 <= seed <= MAX_SEED:
            raise UsageError(
                f"{self.where}: probe.seed is {_short_int(seed)}, but seeds are 0 to "
                f"{MAX_SEED:,}; {REMAKE}"
            )
        reduce = self.get(obj, "reduce", str, "probe.reduce")
        if reduce not in Reduce.words():
            raise self.error("probe.reduce", " or ".join(map(repr, Reduce.words())), reduce)
        samples = obj.get("samples")
        if samples is not None and (type(samples) is not int or samples < 0):
            raise self.error("probe.samples", "a count of samples or absent", samples)
        shards = obj.get("shards")  # a report merged from shards
        sha = obj.get("data_sha256")
        if sha is not None and not (isinstance(sha, str) and len(sha) == 64):
            raise self.error("probe.data_sha256", "a SHA-256 in hex or absent", sha)
        return ProbeMeta(
            source=self.get(obj, "source", str, "probe.source"),
            seed=seed,
            batch_size=batch,
            training=self.get(obj, "training", bool, "probe.training"),
            reduce=Reduce(reduce),
            samples=samples,
            data_sha256=sha,
            shards=shards if isinstance(shards, int) and not isinstance(shards, bool) else None,
        )

    def row(self, obj: object, index: int, collection: str, key: str) -> ProfileRow:
        """One row: a fast path for a well-formed row (names built only for errors)."""
        return _fast_row(obj, key) or self.checked_row(obj, f"{collection}[{index}]", key)

    def checked_row(self, obj: object, at: str, key: str) -> ProfileRow:
        if not isinstance(obj, dict):
            raise self.error(at, "an object", obj)
        status = self.get(obj, "status", str, f"{at}.status")
        if status not in _STATUSES:
            raise self.error(f"{at}.status", f"one of {', '.join(Status.words())}", status)
        gradient = self.get(obj, "gradient", (dict, type(None)), f"{at}.gradient")
        mean_abs = None
        if gradient is not None:
            # null: a number that was not finite (the one encoding of every JSON schema)
            value = self.get(
                gradient, "mean_abs", (int, float, type(None)), f"{at}.gradient.mean_abs"
            )
            mean_abs = (
                None
                if value is None
                else self.number(gradient, "mean_abs", f"{at}.gradient.mean_abs")
            )
            if mean_abs is not None and mean_abs < 0:
                raise self.error(f"{at}.gradient.mean_abs", "a number >= 0", mean_abs)
        flags = self.get(obj, "flags", list, f"{at}.flags")
        if not all(isinstance(f, str) for f in flags):
            raise self.error(f"{at}.flags", "a list of strings", flags)
        for flag in flags:
            _unicode_text(flag, self, f"{at}.flags")
        causes = obj.get("causes") or []
        first = causes[0] if isinstance(causes, list) and causes else None
        cause = None
        if isinstance(first, dict) and isinstance(first.get("code"), str):
            layer = first.get("layer")
            cause = cause_text(first["code"], layer if isinstance(layer, str) else None)
        shape = obj.get("shape")
        input_shape = None
        if obj.get("class") == "InputLayer" and isinstance(shape, list):
            input_shape = tuple(shape) if all(type(d) is int for d in shape) else None
        return ProfileRow(
            name=self.get(obj, key, str, f"{at}.{key}"),
            status=_STATUSES[status],
            mean_abs=mean_abs,
            flags=tuple(flags),
            cause=cause,
            input_shape=input_shape,
        )


def _fast_row(obj: object, key: str) -> ProfileRow | None:
    """The row when every member is exactly as `scan --json` writes it (ASCII names, a float
    mean |g|); None sends it through the checked path, which names what is wrong."""
    if type(obj) is not dict:
        return None
    name, status, flags = obj.get(key), obj.get("status"), obj.get("flags")
    gradient = obj.get("gradient", obj)  # obj: missing
    if type(name) is not str or not name.isascii() or type(flags) is not list:
        return None
    word = _STATUSES.get(status) if type(status) is str else None
    if word is None:
        return None
    mean_abs = None
    if gradient is not None:
        mean = gradient.get("mean_abs") if type(gradient) is dict else None
        if type(mean) is not float or not (0 <= mean < math.inf):
            return None
        mean_abs = mean
    for flag in flags:
        if type(flag) is not str or not flag.isascii():
            return None
    cause = None
    causes = obj.get("causes")
    if causes:
        first = causes[0] if isinstance(causes, list) else None
        if isinstance(first, dict) and isinstance(first.get("code"), str):
            layer = first.get("layer")
            cause = cause_text(first["code"], layer if isinstance(layer, str) else None)
    input_shape = None
    if obj.get("class") == "InputLayer":
        shape = obj.get("shape")
        if isinstance(shape, list) and all(type(d) is int for d in shape):
            input_shape = tuple(shape)
    return ProfileRow(name, word, mean_abs, tuple(flags), cause, input_shape)


_STATUSES = {word: Status(word) for word in Status.words()}


def _short_int(value: int) -> str:
    text = str(value)
    return text if len(text) <= 20 else f"a number of {len(text)} digits"
