"""A Keras model's copy that answers as the model does: its weights, and the state derived from them.

`keras.models.clone_model` then `set_weights` copies every variable, but a layer whose state is
computed from its variables once they are set (an adapted `Normalization`: its mean and variance
tensors are made from the adapted variables in `finalize_state`) keeps its build-time state until
that state is finalized again; the copy then normalizes with mean 0 and variance 1.
"""

from __future__ import annotations


def finalize_states(model) -> None:
    """Recompute each layer's state from its variables after `set_weights` (a no-op for most layers)."""
    for layer in model.layers:
        if callable(getattr(layer, "finalize_state", None)):  # an InputLayer has none
            layer.finalize_state()
        if getattr(layer, "layers", None):  # a nested model: its own layers too
            finalize_states(layer)


def copy_model(model):
    """A clone of `model` with its weights and the state derived from them."""
    import keras

    copy = keras.models.clone_model(model)
    copy.set_weights(model.get_weights())
    finalize_states(copy)
    return copy
