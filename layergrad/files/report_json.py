"""Reports are their schema: the one writer and the one reader of layergrad's JSON reports.

`to_json(report)` walks a result object's dataclass fields, and `from_json(cls, doc)` reads
one back by the same fields' type hints; `SPECS` says, class by class, only where the JSON
differs from the fields (a member named otherwise, a field not written, a member written only
when set, an object whose members join its parent's) and the checks between members.

A report read back (`merge` reads its shards here) is untrusted input like a model file: it
must be a regular file (a FIFO or a device is refused before it is opened), at most
`MAX_REPORT_BYTES`, strict JSON (no NaN / Infinity, no member named twice), and every member
is checked against its field's type within the bounds below (the one place they are written),
so a malformed or foreign file is one clear line that names the member. The walk follows the
types, not the document, so a document nests no deeper than the report it claims to be.

`diff` and `check --baseline` read a committed `layergrad scan --json` as a gradient profile
(`load_profile`, at most MAX_PROFILE_BYTES) the same way: never a false regression.
"""

from __future__ import annotations

import json
import math
import os
import types
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import MISSING, dataclass, field, fields, is_dataclass, replace
from functools import cache
from pathlib import Path
from typing import NoReturn, TypeVar, Union, cast, get_args, get_origin, get_type_hints

from layergrad.core.errors import InputError
from layergrad.core.fit_results import SCHEMA as FIT_SCHEMA
from layergrad.core.fit_results import Checkpoint, FitReport
from layergrad.core.fix_results import SCHEMA as FIX_SCHEMA
from layergrad.core.fix_results import FixReport, OutputLoss, Repair, Run
from layergrad.core.limits import MAX_BATCH_SIZE, MAX_SEED
from layergrad.core.results import (
    CheckItem,
    CheckReport,
    DataStats,
    Fact,
    FileVerdict,
    FrobeniusNorms,
    GradientStats,
    InspectReport,
    ModelMeta,
    NormDistribution,
    ProbeMeta,
    RankedSample,
    Reason,
    Result,
    SampleStats,
    ScanReport,
    ScanRow,
    SpectralNorms,
    WeightScanReport,
)
from layergrad.core.vocab import CAUSE_CODES, SCAN_FLAGS, Severity, Status, Word
from layergrad.files.gradient_profile import (
    ACTIVATIONS,
    ROW_KEYS,
    DiffReport,
    Profile,
    ProfileRow,
    RowDiff,
)
from layergrad.files.guards import require_regular
from layergrad.files.layer_listing import LayerListing, LayerRow
from layergrad.files.weight_health import WeightHealth

INSPECT_SCHEMA, SCAN_SCHEMA = "layergrad.inspect/1", "layergrad.scan/1"
LAYERS_SCHEMA = "layergrad.layers/1"
CHECK_SCHEMA, DIFF_SCHEMA = "layergrad.check/1", "layergrad.diff/1"
EXPECTED = "a `layergrad inspect --json` or `scan --json` report"
T = TypeVar("T")
W = TypeVar("W", bound=Word)
_hints = cache(get_type_hints)  # a class's field types, worked out once

# --- the bounds on untrusted input, in one place ---------------------------------------------
MAX_REPORT_BYTES = 64 * 2**20  # a few hundred bytes per layer: some 100,000 layers
# a scan read as a profile: 16 MiB is a model of some 50,000 layers (or 200,000 minimal rows),
# which `diff` reads, compares and prints in seconds
MAX_PROFILE_BYTES = 16 * 2**20
# no gradient of float32 values summed over any data set comes near 1e100 (float32 ends at
# 3.4e38): a larger number was edited by hand, and the shards' numbers combined (the root of
# the sum of their squares, weighted by counts) would overflow a float64
MAX_MEASURE = 1e100
MAX_COUNT = 2**63 - 1  # every count, index, size and seed: a 64-bit integer, never negative
MAX_TEXT = 2**20  # characters of one string (a name, a message, a path)
MAX_ITEMS = 2**24  # entries of one list


@dataclass(frozen=True)
class Spec:
    """Where one class's JSON differs from its dataclass fields.

    `keys`: field -> member name; `skip`: fields not written (read as their default, or as
    `fill`); `when_set`: members written only when neither None nor empty; `inline`: fields
    (an object or None) whose members join this object's; `nullable`: members that may be
    null for an empty tuple; `words`: word fields limited to a subset; `tops`: a measure's
    largest value; `signed`: measures that may be negative (down to -`tops`); `ints`: an
    integer's range, when narrower than a count's (0 to MAX_COUNT); `head`: constant
    members written first; `also`: properties written after the fields (named by `keys`);
    `write(obj, doc)` and `finish(obj, doc, reader, at)` adjust what the
    walk wrote and read (checks between members), `prepare(doc, reader, at)` the document
    before it is read (members named by another member's value).

    Written only (the reports layergrad does not read back: `fit`, `fix`, `layers`): `groups`: a
    member that is an object of these fields or properties (each named by `keys`); `picks`: a
    list field whose items are written as {member: attribute}.
    """

    keys: Mapping[str, str] = field(default_factory=dict)
    skip: frozenset[str] = frozenset()
    fill: Mapping[str, object] = field(default_factory=dict)
    when_set: frozenset[str] = frozenset()
    inline: frozenset[str] = frozenset()
    nullable: frozenset[str] = frozenset()
    words: Mapping[str, tuple[Word, ...]] = field(default_factory=dict)
    tops: Mapping[str, float] = field(default_factory=dict)
    signed: frozenset[str] = frozenset()
    ints: Mapping[str, tuple[int, int, str]] = field(default_factory=dict)
    head: Mapping[str, str] = field(default_factory=dict)
    groups: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    picks: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    also: tuple[str, ...] = ()
    write: Callable[[object, dict[str, object]], None] | None = None
    finish: Callable[[object, Mapping[str, object], Reader, str], object] | None = None
    prepare: Callable[[Mapping[str, object], Reader, str], Mapping[str, object]] | None = None


# --- writing ---------------------------------------------------------------------------------


def _picked(item: object, picks: Iterable[tuple[str, str]]) -> dict[str, object]:
    """The picked members of a list item; a finding (`Reason`) is its whole finding record
    too, the picked names first (they keep their older names: `finding` is its `code`)."""
    doc = {k: to_json(getattr(item, a)) for k, a in picks}
    if isinstance(item, Reason):
        record = to_json(item)
        assert isinstance(record, dict)
        doc.update({k: v for k, v in record.items() if k not in doc})
    return doc


def to_json(value: object) -> object:
    """A result object as JSON-ready values (dicts, lists, strings, numbers, None): a number
    that is not finite becomes None (JSON has no NaN or Infinity)."""
    kind = type(value)  # the plain types first: a diff writes 700,000 rows through here
    if kind is str or kind is int or kind is bool or value is None:
        return value
    plan = _PLANS.get(kind)
    if plan is None:
        return _plain(value)
    spec, steps = plan
    doc: dict[str, object] = dict(spec.head)
    for member, names in spec.groups.items():
        doc[member] = {spec.keys.get(n, n): to_json(getattr(value, n)) for n in names}
    for name, key, way in steps:
        item = getattr(value, name)
        if not way:
            doc[key] = to_json(item)
        elif way == "when_set":
            if item not in (None, ()):
                doc[key] = to_json(item)
        elif way == "picks":
            picks = spec.picks[name].items()
            doc[key] = [_picked(i, picks) for i in item]
        else:  # inline
            inner = to_json(item)
            if isinstance(inner, dict):
                doc.update({k: v for k, v in inner.items() if k not in doc})
    doc.update({spec.keys.get(n, n): to_json(getattr(value, n)) for n in spec.also})
    if spec.write is not None:
        spec.write(value, doc)
    return doc


def _plain(value: object) -> object:
    """A value that is not a result object, as JSON-ready values."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: to_json(item) for key, item in value.items()}
    if isinstance(value, (tuple, list)):
        return [to_json(item) for item in value]
    if isinstance(value, Word):
        return value.value
    if is_dataclass(value) and not isinstance(value, type):
        _PLANS[type(value)] = _plan(value)
        return to_json(value)
    return value


Plan = tuple[Spec, tuple[tuple[str, str, str], ...]]
_PLANS: dict[type, Plan] = {}


def _plan(value: object) -> Plan:
    """How a result object's class is written, worked out once: its spec, and each field
    written (its name, its member, and how: plainly, only when set, picked or inline)."""
    spec = SPECS.get(type(value), PLAIN)
    ways = (("when_set", spec.when_set), ("picks", spec.picks), ("inline", spec.inline))
    steps = tuple(
        (f.name, spec.keys.get(f.name, f.name), next((w for w, n in ways if f.name in n), ""))
        for f in fields(value)  # type: ignore[arg-type]
        if f.name not in spec.skip
    )
    return spec, steps


# --- reading ---------------------------------------------------------------------------------


def read_document(
    path: str | os.PathLike[str], where: str, limit: int, kind: str, advice: str
) -> object:
    """The strict JSON document in the file `path` (NaN, Infinity and a member named twice refused).

    `where` names the file in errors, `kind` says what it should be ("a scan JSON"), and
    `advice` ends each message (what to do instead).

    Raises:
        InputError: the file is missing, not a regular file, unreadable, over `limit` bytes,
            not UTF-8 text, not strict JSON, or nested too deeply to parse.
    """
    text = os.fspath(path)
    if os.path.exists(text) and not os.path.isdir(text):  # a FIFO would block, /dev/zero never end
        require_regular(Path(text), f"{kind} file", lambda m: InputError(f"{where}: {m}"))
    try:
        with open(text, "rb") as handle:
            data = handle.read(limit + 1)
    except FileNotFoundError:
        raise InputError(f"{where}: no such file; {advice}") from None
    except IsADirectoryError:
        raise InputError(f"{where} is a directory, not {kind} file; {advice}") from None
    except OSError as exc:
        raise InputError(f"{where}: cannot read it ({exc.strerror or exc})") from None
    if len(data) > limit:
        raise InputError(
            f"{where} is larger than {limit / 2**20:g} MiB, far more than {kind} holds; {advice}"
        )
    try:
        return json.loads(
            data.decode("utf-8"), parse_constant=_no_constant, object_pairs_hook=_unique
        )
    except UnicodeDecodeError:
        raise InputError(f"{where} is not a JSON document (not UTF-8 text); {advice}") from None
    except ValueError as exc:
        raise InputError(f"{where} is not a JSON document ({str(exc)[:80]}); {advice}") from None
    except RecursionError:  # layergrad's documents are a few levels deep; the parser recurses
        raise InputError(f"{where} is nested too deeply for {kind}; {advice}") from None


def _no_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not valid JSON")


def _unique(pairs: list[tuple[str, object]]) -> dict[str, object]:
    """An object whose members are named once (a member named twice: which one counts?)."""
    found = dict(pairs)
    if len(found) < len(pairs):
        names = [name for name, _ in pairs]
        twice = next(n for n in names if names.count(n) > 1)
        raise ValueError(f"member {twice!r} is given twice")
    return found


def shown(value: object) -> str:
    """A value as an error message shows it (JSON, at most 60 characters)."""
    try:
        return json.dumps(value)[:60]
    except (TypeError, ValueError):
        return type(value).__name__


class Reader:
    """Reads JSON values as the types expected, or raises one clear InputError naming the
    member (`results[0].gradient.l2`) and the file (`where`).

    `missing` ends the message of a member that is missing (what the file should be);
    `wrong` that of a member of the wrong type.
    """

    def __init__(self, where: str, missing: str = f"expected {EXPECTED}", wrong: str = "") -> None:
        self.where, self.missing, self.wrong = where, missing, wrong

    def error(self, at: str, expected: str, got: object) -> InputError:
        return InputError(f"{self.where}: {at} is {shown(got)}, expected {expected}{self.wrong}")

    def member(self, doc: Mapping[str, object], key: str, at: str = "") -> object:
        """`doc[key]` (`doc` is at `at`); InputError naming it when it is missing."""
        if key not in doc:
            raise InputError(f"{self.where}: {f'{at}.{key}' if at else key} is missing; "
                             f"{self.missing}")  # fmt: skip
        return doc[key]

    def text(self, value: object, at: str) -> str:
        """A string of at most MAX_TEXT characters that is text (no lone surrogate escape
        such as \\ud800, which cannot be printed)."""
        if not isinstance(value, str):
            raise self.error(at, "a string", value)
        if len(value) > MAX_TEXT:
            raise self.error(at, f"a string of at most {MAX_TEXT:,} characters", value[:40])
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise self.error(
                at, "text (it holds a lone surrogate escape such as \\ud800)", "a broken string"
            ) from None
        return value

    def count(self, value: object, at: str, bounds: tuple[int, int, str] | None = None) -> int:
        """An integer from 0 to MAX_COUNT, or in `bounds` (low, high, the range in words)."""
        low, high, words = bounds or (0, MAX_COUNT, f"an integer from 0 to {MAX_COUNT}")
        if type(value) is not int:
            raise self.error(at, "an integer", value)
        if not low <= value <= high:
            raise self.error(at, words, value)
        return value

    def measure(self, value: object, at: str, top: float = MAX_MEASURE, low: float = 0.0) -> float:
        """A norm, a mean |g| or a fraction: a finite number from `low` (0) to `top` (a number
        edited by hand past that, `1e999` read as infinity or a negative norm, is refused)."""
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise self.error(at, "an integer or a number", value)
        try:
            number = float(value)
        except OverflowError:  # an integer of 400 digits
            number = math.inf
        if not low <= number <= top:  # also NaN
            raise self.error(at, f"a finite number from {low:g} to {top:g}", value)
        return number

    def word(self, kind: type[W], value: object, at: str, among: tuple[W, ...] | None = None) -> W:
        """One of the words of `kind` (of `among`, when given)."""
        allowed = [str(w) for w in among] if among is not None else kind.words()
        if value not in allowed:
            raise self.error(at, f"one of {', '.join(allowed)}", value)
        return kind(value)

    def listed(self, value: object, at: str) -> list[object]:
        if not isinstance(value, list):
            raise self.error(at, "a list", value)
        if len(value) > MAX_ITEMS:
            raise self.error(at, f"a list of at most {MAX_ITEMS:,} entries", "longer")
        return value

    def obj(self, value: object, at: str) -> Mapping[str, object]:
        if not isinstance(value, dict):
            raise self.error(at, "an object", value)
        return value

    def value(
        self,
        hint: object,
        value: object,
        at: str,
        top: float,
        words: object,
        low: float = 0.0,
        bounds: tuple[int, int, str] | None = None,
    ) -> object:
        """`value` read as the type `hint` (a field's type) describes (a number from `low`, an
        integer within `bounds`)."""
        origin, args = get_origin(hint), get_args(hint)
        if origin in (Union, types.UnionType):
            if value is None and type(None) in args:
                return None
            (hint,) = [a for a in args if a is not type(None)]
            origin, args = get_origin(hint), get_args(hint)
        if origin is tuple:
            return tuple(
                self.value(args[0], v, f"{at}[{i}]", top, words, low, bounds)
                for i, v in enumerate(self.listed(value, at))
            )
        if hint is str:
            return self.text(value, at)
        if hint is bool:
            if not isinstance(value, bool):
                raise self.error(at, "true or false", value)
            return value
        if hint is int:
            return self.count(value, at, bounds)
        if hint is float:
            return self.measure(value, at, top, low)
        if isinstance(hint, type) and issubclass(hint, Word):
            return self.word(hint, value, at, words if isinstance(words, tuple) else None)
        if isinstance(hint, type) and is_dataclass(hint):
            return self.read(hint, self.obj(value, at), at)
        raise TypeError(f"no JSON reading for {hint}")  # a field type added without one

    def read(self, cls: type[T], doc: Mapping[str, object], at: str = "") -> T:
        """An object of the dataclass `cls` from the JSON object `doc` (at `at`)."""
        klass: type = cls
        spec = SPECS.get(klass, PLAIN)
        hints = _hints(klass)
        if spec.prepare is not None:
            doc = spec.prepare(doc, self, at)
        values: dict[str, object] = {}
        for f in fields(cls):  # type: ignore[arg-type]
            if f.name in spec.skip:
                if f.name in spec.fill:
                    values[f.name] = spec.fill[f.name]
                continue
            if f.name in spec.inline:  # an object or None
                (inner,) = [a for a in get_args(hints[f.name]) if a is not type(None)]
                if any(k in doc for k in _own_keys(inner, klass)):
                    values[f.name] = self.read(inner, doc, at)
                elif f.default is MISSING:
                    values[f.name] = None
                continue
            key = spec.keys.get(f.name, f.name)
            name = f"{at}.{key}" if at else key
            if key not in doc and (f.default is not MISSING or f.name in spec.when_set):
                continue
            item = self.member(doc, key, at)
            if item is None and f.name in spec.nullable:
                values[f.name] = ()
                continue
            top = spec.tops.get(f.name, MAX_MEASURE)
            low = -top if f.name in spec.signed else 0.0
            words = spec.words.get(f.name)
            bounds = spec.ints.get(f.name)
            values[f.name] = self.value(hints[f.name], item, name, top, words, low, bounds)
        made: object = cls(**values)
        if spec.finish is not None:
            made = spec.finish(made, doc, self, at)
        return made  # type: ignore[return-value]


def from_json(cls: type[T], doc: object, where: str = "report") -> T:
    """An object of the dataclass `cls` read from a parsed JSON document."""
    reader = Reader(where)
    return reader.read(cls, reader.obj(doc, "the document"))


@cache
def _own_keys(inner: type, parent: type) -> tuple[str, ...]:
    """The members an inlined object adds to its parent's (its presence is any of them)."""
    spec, theirs = SPECS.get(inner, PLAIN), SPECS.get(parent, PLAIN)
    taken = {theirs.keys.get(f.name, f.name) for f in fields(parent)}
    mine = (spec.keys.get(f.name, f.name) for f in fields(inner) if f.name not in spec.skip)
    return tuple(k for k in mine if k not in taken)


# --- the reports -----------------------------------------------------------------------------


def read_report(path: str | os.PathLike[str]) -> InspectReport | ScanReport:
    """The report in the JSON file `path` (an inspect or an activations scan).

    Raises:
        InputError: not a regular file, too large, not strict JSON, another schema, or a
            member missing or of the wrong type.
    """
    where = os.fspath(path)
    doc = read_document(path, where, MAX_REPORT_BYTES, "a report", f"expected {EXPECTED}")
    return report_from_json(doc, where)


def report_from_json(doc: object, where: str = "report") -> InspectReport | ScanReport:
    """The report of a parsed JSON document; `where` names it in errors."""
    if not isinstance(doc, dict):
        raise Reader(where).error("the document", "a JSON object", doc)
    schema = doc.get("schema")
    if schema == INSPECT_SCHEMA:
        return from_json(InspectReport, doc, where)
    if schema == SCAN_SCHEMA:
        if doc.get("wrt", "activations") != "activations":
            raise InputError(
                f"{where} is a scan of the weights (--wrt weights), which merge cannot combine "
                "exactly: it holds each variable's gradient norms, not the gradient, and the "
                "norm of the whole data's gradient (the shards' gradients weighted by samples) "
                "does not follow from the shards' norms; run scan --wrt weights --data over the "
                "whole data set, on several machines with --distribute multi-worker"
            )
        return from_json(ScanReport, doc, where)
    said = shown(schema) if isinstance(schema, (str, type(None))) else "not a string"
    raise InputError(
        f"{where} has schema {said}; expected {EXPECTED} ({INSPECT_SCHEMA} or {SCAN_SCHEMA})"
    )


# --- a scan as a gradient profile (`diff`, `check --baseline`) -----------------------------

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
    reader = Reader(where, REMAKE, f"; {REMAKE}")
    if not isinstance(doc, dict):
        raise reader.error("the document", "a JSON object", doc)
    schema = doc.get("schema")
    if schema != SCAN_SCHEMA:
        raise InputError(_schema_message(where, schema))
    wrt = doc.get("wrt", ACTIVATIONS)
    if not isinstance(wrt, str) or wrt not in ROW_KEYS:
        raise reader.error("wrt", " or ".join(map(repr, ROW_KEYS)), wrt)
    collection, key = ROW_KEYS[wrt]
    listed = reader.listed(reader.member(doc, collection), collection)
    rows = tuple(_profile_row(reader, r, f"{collection}[{i}]", key) for i, r in enumerate(listed))
    twice = sorted(n for n, k in Counter(r.name for r in rows).items() if k > 1)
    if twice:
        raise InputError(f"{where}: {collection} name {', '.join(twice)} more than once")
    target: str | None = None
    loss = loss_source = None
    if wrt == ACTIVATIONS:
        named = reader.member(doc, "target")
        target = None if named is None else reader.text(named, "target")
    else:
        loss_doc = reader.obj(reader.member(doc, "loss"), "loss")
        loss = reader.text(reader.member(loss_doc, "name", "loss"), "loss.name")
        source = loss_doc.get("source")
        loss_source = None if source is None else reader.text(source, "loss.source")
    return Profile(
        model=reader.read(ModelMeta, reader.obj(reader.member(doc, "model"), "model"), "model"),
        probe=reader.read(ProbeMeta, reader.obj(reader.member(doc, "probe"), "probe"), "probe"),
        target=target,
        rows=rows,
        wrt=wrt,
        loss=loss,
        loss_source=loss_source,
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


def _profile_row(read: Reader, doc: object, at: str, key: str) -> ProfileRow:
    """One row. Each member exactly as `scan --json` writes it (ASCII names, a float mean |g|)
    is taken as it is (a diff reads 200,000 rows); any other goes through the reader, which
    checks it and names what is wrong."""
    row = doc if type(doc) is dict else read.obj(doc, at)
    status = row.get("status")
    word = _STATUSES.get(status) if type(status) is str else None
    if word is None:
        word = read.word(Status, read.member(row, "status", at), f"{at}.status")
    gradient = row["gradient"] if "gradient" in row else read.member(row, "gradient", at)
    mean_abs = gradient.get("mean_abs") if type(gradient) is dict else None
    if gradient is not None and not (type(mean_abs) is float and 0 <= mean_abs <= MAX_MEASURE):
        value = read.member(read.obj(gradient, f"{at}.gradient"), "mean_abs", f"{at}.gradient")
        # null: a number that was not finite (the one encoding of every JSON schema)
        mean_abs = None if value is None else read.measure(value, f"{at}.gradient.mean_abs")
    flags = row.get("flags")
    if type(flags) is not list or not all(type(f) is str and f.isascii() for f in flags):
        listed = read.listed(read.member(row, "flags", at), f"{at}.flags")
        flags = [read.text(f, f"{at}.flags[{i}]") for i, f in enumerate(listed)]
    name = row.get(key)
    if type(name) is not str or not name.isascii():
        name = read.text(read.member(row, key, at), f"{at}.{key}")
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


def _write_result(obj: object, doc: dict[str, object]) -> None:
    """An inspect result's gradient carries its shape (a scan row's is the row's); dead units
    mean nothing without a gradient: null."""
    assert isinstance(obj, (Result, ScanRow))
    gradient = doc.get("gradient")
    if isinstance(obj, Result) and obj.gradient is not None and isinstance(gradient, dict):
        doc["gradient"] = {"shape": list(obj.gradient.shape), **gradient}
    if obj.data is not None and obj.gradient is None:
        doc["dead_units"] = None


def _finish_result(obj: object, doc: Mapping[str, object], read: Reader, at: str) -> object:
    """The gradient's shape (an inspect result's own, a scan row's the row's), the per-sample
    count (the batch), and the checks between a gradient's numbers."""
    assert isinstance(obj, (Result, ScanRow))
    own = obj.source.shape if isinstance(obj, Result) else obj.shape
    shape, g = own, obj.gradient
    if isinstance(obj, Result) and g is not None:
        size = read.member(read.obj(doc["gradient"], f"{at}.gradient"), "shape", f"{at}.gradient")
        shape = cast(
            tuple[int, ...], read.value(tuple[int, ...], size, f"{at}.gradient.shape", 0, None)
        )
    if g is not None:
        g = replace(g, shape=shape)
        elements = math.prod(shape) if shape else 1
        if g.nonfinite > elements:
            raise read.error(
                f"{at}.gradient.nonfinite", f"a count from 0 to {elements}", g.nonfinite
            )
        # |g| at any element is at most the L2 of all, and their mean at most their largest
        pairs = (("max_abs", g.max_abs, "l2", g.l2), ("mean_abs", g.mean_abs, "max_abs", g.max_abs))
        for name, low, what, high in pairs:
            if low > high * (1 + 1e-4) + 1e-30:
                raise read.error(
                    f"{at}.gradient.{name}", f"a number at most {what} ({high:.6g})", low
                )
    data = obj.data
    if data is not None and data.per_sample_l2 is not None:
        stats = data.per_sample_l2
        lo, mean, hi = stats.min, stats.mean, stats.max
        if not lo <= mean * (1 + 1e-6) + 1e-30 <= hi * (1 + 2e-6) + 2e-30:
            raise read.error(
                f"{at}.per_sample_l2.mean", f"a number from min {lo:.6g} to max {hi:.6g}", mean
            )
        data = replace(data, per_sample_l2=replace(stats, count=own[0] if own else 0))
    return replace(obj, gradient=g, data=data)


def _finish_probe(obj: object, doc: Mapping[str, object], read: Reader, at: str) -> object:
    """A SHA-256 (the batch size and the seed are read within what layergrad takes)."""
    assert isinstance(obj, ProbeMeta)
    sha = obj.data_sha256
    if sha is not None and len(sha) != 64:
        raise read.error(f"{at}.data_sha256", "a SHA-256 in hex or absent", sha)
    return obj


# a finding record's `severity`, as the reports write it
SEVERITY_WORDS = {Severity.FAIL: "failure", Severity.WARN: "warning"}


def _write_reason(obj: object, doc: dict[str, object]) -> None:
    """The one finding record: the op, if any, is named in the message; `facts` holds the
    typed values the message was said from; `severity` (`failure` / `warning`) is the
    rule's, and `repair` the config edit `fix` applies, when the rule has one."""
    assert isinstance(obj, Reason)
    if obj.op:
        doc["message"] = f"{obj.message} (op {obj.op})"
    doc["facts"] = to_json(dict(obj.facts))
    doc["severity"] = SEVERITY_WORDS[obj.severity]
    if obj.repair is not None:
        doc["repair"] = to_json(obj.repair)


def _write_check_item(obj: object, doc: dict[str, object]) -> None:
    """`records`: each finding of the check as one finding record, its rule's own where the
    check keeps one (the loss, the targets, the forward pass), else said by the check's
    message; `severity` is whether it fails the file here (`--fail-on`), as `findings` and
    `warnings` say."""
    assert isinstance(obj, CheckItem)
    records = []
    for code in obj.findings:
        severity = SEVERITY_WORDS[Severity.WARN if code in obj.warnings else Severity.FAIL]
        for reason in [r for r in obj.reasons if r.code == code] or [Reason(code, obj.message)]:
            record = to_json(reason)
            assert isinstance(record, dict)
            records.append({**record, "severity": severity})
    doc["records"] = records


def _finish_reason(obj: object, doc: Mapping[str, object], read: Reader, at: str) -> object:
    """A cause's `facts` (absent from reports written before they were): names to strings,
    numbers, true / false or null."""
    facts: list[tuple[str, Fact]] = []
    for key, value in read.obj(doc.get("facts", {}), f"{at}.facts").items():
        if not isinstance(value, (str, int, float, bool, type(None))):
            raise read.error(f"{at}.facts.{key}", "a string, a number, true, false or null", value)
        facts.append(
            (key, read.text(value, f"{at}.facts.{key}") if isinstance(value, str) else value)
        )
    return replace(obj, facts=tuple(facts))  # type: ignore[type-var]


def _write_norms(obj: object, doc: dict[str, object]) -> None:
    """Over a data set `per_sample` is null and the distribution's members join."""
    if getattr(obj, "distribution", None) is not None:
        doc["per_sample"] = None


def _finish_norms(obj: object, doc: Mapping[str, object], read: Reader, at: str) -> object:
    """Reports read back are over --data: the distribution, never per-sample norms."""
    assert isinstance(obj, (FrobeniusNorms, SpectralNorms))
    if obj.per_sample:
        raise read.error(f"{at}.per_sample", "null (a report over --data)", "a list")
    if obj.distribution is None:
        read.member(doc, "histogram", at)
    return obj


def _finish_histogram(obj: object, doc: Mapping[str, object], read: Reader, at: str) -> object:
    assert isinstance(obj, NormDistribution)
    h = obj.histogram
    if not all(e > 0 for e in h.edges):
        raise read.error(f"{at}.histogram.edges", "a list of positive numbers", list(h.edges))
    if h.edges and len(h.edges) != len(h.counts) + 1:
        raise read.error(f"{at}.histogram.counts", "a count per bin", list(h.counts))
    return obj


def _write_check(obj: object, doc: dict[str, object]) -> None:
    """Whether every file passed and the summary line, before the files."""
    assert isinstance(obj, CheckReport)
    files = doc.pop("files")
    doc.update(passed=obj.passed, summary=obj.summary, files=files)


def _write_diff(obj: object, doc: dict[str, object]) -> None:
    """The rows under `layers`, each named by `layer` (with --wrt weights: `variables`,
    `variable`, as `scan` names them); the target, or what was differentiated (`wrt`, `loss`);
    the number of regressions last."""
    assert isinstance(obj, DiffReport)
    collection, key = ROW_KEYS[obj.wrt]
    rows = cast(list[dict[str, object]], doc.pop("rows"))
    for member in ("wrt", "loss") if obj.loss is None else ("target",):
        del doc[member]
    doc["tolerance"] = doc.pop("tolerance")  # after what was differentiated, as ever
    doc[collection] = rows if key == "layer" else [{key: r.pop("layer"), **r} for r in rows]
    doc["regressions"] = len(obj.regressions)


def _prepare_diff(doc: Mapping[str, object], read: Reader, at: str) -> Mapping[str, object]:
    """The rows and their names where `_write_diff` put them."""
    wrt = doc.get("wrt", ACTIVATIONS)
    if not isinstance(wrt, str) or wrt not in ROW_KEYS:
        raise read.error(f"{at}.wrt" if at else "wrt", " or ".join(ROW_KEYS), wrt)
    collection, key = ROW_KEYS[str(wrt)]
    rows = read.listed(read.member(doc, collection, at), collection)
    named = []
    for i, row in enumerate(rows):
        item = read.obj(row, f"{collection}[{i}]")
        named.append({"layer": read.member(item, key, f"{collection}[{i}]"), **item})
    return {"target": None, **doc, "rows": named}


def _finish_row_diff(obj: object, doc: Mapping[str, object], read: Reader, at: str) -> object:
    """Each side is its scan's row of the same name."""
    assert isinstance(obj, RowDiff)
    base, new = (None if s is None else replace(s, name=obj.name) for s in (obj.base, obj.new))
    return replace(obj, base=base, new=new)


def _write_repair(obj: object, doc: dict[str, object]) -> None:
    """A repair's code as one text, one change a line; no reason why: null."""
    assert isinstance(obj, Repair)
    doc.update(code="\n".join(obj.code), why=obj.why or None)


def _write_fix(obj: object, doc: dict[str, object]) -> None:
    """Each repair carries the original's run, the one it is judged against."""
    assert isinstance(obj, FixReport)
    original = to_json(obj.original)
    for repair in cast(list[dict[str, object]], doc["repairs"]):
        repair["original"] = original


# a training run's losses (`fix`): what the loss is called, and each loss as a `..._loss`
SCORED = {"loss_name": "loss", "final": "final_loss", "trivial": "trivial_loss",
          "baseline": "baseline_loss"}  # fmt: skip


def _row(keys: Mapping[str, str], words: Mapping[str, tuple[Word, ...]] | None = None) -> Spec:
    """What an inspect result and a scan row share."""
    return Spec(
        keys=keys,
        skip=frozenset({"warnings", "array"}),
        when_set=frozenset({"jacobian"}),
        inline=frozenset({"data"}),
        words=words or {},
        write=_write_result,
        finish=_finish_result,
    )


def _norms(skip: str) -> Spec:
    """A Jacobian norm: over a data set its distribution's members join it."""
    return Spec(
        skip=frozenset({skip}),
        inline=frozenset({"distribution"}),
        nullable=frozenset({"per_sample"}),
        write=_write_norms,
        finish=_finish_norms,
    )


def _written(
    schema: str,
    groups: Mapping[str, str],
    picks: Mapping[str, str],
    keys: Mapping[str, str],
    skip: frozenset[str] = frozenset(),
    also: tuple[str, ...] = (),
    write: Callable[[object, dict[str, object]], None] | None = None,
) -> Spec:
    """A report written and never read (`fit`, `fix`, `layers`): each `groups` member is an
    object of these fields (not written at the top); each `picks` field is a list whose items
    are written as these members (`member=attribute` where the names differ)."""
    members = {name: tuple(names.split()) for name, names in groups.items()}
    grouped = {n for names in members.values() for n in names}
    items = {
        name: {m: a or m for m, _, a in (word.partition("=") for word in words.split())}
        for name, words in picks.items()
    }
    return Spec(
        keys=keys,
        skip=skip | grouped,
        head={"schema": schema},
        groups=members,
        picks=items,
        also=also,
        write=write,
    )


PLAIN = Spec()
SPECS: dict[type, Spec] = {
    InspectReport: Spec(head={"schema": INSPECT_SCHEMA}),
    ScanReport: Spec(
        head={"schema": SCAN_SCHEMA},
        keys={"rows": "layers"},
        skip=frozenset({"first_nonfinite", "constant", "input_range"}),
    ),
    WeightScanReport: Spec(
        head={"schema": SCAN_SCHEMA, "wrt": "weights"},
        keys={"noise": "gradient_snr"},
        skip=frozenset({"dead_layers", "activations"}),
        when_set=frozenset({"noise"}),
    ),
    ModelMeta: Spec(keys={"class_name": "class"}, skip=frozenset({"warnings"})),
    # samples, replicas and data_sha256 only with --data; drawn only when the probe follows
    # the model's preprocessing; shards and first_sample only in merged / shard reports
    ProbeMeta: Spec(
        when_set=frozenset(
            {"samples", "replicas", "data_sha256", "drawn", "shards", "first_sample"}
        ),
        # what `--batch-size` and `--seed` take
        ints={
            "batch_size": (1, MAX_BATCH_SIZE, f"1 to {MAX_BATCH_SIZE:,}"),
            "seed": (0, MAX_SEED, f"a seed from 0 to {MAX_SEED:,}"),
        },
        finish=_finish_probe,
    ),
    Result: _row({"source": "from", "target": "to"}),
    ScanRow: _row({"class_name": "class"}, {"flags": SCAN_FLAGS}),
    GradientStats: Spec(
        skip=frozenset({"shape", "top_units"}), fill={"shape": ()}, tops={"zero_fraction": 1.0}
    ),
    Reason: Spec(
        skip=frozenset({"output", "loss", "rule", "severity", "step", "repair", "op", "facts"}),
        words={"code": CAUSE_CODES},
        write=_write_reason,
        finish=_finish_reason,
    ),
    DataStats: Spec(nullable=frozenset({"dead_units"})),
    SampleStats: Spec(skip=frozenset({"count"}), fill={"count": 0}),
    NormDistribution: Spec(keys={"count": "samples"}, finish=_finish_histogram),
    RankedSample: Spec(when_set=frozenset({"rel_stderr"})),
    FrobeniusNorms: _norms("sample_rel_stderr"),
    Checkpoint: Spec(skip=frozenset({"nonfinite_inputs"})),
    Run: Spec(keys=SCORED),
    OutputLoss: Spec(keys=SCORED),
    CheckItem: Spec(skip=frozenset({"reasons"}), write=_write_check_item),
    # what a file gets, and the findings that fail it or warn, in check order
    FileVerdict: Spec(also=("verdict", "failures", "warnings")),
    CheckReport: Spec(head={"schema": CHECK_SCHEMA}, write=_write_check),
    DiffReport: Spec(head={"schema": DIFF_SCHEMA}, write=_write_diff, prepare=_prepare_diff),
    RowDiff: Spec(keys={"name": "layer"}, signed=frozenset({"decades"}), finish=_finish_row_diff),
    # a side of a diff's row: what the comparison read of the scan's row
    ProfileRow: Spec(skip=frozenset({"name", "cause", "input_shape"}), fill={"name": ""}),
    SpectralNorms: _norms("converged"),
    FitReport: _written(
        FIT_SCHEMA,
        {
            "model": "path model_class model",
            "training": "data steps epochs every loss_name optimizer learning_rate stopped",
        },
        {"findings": "finding=code layer step message"},
        keys={"model_class": "class", "model": "name", "loss_name": "loss"},
    ),
    FixReport: _written(
        FIX_SCHEMA,
        {"model": "path model_class", "findings": "before after gone remaining"},
        {"unrepaired": "finding=code layer message hint"},
        keys={"model_class": "class", "ok": "passed"},
        skip=frozenset({"original", "replaced"}),
        also=("ok",),
        write=_write_fix,
    ),
    Repair: Spec(write=_write_repair),
    LayerListing: _written(
        LAYERS_SCHEMA,
        {"model": "path format class_name name keras_version inputs graph_known"},
        {"operations": "path class=class_name inbound"},
        keys={"class_name": "class", "graph_known": "graph", "rows": "layers"},
        also=("total_params",),
    ),
    LayerRow: Spec(
        keys={"class_name": "class"},
        skip=frozenset({"position", "unmatched"}),
        also=("problem", "index"),
    ),
    WeightHealth: Spec(skip=frozenset({"layer", "params"})),
}
