"""A model file opened once for `fix`: checked, repaired from and trained without a reload.

`OpenedFile` loads the file through `session.load` (the audit, safe mode unless `--unsafe`,
the strategy of `--data`) the first time it is asked for, by `check` (as its
`CheckOptions.opener`) or by `fix` itself, and keeps the weights it loaded with: the check's
probe may run the model in training mode (BatchNormalization's moving statistics move), so
`restore` puts them back. `twin` is a clone with those starting weights, to train while the
model itself stays as loaded for the repairs to copy from.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from layergrad.core.probe_options import PathLike, ProbeOptions
from layergrad.core.tf_types import KerasModel
from layergrad.files.file_info import FileInfo

if TYPE_CHECKING:
    from layergrad.commands.check.steps import Opened


class OpenedFile:
    """One model file, loaded at most once (see the module doc)."""

    def __init__(self, path: PathLike, imports: Sequence[str] = (), unsafe: bool = False):
        self.path = path
        self.imports = tuple(imports)
        self.unsafe = unsafe
        self.opened: Opened | None = None
        self._start: list[np.ndarray] = []

    def __call__(self, path: PathLike, probe: ProbeOptions, info: FileInfo | None) -> Opened:
        """The file loaded (the first call loads it; `check` calls this as its opener)."""
        if self.opened is None:
            from layergrad.commands.session import load

            self.opened = load(path, probe, imports=self.imports, unsafe=self.unsafe, info=info)
            self._start = [np.array(v.numpy()) for v in self.opened[0].model.weights]
        return self.opened

    def get(self, probe: ProbeOptions) -> Opened:
        """The file loaded (now, if nothing asked for it yet), with its loaded weights."""
        opened = self(self.path, probe, None)
        self.restore()
        return opened

    @property
    def model(self) -> KerasModel:
        assert self.opened is not None, "get() the model first"
        return self.opened[0].model

    def restore(self) -> None:
        """Put back the weights the model was loaded with."""
        if self.opened is None:
            return
        for variable, value in zip(self.model.weights, self._start, strict=True):
            variable.assign(value)

    def twin(self, probe: ProbeOptions) -> Opened:
        """A model to train: a clone with the loaded weights (the file loaded again when
        Keras cannot clone this model, e.g. a subclassed one)."""
        from layergrad.core.keras_backend import quiet_import

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
            from layergrad.commands.session import load

            return load(self.path, probe, imports=self.imports, unsafe=self.unsafe,
                        info=loaded.info)  # fmt: skip
        return replace(loaded, model=clone), warnings, strategy


def _paths(model: KerasModel) -> list[tuple[str, tuple[int, ...]]]:
    return [(str(getattr(v, "path", "")), tuple(v.shape)) for v in model.weights]
