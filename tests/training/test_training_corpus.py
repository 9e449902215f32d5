"""The floors of the training corpus (tests/training_runs.py): on one seed, every healthy
run gets no finding and every injected problem gets its finding (on its layer, where it has
one; its repaired copy, where it has one, trains, and a run carrying a failing finding does
not). benchmarks/bench_training_corpus.py measures the same runs over several seeds; the
table is in docs/training.md."""

from __future__ import annotations

import pytest
import training_runs as T

from layergrad.core.vocab import Finding, Severity
from layergrad.training.rules import BY_CODE

SEED = 3  # (the rules were tuned chiefly on seeds 0 and 1)

# Whether a build trains, by (build, steps, every, trivial): the same fit on the same seed is
# trained once. Three runs share one repair (`lr_fixed`), and two repairs are healthy runs of
# the corpus (`healthy_mlp`, `healthy_binary` as `sigmoid_head`): the same seeded fit each time.
_TRAINED: dict[tuple[object, ...], bool] = {}


def _key(build, run: T.Run) -> tuple[object, ...]:
    build = T.healthy_binary if build is T.sigmoid_head else build
    return (build, run.steps, run.every, run.trivial)


def _repaired_trains(run: T.Run) -> bool:
    key = _key(run.repaired, run)
    if key not in _TRAINED:
        _TRAINED[key] = T.train(run, SEED, repaired=True).trained
    return _TRAINED[key]


@pytest.mark.slow
@pytest.mark.parametrize("run", T.RUNS, ids=[r.name for r in T.RUNS])
def test_the_corpus_run_gets_its_finding_and_healthy_runs_none(run):
    outcome = T.train(run, SEED)
    if run.callbacks is list:  # nothing injected during the fit: a repair may be this very run
        _TRAINED.setdefault(_key(run.build, run), outcome.trained)
    if run.expected is None:
        assert outcome.findings == (), outcome.findings
    else:
        assert outcome.named, (run.expected, run.layer, outcome.findings)
    if run.repaired is not None:  # its repair trains; a failing finding's run does not
        failing = BY_CODE[Finding(run.expected)].severity is Severity.FAIL
        assert _repaired_trains(run) and not (failing and outcome.trained)
    if run.name == "nan_op":  # the NaN op is named first, at its layer and its step
        assert outcome.findings[0] == ("nonfinite", "head", T.NAN_STEP), outcome.findings
