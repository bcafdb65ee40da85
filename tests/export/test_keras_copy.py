"""Copies of a Keras model that pruned and slim are made from keep an adapted Normalization's mean and variance."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks import corpus_models as keras_corpus

pytestmark = pytest.mark.slow


def test_a_copy_answers_as_the_model_with_its_adapted_normalization():
    from export.keras_copy import copy_model

    model, rows = keras_corpus.image_with_preprocessing()
    copy = copy_model(model)
    np.testing.assert_array_equal(np.asarray(copy(rows["image"])), np.asarray(model(rows["image"])))


def test_the_slim_copy_normalizes_as_the_model_does():
    from export.prune import prune_filters

    model, _ = keras_corpus.image_with_preprocessing()
    slim = prune_filters(model, 0.5)
    for state in ("mean", "variance"):
        kept, adapted = (np.asarray(getattr(m.get_layer("normalize"), state)) for m in (slim, model))
        np.testing.assert_array_equal(kept, adapted)
    assert np.asarray(model.get_layer("normalize").mean).any()  # adapted: not the build-time zeros
