"""What a `check` run looks for and how it probes: `CheckOptions`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from layergrad.core.errors import UsageError
from layergrad.core.probe_options import ProbeOptions, Progress
from layergrad.core.vocab import DEFAULT_FAIL_ON, Finding, Reduce
from layergrad.diagnose.regressions import DEFAULT_TOLERANCE

if TYPE_CHECKING:
    from layergrad.core.probe_options import PathLike
    from layergrad.core.tf_types import Strategy
    from layergrad.engine.loader import LoadedModel
    from layergrad.files.file_info import FileInfo

# How a check step records one check: add(check, message, findings=(), ...) -> passed
Add = Callable[..., bool]
# How the `loads` check opens the file: opener(path, probe, info) -> what `session.load` returns
Opener = Callable[
    ["PathLike", ProbeOptions, "FileInfo"],
    "tuple[LoadedModel, tuple[str, ...], Strategy | None]",
]


@dataclass(frozen=True)
class CheckOptions:
    """What a check run looks for and how it probes.

    `probe` makes the batch of the forward and gradient checks (a random one, `input_file`,
    or every sample of `data`); its `reduce` and `training` are the check's own choice.
    """

    fail_on: frozenset[Finding] = frozenset(DEFAULT_FAIL_ON)
    static_only: bool = False
    imports: tuple[str, ...] = ()
    unsafe: bool = False
    probe: ProbeOptions = field(default_factory=ProbeOptions)
    loss: str | None = None  # a keras.losses name overriding the file's compiled loss
    baselines: tuple[str, ...] = ()  # `layergrad scan --json` files (see baseline.match_baselines)
    tolerance: float = DEFAULT_TOLERANCE  # decades of mean |g| a baseline allows
    on_progress: Progress | None = None
    allow_other_data: bool = False  # --baseline --data: compare with a baseline of other data
    # a caller that keeps the loaded model (`fix`); None: `session.load`
    opener: Opener | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.allow_other_data and not (self.probe.data_set is not None and self.baselines):
            raise UsageError("--allow-other-data goes with --baseline and --data; drop it")

    def probing(self, training: bool = False) -> ProbeOptions:
        """The probe options of the forward and gradient checks, in training mode or not."""
        return replace(self.probe, reduce=Reduce.SUM, training=training)
