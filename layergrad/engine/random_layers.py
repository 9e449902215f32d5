"""Every random draw of a run from its `--seed`: the layers that draw in training mode.

Keras 3 layers that draw at random in training mode (Dropout, SpatialDropout, GaussianNoise,
GaussianDropout, AlphaDropout, the random preprocessing layers) each draw from a
`keras.random.SeedGenerator`: a state variable `[key, counter]`, the key taken from Python's
`random` when the layer was made without a seed (so the same file loaded twice draws
different masks), the counter advanced by one at each draw. So that a run draws the same
numbers every time:

- `seed_model`, once the model is loaded: each key from `--seed` and the generator's place in
  the model, and Python's, NumPy's and TensorFlow's global generators and Keras's global
  `SeedGenerator` (the unseeded draws of custom layers) by `keras.utils.set_random_seed`;
- `drawing_for(model, b)` around the passes over batch `b` (the loop over batches, a batch
  read again): every counter at batch b's own, `b * BATCH_STRIDE`;
- `rewind`, before each eager pass in training mode (`layer_calls.forward`): the counters
  back at the current batch's, so a pass made again (the probe in training mode after one in
  inference, the Jacobian measures, a diagnosis) sees the masks the measured pass saw.

The numbers of batch b depend only on the seed, the layer and b: two runs, the probe batch
given as `--input` and the same batch first in `--data`, eager and compiled steps draw the
same. The counters are set outside the compiled step, from Python, between its calls (under
`tf.distribute` every replica's copy is set; each replica draws its share of the batch's
rows from the same state).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import numpy as np

from layergrad.core.tf_runtime import keras
from layergrad.core.tf_types import KerasModel, KerasVariable

STATE = "seed_generator_state"  # the name of a SeedGenerator's state variable
BATCH_STRIDE = 1 << 12  # draws of one layer in one batch before the next batch's numbers
KEYS = 2**31 - 3  # keys 1 ... 2**31 - 3: Keras casts a state to int32 modulo 2**31 - 2
_batch: ContextVar[int] = ContextVar("layergrad_random_batch", default=0)


def generator_states(model: KerasModel) -> list[KerasVariable]:
    """The state variable of every SeedGenerator of `model`'s layers, in the model's order."""
    return list({id(v): v for v in model.variables if v.name == STATE}.values())


def seed_model(model: KerasModel, seed: int) -> None:
    """Seed every random draw of a run on `model` from `seed` (see the module)."""
    keras.utils.set_random_seed(seed)
    for index, state in enumerate(generator_states(model)):
        key = int(np.random.SeedSequence([seed, index]).generate_state(1)[0]) % KEYS + 1
        state.assign(np.array([key, 0], np.int64))


def _at_batch(states: list[KerasVariable], batch: int) -> None:
    for state in states:
        key = int(np.asarray(state.numpy()).reshape(-1)[0])
        state.assign(np.array([key, batch * BATCH_STRIDE], np.int64))


@contextmanager
def drawing_for(model: KerasModel, batch: int) -> Iterator[None]:
    """Passes over batch `batch` (its index in the whole data set) draw that batch's numbers:
    the counters are set now, and every eager pass inside sets them again (`rewind`)."""
    token = _batch.set(batch)
    try:
        _at_batch(generator_states(model), batch)
        yield
    finally:
        _batch.reset(token)


def rewind(model: KerasModel) -> None:
    """Set the counters back at the current batch's (0 outside `drawing_for`): an eager pass
    draws what every pass over that batch draws."""
    _at_batch(generator_states(model), _batch.get())


def draws_in(model: KerasModel, training: bool) -> bool:
    """Whether a run of `model` draws from its random layers (in training mode, when it has
    any): then its numbers depend on `--seed`, and the report says which."""
    return training and bool(generator_states(model))
