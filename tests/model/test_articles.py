"""Messages built from layer classes, activations and ranks say "a" or "an" by the sound of the
word ("an LSTM", not "a LSTM"): the article of each word below is written by hand, as it is
read aloud."""

from __future__ import annotations

import pytest

from layergrad.core.vocab import with_article

SAID = {
    "an": ["LSTM", "RNN", "MLP", "Embedding", "Input", "InputLayer", "Activation", "elu",
           "exponential", "UpSampling2D", "8-D", "11-D", "18-D", "ELU", "HDF5", "output"],
    "a": ["Dense", "GRU", "ReLU", "GELU", "SELU", "PReLU", "SimpleRNN", "Conv2D", "sigmoid",
          "softmax", "linear", "tanh", "UnitNormalization", "3-D", "4-D", "SparseTensorSpec",
          "custom layer Scale", "Lambda layer"],
}  # fmt: skip


@pytest.mark.parametrize("article,word", [(a, w) for a, words in SAID.items() for w in words])
def test_the_article_follows_the_sound_of_the_word(article, word):
    assert with_article(word) == f"{article} {word}"
