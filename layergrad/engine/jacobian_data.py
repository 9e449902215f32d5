"""Per-sample Jacobian norms over a stream of batches: the probe batch, or every sample of a
data set (`--measure jacobian --data`).

Each batch is measured as one batch is (`jacobian.measure_jacobian` for `inspect`,
`jacobian.scan_frobenius` for `scan`); its per-sample norms go into `NormTotals` (moments, log
histogram, the k largest with their sample indices) and are dropped, so memory is one batch's
whatever the number of samples. The first batch chooses the method for all; the result is
batch-independent only when every batch was.

On an eager tape the estimate's tf.functions are traced anew for every batch, which over a
data set costs more than the products. So when `inspect`'s first batch measures every target
by the estimate and does not mix samples, the forward pass, the mixing check, the probes and
the Lanczos steps become one tf.function of the batch's inputs and seed (`EstimateStep`),
traced once. A shorter batch is padded with copies of its last sample, their rows dropped; a
batch that mixes samples is measured again on its eager tape (the diagonal blocks).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import TYPE_CHECKING, TypedDict

import numpy as np

from layergrad.core.probe_options import Progress
from layergrad.core.results import FrobeniusNorms, JacobianStats, SpectralNorms
from layergrad.core.tf_runtime import tf
from layergrad.core.tf_types import KerasModel, Strategy, Tensor, TFFunction
from layergrad.core.vocab import JacobianMethod
from layergrad.data.devices import is_multi_worker
from layergrad.data.probe_input import ProbeBatch
from layergrad.data.stats.accumulators import gather_workers
from layergrad.data.stats.sample_ranking import NormPayload, NormTotals
from layergrad.engine.jacobian import (
    DEFAULT_PROBES,
    JacobianOptions,
    Key,
    choose_method,
    estimate_ops,
    estimate_stats,
    linear_maps,
    measure_jacobian,
    no_spectral,
    scan_frobenius,
)
from layergrad.engine.linear_map import LinearMap
from layergrad.engine.random_layers import drawing_for
from layergrad.engine.step_calls import moving_statistics_kept
from layergrad.engine.trace import Replay, replay
from layergrad.model.layer_refs import Site

if TYPE_CHECKING:
    from layergrad.data.sources import DataStream

Replayed = Callable[[ProbeBatch], Replay]  # the forward pass replayed on a batch
BATCH_SEED_STRIDE = 1_000_003  # batch b draws with seed + b * this (distinct for any seed)


class PairPayload(TypedDict):
    """A `PairTotals` as JSON."""

    frobenius: NormPayload
    spectral: NormPayload | None
    method: str | None
    probes: int | None
    independent: bool
    iterations: int | None
    converged: bool
    unit_sq: list[float] | None
    warnings: list[str]


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
    own: JacobianStats | None = None  # the last batch's own (per-sample) norms

    def __post_init__(self) -> None:
        self.frobenius = NormTotals(self.top)
        self.spectral = NormTotals(self.top)

    def add(self, stats: JacobianStats, warnings: Sequence[str], samples: np.ndarray) -> None:
        """Add one batch's JacobianStats (`samples`: the batch's sample indices)."""
        s = stats.spectral
        add_norms(self.frobenius, stats.frobenius, samples)
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
        self.own = stats

    def payload(self) -> PairPayload:
        """Everything added, for `gather_workers` (JSON: `merge_payload` reads it)."""
        return {
            "frobenius": self.frobenius.payload(),
            "spectral": None if self.spectral is None else self.spectral.payload(),
            "method": None if self.method is None else self.method.value,
            "probes": self.probes,
            "independent": self.independent,
            "iterations": self.iterations,
            "converged": self.converged,
            "unit_sq": None if self.unit_sq is None else self.unit_sq.tolist(),
            "warnings": list(self.warnings),
        }

    def merge_payload(self, other: PairPayload) -> None:
        """Add the totals of other samples (another worker's `payload`)."""
        method = other["method"]
        if method is None:  # that worker had no batch
            return
        self.frobenius.merge(NormTotals.from_payload(other["frobenius"]))
        if other["spectral"] is None:
            self.spectral = None
        elif self.spectral is not None:
            self.spectral.merge(NormTotals.from_payload(other["spectral"]))
        if other["iterations"] is not None:
            self.iterations = max(self.iterations or 0, int(other["iterations"]))
        self.converged = self.converged and bool(other["converged"])
        self.method, self.probes = JacobianMethod(method), other["probes"]
        self.independent = self.independent and bool(other["independent"])
        if other["unit_sq"] is not None:
            units = np.asarray(other["unit_sq"], np.float64)
            self.unit_sq = units if self.unit_sq is None else self.unit_sq + units
        self.warnings.update(dict.fromkeys(other["warnings"]))

    def stats(self) -> JacobianStats:
        """The JacobianStats over every sample added."""
        frob = frobenius_over(self.frobenius)
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


def add_norms(totals: NormTotals, norms: FrobeniusNorms, samples: np.ndarray) -> None:
    """Add one batch's per-sample Frobenius norms (and their errors, when estimated)."""
    rel = np.asarray(norms.sample_rel_stderr) if norms.sample_rel_stderr else None
    totals.add(np.asarray(norms.per_sample), samples, rel)


def frobenius_over(totals: NormTotals) -> FrobeniusNorms:
    """The Frobenius norms over every sample added."""
    d = totals.distribution()
    return FrobeniusNorms((), d.mean, d.max, totals.largest_rel, (), d)


def data_batches(
    stream: DataStream, model: KerasModel, on_progress: Progress | None
) -> Iterator[tuple[int, ProbeBatch, np.ndarray]]:
    """Each batch of a `data.sources.DataStream` this process runs (its shard under
    `--distribute multi-worker`): (its index among the data's batches, the ProbeBatch, its
    samples' indices in the data).

    The index is its first sample's index (counted from `--first-sample`) over `--batch-size`:
    for a shard numbered from a multiple of the batch size, the batch's index in the whole data
    set, so its random draws (seeded by it) are those of one run over the whole. While the
    caller holds a batch, `model`'s random layers draw that batch's numbers
    (`random_layers.drawing_for`). `on_progress` gets the samples done after each batch."""
    names = tuple(s.name for s in stream.specs)
    size = max(int(getattr(stream, "batch_size", 1) or 1), 1)
    done = 0
    for b, tensors in enumerate(stream.indexed()):
        samples = np.asarray(tensors[-1].numpy(), np.int64)
        batch = ProbeBatch(tuple(tensors[:-1]), names, stream.source, None)
        index = int(samples[0]) // size if samples.size else stream.batch_index(b)
        with drawing_for(model, index):
            yield index, batch, samples
        done += len(samples)
        if on_progress is not None:
            on_progress(done, stream.samples)
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
    strategy: Strategy | None = None,
) -> list[tuple[JacobianStats | None, tuple[str, ...]]]:
    """The Jacobian norms of d target[i] / d source[i] over every sample, per target.

    Args:
        model: the loaded model; stream: its `--data` batches (`data.sources.DataStream`).
        source, targets: the pair ends (targets whose gradient was not ok are left out by
            the caller).
        how: probes / exact / seed, as for one batch.
        top: how many of the most sensitive samples to keep.
        strategy: under `--distribute multi-worker` each worker measures its shard and the
            totals combine over the workers (`gather_workers`), the same on every worker.

    Returns:
        Per target, (its JacobianStats, warnings); (None, why) when there is no per-sample
        Jacobian (no batch axis).
    """
    replayed = partial(
        replay, model, targets=targets, sources=[source], training=training, reduce=reduce
    )
    pairs = [PairTotals(top) for _ in targets]
    missing: dict[int, str] = {}
    step: EstimateStep | None = None
    with moving_statistics_kept(model):  # the pass in training mode leaves them as they were
        for k, (b, batch, samples) in enumerate(data_batches(stream, model, on_progress)):
            drawn = batch_seeded(how, b)
            found = None
            if k == 0 and not stream.probe:  # the first batch decides: the compiled step, or
                # eager tapes throughout (the probe batch: its eager tape, tracing costs more)
                sharded = stream.part is not None or stream.first_sample > 0
                # a shard traces for a whole batch, as one run does
                first = estimate_step(
                    replayed, batch, drawn, stream.batch_size if sharded else None
                )
                step, found = (None, None) if first is None else first
            elif step is not None:
                found = step.run(batch, drawn.seed)
                step = step if found is not None else None  # it mixes samples: eager from here on
            if step is not None and found is not None:
                missing.update(step.missing)
                for t, stats, warnings in found:
                    pairs[t].add(stats, warnings, samples)
            else:  # on the batch's own eager tape
                live = replayed(batch)
                for t, lin in linear_maps(live, missing):
                    pairs[t].add(*measure_jacobian(lin, drawn), samples)
                del live
            if k == 0 and pairs and pairs[0].method is not None:  # the first batch's method for all
                exact = pairs[0].method == JacobianMethod.EXACT
                how = replace(how, exact=exact, probes=None if exact else pairs[0].probes)
    if is_multi_worker(strategy):  # the totals of every worker's shard (JSON: keys are text)
        mine = ([p.payload() for p in pairs], {str(t): w for t, w in missing.items()})
        pairs, missing = [PairTotals(top) for _ in pairs], {}
        for payloads, why in gather_workers(strategy, mine):
            for pair, payload in zip(pairs, payloads, strict=True):
                pair.merge_payload(payload)
            missing.update({int(t): w for t, w in why.items()})
    out: list[tuple[JacobianStats | None, tuple[str, ...]]] = []
    for t, pair in enumerate(pairs):
        if t in missing or pair.method is None:
            out.append((None, (missing.get(t, "no samples"),)))
        else:
            stats = pair.own if stream.probe and pair.own is not None else pair.stats()
            out.append((stats, tuple(pair.warnings)))
    return out


def batch_seeded(how: JacobianOptions, index: int) -> JacobianOptions:
    """The options for batch `index`: its own random draws (independent errors across
    batches), the first batch's those of one probe batch with the same seed."""
    return replace(how, seed=how.seed + BATCH_SEED_STRIDE * index)


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
    strategy: Strategy | None = None,
) -> tuple[dict[Key, FrobeniusNorms], tuple[str, ...]]:
    """Per watched activation of `scan`, ||d target[i] / d layer[i]||_F over every sample.

    Returns the norms by (layer path, call, output), and the notes of how they were measured
    (over every worker's shard under `--distribute multi-worker`, as `inspect_jacobians`).
    """
    totals: dict[Key, NormTotals] = {}
    notes: dict[str, None] = {}
    norms: dict[Key, FrobeniusNorms] = {}
    with moving_statistics_kept(model):
        for b, batch, samples in data_batches(stream, model, on_progress):
            live = replay(model, batch, (target,), training=training, reduce=reduce, seed=how.seed)
            norms, found = scan_frobenius(live, batch_seeded(how, b))
            notes.update(dict.fromkeys(found))
            for key, f in norms.items():
                add_norms(totals.setdefault(key, NormTotals(top)), f, samples)
            del live
    if stream.probe:  # one batch: its own per-sample norms
        return norms, tuple(notes)
    if is_multi_worker(strategy):
        mine = ([(*key, acc.payload()) for key, acc in totals.items()], list(notes))
        totals, notes = {}, {}
        for norms_of, said in gather_workers(strategy, mine):
            for path, call, output, payload in norms_of:
                acc = totals.setdefault((path, call, output), NormTotals(top))
                acc.merge(NormTotals.from_payload(payload))
            notes.update(dict.fromkeys(said))
    return {key: frobenius_over(acc) for key, acc in totals.items()}, tuple(notes)


Measured = list[tuple[int, JacobianStats, tuple[str, ...]]]  # (target index, stats, warnings)


@dataclass
class EstimateStep:
    """The compiled step for a model, a source and its targets; `run` measures one batch."""

    function: TFFunction
    size: int  # the batch size it is traced for (larger batches trace again)
    probes: int
    targets: tuple[int, ...]  # the indices of the targets it measures (the others: no batch axis)
    columns: tuple[int, ...]  # n of each measured target's Jacobians
    notes: tuple[tuple[str, ...], ...]  # each target's warnings from the first batch
    missing: dict[int, str]  # the targets without a batch axis, and why

    def run(self, batch: ProbeBatch, seed: int) -> Measured | None:
        """Each measured target's JacobianStats and warnings for `batch`, drawn from `seed`;
        None when the batch mixes samples (then measure it eagerly)."""
        count = int(np.shape(batch.arrays[0])[0]) if batch.arrays else 0
        inputs = [tf.convert_to_tensor(a) for a in batch.arrays]
        short = self.size - count
        if short > 0:  # pad with copies of the last sample (dropped below)
            inputs = [tf.concat([a, tf.repeat(a[-1:], short, axis=0)], axis=0) for a in inputs]
        outs = self.function(inputs, tf.constant(seed, tf.int64))
        out: Measured = []
        for t, n, note, (mixes, squared, *rest) in zip(
            self.targets, self.columns, self.notes, outs, strict=True
        ):
            if bool(mixes):
                return None
            found = [squared.numpy()[:, :count], *(a.numpy()[:count] for a in rest)]
            stats, why = estimate_stats(found, n, self.probes, True)
            out.append((t, stats, (*note, *why)))
        return out


def estimate_step(
    replayed: Replayed, batch: ProbeBatch, how: JacobianOptions, size: int | None = None
) -> tuple[EstimateStep, Measured] | None:
    """The compiled step for `batch` (drawn from `how.seed`) and the batches after it, with
    its measurement of `batch`; None when the batches are to be measured on their eager
    tapes: some target is measured exactly, the batch mixes samples, or the step cannot be
    traced (the eager measurement of the batch then says why).

    `size` is the batch size to trace for (default: `batch`'s): a shard whose first batch
    is shorter (the last of the whole run) is padded to it, so that its draws are those of
    one run over the whole data."""
    live = replayed(batch)
    measured, columns, notes = [], [], []
    missing: dict[int, str] = {}
    for t, lin in linear_maps(live, missing):
        method, note = choose_method(lin, how)
        if method != JacobianMethod.ESTIMATE or bool(lin.mixing(how.seed)[0]):
            return None
        measured.append(t)
        columns.append(lin.n)
        notes.append(() if note is None else (note,))
    del live
    if not measured:
        return None
    probes = how.probes or DEFAULT_PROBES

    def build(spectral: bool) -> TFFunction:
        @tf.function(autograph=False)
        def step(inputs: list[Tensor], seed: Tensor) -> list[list[Tensor]]:
            probe = ProbeBatch(tuple(inputs), batch.names, batch.source, None)
            live = replayed(probe)
            out = []
            for t in measured:
                lin = LinearMap(live.tape, live.sources[0], live.targets[t])
                out.append([lin.mixing(seed)[0], *estimate_ops(lin, probes, seed, spectral)])
            return out

        return step

    size = max(size or 0, int(np.shape(batch.arrays[0])[0]))
    step = EstimateStep(
        build(True), size, probes, tuple(measured), tuple(columns), tuple(notes), missing
    )
    try:
        try:
            first = step.run(batch, how.seed)  # traces it
        except (LookupError, ValueError, TypeError) as exc:  # J v needs a second derivative
            step.function = build(False)
            step.notes = tuple((*n, no_spectral(exc)) for n in step.notes)
            first = step.run(batch, how.seed)
    except Exception:  # the model does not trace: the eager measurement says why
        return None
    return None if first is None else (step, first)
