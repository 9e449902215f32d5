"""The verdict corpus: healthy architectures times fault operators, in every form Keras writes.

One builder for the benchmark (bench_verdict_corpus.py) and the floor tests
(tests/commands/test_verdict_corpus.py):

    cases = build_corpus(folder, archs=None, operators=None, forms=None, saves=None)

writes each model of `corpus_archs.ARCHS` (healthy, then each mutant of
`corpus_faults.OPERATORS` that makes sense on it) in each written form (`FORMS`: str, fn, obj;
see corpus_forms.py) and each saved form (`SAVES`):

  keras    model.save("m.keras")
  h5       model.save("m.h5") (legacy HDF5; not for subclassed models)
  resaved  the .keras loaded back (safe mode) and saved again
  fitted   one epoch of `fit` on the architecture's data (64 samples, run eagerly), then saved
           as .keras

and returns one `Case` per file: what it is, where it is, the data to check it with (`data`,
an .npz: for the faults that only data shows, and for the healthy models' data false alarms,
`healthy_data`), the import it needs and what `check` must find. Seeds are fixed: the same
arguments write the same files.
"""

from __future__ import annotations

import contextlib
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from layergrad.core.keras_backend import quiet_import

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # the corpus modules import each other by name
    sys.path.insert(0, str(HERE))
tf, keras = quiet_import()
warnings.filterwarnings("ignore", module="keras")  # optimizer variables skipped on loading

import numpy as np  # noqa: E402
from corpus_archs import ARCHS, BY_NAME, Arch  # noqa: E402
from corpus_faults import OPERATORS, Mutant, mutants  # noqa: E402
from corpus_forms import FORMS, Build, Head, labels  # noqa: E402

SAVES = ("keras", "h5", "resaved", "fitted")
CUSTOM_LAYERS = str(HERE / "corpus_layers.py")
ROWS = 64

__all__ = [
    "ARCHS",
    "BY_NAME",
    "CUSTOM_LAYERS",
    "FORMS",
    "OPERATORS",
    "SAVES",
    "Case",
    "Outcome",
    "build_corpus",
    "plan",
    "run_case",
]


@dataclass(frozen=True)
class Case:
    arch: str
    op: str  # "healthy", or the mutant's operator
    form: str
    save: str
    path: Path | None  # None: this form cannot be written (`skipped` says why)
    expect: tuple[str, tuple[str, ...]] | None
    data: Path | None  # check with --data (the fault needs it, or the healthy data run)
    imports: tuple[str, ...] = ()
    skipped: str = ""

    @property
    def name(self) -> str:
        data = "+data" if self.data is not None else ""
        return f"{self.arch}/{self.op}/{self.form}/{self.save}{data}"


def _arrays(arch: Arch, head: Head, seed: int) -> tuple[dict[str, np.ndarray], Any]:
    rng = np.random.default_rng(seed)
    x = arch.data(rng, ROWS)
    if head.kind == "reconstruction":
        y: Any = next(iter(x.values()))
    else:
        y = labels(head, rng, ROWS, classes=None)
    if arch.others:
        y = {"head": y, **{k: labels(v, rng, ROWS) for k, v in arch.others.items()}}
    return x, y


def _write_data(path: Path, x: dict[str, np.ndarray], y: Any) -> Path:
    ys = {f"y:{k}": v for k, v in y.items()} if isinstance(y, dict) else {"y": y}
    np.savez(path, **x, **ys)
    return path


def _model(arch: Arch, mutant: Mutant) -> keras.Model:
    keras.utils.set_random_seed(0)
    b = Build(mutant.spec)
    model = arch.build(b)
    b.compile(model, arch.others)
    return model


def _fit(model: keras.Model, x: dict[str, np.ndarray], y: Any, steps: int | None = None) -> None:
    x = {k: v.astype(object) if v.dtype.kind == "U" else v for k, v in x.items()}  # tf.string
    inputs: Any = x if len(x) > 1 else next(iter(x.values()))
    # A few steps, run eagerly: tracing the train function costs more than the steps. The
    # flag is not part of the compile config: the saved file is the one a traced fit writes.
    model.run_eagerly = True
    try:
        model.fit(inputs, y, epochs=1, batch_size=16, verbose=0, steps_per_epoch=steps)
    finally:
        model.run_eagerly = False


def _save_all(
    model: keras.Model, stem: Path, saves: tuple[str, ...], x: dict[str, np.ndarray], y: Any
) -> dict[str, tuple[Path, str]]:
    """Write each saved form of one model: {save: (path, why it could not be written or '')}."""
    out = {}
    for save in SAVES:  # in this order: `fitted` changes the model
        if save not in saves:
            continue
        path = stem.with_name(f"{stem.name}__{save}.{'h5' if save == 'h5' else 'keras'}")
        try:
            if save == "resaved":
                first = stem.with_name(f"{stem.name}__first.keras")
                model.save(first)
                keras.models.load_model(first, safe_mode=True).save(path)
                first.unlink()
            else:
                if save == "fitted":
                    _fit(model, x, y)
                model.save(path)
                if save == "h5":  # Keras cannot load every .h5 it writes (masking ops)
                    keras.models.load_model(path, safe_mode=True)
            out[save] = (path, "")
        except Exception as exc:  # e.g. a subclassed model in .h5, a loss that cannot take y
            text = str(exc).splitlines()[0][:120] if str(exc) else ""
            out[save] = (path, f"{type(exc).__name__}: {text}")
    return out


def _write(arch: Arch, mutant: Mutant, stem: Path, saves: tuple[str, ...]) -> dict[str, Any]:
    fit_x, fit_y = _arrays(arch, arch.head, seed=2)  # the data it is trained on
    model = _model(arch, mutant)
    if "bn" in arch.tags:  # BatchNormalization statistics trained for at least a step
        with contextlib.suppress(Exception):  # a loss that cannot take y: left untrained
            _fit(model, fit_x, fit_y, steps=1)
    return _save_all(model, stem, saves, fit_x, fit_y)


def _cases_of(
    arch: Arch,
    form: str,
    mutant: Mutant,
    saves: tuple[str, ...],
    root: Path,
    healthy_data: bool,
    fit_mutants: bool,
) -> list[Case]:
    imports = (CUSTOM_LAYERS,) if "custom" in arch.tags else ()
    stem = root / f"{arch.name}__{mutant.op}__{form}"
    data = None
    if mutant.data and "no_data" in arch.tags:
        return []
    healthy_data = healthy_data and "no_data" not in arch.tags
    if mutant.data or (mutant.op == "healthy" and healthy_data and form == arch.forms[0]):
        x, y = _arrays(arch, mutant.labels or arch.head, seed=1)
        x = {k: v * mutant.scale if v.dtype.kind == "f" else v for k, v in x.items()}
        data = _write_data(stem.with_suffix(".npz"), x, y)
    if "no_h5" in arch.tags:
        saves = tuple(s for s in saves if s != "h5")
    if mutant.op != "healthy":
        saves = tuple(s for s in saves if s != "fitted" or fit_mutants)
    written = {
        s: stem.with_name(f"{stem.name}__{s}.{'h5' if s == 'h5' else 'keras'}") for s in saves
    }
    if all(p.exists() for p in written.values()):  # written by an earlier run: kept
        saved = {s: (p, "") for s, p in written.items()}
    else:
        saved = _write(arch, mutant, stem, saves)
    out = []
    for save, (path, skipped) in saved.items():
        keep = None if skipped else path
        if not mutant.data:  # a data fault's file alone is the healthy model's twin
            out.append(
                Case(arch.name, mutant.op, form, save, keep, mutant.expect, None, imports, skipped)
            )
        if data is not None and (save == "keras" or mutant.op != "healthy"):
            out.append(
                Case(arch.name, mutant.op, form, save, keep, mutant.expect, data, imports, skipped)
            )
    return out


def build_corpus(
    root: str | Path,
    archs: list[str] | None = None,
    operators: list[str] | None = None,
    forms: tuple[str, ...] | None = None,
    saves: tuple[str, ...] = SAVES,
    healthy_data: bool = True,
    ops: list[str] | None = None,
    fit_mutants: bool = False,
    mutant_saves: tuple[str, ...] | None = None,
) -> list[Case]:
    """Write the corpus to `root`; one Case per file (and per file + data).

    `ops` keeps only the mutants of those names (e.g. "loss_bce"), after `operators` made
    them. The healthy models are written in every saved form of `saves`; the mutants in every
    one of `mutant_saves` (default: `saves`) but `fitted` unless `fit_mutants` (one epoch of
    fit each: the slowest form to write).
    """
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    cases = []
    for arch, form, mutant in plan(archs, operators, forms, ops):
        kept = saves if mutant.op == "healthy" or mutant_saves is None else mutant_saves
        cases.extend(_cases_of(arch, form, mutant, kept, root, healthy_data, fit_mutants))
    return cases


def plan(
    archs: list[str] | None = None,
    operators: list[str] | None = None,
    forms: tuple[str, ...] | None = None,
    ops: list[str] | None = None,
) -> list[tuple[Arch, str, Mutant]]:
    """The models `build_corpus` writes (each in its saved forms), without writing them."""
    out = []
    for arch in ARCHS if archs is None else [BY_NAME[a] for a in archs]:
        for form in arch.forms:
            if forms is not None and form not in forms:
                continue
            for mutant in mutants(arch, arch.spec(form), operators):
                if ops is None or mutant.op in ops:
                    out.append((arch, form, mutant))
    return out


def save_manifest(cases: list[Case], root: str | Path) -> Path:
    """Write `cases.json` beside the corpus, so a later run checks it again without building."""
    import json

    rows = [
        {**c.__dict__, "path": c.path and str(c.path), "data": c.data and str(c.data)}
        for c in cases
    ]
    path = Path(root) / "cases.json"
    path.write_text(json.dumps(rows), encoding="utf-8")
    return path


def load_manifest(root: str | Path) -> list[Case]:
    import json

    rows = json.loads((Path(root) / "cases.json").read_text(encoding="utf-8"))
    out = []
    for row in rows:
        expect = row["expect"] and (row["expect"][0], tuple(row["expect"][1]))
        out.append(
            Case(
                **{
                    **row,
                    "path": row["path"] and Path(row["path"]),
                    "data": row["data"] and Path(row["data"]),
                    "expect": expect,
                    "imports": tuple(row["imports"]),
                }
            )
        )
    return out


@dataclass(frozen=True)
class Outcome:
    case: Case
    found: tuple[tuple[str, str, str], ...]  # (check, finding, message) of each finding
    seconds: float

    @property
    def hit(self) -> bool:
        """The expected finding, at one of the expected layers."""
        if self.case.expect is None:
            return False
        finding, where = self.case.expect
        return any(f == finding and any(f"'{w}'" in m for w in where) for _, f, m in self.found)

    @property
    def false_alarm(self) -> bool:
        """Any finding (failure, warning or error) where none is expected."""
        return self.case.expect is None and bool(self.found)


def run_case(case: Case) -> Outcome:
    """`check` one file of the corpus (with its data), as the Python API runs it."""
    import time

    from layergrad.commands.check.check_files import CheckOptions, check_files
    from layergrad.core.probe_options import ProbeOptions

    options = CheckOptions(imports=case.imports, probe=ProbeOptions(data=case.data))
    assert case.path is not None, case.skipped
    start = time.perf_counter()
    try:
        (verdict,) = check_files([case.path], options)
        found = tuple((c.name, str(f), c.message) for c in verdict.checks for f in c.findings)
    except Exception as exc:  # a usage error: the command refused the file and its data
        found = (("usage", "usage_error", f"{type(exc).__name__}: {exc}"),)
    return Outcome(case, found, time.perf_counter() - start)
