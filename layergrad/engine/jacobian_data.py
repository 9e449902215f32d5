"""Per-sample Jacobian norms over every sample of a data set (`--measure jacobian --data`).

Batch by batch, the same measurement as for one probe batch (`jacobian.measure_jacobian` for
`inspect`, `jacobian_scan.scan_frobenius` for `scan`), from one forward pass per batch; each
batch's per-sample norms go into `NormTotals` (moments, log histogram, the k largest with
their sample indices) and are dropped, so memory is one batch's whatever the number of
samples. The method is chosen on the first batch and kept for the others (a partial last
batch is measured the same way). Batch independence is checked on every batch; the result
is independent only when every batch was.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np

from layergrad.core.results import FrobeniusNorms, JacobianStats, SpectralNorms
from layergrad.core.tf_types import KerasModel

if TYPE_CHECKING:
    from layergrad.data.sources import DataStream
from layergrad.core.vocab import JacobianMethod
from layergrad.data.probe_input import ProbeBatch
from layergrad.data.sample_ranking import NormTotals
from layergrad.engine.jacobian import JacobianOptions, measure_jacobian, no_batch_axis
from layergrad.model.layer_refs import Site

Progress = Callable[[int, "int | None"], None]
Key = tuple[str, int, int]  # (layer path, call, output), as in `jacobian_scan`
BATCH_SEED_STRIDE = 1_000_003  # batch b draws with seed + b * this (distinct for any seed)


@dataclass
class PairTotals:
    """One (from, to) pair's Jacobian norms added up over the batches."""

    top: int
    frobenius: NormTotals = field(init=False)
    spectral: NormTotals | None = field(init=False)
    method: JacobianMethod | None = None
    probes: int | None = None
    independent: bool = True
    iterations: int | None = None
    converged: bool = True
    unit_sq: np.ndarray | None = None  # sum over samples of each unit's squared column norm
    warnings: dict[str, None] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.frobenius = NormTotals(self.top)
        self.spectral = NormTotals(self.top)

    def add(self, stats: JacobianStats, samples: np.ndarray, warnings: Sequence[str]) -> None:
        """Add one batch's JacobianStats (`samples`: the batch's sample indices)."""
        f, s = stats.frobenius, stats.spectral
        rel = np.asarray(f.sample_rel_stderr) if f.sample_rel_stderr else None
        self.frobenius.add(np.asarray(f.per_sample), samples, rel)
        if s is None:
            self.spectral = None
        elif self.spectral is not None:
            self.spectral.add(np.asarray(s.per_sample), samples)
            if s.iterations is not None:
                self.iterations = max(self.iterations or 0, s.iterations)
            self.converged = self.converged and s.converged
        self.method, self.probes = stats.method, stats.probes
        self.independent = self.independent and stats.batch_independent
        units = np.square(np.asarray(stats.unit_sensitivity, np.float64)) * len(samples)
        self.unit_sq = units if self.unit_sq is None else self.unit_sq + units
        self.warnings.update(dict.fromkeys(warnings))

    def stats(self) -> JacobianStats:
        """The JacobianStats over every sample added."""
        f = self.frobenius.distribution()
        frob = FrobeniusNorms((), f.mean, f.max, self.frobenius.largest_rel, (), f)
        spec = None
        if self.spectral is not None:
            d = self.spectral.distribution()
            spec = SpectralNorms((), d.mean, d.max, self.iterations, self.converged, d)
        count = max(self.frobenius.count, 1)
        units = (
            () if self.unit_sq is None else tuple(float(math.sqrt(u / count)) for u in self.unit_sq)
        )
        assert self.method is not None
        return JacobianStats(self.method, self.probes, self.independent, frob, spec, units)


def data_batches(stream: DataStream) -> Iterator[tuple[ProbeBatch, np.ndarray]]:
    """Each batch of a `data.sources.DataStream` as a ProbeBatch, with its sample indices."""
    names = tuple(s.name for s in stream.specs)
    offset = 0
    for tensors in stream.dataset:
        rows = int(tensors[0].shape[0]) if tensors[0].shape.rank else 1
        yield (
            ProbeBatch(tuple(tensors), names, stream.source, None),
            np.arange(offset, offset + rows),
        )
        offset += rows
    stream.raise_failure()


def inspect_jacobians(
    model: KerasModel,
    stream: DataStream,
    source: Site,
    targets: Sequence[Site],
    how: JacobianOptions,
    *,
    training: bool = False,
    reduce: str = "sum",
    top: int = 10,
    on_progress: Progress | None = None,
) -> list[tuple[JacobianStats | None, tuple[str, ...]]]:
    """The Jacobian norms of d target[i] / d source[i] over every sample, per target.

    Args:
        model: the loaded model; stream: its `--data` batches (`data.sources.DataStream`).
        source, targets: the pair ends (targets whose gradient was not ok are left out by
            the caller).
        how: probes / exact / seed, as for one batch.
        top: how many of the most sensitive samples to keep.

    Returns:
        Per target, (its JacobianStats, warnings); (None, why) when there is no per-sample
        Jacobian (no batch axis).
    """
    from layergrad.engine.probe import live_probe

    pairs = [PairTotals(top) for _ in targets]
    missing: dict[int, str] = {}
    done = 0
    for b, (batch, samples) in enumerate(data_batches(stream)):
        live = live_probe(model, batch, [source], list(targets), training=training, reduce=reduce)
        drawn = batch_seeded(how, b)
        for t, (pair, target) in enumerate(zip(pairs, live.targets, strict=True)):
            why = no_batch_axis(live.sources[0], target)
            if why:
                missing[t] = why
                continue
            stats, warnings = measure_jacobian(live.tape, live.sources[0], target, drawn)
            pair.add(stats, samples, warnings)
        if done == 0 and pairs and pairs[0].method is not None:  # the first batch decides
            how = _kept_method(how, pairs[0])
        del live
        done += len(samples)
        if on_progress is not None:
            on_progress(done, stream.samples)
    out: list[tuple[JacobianStats | None, tuple[str, ...]]] = []
    for t, pair in enumerate(pairs):
        if t in missing or pair.method is None:
            out.append((None, (missing.get(t, "no samples"),)))
        else:
            out.append((pair.stats(), tuple(pair.warnings)))
    return out


def batch_seeded(how: JacobianOptions, index: int) -> JacobianOptions:
    """The options for batch `index`: its own random draws (independent errors across
    batches), the first batch's those of one probe batch with the same seed."""
    return replace(how, seed=how.seed + BATCH_SEED_STRIDE * index)


def _kept_method(how: JacobianOptions, pair: PairTotals) -> JacobianOptions:
    """The options that make every later batch use the first batch's method."""
    if pair.method == JacobianMethod.EXACT:
        return replace(how, exact=True, probes=None)
    return replace(how, exact=False, probes=pair.probes)


def scan_jacobians(
    model: KerasModel,
    stream: DataStream,
    target: Site | None,
    how: JacobianOptions,
    *,
    training: bool = False,
    reduce: str = "sum",
    top: int = 10,
    on_progress: Progress | None = None,
) -> tuple[dict[Key, FrobeniusNorms], tuple[str, ...]]:
    """Per watched activation of `scan`, ||d target[i] / d layer[i]||_F over every sample.

    Returns the norms by (layer path, call, output), and the notes of how they were measured.
    """
    from layergrad.engine.jacobian_scan import scan_frobenius
    from layergrad.engine.trace import live_trace

    totals: dict[Key, NormTotals] = {}
    notes: dict[str, None] = {}
    done = 0
    for b, (batch, samples) in enumerate(data_batches(stream)):
        live = live_trace(model, batch, target, training=training, reduce=reduce, seed=how.seed)
        norms, found = scan_frobenius(live, batch_seeded(how, b))
        notes.update(dict.fromkeys(found))
        for key, f in norms.items():
            acc = totals.setdefault(key, NormTotals(top))
            rel = np.asarray(f.sample_rel_stderr) if f.sample_rel_stderr else None
            acc.add(np.asarray(f.per_sample), samples, rel)
        del live
        done += len(samples)
        if on_progress is not None:
            on_progress(done, stream.samples)
    out = {}
    for key, acc in totals.items():
        d = acc.distribution()
        out[key] = FrobeniusNorms((), d.mean, d.max, acc.largest_rel, (), d)
    return out, tuple(notes)
