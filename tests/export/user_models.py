"""The user's own models, built and trained for real in the tests: what an ML engineer brings to Slipway.

A two-input, two-output functional model; a small residual CNN on the digits; a model
with a custom layer whose class lives in a file of its own (as a user's module would),
and one whose custom layer uses a TensorFlow op tf2onnx cannot convert. Each is saved
as a .keras file, an .h5 file and a SavedModel folder.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np

from export import tf_env  # noqa: F401

CUSTOM_MODULE = "slipway_user_layers"
CUSTOM_SOURCE = '''
import keras
import tensorflow as tf


class Scale(keras.layers.Layer):
    """A learnt scale per feature: the smallest layer Keras cannot rebuild without its class."""

    def build(self, shape):
        self.scale = self.add_weight(shape=(shape[-1],), initializer="ones", name="scale")

    def call(self, x):
        return x * self.scale


class LogGamma(keras.layers.Layer):
    """log-gamma of its input: TensorFlow's Lgamma op has no ONNX conversion in tf2onnx."""

    def call(self, x):
        return tf.math.lgamma(x + 1.0)


CUSTOM_OBJECTS = {"Scale": Scale}


def custom_objects():
    return {"Scale": Scale}
'''


def custom_layers(folder: Path):
    """The custom layers' module, written to `folder` and imported from there (not from the project)."""
    path = folder / f"{CUSTOM_MODULE}.py"
    path.write_text(CUSTOM_SOURCE)
    spec = importlib.util.spec_from_file_location(CUSTOM_MODULE, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[CUSTOM_MODULE] = module
    spec.loader.exec_module(module)
    return module, path


def two_input_model(rows: int = 256, seed: int = 0):
    """features [N, 4] + extra [N, 3] -> cls (3 classes, softmax) and score [N, 1]; trained; returns (model, data)."""
    import keras

    keras.utils.set_random_seed(seed)
    rng = np.random.default_rng(seed)
    features = rng.normal(0, 1, (rows, 4)).astype(np.float32)
    extra = rng.normal(0, 1, (rows, 3)).astype(np.float32)
    labels = (features[:, 0] > 0).astype(np.int64) + (extra[:, 0] > 0.5).astype(np.int64)
    score = extra.sum(axis=1, keepdims=True).astype(np.float32)
    a, b = keras.Input((4,), name="features"), keras.Input((3,), name="extra")
    hidden = keras.layers.Dense(16, activation="relu", name="hidden")(keras.layers.Concatenate(name="join")([a, b]))
    cls = keras.layers.Dense(3, activation="softmax", name="cls")(hidden)
    out_score = keras.layers.Dense(1, name="score")(hidden)
    model = keras.Model([a, b], [cls, out_score], name="two_input")
    model.compile(keras.optimizers.Adam(0.02), ["sparse_categorical_crossentropy", "mean_squared_error"])
    model.fit([features, extra], [labels, score], epochs=12, batch_size=32, verbose=0)
    return model, {"features": features, "extra": extra, "labels": labels}


def residual_cnn(epochs: int = 20, seed: int = 0):
    """A small residual CNN (conv, batch norm, an addition, global pooling) on the digits; returns (model, splits).

    Trained to its plateau (~94% held out; 80% after 5 epochs), so a slimmed copy's accuracy drop is measured
    against what the architecture reaches, not against an under-trained original a longer fine-tune simply overtakes.
    """
    import keras

    from export.data import load_digits_splits

    keras.utils.set_random_seed(seed)
    splits = load_digits_splits(seed=seed)
    inputs = keras.Input((8, 8, 1), name="pixels")
    x = keras.layers.Conv2D(16, 3, padding="same", name="stem")(inputs)
    x = keras.layers.BatchNormalization(momentum=0.8, name="stem_bn")(x)
    x = keras.layers.ReLU(name="stem_relu")(x)
    y = keras.layers.Conv2D(16, 3, padding="same", activation="relu", name="block_conv1")(x)
    y = keras.layers.Conv2D(16, 3, padding="same", name="block_conv2")(y)
    x = keras.layers.ReLU(name="block_relu")(keras.layers.Add(name="residual")([x, y]))
    x = keras.layers.GlobalAveragePooling2D(name="pool")(x)
    outputs = keras.layers.Dense(10, activation="softmax", name="digit")(x)
    model = keras.Model(inputs, outputs, name="residual_cnn")
    model.compile(keras.optimizers.Adam(1e-2), "sparse_categorical_crossentropy", metrics=["accuracy"])
    model.fit(splits.x_train, splits.y_train, epochs=epochs, batch_size=64, verbose=0)
    return model, splits


def custom_layer_model(layers, seed: int = 0):
    """x [N, 6] -> Scale (custom) -> Dense softmax; trained briefly; returns (model, data)."""
    import keras

    keras.utils.set_random_seed(seed)
    rng = np.random.default_rng(seed)
    x = rng.normal(0, 1, (128, 6)).astype(np.float32)
    labels = (x[:, :3].sum(axis=1) > 0).astype(np.int64)
    inputs = keras.Input((6,), name="x")
    outputs = keras.layers.Dense(2, activation="softmax", name="probabilities")(layers.Scale(name="scale")(inputs))
    model = keras.Model(inputs, outputs, name="custom")
    model.compile(keras.optimizers.Adam(0.05), "sparse_categorical_crossentropy")
    model.fit(x, labels, epochs=8, batch_size=32, verbose=0)
    return model, {"x": x, "labels": labels}


def unconvertible_model(layers):
    """x [N, 4] -> LogGamma (custom, TensorFlow's Lgamma) -> Dense: Keras runs it, tf2onnx cannot convert it."""
    import keras

    inputs = keras.Input((4,), name="x")
    return keras.Model(inputs, keras.layers.Dense(2, name="out")(layers.LogGamma(name="lgamma")(inputs)))


def save_all(model, folder: Path, stem: str) -> dict[str, Path]:
    """The model as a .keras file, an .h5 file and a SavedModel folder (model.export)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = {"keras": folder / f"{stem}.keras", "h5": folder / f"{stem}.h5", "savedmodel": folder / f"{stem}-savedmodel"}
    model.save(paths["keras"])
    model.save(paths["h5"])
    model.export(paths["savedmodel"], verbose=False)
    return paths
