"""The demo's CNN for 8x8 digits, with named input and output so the ONNX graph keeps them."""

from __future__ import annotations

from export import tf_env  # noqa: F401
from export.data import IMAGE_SHAPE, NUM_CLASSES

INPUT_NAME = "image"
OUTPUT_NAME = "probabilities"


def build_cnn(filters: tuple[int, int] = (32, 64), dense_units: int = 128, dropout: float = 0.3):
    """Two 3x3 conv blocks, a dense head and a softmax: ~150k parameters, 98-99% on digits."""
    import keras

    inputs = keras.Input(shape=IMAGE_SHAPE, name=INPUT_NAME)
    x = keras.layers.Conv2D(filters[0], 3, padding="same", activation="relu", name="conv1")(inputs)
    x = keras.layers.Conv2D(filters[1], 3, padding="same", activation="relu", name="conv2")(x)
    x = keras.layers.MaxPooling2D(2, name="pool")(x)
    x = keras.layers.Flatten(name="flatten")(x)
    x = keras.layers.Dense(dense_units, activation="relu", name="dense")(x)
    x = keras.layers.Dropout(dropout, name="dropout")(x)
    outputs = keras.layers.Dense(NUM_CLASSES, activation="softmax", name=OUTPUT_NAME)(x)
    return keras.Model(inputs, outputs, name="digits_cnn")
