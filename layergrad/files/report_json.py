"""Read a `layergrad inspect --json` or `scan --json` report back into its result objects.

`merge` reads its shards here. The file is untrusted input like a model file: it must be a
regular file (a FIFO or a device is refused before it is opened, `guards.require_regular`),
at most `MAX_REPORT_BYTES`, strict JSON (no NaN / Infinity), and every member is checked for
its type, so a malformed or foreign file is one clear line that names the member.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import TypeVar

from layergrad.core.errors import InputError
from layergrad.core.results import (
    DataStats,
    Endpoint,
    Fact,
    FrobeniusNorms,
    GradientStats,
    Histogram,
    InspectReport,
    JacobianStats,
    ModelMeta,
    NormDistribution,
    ProbeMeta,
    RankedSample,
    Reason,
    Result,
    SampleStats,
    ScanJacobian,
    ScanReport,
    ScanRow,
    SpectralNorms,
)
from layergrad.core.vocab import (
    CAUSE_CODES,
    SCAN_FLAGS,
    Finding,
    JacobianMethod,
    Reduce,
    Status,
    Word,
)
from layergrad.files.json_document import read_json_document
from layergrad.files.json_fields import NUMBER, OPTIONAL, JsonFields

INSPECT_SCHEMA, SCAN_SCHEMA = "layergrad.inspect/1", "layergrad.scan/1"
MAX_REPORT_BYTES = 64 * 2**20  # a few hundred bytes per layer: some 100,000 layers
# no gradient of float32 values summed over any data set comes near 1e100 (float32 ends at
# 3.4e38): a larger number was edited by hand, and the shards' numbers combined (the root of
# the sum of their squares, weighted by counts) would overflow a float64
MAX_MEASURE = 1e100
EXPECTED = "a `layergrad inspect --json` or `scan --json` report"
T = TypeVar("T")
W = TypeVar("W", bound=Word)


def read_report(path: str | os.PathLike[str]) -> InspectReport | ScanReport:
    """The report in the JSON file `path` (an inspect or an activations scan).

    Raises:
        InputError: not a regular file, too large, not strict JSON, another schema, or a
            member missing or of the wrong type.
    """
    where = os.fspath(path)
    doc = read_json_document(path, where, MAX_REPORT_BYTES, "a report", f"expected {EXPECTED}")
    return report_from_json(doc, where)


def report_from_json(doc: object, where: str = "report") -> InspectReport | ScanReport:
    """The report of a parsed JSON document; `where` names it in errors."""
    read = _Reader(where)
    if not isinstance(doc, dict):
        raise read.error("the document", "a JSON object", doc)
    schema = doc.get("schema")
    if schema == INSPECT_SCHEMA:
        return InspectReport(
            model=read.model(read.get(doc, "model", dict)),
            probe=read.probe(read.get(doc, "probe", dict)),
            results=tuple(
                read.result(r, f"results[{i}]")
                for i, r in enumerate(read.get(doc, "results", list))
            ),
        )
    if schema == SCAN_SCHEMA:
        if doc.get("wrt", "activations") != "activations":
            raise InputError(
                f"{where} is a scan of the weights (--wrt weights), which merge cannot combine "
                "exactly: it holds each variable's gradient norms, not the gradient, and the "
                "norm of the whole data's gradient (the shards' gradients weighted by samples) "
                "does not follow from the shards' norms; run scan --wrt weights --data over the "
                "whole data set, on several machines with --distribute multi-worker"
            )
        notes = read.get(doc, "notes", list)
        return ScanReport(
            model=read.model(read.get(doc, "model", dict)),
            probe=read.probe(read.get(doc, "probe", dict)),
            target=read.get(doc, "target", (str, OPTIONAL)),
            rows=tuple(
                read.row(r, f"layers[{i}]") for i, r in enumerate(read.get(doc, "layers", list))
            ),
            notes=tuple(n for n in notes if isinstance(n, str)),
        )
    shown = json.dumps(schema)[:60] if isinstance(schema, (str, type(None))) else "not a string"
    raise InputError(f"{where} has schema {shown}; expected {EXPECTED} ({INSPECT_SCHEMA} or "
                     f"{SCAN_SCHEMA})")  # fmt: skip


class _Reader(JsonFields):
    """Typed reads of a report's members; each error names the member and the file."""

    def __init__(self, where: str) -> None:
        super().__init__(where, f"expected {EXPECTED}")

    def word(
        self,
        obj: Mapping[str, object],
        key: str,
        words: type[W],
        name: str,
        subset: Sequence[W] | None = None,
    ) -> W:
        value = self.get(obj, key, str, name)
        allowed = [str(w) for w in subset] if subset is not None else words.words()
        if value not in allowed:
            raise self.error(name, f"one of {', '.join(allowed)}", value)
        return words(value)

    def shape(self, obj: Mapping[str, object], name: str) -> tuple[int, ...]:
        shape = self.get(obj, "shape", list, f"{name}.shape")
        if not all(type(d) is int and d >= 0 for d in shape):
            raise self.error(f"{name}.shape", "a list of sizes", shape)
        return tuple(shape)

    def model(self, obj: Mapping[str, object]) -> ModelMeta:
        def text(key: str) -> str:
            return str(self.get(obj, key, str, f"model.{key}"))

        return ModelMeta(
            path=text("path"), format=text("format"), class_name=text("class"), name=text("name")
        )

    def probe(self, obj: Mapping[str, object]) -> ProbeMeta:
        def opt_int(key: str) -> int | None:
            value = obj.get(key)
            if value is not None and (type(value) is not int or value < 0):
                raise self.error(f"probe.{key}", "a count or null", value)
            return value

        return ProbeMeta(
            source=self.get(obj, "source", str, "probe.source"),
            seed=opt_int("seed"),
            batch_size=self.get(obj, "batch_size", int, "probe.batch_size"),
            training=self.get(obj, "training", bool, "probe.training"),
            reduce=self.word(obj, "reduce", Reduce, "probe.reduce"),
            samples=opt_int("samples"),
            replicas=opt_int("replicas"),
            shards=opt_int("shards"),
            first_sample=opt_int("first_sample"),
            data_sha256=self.get(obj, "data_sha256", (str, OPTIONAL), "probe.data_sha256")
            if "data_sha256" in obj
            else None,
        )

    def gradient(self, obj: object, name: str, shape: tuple[int, ...]) -> GradientStats | None:
        if obj is None:
            return None
        if not isinstance(obj, dict):
            raise self.error(name, "an object or null", obj)

        def num(key: str, top: float = MAX_MEASURE) -> float:
            return self.measure(obj, key, f"{name}.{key}", top)

        l2, mean_abs, max_abs = num("l2"), num("mean_abs"), num("max_abs")
        nonfinite = self.get(obj, "nonfinite", int, f"{name}.nonfinite")
        elements = math.prod(shape) if shape else 1
        if not 0 <= nonfinite <= elements:
            raise self.error(f"{name}.nonfinite", f"a count from 0 to {elements}", nonfinite)
        # |g| at any element is at most the L2 of all, and their mean at most their largest
        for low, high, what in ((max_abs, l2, "l2"), (mean_abs, max_abs, "max_abs")):
            if low > high * (1 + 1e-4) + 1e-30:
                raise self.error(
                    f"{name}.{'max_abs' if what == 'l2' else 'mean_abs'}",
                    f"a number at most {what} ({high:.6g})",
                    low,
                )
        return GradientStats(
            shape=shape,
            l2=l2,
            mean_abs=mean_abs,
            max_abs=max_abs,
            zero_fraction=num("zero_fraction", top=1.0),
            nonfinite=nonfinite,
        )

    def measure(
        self, obj: Mapping[str, object], key: str, name: str, top: float = MAX_MEASURE
    ) -> float:
        """A norm, a mean |g| or a fraction: a finite number from 0 to `top` (a number edited
        by hand past that, `1e999` read as infinity or a negative norm, is refused)."""
        value = float(self.get(obj, key, NUMBER, name))
        if not 0.0 <= value <= top:  # also NaN
            raise self.error(name, f"a finite number from 0 to {top:g}", value)
        return value

    def optional_measure(self, obj: Mapping[str, object], key: str, name: str) -> float | None:
        """`measure`, or None for a member that is null."""
        if self.get(obj, key, (int, float, OPTIONAL), name) is None:
            return None
        return self.measure(obj, key, name)

    def causes(self, obj: Mapping[str, object], name: str) -> tuple[Reason, ...]:
        out = []
        for i, c in enumerate(self.get(obj, "causes", list, f"{name}.causes")):
            at = f"{name}.causes[{i}]"
            if not isinstance(c, dict):
                raise self.error(at, "an object", c)
            out.append(
                Reason(
                    code=self.word(c, "code", Finding, f"{at}.code", CAUSE_CODES),
                    layer=self.get(c, "layer", (str, OPTIONAL), f"{at}.layer"),
                    message=self.get(c, "message", str, f"{at}.message"),
                    hint=self.get(c, "hint", str, f"{at}.hint"),
                    facts=self.facts(c, f"{at}.facts"),
                )
            )
        return tuple(out)

    def facts(self, obj: Mapping[str, object], name: str) -> tuple[tuple[str, Fact], ...]:
        """A cause's `facts` (absent from reports written before they were): names to
        strings, numbers, true / false or null."""
        if "facts" not in obj:
            return ()
        read: list[tuple[str, Fact]] = []
        for key, value in self.get(obj, "facts", dict, name).items():
            if not isinstance(value, (str, int, float, bool, OPTIONAL)):
                raise self.error(f"{name}.{key}", "a string, a number, true, false or null", value)
            if isinstance(value, str):
                value = self.text(value, f"{name}.{key}")
            read.append((key, value))
        return tuple(read)

    def data(self, obj: Mapping[str, object], name: str, samples: int | None) -> DataStats | None:
        if "per_sample_l2" not in obj and "dead_units" not in obj:
            return None
        units = self.get(obj, "dead_units", (list, OPTIONAL), f"{name}.dead_units") or []
        if not all(type(u) is int for u in units):
            raise self.error(f"{name}.dead_units", "a list of unit indices", units)
        first = self.get(obj, "first_nonfinite_batch", (int, OPTIONAL),
                         f"{name}.first_nonfinite_batch")  # fmt: skip
        stats = self.get(obj, "per_sample_l2", (dict, OPTIONAL), f"{name}.per_sample_l2")
        per_sample = None
        if stats is not None:
            per_sample = self.sample_stats(stats, samples or 0, f"{name}.per_sample_l2")
            lo, mean, hi = per_sample.min, per_sample.mean, per_sample.max
            if not lo <= mean * (1 + 1e-6) + 1e-30 <= hi * (1 + 2e-6) + 2e-30:
                raise self.error(
                    f"{name}.per_sample_l2.mean",
                    f"a number from min {lo:.6g} to max {hi:.6g}",
                    mean,
                )
        return DataStats(tuple(units), per_sample, first)

    def result(self, obj: object, name: str) -> Result:
        if not isinstance(obj, dict):
            raise self.error(name, "an object", obj)
        ends = []
        for key in ("from", "to"):
            end = self.get(obj, key, dict, f"{name}.{key}")
            ends.append(
                Endpoint(
                    layer=self.get(end, "layer", str, f"{name}.{key}.layer"),
                    shape=self.shape(end, f"{name}.{key}"),
                    dtype=self.get(end, "dtype", str, f"{name}.{key}.dtype"),
                )
            )
        grad = self.get(obj, "gradient", (dict, OPTIONAL), f"{name}.gradient")
        shape = self.shape(grad, f"{name}.gradient") if grad is not None else ends[0].shape
        return Result(
            source=ends[0],
            target=ends[1],
            status=self.word(obj, "status", Status, f"{name}.status"),
            gradient=self.gradient(grad, f"{name}.gradient", shape),
            causes=self.causes(obj, name),
            data=self.data(obj, name, ends[0].shape[0] if ends[0].shape else None),
            jacobian=self.jacobian(obj.get("jacobian"), f"{name}.jacobian"),
        )

    def row(self, obj: object, name: str) -> ScanRow:
        if not isinstance(obj, dict):
            raise self.error(name, "an object", obj)
        shape = self.shape(obj, name)
        flags = self.get(obj, "flags", list, f"{name}.flags")
        if not all(isinstance(f, str) and f in SCAN_FLAGS for f in flags):
            raise self.error(f"{name}.flags", f"a list of {', '.join(SCAN_FLAGS)}", flags)
        return ScanRow(
            layer=self.get(obj, "layer", str, f"{name}.layer"),
            class_name=self.get(obj, "class", str, f"{name}.class"),
            shape=shape,
            dtype=self.get(obj, "dtype", str, f"{name}.dtype"),
            status=self.word(obj, "status", Status, f"{name}.status"),
            gradient=self.gradient(obj.get("gradient"), f"{name}.gradient", shape),
            flags=tuple(Finding(f) for f in flags),
            causes=self.causes(obj, name),
            data=self.data(obj, name, shape[0] if shape else None),
            jacobian=self.scan_jacobian(obj.get("jacobian"), f"{name}.jacobian"),
        )

    def jacobian(self, obj: object, name: str) -> JacobianStats | None:
        """An inspect result's `jacobian` over --data (None when it has none)."""
        if obj is None:
            return None
        if not isinstance(obj, dict):
            raise self.error(name, "an object or null", obj)
        probes = self.get(obj, "probes", (int, OPTIONAL), f"{name}.probes")
        spectral = self.get(obj, "spectral", (dict, OPTIONAL), f"{name}.spectral")
        units = self.get(obj, "unit_sensitivity", list, f"{name}.unit_sensitivity")
        if not all(
            isinstance(u, NUMBER) and not isinstance(u, bool) and 0 <= u <= MAX_MEASURE
            for u in units
        ):
            raise self.error(f"{name}.unit_sensitivity", "a list of finite numbers >= 0", units)
        spec = None
        if spectral is not None:
            at = f"{name}.spectral"
            mean, top, distribution = self.norms(spectral, at)
            steps = self.get(spectral, "iterations", (int, OPTIONAL), f"{at}.iterations")
            spec = SpectralNorms((), mean, top, steps, distribution=distribution)
        independent = self.get(obj, "batch_independent", bool, f"{name}.batch_independent")
        frobenius = self.get(obj, "frobenius", dict, f"{name}.frobenius")
        return JacobianStats(
            method=self.word(obj, "method", JacobianMethod, f"{name}.method"),
            probes=probes,
            batch_independent=independent,
            frobenius=self.frobenius(frobenius, f"{name}.frobenius"),
            spectral=spec,
            unit_sensitivity=tuple(float(u) for u in units),
        )

    def scan_jacobian(self, obj: object, name: str) -> ScanJacobian | None:
        if obj is None:
            return None
        if not isinstance(obj, dict):
            raise self.error(name, "an object or null", obj)
        at = f"{name}.frobenius"
        return ScanJacobian(self.frobenius(self.get(obj, "frobenius", dict, at), at))

    def frobenius(self, obj: Mapping[str, object], name: str) -> FrobeniusNorms:
        mean, top, distribution = self.norms(obj, name)
        rel = self.optional_measure(obj, "rel_stderr", f"{name}.rel_stderr")
        return FrobeniusNorms((), mean, top, rel, (), distribution)

    def sample_stats(self, obj: Mapping[str, object], count: int, name: str) -> SampleStats:
        """`mean`, `std`, `min`, `max` and the optional `p50`, `p95` of a distribution."""

        def num(key: str, optional: bool = False) -> float | None:
            read = self.optional_measure if optional else self.measure
            return read(obj, key, f"{name}.{key}")

        return SampleStats(
            count=count,
            mean=float(num("mean") or 0.0),
            std=float(num("std") or 0.0),
            min=float(num("min") or 0.0),
            p50=num("p50", optional=True),
            p95=num("p95", optional=True),
            max=float(num("max") or 0.0),
        )

    def norms(self, obj: Mapping[str, object], name: str) -> tuple[float, float, NormDistribution]:
        """(mean, max, the distribution over the data) of a norm's member."""
        if obj.get("per_sample") is not None:
            raise self.error(f"{name}.per_sample", "null (a report over --data)", "a list")

        hist = self.get(obj, "histogram", dict, f"{name}.histogram")
        edges = self.get(hist, "edges", list, f"{name}.histogram.edges")
        counts = self.get(hist, "counts", list, f"{name}.histogram.counts")
        if not all(isinstance(e, NUMBER) and not isinstance(e, bool) and e > 0 for e in edges):
            raise self.error(f"{name}.histogram.edges", "a list of positive numbers", edges)
        if not all(type(c) is int and c >= 0 for c in counts) or (
            edges and len(edges) != len(counts) + 1
        ):
            raise self.error(f"{name}.histogram.counts", "a count per bin", counts)
        top = []
        for i, item in enumerate(self.get(obj, "top", list, f"{name}.top")):
            at = f"{name}.top[{i}]"
            if not isinstance(item, dict):
                raise self.error(at, "an object", item)
            rel = self.optional_measure(item, "rel_stderr", f"{at}.rel_stderr") \
                if "rel_stderr" in item else None  # fmt: skip
            sample = self.get(item, "sample", int, f"{at}.sample")
            value = self.measure(item, "value", f"{at}.value")
            top.append(RankedSample(sample, value, rel))
        samples = self.get(obj, "samples", int, f"{name}.samples")
        distribution = NormDistribution(
            **asdict(self.sample_stats(obj, samples, name)),
            histogram=Histogram(
                tuple(float(e) for e in edges),
                tuple(counts),
                self.get(hist, "zeros", int, f"{name}.histogram.zeros"),
                self.get(hist, "bins_per_decade", int, f"{name}.histogram.bins_per_decade"),
            ),
            top=tuple(top),
            mean_rel_stderr=self.optional_measure(
                obj, "mean_rel_stderr", f"{name}.mean_rel_stderr"
            ),
        )
        return distribution.mean, distribution.max, distribution
