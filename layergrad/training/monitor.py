"""`GradientMonitor`: a Keras callback that watches the gradient while `model.fit` trains.

    from layergrad import GradientMonitor
    monitor = GradientMonitor(every=100, report="fit.json")
    model.fit(x, y, epochs=5, callbacks=[monitor])
    monitor.report.findings    # the Reason of each problem seen

The compiled step (`step_hook.py`) reduces the batch of every `every`-th step (and of the
first and last) and writes each step's loss and NaN/Inf flag into a ring, a row per optimizer
step (with `steps_per_execution > 1` too). The callback reads the ring when Keras's logs turn
NaN/Inf and before a ring wraps round; the first non-finite step is reduced in full, named,
and (with `stop_on_nonfinite`) ends training. At the end the findings rules (`rules.py`) run
over the record.
"""

from __future__ import annotations

import contextlib
import math
import os
import warnings
from dataclasses import dataclass

import numpy as np

from layergrad.core.errors import OutputError, op_message
from layergrad.core.fit_results import Checkpoint, FitReport
from layergrad.core.results import Reason
from layergrad.core.tf_runtime import keras, tf
from layergrad.core.tf_types import SummaryWriter
from layergrad.core.vocab import Finding
from layergrad.training import rules
from layergrad.training.checkpoint_rows import checkpoint_from_rows, write_summaries
from layergrad.training.model_facts import (
    heads,
    is_built,
    layer_facts,
    layers_and_variables,
    loss_name,
    output_units,
)
from layergrad.training.monitor_words import (
    EARLY,
    blind_note,
    built_note,
    finding_line,
    logged_loss,
    loss_only_nonfinite,
    positive_loss,
    same_finding,
    say,
    summary_line,
    verbosity,
    whole_steps,
)
from layergrad.training.nonfinite import BadBatch, nonfinite_finding
from layergrad.training.report_files import check_log_dir, check_report_path, write_report
from layergrad.training.step_hook import StepHook, TrainFunction, trace_key
from layergrad.training.step_reductions import value_now

# The wrappers installed on each model (by id) until its monitored fit ends: a fit that raised
# never calls on_train_end, and the next monitored fit of that model closes them first.
_OPEN: dict[int, contextlib.ExitStack] = {}


def _close(model: object) -> None:
    """Remove the wrappers installed on `model`, if any."""
    stack = _OPEN.pop(id(model), None)
    if stack is not None:
        stack.close()


class GradientMonitor(keras.callbacks.Callback):  # type: ignore[name-defined]
    """Watch d loss / d weights during `model.fit`; name the layer where NaN/Inf started.

    Args:
        every: reduce the gradients every this many steps (and on the first and last step).
        log_dir: also write TensorBoard summaries here (`layergrad/update_ratio/<layer>`,
            `layergrad/grad_l2/<layer>`, `layergrad/dead_fraction/<layer>`, and a histogram
            `layergrad/gradient/<layer>`).
        report: also write the record at the end of training: `.json` (`layergrad.fit/1`)
            or `.html` (a self-contained page).
        stop_on_nonfinite: end training on the first step whose loss, a gradient or an
            activation is NaN or Inf.
        chance_loss: the trivial loss (of predicting the labels' prior; a positive finite
            number, else ValueError), for `plateau_at_chance`, `oscillating` and
            `slow_convergence` (default: log C for a C-class cross-entropy, log 2 for a binary
            one; none for other losses: pass the targets' variance for mse).
        batches_per_epoch: the batches of one pass over the data, when Keras's epochs are
            not passes (a repeated dataset trained for `steps_per_epoch` steps in one Keras
            epoch, as `layergrad fit --steps` trains): the report's epochs and each
            checkpoint's epoch and batch then count passes over the data (default: Keras's).
        verbose: 0 (the default, as Keras's own callbacks) prints nothing; 1 prints to stderr
            one line per new finding as training finds it (`GradientMonitor: step 40:
            dying_units at dense_1: ...`) and a summary when training ends. The findings
            about the whole loss curve (`not_learning`, `plateau_at_chance`, `oscillating`,
            `slow_convergence`) are judged on the whole run, so they are said at its end.

    After training, `report` (a `FitReport`) holds every checkpoint and the findings.

    `report` and `log_dir` are checked when the callback is made and again when training
    begins, before any step (`OutputError`): a report replaces only a report layergrad
    wrote, never through a link, never a directory or special file; `log_dir` must be a
    folder that can be written, and TensorBoard must be installed. The monitor never stops a
    `model.fit` that works without it: a model Keras builds at its first step (subclassed,
    or a Sequential without an `Input`) is monitored from its second step; a custom
    `train_step` whose loss or gradients it cannot see (not through `compute_loss`, not
    applied by `model.optimizer`) is recorded from Keras's logs, said once as a
    `UserWarning` and in `report.notes`.
    """

    def __init__(
        self,
        every: int = 100,
        log_dir: str | os.PathLike[str] | None = None,
        report: str | os.PathLike[str] | None = None,
        stop_on_nonfinite: bool = True,
        chance_loss: float | None = None,
        batches_per_epoch: int | None = None,
        verbose: int = 0,
    ) -> None:
        super().__init__()
        self.every, self.stop_on_nonfinite = whole_steps(every), stop_on_nonfinite
        self.batches_per_epoch = (
            None
            if batches_per_epoch is None
            else whole_steps(batches_per_epoch, "batches_per_epoch")
        )
        self.log_dir = None if log_dir is None else check_log_dir(log_dir)
        self.report_path = None if report is None else check_report_path(report)
        self.chance_loss = None if chance_loss is None else positive_loss(chance_loss)
        self.verbose = verbosity(verbose)
        self.report: FitReport | None = None
        # the key, hook and train functions of the last fit (`trace_key`)
        self._traced: tuple[object, StepHook, tuple[TrainFunction, TrainFunction]] | None = None
        self._reset()

    def _reset(self) -> None:
        self._losses: list[float | None] = []
        self._checkpoints: list[Checkpoint] = []
        self._nonfinite: Reason | None = None
        self._bad_batch: BadBatch | None = None  # the first batch that held NaN/Inf
        self._takes_nonfinite = False  # a checkpoint after such a batch was all finite
        self._step, self._epoch, self._first_batch = 0, 0, 0
        self._measuring = False  # whether the running execution measures every step
        self._unread: list[_Execution] = []  # executions whose losses are still in the ring
        self._measured: int | None = None  # the first unread measured step
        self._writer: SummaryWriter = None  # opened by on_train_begin
        self._begun: int | None = None  # the first monitored step (1 when Keras built the model)
        self._notes: list[str] = []
        self._stopped_at: int | None = None  # the step after which the monitor ended training
        self._said: list[Reason] = []  # the findings `verbose` printed, in order

    # Keras hooks

    def on_train_begin(self, logs: dict[str, object] | None = None) -> None:
        self._reset()
        # checked again before any step: the file may have appeared since
        if self.log_dir is not None:
            check_log_dir(self.log_dir)
        if self.report_path is not None:
            check_report_path(self.report_path)
        steps, epochs = self.params.get("steps"), self.params.get("epochs") or 1
        self._last = steps * epochs - 1 if steps else None
        if is_built(self.model):  # else Keras's first step builds it (on_train_batch_end)
            self._start()

    def _start(self) -> None:
        """Install the monitored step (on a built model), from step `self._step`."""
        model = self.model
        self._begun = self._step
        self._layers, self._variables = layers_and_variables(model)
        rows = int(getattr(model, "steps_per_execution", 1) or 1)
        histograms = self.log_dir is not None
        key = trace_key(model, self._variables, rows, histograms)
        traced = self._traced if self._traced is not None and self._traced[0] == key else None
        if traced is None:
            self._hook = StepHook(model, self._layers, self._variables, histograms, rows=rows)
        else:  # the same model, compiled alike: run the steps an earlier fit traced again
            self._hook = traced[1]
            self._hook.results.reset()
        _close(model)
        _OPEN[id(model)] = contextlib.ExitStack()
        _OPEN[id(model)].enter_context(self._hook.installed())
        if traced is None:
            traced = self._traced = (key, self._hook, self._hook.train_functions())
        self._functions = traced[2]  # (measuring, ordinary)
        if self.log_dir is not None:
            try:
                self._writer = tf.summary.create_file_writer(self.log_dir)
            except (tf.errors.OpError, OSError) as exc:  # e.g. a folder no one can create
                _close(model)
                said = op_message(exc)[:200]
                raise OutputError(
                    f"log_dir {self.log_dir}: TensorBoard cannot write there ({said})"
                ) from exc

    def on_epoch_begin(self, epoch: int, logs: dict[str, object] | None = None) -> None:
        self._epoch = epoch

    def on_train_batch_begin(self, batch: int, logs: dict[str, object] | None = None) -> None:
        self._first_batch = batch
        if self._begun is None:  # Keras builds the model in this execution: Keras's own step
            return
        # the next execution runs steps [s, s + rows): measure them all if one is a checkpoint
        s, rows, last = self._step, self._hook.rows, self._last
        self._measuring = (
            (-s) % self.every < rows
            or (last is not None and s <= last < s + rows)
            or (s == self._begun and s > 0)
        )
        function = self._functions[0 if self._measuring else 1]
        if self.model.train_function is not function:  # (Keras tracks what a model is set)
            self.model.train_function = function

    def on_train_batch_end(self, batch: int, logs: dict[str, object] | None = None) -> None:
        logged = logged_loss(logs)
        if self._begun is None:  # Keras's own step built the model: its loss from the logs
            ran = max(1, batch - self._first_batch + 1)
            self._losses += [None] * (ran - 1) + [logged]
            self._step += ran
            if is_built(self.model):
                self._notes.append(built_note(self._step))
                self._start()
            return
        hook, rows = self._hook, self._hook.rows
        # with stop_on_nonfinite, a measured step's NaN/Inf stops training at once, even one
        # only in its gradients (Keras's logs show only the loss): one read of the counts
        watch = self._measuring and self.stop_on_nonfinite and self._nonfinite is None
        # [steps this fit has run, of them non-finite]
        counts = value_now(hook.results.counts) if rows > 1 or watch else (0, 0)
        ran = 1 if rows == 1 else int(counts[0]) - (self._step - self._begun)
        self._unread.append(
            _Execution(self._step, ran, self._epoch, self._first_batch, self._measuring, logged)
        )
        self._step += ran
        if not hook.sees_loss or not hook.sees_gradients:  # say once what the step hides
            note = blind_note(self.model, hook.sees_gradients)
            if note not in self._notes:
                self._notes.append(note)
                warnings.warn(f"GradientMonitor: {note}", UserWarning, stacklevel=2)
        if self._measuring and self._measured is None:
            self._measured = self._unread[-1].first
        # Read when Keras's logs (its running mean loss) show a NaN/Inf (between checkpoints,
        # one only in the gradients shows in the next step's loss), when a watched measured
        # step counted one, and before the next execution could write over an unread row: of
        # the losses, or of a measured step.
        end = self._step + rows  # the next execution's steps end here
        full = end - self._unread[0].first > hook.results.ring or (
            self._measured is not None and end - self._measured > hook.results.kept
        )
        if full or not _finite(logs) or (watch and counts[1] > 0):
            self._read()

    def on_train_end(self, logs: dict[str, object] | None = None) -> None:
        if self._unread:
            self._read()
        _close(self.model)
        if self._writer is not None:
            self._writer.close()  # (flushes it)
        self.report = self._build_report()
        if self.verbose:
            self._say(list(self.report.findings))
            say(summary_line(self.report, self._said))
        if self.report_path is not None:
            write_report(self.report, self.report_path)

    def _say(self, found: list[Reason]) -> None:
        """Print each finding not printed yet (`verbose`): one line each."""
        for finding in found:
            if not any(same_finding(finding, s) for s in self._said):
                self._said.append(finding)
                say(finding_line(finding))

    # reading the step's variables

    def _read(self) -> None:
        """Record the unread steps' losses, and the checkpoints among them."""
        hook, begun = self._hook, self._begun or 0
        ring = value_now(hook.results.losses)  # per row: NaN/Inf flag, loss, batch's flag
        read: dict[str, np.ndarray] = {}  # the rows of the reductions, read once
        for execution in self._unread:
            for j in range(execution.ran):
                step = execution.first + j
                counted = step - begun  # the step's number for the hook
                bad, loss, batch_bad = (float(v) for v in ring[counted % hook.results.ring])
                value: float | None = loss
                if not hook.sees_loss:  # the step's own loss: Keras's logs of the execution
                    value = execution.logged if j == execution.ran - 1 else None
                    bad = float(bad or (value is not None and not math.isfinite(value)))
                self._losses.append(value)
                first_bad = bool(bad) and self._nonfinite is None
                due = execution.measuring and (
                    step % self.every == 0 or step == self._last or step == begun
                )
                epoch, batch = self._where(execution, j)
                if batch_bad and self._bad_batch is None and not self._takes_nonfinite:
                    names = hook.input_names
                    name = names[0] if len(names) == 1 else None
                    self._bad_batch = BadBatch(step + 1, epoch, batch, name)
                if not hook.sees_gradients:  # nothing to read but the loss
                    if first_bad:
                        self._stop(loss_only_nonfinite(step, epoch, batch))
                    continue
                if not (due or first_bad):
                    continue
                row = counted % hook.results.kept if execution.measuring else hook.results.spare
                read = read or hook.results.read_rows(self._writer is not None)
                checkpoint = checkpoint_from_rows(
                    read, row, step, counted, hook, epoch=epoch, batch=batch, loss=value
                )
                # (a flag without a NaN/Inf: finite values whose sum overflowed)
                real = first_bad and (
                    (value is not None and not math.isfinite(value))
                    or any(
                        c.nonfinite_gradient or c.nonfinite_activation or c.nonfinite_weight
                        for c in checkpoint.layers
                    )
                    or bool(checkpoint.nonfinite_inputs)
                )
                since = self._checkpoints[-1].step if self._checkpoints else None
                if due and not real and self._bad_batch is not None:
                    # a NaN/Inf batch, and the checkpoint after it all finite: the model takes
                    # such batches (a mask of -inf): a later NaN/Inf is not put down to them
                    self._bad_batch, self._takes_nonfinite = None, True
                if due or real:
                    self._checkpoints.append(checkpoint)
                    if self._writer is not None:
                        write_summaries(self._writer, checkpoint, read, row, hook.layers)
                if real:
                    self._stop(nonfinite_finding(
                        checkpoint, hook.order(), epoch, batch, since, self._bad_batch,
                        partial=[e.path for e in hook.layers if _looks_up(e.layer)],
                    ), at=checkpoint.step)  # fmt: skip
        self._unread, self._measured = [], None
        if self.verbose:
            self._say([f for f in self._findings() if f.code in EARLY])

    def _where(self, execution: _Execution, j: int) -> tuple[int, int]:
        """The epoch and batch (from 0) of the `j`-th step of `execution`: Keras's, or the
        pass over the data and the batch within it (`batches_per_epoch`)."""
        n = self.batches_per_epoch
        if n is None:
            return execution.epoch, execution.batch + j
        return divmod(execution.first + j, n)

    def _epochs(self) -> int:
        """The epochs the run began: Keras's, or the passes over the data it began."""
        if not self._losses:
            return 0
        n = self.batches_per_epoch
        return self._epoch + 1 if n is None else math.ceil(len(self._losses) / n)

    def _stop(self, finding: Reason, at: int | None = None) -> None:
        """Record the first NaN/Inf, seen at step `at` (default: the finding's, which may be
        earlier: a batch whose NaN/Inf the weights showed later); with `stop_on_nonfinite`,
        end training after this execution's steps."""
        self._nonfinite = finding
        if self.stop_on_nonfinite:
            self.model.stop_training = True
            self._stopped_at = finding.step if at is None else at

    def _findings(self) -> list[Reason]:
        """The findings of the record so far (at the end: of the run)."""
        model = self.model
        chance = self.chance_loss
        if chance is None:
            chance = rules.chance_loss(loss_name(model.loss), output_units(model))
        return rules.findings(
            self._losses,
            self._checkpoints,
            self._nonfinite,
            chance_loss=chance,
            heads=heads(model, self._layers) if self._begun is not None else (),
            facts=layer_facts(self._layers),
        )

    def _build_report(self) -> FitReport:
        model = self.model
        optimizer = getattr(model, "optimizer", None)
        lr = self._checkpoints[0].learning_rate if self._checkpoints else None
        # stopped: the monitor ended the run before its last step (a run it stopped at its
        # last step, or one whose length Keras did not know, ran every step it had)
        stopped = self._stopped_at is not None and (
            self._last is None or self._stopped_at <= self._last
        )
        return FitReport(
            model=str(model.name),
            model_class=type(model).__name__,
            every=self.every,
            steps=len(self._losses),
            epochs=self._epochs(),
            loss_name=loss_name(model.loss),
            optimizer=type(optimizer).__name__ if optimizer is not None else "",
            learning_rate=lr,
            losses=tuple(self._losses),
            checkpoints=tuple(self._checkpoints),
            findings=tuple(self._findings()),
            stopped=Finding.NONFINITE.value if stopped else None,
            notes=tuple(self._notes),
        )


@dataclass(frozen=True)
class _Execution:
    """One call of Keras's train function: its first step (from 0), the steps it ran, the
    epoch and batch it started at, and whether it measured every step."""

    first: int
    ran: int
    epoch: int
    batch: int
    measuring: bool
    logged: float | None = None  # the loss in Keras's logs after it


def _finite(logs: dict[str, object] | None) -> bool:
    """Keras's logs hold numbers, and all are finite (its running mean of the loss turns
    NaN/Inf with the first step whose loss is). No number: the step cannot tell."""
    found = [v for v in (logs or {}).values() if isinstance(v, (int, float))]
    return bool(found) and all(math.isfinite(v) for v in found)


def _looks_up(layer: object) -> bool:
    """Whether a batch reads only some of the layer's weights (an Embedding's rows): NaN/Inf
    in the others reach no loss until a batch looks them up."""
    return isinstance(layer, keras.layers.Embedding)
