"""`layergrad fix`: the repair of each finding, applied to a copy, and the evidence it trains.

1. with `--data`, `fit`'s checks first (its compile, its labels: what `fit` refuses, `fix`
   refuses in its words); check the file (and with `--data`, train it: `fit`) for its
   findings; the file is loaded once (`OpenedFile`, below): the check, the repairs and a
   clone for the training share it;
2. plan a repair for each finding that has a mechanical one (`plan.py`), from the
   finding's own facts: the head, the loss, the labels, the weights, the inputs, the
   update ratios;
3. apply each repair alone and all together to the model's config and rebuild it
   (`build`, within the memory estimate of any file); read each copy back once (the same
   audit as any file) and check it;
4. with `--data`: train the original and each copy for the same steps on the same batches
   and judge each repair (`evidence.py`: the training side by side and the verdict);
5. write the copy to `--output` (never over the model file, never over an existing file
   without `--force` unless `fix` wrote it: its zip comment says so): with every repair, or
   with evidence the verified ones when some are (a repair that did not help is left out,
   with a note); with evidence and no verified repair, no copy (a note says so). A failing
   finding the copy still has is said (`unrepaired`), never left out.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import tempfile
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from layergrad.commands.check.check_files import check_file, read_checks
from layergrad.commands.check.verdicts import CheckOptions
from layergrad.commands.fit.checks import DEFAULT_STEPS, FitOptions, check_counts
from layergrad.commands.fix.plan import InputStats, Plan, Planning, plan_repairs
from layergrad.commands.session import load
from layergrad.core.errors import InputError, OutputError, UsageError, describe
from layergrad.core.fix_results import FAILING, FixReport, Repair, Run, Verdict
from layergrad.core.keras_backend import quiet_import
from layergrad.core.limits import DEFAULT_MAX_MEMORY
from layergrad.core.probe_options import PathLike, ProbeOptions
from layergrad.core.results import FileVerdict, Reason
from layergrad.core.tf_types import KerasModel
from layergrad.core.vocab import Finding
from layergrad.data.preflight import check_source
from layergrad.files.file_info import FileInfo
from layergrad.files.outputs import FIX_COPY_MARK, check_target, data_inputs, write_file

if TYPE_CHECKING:
    from layergrad.commands.check.verdicts import Opened
    from layergrad.model.label_summary import LabelSummary


@dataclass(frozen=True)
class FixOptions:
    """How `fix` works: where the copy goes, how long each model trains and on what, the
    memory budget of the model and of each copy (`max_memory`, bytes); the bounds are `fit`'s
    (UsageError when made)."""

    output: str | None = None  # default: MODEL.fixed.keras in the working directory
    force: bool = False
    steps: int = DEFAULT_STEPS
    batch_size: int = 32
    seed: int = 0
    limit: int | None = None
    max_memory: int = DEFAULT_MAX_MEMORY  # the memory estimate's budget, the copy's too

    def __post_init__(self) -> None:  # `fit`'s bounds, before any work
        check_counts(self.steps, self.batch_size, self.seed)


def default_output(path: PathLike) -> str:
    """`MODEL.fixed.keras`, named after the model, in the working directory."""
    stem = Path(os.fspath(path).rstrip("/\\")).name
    for suffix in (".keras", ".h5", ".hdf5"):
        stem = stem.removesuffix(suffix)
    return f"{stem or 'model'}.fixed.keras"


def fix_model(
    path: PathLike,
    data: PathLike | None = None,
    options: FixOptions | None = None,
    *,
    imports: Sequence[str] = (),
    unsafe: bool = False,
) -> FixReport:
    """Repair the model in `path` (never written): each finding's repair, as code, in a copy.

    Args:
        path: a `.keras` or `.h5` model file.
        data: labelled data as for `fit` (a `.npz` with `y`, a folder of class sub-folders,
            `FILE.py:function`); with it each repair is trained and judged.
        options: the output file, `force`, steps, batch size, seed, limit.
        imports, unsafe: as for every command.

    Returns:
        The `FixReport`: each repair, its code lines and verdict; the copy's path.

    Raises:
        InputError, LoadError, UnsafeModelError, OutputError: a file that cannot be read or
            loaded, data that does not fit, an output that must not be written.
    """
    options = options or FixOptions()
    probe = ProbeOptions(data=data, limit=options.limit, seed=options.seed,
                         batch_size=options.batch_size if data is not None else None,
                         max_memory=options.max_memory)  # fmt: skip
    if options.output is not None and not options.output.strip():
        raise UsageError("--output is empty: name the repaired copy's .keras file, or leave it out")
    output = options.output or default_output(path)
    if not output.endswith(".keras"):
        raise OutputError(f"--output {output}: the repaired copy is a .keras file; name it so")
    inputs = [os.fspath(path), *imports, *data_inputs(data)]
    check_target(output, "--output", "keras", inputs, force=options.force)
    check = CheckOptions(imports=tuple(imports), unsafe=unsafe, probe=probe)
    # a file that cannot be read or must not load, a missing file, a forged header: refused
    # by the checks that read files only, before TensorFlow starts
    read = read_checks(path, check)  # once: its verdicts begin the checks below
    _refuse_unreadable(read.verdict)
    # read once (above) and loaded once: checked, repaired, trained
    original_file = OpenedFile(path, imports, unsafe, read.info)
    if data is not None:  # `fit`'s checks first: what it refuses, `fix` refuses (exit 2)
        check_source(data, None)
    # TensorFlow, after the checks above
    from layergrad.commands.fix.build import BuildError, build, model_config, weights_by_layer
    from layergrad.commands.fix.evidence import input_stats, judge, reached_outputs, ready, train

    fitting = FitOptions(steps=options.steps, batch_size=options.batch_size, seed=options.seed)
    # `fit`'s compile first: the check leaves out of the file's info a compiled loss Keras
    # cannot build (its gradient checks then use a projection), which `fit` refuses
    prepared = None if data is None else ready(original_file.twin(probe), data, fitting,
                                               options.limit)  # fmt: skip
    verdict = check_file(path, replace(check, opener=original_file), read=read)
    _refuse_unreadable(verdict)
    before = list(check_findings(verdict))
    opened = original_file.get(probe)
    model, info = opened[0].model, opened[0].info
    labels: Mapping[str, LabelSummary] = {}
    stats: list[InputStats] = []
    original: Run | None = None
    fit_report = rival = None  # rival: the trained original, scored by each copy's loss
    if prepared is not None:
        labels, stats = prepared.labels.summaries, input_stats(prepared, options.limit)
        original, fit_report, rival = train(lambda: prepared, fitting, found=before)
        before = list(original.findings)
    planning = Planning(info, labels, stats, weights_by_layer(model), fit_report)
    plans, unrepaired, notes = plan_repairs(planning, before, verdict)
    report = functools.partial(
        FixReport, path=info.path, model_class=type(model).__name__, before=tuple(before),
        data=None if data is None else os.fspath(data), original=original,
        steps=options.steps if data is not None else None, output=None, after=tuple(before),
    )  # fmt: skip
    if not plans:
        graphless = (  # a subclassed model: its file has no layers to name or change
            (f"{type(model).__name__} is a subclassed model: its file holds no layer graph, so "
             "no layer can be named or changed; its findings keep their hints",)
            if unrepaired and not info.graph.known else ()
        )  # fmt: skip
        return report(repairs=(), unrepaired=tuple(unrepaired), notes=graphless)
    try:
        config = model_config(model)
    except BuildError as exc:
        unapplied = tuple(_repair(p, why=f"not applied: {exc}", applied=False) for p in plans)
        return report(repairs=unapplied, unrepaired=tuple(unrepaired),
                      notes=(f"no copy written: {exc}",))  # fmt: skip

    def make(chosen: Sequence[Plan], folder: str, name: str) -> str:
        copy = build(model, config, info.compile_config, chosen, unsafe=unsafe,
                     seed=options.seed, budget=(probe.rows, options.max_memory))  # fmt: skip
        target = os.path.join(folder, name)
        try:
            copy.save(target)
        except Exception as exc:  # Keras cannot write this model
            raise BuildError(f"Keras cannot save the copy ({describe(exc)})") from exc
        return target

    def evidence(target: str) -> tuple[tuple[str, ...], Run | None]:
        copy_file = OpenedFile(target, imports, unsafe)  # read back once: checked, trained
        found = check_findings(check_file(target, replace(check, opener=copy_file)))
        if data is None:
            return found, None
        run, _, _ = train(lambda: ready(copy_file.get(probe), data, fitting, options.limit),
                          fitting, found=found, rival=rival)  # fmt: skip
        return run.findings, run

    def settle(plan: Plan, found: tuple[str, ...], run: Run | None) -> Repair:
        """The repair with its evidence: the findings its copy lost and its verdict."""
        verdict_, why = Verdict.NOT_RUN, ""
        if original is not None and run is not None:
            reached = reached_outputs(info.graph, plan.layer, original)
            verdict_, why = judge(plan.finding, original, run, reached)
        elif plan.finding in found:
            why = f"the copy with this repair still has {plan.finding}"
        gone = tuple(f for f in before if f not in found)
        return replace(_repair(plan), gone=gone, verdict=verdict_, why=why, repaired=run)

    repairs: list[Repair] = []
    together: Run | None = None
    after: tuple[str, ...] = tuple(before)
    written: str | None = None
    replaced = False
    with tempfile.TemporaryDirectory(prefix="layergrad-fix-") as folder:
        usable: list[Plan] = []
        alone: dict[int, tuple[tuple[str, ...], Run | None]] = {}
        for i, plan in enumerate(plans):
            tried: dict[int, tuple[tuple[str, ...], Run | None]] = {}
            forms = (plan, *plan.alternatives) if data is not None else (plan,)
            try:
                target = make([plan], folder, f"alone_{i}.keras")
            except BuildError as exc:
                repairs.append(_repair(plan, why=f"not applied: {exc}", applied=False))
                continue
            if len(plans) > 1 or len(forms) > 1:  # else: the copy with every repair
                tried[0] = evidence(target)
            for k, form in enumerate(forms[1:], start=1):  # a learning rate a decade apart
                with contextlib.suppress(BuildError):
                    tried[k] = evidence(make([form], folder, f"alone_{i}_{k}.keras"))
            if tried:
                k = _best(plan, tried)
                if k:
                    notes.append(_chose(plan, k))
                    plan = replace(forms[k], covers=plan.covers)
                    plans[i] = plan
                alone[i] = tried[k]  # the copy with this form alone, trained already
            usable.append(plan)
            repairs.append(settle(plan, *alone[i]) if i in alone else _repair(plan))

        chosen = _chosen(usable, repairs, notes)
        made: str | None = None  # the copy with the chosen repairs
        if chosen:
            try:
                made = make(chosen, folder, "together.keras")
                only = plans.index(chosen[0]) if len(chosen) == 1 else -1
                after, together = alone[only] if only in alone else evidence(made)
            except BuildError as exc:
                notes.append(f"no copy written: the repairs together cannot be applied: {exc}")
                made = None
        if len(plans) == 1 and usable:
            repairs[0] = settle(plans[0], after, together)
        verified = {r.change for r in repairs if r.verdict is Verdict.VERIFIED}
        if made is not None and data is not None and not any(p.change in verified for p in chosen):
            notes.append(NONE_VERIFIED)  # a copy not shown to train better is no repair
        elif made is not None:
            written, replaced = output, _write(made, output, inputs, options.force)
    lost = {f for r in repairs for f in r.gone}  # another finding's repair took it away
    unrepaired = [u for u in unrepaired if u.code not in lost]
    unrepaired += _still_failing(before, after, repairs, unrepaired)
    return report(repairs=tuple(repairs), unrepaired=tuple(unrepaired), after=after,
                  output=written, together=together, notes=tuple(notes),
                  replaced=replaced)  # fmt: skip


class OpenedFile:
    """One model file, loaded at most once (see the module doc)."""

    def __init__(
        self,
        path: PathLike,
        imports: Sequence[str] = (),
        unsafe: bool = False,
        info: FileInfo | None = None,
    ):
        self.path = path
        self.imports = tuple(imports)
        self.unsafe = unsafe
        self.info = info  # the file as read already, if it was (not read again to load it)
        self.opened: Opened | None = None
        self._start: list[np.ndarray] = []

    def __call__(self, path: PathLike, probe: ProbeOptions, info: FileInfo | None) -> Opened:
        """The file loaded (the first call loads it; `check` calls this as its opener)."""
        if self.opened is None:
            info = info if info is not None else self.info
            self.opened = load(path, probe, imports=self.imports, unsafe=self.unsafe, info=info)
            self._start = [np.array(v.numpy()) for v in self.opened[0].model.weights]
        return self.opened

    def get(self, probe: ProbeOptions) -> Opened:
        """The file loaded (now, if nothing asked for it yet), with the weights it was loaded
        with put back."""
        opened = self(self.path, probe, None)
        for variable, value in zip(opened[0].model.weights, self._start, strict=True):
            variable.assign(value)
        return opened

    def twin(self, probe: ProbeOptions) -> Opened:
        """A model to train: a clone with the loaded weights (the file loaded again when
        Keras cannot clone this model, e.g. a subclassed one)."""
        loaded, warnings, strategy = self.get(probe)
        _, keras = quiet_import()
        scope = strategy.scope() if strategy is not None else contextlib.nullcontext()
        clone = None
        with contextlib.suppress(Exception), scope:  # a model Keras cannot clone: read again
            made = keras.models.clone_model(loaded.model)
            if _paths(made) == _paths(loaded.model):  # the same weights, in the same order
                made.set_weights(self._start)
                clone = made
        if clone is None:
            return load(self.path, probe, imports=self.imports, unsafe=self.unsafe,
                        info=loaded.info)  # fmt: skip
        return replace(loaded, model=clone), warnings, strategy


def _paths(model: KerasModel) -> list[tuple[str, tuple[int, ...]]]:
    return [(str(getattr(v, "path", "")), tuple(v.shape)) for v in model.weights]


def _best(plan: Plan, tried: Mapping[int, tuple[tuple[str, ...], Run | None]]) -> int:
    """Of the forms of `plan` tried (0: the plan, k: its alternative k - 1), the one whose
    copy no longer has the finding and ends lowest against its trivial loss on the held-back
    samples (a copy that could not be trained comes last)."""

    def rank(k: int) -> tuple[bool, float]:
        found, run = tried[k]
        if run is None or run.error is not None:
            return True, math.inf
        score = run.relative if run.relative is not None else run.final
        return plan.finding in found, math.inf if score is None else score

    return min(tried, key=rank)


def _chose(plan: Plan, k: int) -> str:
    """The note of a repair whose alternative form trained best."""
    first, chosen = plan.code[0] if plan.code else plan.change, plan.alternatives[k - 1]
    return (f"{plan.finding}: of the forms tried on the data ({first}, and "
            f"{len(plan.alternatives)} more, a decade apart), "
            f"{chosen.code[0] if chosen.code else chosen.change} trained best on the held-back "
            "samples")  # fmt: skip


NONE_VERIFIED = (
    "no copy written: no repair was verified on the data, and a copy that is not shown to "
    "train better is no repair; apply the changes above by hand to try them, or run fix "
    "again with more --steps"
)


def _chosen(usable: list[Plan], repairs: list[Repair], notes: list[str]) -> list[Plan]:
    """The repairs the written copy holds: with evidence, the verified ones when there are
    some (a repair that did not help is left out, with a note); else every one."""
    done = {r.change for r in repairs if r.verdict is Verdict.VERIFIED}
    verified = [p for p in usable if p.change in done]
    if not verified or len(verified) == len(usable):
        return usable
    left = [p for p in usable if p not in verified]
    notes.append(
        "the copy holds the verified repairs; left out, not verified: "
        + "; ".join(f"{p.finding} ({p.code[0] if p.code else p.change})" for p in left)
    )
    return verified


def _still_failing(
    before: Sequence[str], after: Sequence[str], repairs: Sequence[Repair],
    unrepaired: Sequence[Reason],
) -> list[Reason]:  # fmt: skip
    """Each failing finding of the original that the copy with every repair still has, and
    that no repair nor reason names: said, with the repairs that were meant to clear it."""
    named = {r.finding for r in repairs} | {u.code for u in unrepaired}
    found = []
    for finding in before:
        if finding not in FAILING or finding not in after or finding in named:
            continue
        made = "; ".join(r.finding + (f" at {r.layer}" if r.layer else "") for r in repairs)
        said = f"the copy with the repairs ({made}) still has {finding}"
        found.append(Reason(Finding(finding), said, "no mechanical repair cleared it: see check's "
                            "message for it"))  # fmt: skip
    return found


def check_findings(verdict: FileVerdict) -> tuple[str, ...]:
    """Every finding of a check (failures and warnings), once each, in check order."""
    return tuple(dict.fromkeys(str(f) for item in verdict.checks for f in item.findings))


def _repair(plan: Plan, why: str = "", applied: bool = True) -> Repair:
    return Repair(plan.finding, plan.layer, plan.change, plan.code, why=why, applied=applied)


def _refuse_unreadable(verdict: FileVerdict) -> None:
    """A file check cannot read or must not load is bad input (exit 2), not a repair."""
    for item in verdict.checks:
        for finding in item.findings:
            if finding in (Finding.UNREADABLE, Finding.UNSAFE):
                said = item.message  # names the file itself, or is named after it
                raise InputError(said if verdict.path in said else f"{verdict.path}: {said}")


def _write(source: str, output: str, inputs: Sequence[str], force: bool) -> bool:
    """Copy the checked copy's bytes to `output` (atomically, by the output rules); whether
    it replaced a file."""
    with zipfile.ZipFile(source, "a") as zf:  # marked: a later run may replace it
        zf.comment = FIX_COPY_MARK
    return write_file(output, "--output", "keras", Path(source).read_bytes(), inputs, force=force)
