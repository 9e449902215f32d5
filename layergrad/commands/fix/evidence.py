"""The evidence of `fix`: the original and each repaired copy trained side by side as `fit`
trains, and what the trained models output.

What `fix` reads from `--data` before it plans: each output's labels (as `fit`'s checks read
them) and each float input's range (`input_stats`: min, max, mean |x|, per-feature mean and
variance, for `Rescaling` or an adapted `Normalization`), bounded by `limit` samples and
streamed batch by batch.

The run is `fit`'s (the same compile, labels, shuffled batches and `GradientMonitor`, from
`commands/fit/run.py`), after `fit`'s checks (`ready`: what `fit` refuses before its first
step, `fix` refuses in the same words: exit 2 for the original, a copy left untrained). The
original and each copy are trained with the same options (seed, batch size, steps, data), so
the shuffled batches are the same and the copy starts from the original's weights wherever the
repair kept them. What `fix` adds is the loss of the trained model's *predictions*: Keras on
TensorFlow trains a softmax or sigmoid head through the logits it keeps beside the output, so
a head whose outputs are useless (a softmax over one unit is always 1.0) can show a training
loss as good as the repaired one. The served loss is computed from the predictions as plain
arrays, the way a user of the model sees them, on samples no model trained on: every fifth
sample is held back (`_held_back`), so a model that memorised its batches is not taken for one
that learned.

`judge` reads the two runs: the copy's loss on the held-back samples against the trained
original's predictions scored by the copy's loss (its `baseline`), else each against its own
trivial loss; a classifier that answers no better than its labels' prior sits at chance; a
model with several outputs is judged on the outputs the repair reaches.
"""

from __future__ import annotations

import contextlib
import copy
import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from layergrad.commands.fit.checks import FitOptions
from layergrad.commands.fit.run import (
    Predicted,
    Ready,
    fit_steps,
    make_ready,
    refused,
    training_batches,
)
from layergrad.commands.fix.plan import InputStats
from layergrad.core.errors import DataError, InputError, LayergradError, describe
from layergrad.core.fit_results import FitReport
from layergrad.core.fix_results import OutputLoss, Run, Verdict
from layergrad.core.probe_options import PathLike
from layergrad.core.tf_runtime import keras, tf
from layergrad.core.tf_types import KerasModel
from layergrad.data.label_stream import LabelRequest, TrivialLoss
from layergrad.data.sources import DataStream
from layergrad.data.value_checks import reader_refusal
from layergrad.engine.compiled_loss import label_request, output_keys
from layergrad.engine.random_layers import seed_model
from layergrad.model.graph import ModelGraph
from layergrad.render.common import number

if TYPE_CHECKING:
    from layergrad.commands.check.verdicts import Opened

READ_LIMIT = 100_000  # samples read for the input statistics when no --limit is given


# how an input's extremes add up over batches; the other totals are sums
_ADD = {"low": np.minimum, "high": np.maximum}


def input_stats(ready: Ready, limit: int | None) -> list[InputStats]:
    """The statistics of each float input of the data `ready` holds, from its first
    `READ_LIMIT` samples (at most `limit`)."""
    stream = ready.stream
    rows = min(limit or READ_LIMIT, READ_LIMIT)
    names = [s.name for s in stream.specs]
    totals: list[dict[str, np.ndarray]] = [{} for _ in names]
    try:
        for batch in stream.dataset.take(math.ceil(rows / stream.batch_size)):
            for total, tensor in zip(totals, tuple(batch)[: len(names)], strict=False):
                x = np.asarray(tensor.numpy())
                one = _batch_totals(x.astype(np.float64)) if x.dtype.kind == "f" else None
                for k, v in (one or {}).items():
                    total[k] = _ADD.get(k, np.add)(total[k], v) if k in total else v
    except LayergradError:
        raise
    except Exception as exc:
        refusal = reader_refusal(exc)  # NaN ids, values outside the input's dtype
        if refusal is not None:
            raise refusal from None
        return []
    out = []
    for name, s in zip(names, totals, strict=True):
        if s:
            count = float(s["count"])
            mean = s["sum"] / count
            variance = np.maximum(s["squares"] / count - mean**2, 1e-12)
            out.append(InputStats(name, float(s["low"]), float(s["high"]),
                                  float(s["abs"]) / float(s["size"]),
                                  tuple(float(v) for v in np.atleast_1d(mean)),
                                  tuple(float(v) for v in np.atleast_1d(variance))))  # fmt: skip
    return out


def _batch_totals(x: np.ndarray) -> dict[str, np.ndarray] | None:
    """One batch's share of each total; None when it holds no finite value."""
    finite = x[np.isfinite(x)]  # an empty batch holds none
    if not finite.size:
        return None
    rows = x.reshape(-1, x.shape[-1]) if x.ndim > 1 else x.reshape(-1, 1)
    batch = {
        "low": finite.min(),
        "high": finite.max(),
        "abs": np.abs(finite).sum(),
        "size": finite.size,
        "count": rows.shape[0],
        "sum": np.nansum(rows, axis=0),
        "squares": np.nansum(rows**2, axis=0),
    }
    return {k: np.asarray(v, np.float64) for k, v in batch.items()}


SCORED_BATCHES = 32  # held-back batches the trained model's predictions are scored on
HOLD_BACK = 5  # every fifth sample is held back from training, to score the trained model


def ready(opened: Opened, data: PathLike, options: FitOptions, limit: int | None) -> Ready:
    """`fit`'s checks before its first step (`make_ready`, InputError in `fit`'s words) on
    the model `opened`; `fix` has no --loss nor --optimizer: it trains with the file's compile."""
    loaded, _warnings, strategy = opened
    keras.utils.set_random_seed(options.seed)
    with strategy.scope() if strategy is not None else contextlib.nullcontext():
        return make_ready(loaded, strategy, data, options, limit, flags=False)


def _held_back(stream: DataStream) -> tuple[DataStream, DataStream]:
    """The stream split into the samples trained on and those held back to score the trained
    model (every `HOLD_BACK`-th sample, so a file sorted by class holds back every class)."""

    def part(held: bool) -> DataStream:
        split = copy.copy(stream)
        rows = stream.dataset.unbatch().enumerate()
        rows = rows.filter(lambda i, _: (i % HOLD_BACK == HOLD_BACK - 1) == held)
        split.dataset = rows.map(lambda _, row: row).batch(stream.batch_size)
        return split

    return part(held=False), part(held=True)


class Accuracy:
    """A classifier's accuracy on the scored batches (the class of its largest output against
    the label's class id, or the largest column of a one-hot row) and the accuracy of always
    answering the most frequent class of those labels (the prior's)."""

    def __init__(self) -> None:
        self.right = 0
        self.counts: dict[int, int] = {}

    def add(self, labels: object, predicted: object) -> None:
        guess = np.asarray(predicted)
        if guess.ndim < 2 or guess.shape[-1] < 2:
            return
        y = np.asarray(labels)
        ids = np.argmax(y, axis=-1) if y.shape == guess.shape else y.reshape(guess.shape[:-1])
        ids = ids.astype("int64").reshape(-1)
        self.right += int(np.sum(np.argmax(guess, axis=-1).reshape(-1) == ids))
        for k, n in zip(*np.unique(ids, return_counts=True), strict=True):
            self.counts[int(k)] = self.counts.get(int(k), 0) + int(n)

    def result(self) -> tuple[float | None, float | None]:
        total = sum(self.counts.values())
        if not total:
            return None, None
        return self.right / total, max(self.counts.values()) / total


Served = tuple[float | None, tuple[OutputLoss, ...]]  # the total loss, each output's


def _served_losses(
    model: KerasModel,
    predicted: Predicted,
    request: LabelRequest,
    rival: bool = False,
    hits: Accuracy | None = None,
) -> tuple[Served, Served | None]:
    """The compiled loss of the model's predictions (plain arrays) on the held-back batches and,
    for a model with several outputs, each output's loss and trivial loss on them; and, with a
    `rival`, its predictions of the same batches scored by `model`'s loss ((None, ()) when they
    cannot be: another shape); a classifier's hits are counted in `hits`."""
    several = len(request.outputs) > 1
    trivial = [TrivialLoss(n, u or 0) for n, u in zip(request.losses, request.units, strict=False)]
    priors = trivial if several else []  # each output's trivial loss, for several outputs
    mine = _Tally(len(request.outputs))
    theirs = _Tally(len(request.outputs)) if rival else None
    with contextlib.suppress(Exception):  # a model whose loss cannot be recomputed: no score
        losses = _output_losses(model, len(request.outputs)) if several else []
        for x, y, guess, other in predicted:
            mine.add(model, x, y, guess, losses)
            if hits is not None:
                hits.add(y, guess)
            for labels, prior in zip(keras.tree.flatten(y), priors, strict=False):
                prior.add(np.asarray(labels))
            if theirs is not None and theirs.usable:
                theirs.usable = False  # until this batch is scored
                if other is not None and _shapes(other) == _shapes(guess):  # else: no score
                    with contextlib.suppress(Exception):
                        theirs.add(model, x, y, other, losses)
                        theirs.usable = True
    return mine.result(request, trivial), theirs.result(request, trivial) if theirs else None


class _Tally:
    """One predictor's losses on the scored batches: the total and each output's."""

    def __init__(self, outputs: int) -> None:
        self.values: list[float] = []
        self.per_output: list[list[float]] = [[] for _ in range(outputs)]
        self.usable = True

    def add(
        self,
        model: KerasModel,
        x: object,
        y: object,
        predicted: object,
        losses: list[Callable[..., object]],
    ) -> None:
        """Score one batch of predictions by `model`'s loss (and each output's, `losses`)."""
        plain = tf.nest.map_structure(lambda t: tf.constant(np.asarray(t)), predicted)
        self.values.append(float(np.asarray(model.compute_loss(x=x, y=y, y_pred=plain))))
        if not losses:
            return
        pairs = zip(keras.tree.flatten(y), keras.tree.flatten(plain), strict=True)
        with contextlib.suppress(Exception):  # an output's loss not computable: none scored
            for k, (labels, guess) in enumerate(pairs):
                self.per_output[k].append(float(np.mean(np.asarray(losses[k](labels, guess)))))

    def result(self, request: LabelRequest, trivial: list[TrivialLoss]) -> Served:
        if not self.usable:
            return None, ()
        outputs: tuple[OutputLoss, ...] = ()
        scored = all(len(v) == len(self.values) for v in self.per_output)
        if len(request.outputs) > 1 and self.values and scored:
            outputs = tuple(
                OutputLoss(name, loss, _mean(v), t.value() if t.known else None)
                for name, loss, v, t in zip(
                    request.outputs, request.losses, self.per_output, trivial, strict=False
                )
            )
        return _mean(self.values), outputs


def _shapes(outputs: object) -> list[tuple[int | None, ...]]:
    return [tuple(t.shape) for t in keras.tree.flatten(outputs)]


def _output_losses(model: KerasModel, count: int) -> list[Callable[..., object]]:
    """The compiled loss function of each output, in output order (as `output_names`)."""
    loss = model.loss
    names = list(getattr(model, "output_names", None) or [])
    keys = output_keys(model, count) or names
    if isinstance(loss, Mapping):
        each = [loss.get(n, loss.get(k)) for n, k in zip(names, keys, strict=True)]
    elif isinstance(loss, (list, tuple)):
        each = list(loss)
    else:
        each = [loss] * count
    return [keras.losses.get(v) if isinstance(v, str) else v for v in each]


def _mean(values: list[float]) -> float | None:
    """The mean, None when there is nothing or a value is NaN/Inf."""
    if not values or not all(math.isfinite(v) for v in values):
        return None
    return sum(values) / len(values)


def train(
    prepare: Callable[[], Ready],
    options: FitOptions,
    *,
    found: Sequence[str] = (),
    rival: KerasModel | None = None,
) -> tuple[Run, FitReport | None, KerasModel | None]:
    """Train the model `prepare()` makes ready (`fit`'s checks done; trained in place): its
    run, its fit report and the trained model (one that cannot be made ready or trained: a
    run with its error, None, None). `found` are its check findings, joined by the training
    findings. `final` is the loss of the trained model's predictions, else the last tenth of
    the training losses; `baseline` the trained `rival`'s, scored the same way."""
    try:
        made = prepare()
        model = made.model
        if made.labels.refusals:  # `fit` stops here: nothing is trained, its message says why
            stopped = refused(model, made.spec.name, made.labels.refusals)
            said = "; ".join(f"{f.code} at {f.layer}: {f.message}" for f in stopped.findings)
            raise InputError(f"the labels do not fit the outputs (before the first step): {said}")
        if not model.trainable_weights:  # its losses move with the batches alone: no verdict
            raise InputError(
                "it has no trainable weights (every layer is frozen: trainable=False), so "
                "training cannot change it; unfreeze the layers that should learn"
            )
        seed_model(model, options.seed)  # the original and each copy: the same random draws
        trained, held = _held_back(made.stream)
        with made.strategy.scope() if made.strategy is not None else contextlib.nullcontext():
            scored = training_batches(model, held, options, made.labels.samples)
            report, chance, predicted = fit_steps(made, trained, options, rival=rival,
                                                  held=scored.take(SCORED_BATCHES))  # fmt: skip
        # the trained model's score: a failure here is the run's error too
        request = label_request(model, made.spec)
        # a classifier: one output under a categorical cross-entropy (sparse or not)
        classifier = len(request.outputs) == 1 and any("categorical" in n for n in request.losses)
        hits = Accuracy() if classifier else None
        (served, outputs), rivals = _served_losses(
            model, predicted, request, rival is not None, hits
        )
        baseline = None
        if rivals is not None:
            baseline, theirs = rivals
            lost = {o.name: o.final for o in theirs}
            outputs = tuple(replace(o, baseline=lost.get(o.name)) for o in outputs)
        accuracy, prior = hits.result() if hits is not None else (None, None)
        findings = dict.fromkeys([*found, *(str(f.code) for f in report.findings)])
        trained_loss = _final(report.losses)
        final = served if served is not None else trained_loss
        run = Run(report.loss_name, report.losses, chance, final, tuple(findings), outputs=outputs,
                  baseline=baseline, accuracy=accuracy, prior_accuracy=prior,
                  trained_loss=trained_loss)  # fmt: skip
    except DataError:  # values no model takes: the data is wrong, as `fit` says
        raise
    except Exception as exc:  # a LayergradError's message is said as it is
        said = str(exc) if isinstance(exc, LayergradError) else describe(exc)
        return Run("-", findings=tuple(found), error=said), None, None
    return run, report, model


def _final(losses: Sequence[float | None]) -> float | None:
    """The mean of the last tenth of the losses (None when one of them is NaN/Inf)."""
    tail = losses[-max(1, len(losses) // 10) :]
    values = [v for v in tail if v is not None]
    return _mean(values) if len(values) == len(tail) else None


CLEARLY = 0.9  # a loss "clearly below" another: at most this share of it
WELL = 0.5  # a loss "well below" the trivial loss: at most this share of it
ABOVE_PRIOR = 0.05  # an accuracy "above the prior": at least this much above the prior's
FALLING = 0.97  # a run still falls: its last tenth's mean below this share of the tenth before


def judge(
    finding: str, original: Run, repaired: Run, reached: Collection[str] | None = None
) -> tuple[Verdict, str]:
    """`verified` when the finding is gone and the loss falls clearly below the original's
    (like for like, by the copy's `baseline`, else each against its trivial loss); else `not
    verified` and why. A model with several outputs is judged on those the repair reaches
    (`reached`, by name; None: every one), each by its own loss, as the total adds losses of
    any scale: verified when one ends clearly lower and none clearly higher."""
    if repaired.error is not None:
        return Verdict.NOT_VERIFIED, f"the repaired copy could not be trained: {repaired.error}"
    if finding in repaired.findings:
        return Verdict.NOT_VERIFIED, f"the repaired copy still has {finding}"
    falling = _FALLING_WHY if still_falling(repaired.losses) else ""
    chance = at_chance(repaired)
    if chance:
        return Verdict.NOT_VERIFIED, chance + falling
    pairs = _output_pairs(original, repaired, reached)
    if not pairs:
        return _compare(original, repaired, falling)
    said = [(name, _compare(theirs, mine, falling)) for name, theirs, mine in pairs]
    worse = [
        f"output {name}'s loss ends at {ratio:.3g} times the original's: clearly higher"
        for name, theirs, mine in pairs
        if (ratio := _ratio(theirs, mine)) is not None and CLEARLY * ratio > 1
    ]
    if not worse and any(v is Verdict.VERIFIED for _, (v, _) in said):
        return Verdict.VERIFIED, ""
    whys = worse or [f"output {name}: {why}" for name, (_, why) in said]
    return Verdict.NOT_VERIFIED, "; ".join(whys)


def at_chance(run: Run) -> str:
    """Why a classifier's run is no better than the trivial predictor: its accuracy on the
    scored batches is not above always answering their most frequent class, and its loss is
    not well below the trivial loss (a loss a little below it is calibration, not learning);
    "" when it is better, or is no classifier."""
    accuracy, prior = run.accuracy, run.prior_accuracy
    if accuracy is None or prior is None or accuracy >= prior + ABOVE_PRIOR:
        return ""
    mine = run.relative
    if mine is not None and mine <= WELL:
        return ""
    loss = (
        f"its loss ({number(run.final)}) is not well below the trivial loss ({number(run.trivial)})"
        if run.final is not None and run.trivial
        else "its loss has no trivial loss to beat"
    )
    return (
        f"the copy answers {accuracy:.1%} of the scored samples right, no better than always "
        f"answering their most frequent class ({prior:.1%}), and {loss}: it sits at chance"
    )


def reached_outputs(graph: ModelGraph, layer: str | None, run: Run) -> tuple[str, ...] | None:
    """The outputs of `run` a repair at `layer` can change: the output layer itself, one
    nested in it, or one downstream of it (None: every output, as for the learning rate or a
    model whose graph is unknown)."""
    if layer is None or not graph.known:
        return None
    return tuple(
        o.name
        for o in run.outputs
        if o.name == layer
        or layer.startswith(f"{o.name}/")
        or graph.depends(o.name, layer) is not False
    )


def _output_pairs(
    original: Run, repaired: Run, reached: Collection[str] | None
) -> list[tuple[str, Run, Run]]:
    """(output name, the original's, the copy's) for each output the repair reaches that
    both runs scored; empty for a model with one output (or outputs not scored)."""
    if original.error is not None or not original.outputs or not repaired.outputs:
        return []
    copies = {o.name: o for o in repaired.outputs}
    return [
        (o.name, _as_run(o), _as_run(copies[o.name]))
        for o in original.outputs
        if o.name in copies and (reached is None or o.name in reached)
    ]


def _as_run(output: OutputLoss) -> Run:
    return Run(output.loss_name, trivial=output.trivial, final=output.final,
               baseline=output.baseline)  # fmt: skip


def _ratio(original: Run, repaired: Run) -> float | None:
    """The copy's loss over the original's, like for like where it can be (None when the
    two have no common scale)."""
    if repaired.final is None:
        return None
    if repaired.baseline is not None and repaired.baseline > 0:
        return repaired.final / repaired.baseline
    mine, theirs = repaired.relative, original.relative
    return mine / theirs if mine is not None and theirs else None


def _compare(original: Run, repaired: Run, falling: str) -> tuple[Verdict, str]:
    """The verdict of the copy's loss against the original's (each against its trivial loss
    where it has one)."""
    if repaired.final is None:
        return Verdict.NOT_VERIFIED, "the repaired copy's loss turned NaN/Inf"
    mine = repaired.relative
    unlearned = (
        (Verdict.NOT_VERIFIED, f"the copy's loss ends at {mine:.3g} of the trivial loss: it "
                               f"learned no more than the labels' prior{falling}")
        if mine is not None and mine > CLEARLY else None
    )  # fmt: skip  # beating a broken original is no evidence that the copy trains
    if repaired.baseline is not None:
        return unlearned or _like_for_like(repaired, falling)
    # a cross-entropy below 0 read labels it cannot take (e.g. targets beyond [0, 1]): it
    # measures nothing, like a run that could not train
    entropy = "crossentropy" in original.loss_name.replace("_", "").lower()
    invalid = original.final is not None and original.final < 0 and entropy
    if original.error is not None or original.final is None or invalid:
        if repaired.trivial is None or repaired.final < CLEARLY * repaired.trivial:
            return Verdict.VERIFIED, ""
        said = (
            "'s loss ended below 0, on labels it cannot take"
            if invalid
            else (" could not be trained")
        )
        if mine is not None and falling:
            stays = (
                f"and the copy's loss ends at {mine:.3g} of the trivial loss, "
                f"not clearly below it{falling}"
            )
        else:
            stays = "and the copy's loss stays at the trivial loss"
        return Verdict.NOT_VERIFIED, f"the original{said}, {stays}"
    if unlearned:
        return unlearned
    theirs = original.relative
    if mine is not None and theirs is not None:
        ours, base = mine, theirs
        said = f"the loss ends at {mine:.3g} of the trivial loss, the original's at {theirs:.3g}"
    elif repaired.loss_name == original.loss_name:
        ours, base = repaired.final, original.final
        said = f"the loss ends at {ours:.4g}, the original's at {base:.4g}"
    elif mine is not None:
        # the original's loss has no trivial loss (a categorical loss on one unit is 0 for
        # any output): no common scale, so the copy is judged by its own, as when the
        # original cannot be trained
        ours, base = mine, 1.0
        said = (f"the original's loss ({original.loss_name}) has no trivial loss to compare by, "
                f"and the copy's ends at {mine:.3g} of its trivial loss")  # fmt: skip
    else:
        return Verdict.NOT_VERIFIED, (
            f"the losses differ ({original.loss_name}, {repaired.loss_name}) and have no "
            "trivial loss to compare them by"
        )
    if ours <= CLEARLY * base:
        return Verdict.VERIFIED, ""
    return Verdict.NOT_VERIFIED, f"{said}: not clearly below{falling}"


def _like_for_like(repaired: Run, falling: str) -> tuple[Verdict, str]:
    """The copy against the trained original's predictions scored by the copy's loss, on the
    same batches and labels (its `baseline`): one loss, one scale."""
    mine, theirs = repaired.final, repaired.baseline
    assert mine is not None and theirs is not None
    if mine <= theirs - (1 - CLEARLY) * abs(theirs):  # 0.9x, for a loss below 0 too
        return Verdict.VERIFIED, ""
    said = f"{number(mine)}, the original's predictions at {number(theirs)}"
    if repaired.trivial:
        said = (f"{number(mine)} ({mine / repaired.trivial:.3g} of the trivial loss, "
                f"{number(repaired.trivial)}), the original's predictions at {number(theirs)} "
                f"({theirs / repaired.trivial:.3g})")  # fmt: skip
    return Verdict.NOT_VERIFIED, (
        f"the loss ends at {said}, scored by the same loss: not clearly below{falling}"
    )


_FALLING_WHY = "; it was still falling when training stopped: more --steps may show it"


def still_falling(losses: Sequence[float | None]) -> bool:
    """The run's last tenth of losses averages clearly below the tenth before it (a run too
    short for its verdict: e.g. unscaled inputs spend the first steps coming down to the
    trivial loss)."""
    tenth = len(losses) // 10
    if tenth < 1:
        return False
    last, before = losses[-tenth:], losses[-2 * tenth : -tenth]
    values = [v for v in (*last, *before) if v is not None and math.isfinite(v)]
    if len(values) < 2 * tenth:
        return False
    late, early = sum(last) / tenth, sum(before) / tenth  # type: ignore[arg-type]
    return early - late > (1 - FALLING) * abs(early)
