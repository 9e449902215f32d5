"""The CI gate: named checks of one model file, from static reading to gradient flow.

1. readable   the file is a well-formed .keras / .h5 (no TensorFlow)
2. safe       the static audit finds nothing that would run code on load
3. weights    every stored weight is finite
4. loss       the compiled loss (or --loss) fits each output's activation
5. loads      Keras loads it in safe mode
6. forward    a forward pass on a random probe batch is finite, and its outputs vary
7. gradient   the gradient of the loss (compiled in the file, or --loss), else of a random
              projection of the outputs, reaches every differentiable layer, finite
8. trainable  every trainable variable gets a gradient from the loss (skipped without one)
9. baseline   with `--baseline`: no regression against a committed scan (see `diff.py`)

`static_only` stops after 4 and never imports TensorFlow.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from layergrad.commands.check import verdicts
from layergrad.commands.check.dynamic import dynamic
from layergrad.commands.check.loss_check import loss_fits
from layergrad.commands.check.verdicts import Add, CheckOptions
from layergrad.commands.diff import Baseline, load_baselines, match_baselines
from layergrad.core.errors import LayergradError, UsageError, describe, one_line
from layergrad.core.results import CheckItem, FileVerdict, Reason
from layergrad.core.vocab import ALWAYS_FAIL, CHECK_FINDINGS, Finding
from layergrad.files.archive import HDF5_SUFFIXES
from layergrad.files.file_info import FileInfo, read_file_info

__all__ = [
    "CHECKS",
    "CheckOptions",
    "FileRead",
    "check_file",
    "check_files",
    "expand_paths",
    "read_checks",
]


def check_files(
    paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    options: CheckOptions = CheckOptions(),
    on_file: Callable[[str], None] | None = None,
) -> tuple[FileVerdict, ...]:
    """Check each file; `on_file(path)` is called as each one starts (for a progress bar).

    `paths` is one file or a list of them. With `options.baselines`, each baseline is
    matched to a file first (a baseline that matches none, or whose probe cannot be reused,
    is an InputError before anything loads).
    """
    if isinstance(paths, (str, os.PathLike)):  # one file, not a sequence of characters
        paths = [paths]
    unknown = sorted(set(options.fail_on) - set(CHECK_FINDINGS))
    if unknown:
        raise LayergradError(
            f"unknown --fail-on finding {', '.join(unknown)}; use {','.join(CHECK_FINDINGS)}"
        )
    baselines: dict[str, Baseline] = {}
    if options.baselines:
        if options.static_only:
            raise LayergradError("--baseline compares a gradient scan; drop --static-only")
        files = [os.fspath(p) for p in paths]
        found = load_baselines(options.baselines)
        given, data = options.probe.input_file, bool(options.probe.data_set)
        baselines = match_baselines(files, found, given, data)
    verdicts = []
    for path in paths:
        if on_file is not None:
            on_file(os.fspath(path))
        verdicts.append(check_file(path, options, baselines.get(os.fspath(path))))
    return tuple(verdicts)


@dataclass(frozen=True)
class FileRead:
    """The checks that read the file only (readable, safe, weights), run once by
    `read_checks`: their verdicts, the file as read (None: they stopped the file) and what
    a library warned meanwhile. `check_file(..., read=)` goes on from them."""

    path: str
    items: tuple[CheckItem, ...]
    info: FileInfo | None
    told: tuple[str, ...]

    @property
    def verdict(self) -> FileVerdict:
        return _verdict(self.path, list(self.items), self.told)


def check_file(
    path: str | os.PathLike[str],
    options: CheckOptions = CheckOptions(),
    baseline: Baseline | None = None,
    read: FileRead | None = None,
) -> FileVerdict:
    """Run the checks on one file, stopping at the first that leaves nothing to check next.

    Whatever the file holds, it gets a verdict: a failure nobody foresaw is recorded as an
    ``error`` finding of the check that was running, and the other files still get theirs.
    `baseline` adds the `baseline` check, scanning with the baseline's probe. `read`: the
    file's own checks, run before by `read_checks` (`fix` reads the file once).

    Raises:
        UsageError: the options cannot work with this file (a baseline made with another
            probe, an `--input` that does not fit): the command, not the file, is wrong.
    """
    if read is None:
        read = read_checks(path, options)
    info = read.info

    def run(add: Add) -> None:
        """loss, then the checks that run the model (after `_read`, which gave `info`)."""
        if info is None:
            return
        loss = loss_fits(info, options.loss, add, probe_follows=not options.static_only)
        if not options.static_only:
            dynamic(path, info, options, add, loss, baseline)

    return _checked(options, read, run).verdict


def read_checks(path: str | os.PathLike[str], options: CheckOptions = CheckOptions()) -> FileRead:
    """The checks that read the file only, without TensorFlow (`check_file`'s first three)."""
    start = FileRead(os.fspath(path), (), None, ())
    return _checked(options, start, lambda add: _read(path, options, add))


def _checked(
    options: CheckOptions,
    start: FileRead,
    checks: Callable[[Add], FileInfo | None],
) -> FileRead:
    """Run `checks` after the verdicts of `start`, with their `add` and the warnings given."""
    items = list(start.items)
    running = [CHECKS[len(items)]]  # (the checks are recorded in order)

    def add(
        name: str,
        message: str,
        findings: Sequence[Finding] = (),
        replace: bool = False,
        warn: Sequence[Finding] = (),
        reasons: Sequence[Reason] = (),
    ) -> bool:
        """Record a check's verdict; `replace` completes the verdict of a check run before.
        `warn`: findings that only warn whatever `--fail-on` says (their rules warn);
        `reasons`: each finding's message and hint, apart."""
        fail_on = frozenset(options.fail_on) | ALWAYS_FAIL  # (the API may pass a tuple)
        passed = not (set(findings) - set(warn)) & fail_on
        warned = tuple(f for f in findings if f not in fail_on or f in warn)
        item = CheckItem(name, passed, message, tuple(findings), warned, tuple(reasons))
        earlier = [i for i, c in enumerate(items) if c.name == name]
        if replace and earlier:
            items[earlier[-1]] = item
            return passed
        items.append(item)
        running[0] = CHECKS[min(CHECKS.index(name) + 1, len(CHECKS) - 1)]
        return passed

    # the API never prints: a warning Keras (or a custom layer) gives while the file loads or
    # runs is recorded at the end of the file's last check message, not left to the caller
    info = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            info = checks(add)
        except UsageError:
            raise
        except (Exception, SystemExit) as exc:  # one bad file must not sink (or pass) the run
            message = f"failed unexpectedly: {type(exc).__name__}: {describe(exc)}"
            add(running[0], message, [Finding.ERROR])
    # what a library tells the user (not its deprecations)
    told = [one_line(str(w.message))[:200] for w in caught if issubclass(w.category, UserWarning)]
    return FileRead(start.path, tuple(items), info, (*start.told, *told))


def _verdict(path: str, items: list[CheckItem], told: Sequence[str]) -> FileVerdict:
    said = "; ".join(list(dict.fromkeys(told))[:MAX_WARNINGS])
    if said and items:
        last = items[-1]
        items[-1] = replace(last, message=f"{last.message} (warned while checking: {said})")
    return FileVerdict(path, all(i.passed for i in items), tuple(items))


MAX_WARNINGS = 3  # distinct warnings recorded per file


CHECKS = (
    "readable", "safe", "weights", "loss", "loads", "targets", "forward", "gradient", "trainable",
    "baseline",
)  # fmt: skip


def _read(path: str | os.PathLike[str], options: CheckOptions, add: Add) -> FileInfo | None:
    """readable, safe, weights: the file as read, None when a check stops it."""
    if Path(path).is_dir() and not (Path(path) / "saved_model.pb").exists():
        held = _model_files(path, LOOKED_AT)  # one file's check (`fix DIR`): say which to pass
        add(
            "readable",
            f"{os.fspath(path)} is a directory; expected a .keras, .h5 or .hdf5 file; pass the "
            f"model file, e.g. {held[0]}"
            if held
            else f"{os.fspath(path)} is a directory without .keras, .h5 or .hdf5 files; expected "
            "model files; check the path",
            [Finding.UNREADABLE],
        )
        return None
    try:
        info = read_file_info(path, read_weights=True)
    except LayergradError as exc:
        add("readable", str(exc), [Finding.UNREADABLE])
        return None
    add("readable", f"{info.format} file, {len(info.graph.layers)} layers")
    if not verdicts.safe(info, options.imports, options.unsafe, add):
        return None
    verdicts.weights(info, add)
    return info


LOOKED_AT = 10_000  # entries of a directory looked at for a model file to name


MODEL_SUFFIXES = (".keras", *HDF5_SUFFIXES)


def _model_files(path: str | os.PathLike[str], most: int | None = None) -> list[str]:
    """The .keras / .h5 / .hdf5 files under the directory `path`, sorted in each folder (with
    `most`: the first one, found among at most `most` entries); links to directories not
    followed."""
    found: list[str] = []
    seen = 0
    try:
        for root, dirs, files in os.walk(path, followlinks=False):
            found += [os.path.join(root, f) for f in sorted(files) if f.endswith(MODEL_SUFFIXES)]
            seen += len(files) + len(dirs)
            if most is not None and (found or seen > most):
                return found[:1]
    except OSError:
        pass
    return found


def expand_paths(paths: Sequence[str]) -> list[str]:
    """Model files to check: files as given; a directory's .keras / .h5 / .hdf5 files,
    recursively.

    A directory holding `saved_model.pb` is kept as it is, so its check explains SavedModels;
    so is a directory without model files (or one that cannot be listed), so its check says
    so while the other files are checked. Symbolic links to directories are not followed.
    """
    out: list[str] = []
    for text in paths:
        p = Path(text)
        try:
            walk = p.is_dir() and not (p / "saved_model.pb").exists()
        except OSError:
            walk = False
        out.extend((sorted(_model_files(p)) if walk else []) or [text])
    if not out:
        raise LayergradError("give at least one model file to check")
    return out
