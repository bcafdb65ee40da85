"""The shapes of trained Keras model users bring, each built tiny with random weights (nothing downloaded).

The export tests (tests/export/test_keras_corpus.py, test_keras_applications.py) convert and serve them;
`python -m benchmarks keras-corpus` (benchmarks/keras_corpus.py) times their conversion and their variants.

Every builder returns the model and a dict of rows named like its inputs: the .npz a user
would pass as --data. Weights are random; only the Normalization layer is adapted (on
the images it would be trained on), as a user's preprocessing is. The custom-layer model takes its layer
from a module the test writes, as a user's file passed with --custom-objects. Two more models hold
what an ONNX graph cannot (a StringLookup, a tf.py_function), for the refusals.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from export import tf_env  # noqa: F401

ROWS = 48
PYTHON_LAYER_SOURCE = '''
import keras
import tensorflow as tf


class PythonStep(keras.layers.Layer):
    """Doubles its input in Python through tf.py_function: Keras runs it, no ONNX graph can hold it."""

    def call(self, x):
        doubled = tf.py_function(lambda t: t * 2.0, [x], tf.float32)
        return tf.ensure_shape(doubled, x.shape)


CUSTOM_OBJECTS = {"PythonStep": PythonStep}
'''
CUSTOM_LAYER_SOURCE = '''
import keras


class GatedScale(keras.layers.Layer):
    """x * sigmoid(gate) + shift, a gate and a shift per feature: Keras rebuilds it only through --custom-objects."""

    def build(self, input_shape):
        self.gate = self.add_weight(shape=(input_shape[-1],), initializer="random_normal", name="gate")
        self.shift = self.add_weight(shape=(input_shape[-1],), initializer="random_normal", name="shift")

    def call(self, x):
        return x * keras.ops.sigmoid(self.gate) + self.shift


CUSTOM_OBJECTS = {"GatedScale": GatedScale}
'''


def _rng(seed: int) -> np.random.Generator:
    import keras

    keras.utils.set_random_seed(seed)
    return np.random.default_rng(seed)


def sequential_mlp(seed: int = 0):
    """row [N, 6] -> Dense relu -> answer (3 classes, softmax)."""
    import keras

    rng = _rng(seed)
    model = keras.Sequential(
        [
            keras.Input((6,), name="row"),
            keras.layers.Dense(8, activation="relu", name="hidden"),
            keras.layers.Dense(3, activation="softmax", name="answer"),
        ],
        name="mlp",
    )
    return model, {"row": rng.normal(0, 1, (ROWS, 6)).astype(np.float32)}


def functional_list_io(seed: int = 0):
    """[features [N, 4], extra [N, 3]] -> [cls (softmax 3), score [N, 1]]: the list style of multi-input model."""
    import keras

    rng = _rng(seed)
    a, b = keras.Input((4,), name="features"), keras.Input((3,), name="extra")
    hidden = keras.layers.Dense(8, activation="relu", name="hidden")(keras.layers.Concatenate(name="join")([a, b]))
    model = keras.Model(
        [a, b],
        [keras.layers.Dense(3, activation="softmax", name="cls")(hidden), keras.layers.Dense(1, name="score")(hidden)],
        name="list_io",
    )
    return model, {
        "features": rng.normal(0, 1, (ROWS, 4)).astype(np.float32),
        "extra": rng.normal(0, 1, (ROWS, 3)).astype(np.float32),
    }


def functional_dict_io(seed: int = 0):
    """{pixels [N, 8, 8, 2], measurements [N, 5]} -> {label (softmax 4), value [N, 1]}: a residual conv block on the
    pixels, a Dense branch on the measurements. The output keys differ from the layers' names: clients use the keys."""
    import keras

    rng = _rng(seed)
    pixels, measurements = keras.Input((8, 8, 2), name="pixels"), keras.Input((5,), name="measurements")
    x = keras.layers.Conv2D(4, 3, padding="same", activation="relu", name="stem")(pixels)
    y = keras.layers.Conv2D(4, 3, padding="same", activation="relu", name="block_conv1")(x)
    y = keras.layers.Conv2D(4, 3, padding="same", name="block_conv2")(y)
    x = keras.layers.ReLU(name="block_relu")(keras.layers.Add(name="residual")([x, y]))
    x = keras.layers.GlobalAveragePooling2D(name="pool")(x)
    branch = keras.layers.Dense(6, activation="relu", name="branch")(measurements)
    joined = keras.layers.Concatenate(name="join")([x, branch])
    outputs = {
        "label": keras.layers.Dense(4, activation="softmax", name="label_head")(joined),
        "value": keras.layers.Dense(1, name="value_head")(joined),
    }
    model = keras.Model({"pixels": pixels, "measurements": measurements}, outputs, name="dict_io")
    return model, {
        "pixels": rng.normal(0, 1, (ROWS, 8, 8, 2)).astype(np.float32),
        "measurements": rng.normal(0, 1, (ROWS, 5)).astype(np.float32),
    }


def nested_model(seed: int = 0):
    """reading [N, 5] -> encoder (a functional model of its own) -> Dense -> kind (softmax 3)."""
    import keras

    rng = _rng(seed)
    inner_in = keras.Input((5,), name="encoder_in")
    encoder = keras.Model(inner_in, keras.layers.Dense(8, activation="tanh", name="encode")(inner_in), name="encoder")
    reading = keras.Input((5,), name="reading")
    outputs = keras.layers.Dense(3, activation="softmax", name="kind")(keras.layers.Dense(6, name="mix")(encoder(reading)))
    return keras.Model(reading, outputs, name="nested"), {"reading": rng.normal(0, 1, (ROWS, 5)).astype(np.float32)}


def subclassed_model(seed: int = 0):
    """A keras.Model with its own call(measurements): no symbolic inputs, only the shape it was built on."""
    import keras

    @keras.saving.register_keras_serializable(package="slipway_corpus")
    class Scorer(keras.Model):
        def __init__(self, classes: int = 3, **kwargs):
            super().__init__(**kwargs)
            self.classes = classes
            self.hidden = keras.layers.Dense(8, activation="relu")
            self.head = keras.layers.Dense(classes, activation="softmax")

        def call(self, measurements):
            return self.head(self.hidden(measurements))

        def get_config(self):
            return {**super().get_config(), "classes": self.classes}

    rng = _rng(seed)
    model = Scorer(name="scorer")
    rows = rng.normal(0, 1, (ROWS, 7)).astype(np.float32)
    model(rows[:2])  # built by a first call, as a subclassed model is
    return model, {"measurements": rows}


def subclassed_tokens(seed: int = 0):
    """A keras.Model with its own call(tokens) over int64 tokens [N, 5] -> Embedding -> GRU -> Dense: built by a
    first call, it keeps no input dtype; the rows it is given say the tokens are integers."""
    import keras

    @keras.saving.register_keras_serializable(package="slipway_corpus")
    class Reader(keras.Model):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.embed = keras.layers.Embedding(20, 4)
            self.gru = keras.layers.GRU(5)
            self.head = keras.layers.Dense(2, activation="softmax")

        def call(self, tokens):
            return self.head(self.gru(self.embed(tokens)))

    rng = _rng(seed)
    model = Reader(name="reader")
    tokens = rng.integers(0, 20, (ROWS, 5)).astype(np.int64)
    model(tokens[:2])
    return model, {"tokens": tokens}


def image_with_preprocessing(seed: int = 0):
    """image [N, 12, 12, 3] in 0..255 -> Rescaling(1/255) -> Normalization (adapted on the rescaled training
    images) -> Resizing(10, 10) -> CenterCrop(8, 8) -> conv -> digit (softmax 5): preprocessing kept inside
    the model, as many users save it."""
    import keras

    rng = _rng(seed)
    images = rng.uniform(0, 255, (ROWS * 2, 12, 12, 3)).astype(np.float32) * np.array([1.0, 0.6, 0.3], np.float32)
    normalize = keras.layers.Normalization(name="normalize")
    normalize.adapt(images[ROWS:] / 255.0)
    inputs = keras.Input((12, 12, 3), name="image")
    x = normalize(keras.layers.Rescaling(1 / 255.0, name="rescale")(inputs))
    x = keras.layers.CenterCrop(8, 8, name="crop")(keras.layers.Resizing(10, 10, name="resize")(x))
    x = keras.layers.Conv2D(4, 3, activation="relu", name="conv")(x)
    outputs = keras.layers.Dense(5, activation="softmax", name="digit")(keras.layers.GlobalAveragePooling2D(name="pool")(x))
    return keras.Model(inputs, outputs, name="image"), {"image": images[:ROWS]}


def image_and_measurements(seed: int = 0):
    """{image [N, 8, 8, 3] in 0..255, measurements [N, 4]} -> {label (softmax 3), value [N, 1]}: only the image has
    its preprocessing inside (Rescaling, an adapted Normalization), only label a softmax; not in CORPUS (the
    --split tests' model with several inputs and outputs)."""
    import keras

    rng = _rng(seed)
    images = rng.uniform(0, 255, (ROWS * 2, 8, 8, 3)).astype(np.float32)
    normalize = keras.layers.Normalization(name="normalize")
    normalize.adapt(images[ROWS:] / 255.0)
    image, measurements = keras.Input((8, 8, 3), name="image"), keras.Input((4,), name="measurements")
    x = normalize(keras.layers.Rescaling(1 / 255.0, name="rescale")(image))
    x = keras.layers.GlobalAveragePooling2D(name="pool")(keras.layers.Conv2D(4, 3, activation="relu", name="conv")(x))
    joined = keras.layers.Concatenate(name="join")([x, keras.layers.Dense(4, activation="relu", name="branch")(measurements)])
    outputs = {
        "label": keras.layers.Dense(3, activation="softmax", name="label_head")(joined),
        "value": keras.layers.Dense(1, name="value_head")(joined),
    }
    model = keras.Model({"image": image, "measurements": measurements}, outputs, name="image_and_measurements")
    return model, {"image": images[:ROWS], "measurements": rng.normal(0, 1, (ROWS, 4)).astype(np.float32)}


def token_gru(seed: int = 0, length: int = 7):
    """tokens int64 [N, T] (any T) -> Embedding -> GRU -> sentiment (softmax 2): a text model fed integer tokens."""
    import keras

    rng = _rng(seed)
    tokens = keras.Input((None,), dtype="int64", name="tokens")
    x = keras.layers.GRU(6, name="gru")(keras.layers.Embedding(40, 8, name="embed")(tokens))
    outputs = keras.layers.Dense(2, activation="softmax", name="sentiment")(x)
    return keras.Model(tokens, outputs, name="tokens"), {"tokens": rng.integers(0, 40, (ROWS, length)).astype(np.int64)}


def token_lstm(seed: int = 0, length: int = 9):
    """words int64 [N, T] (any T) -> Embedding (index 0 masked) -> LSTM -> topic (softmax 3): the LSTM text model."""
    import keras

    rng = _rng(seed)
    words = keras.Input((None,), dtype="int64", name="words")
    x = keras.layers.LSTM(6, name="lstm")(keras.layers.Embedding(30, 8, mask_zero=True, name="embed")(words))
    outputs = keras.layers.Dense(3, activation="softmax", name="topic")(x)
    tokens = rng.integers(1, 30, (ROWS, length)).astype(np.int64)
    tokens[::3, -3:] = 0  # every third row padded at its end, as batched texts of several lengths are
    return keras.Model(words, outputs, name="lstm"), {"words": tokens}


def custom_layer_model(layers, seed: int = 0):
    """reading [N, 6] -> Dense -> GatedScale (the user's own layer, from `layers`) -> Dense -> grade (softmax 3)."""
    import keras

    rng = _rng(seed)
    reading = keras.Input((6,), name="reading")
    x = layers.GatedScale(name="gated")(keras.layers.Dense(8, activation="relu", name="hidden")(reading))
    outputs = keras.layers.Dense(3, activation="softmax", name="grade")(x)
    return keras.Model(reading, outputs, name="custom"), {"reading": rng.normal(0, 1, (ROWS, 6)).astype(np.float32)}


def transformer_block(seed: int = 0):
    """{sequence [N, 6, 8], keep bool [N, 6]} -> MultiHeadAttention + residual + LayerNormalization -> Dense (exact
    GELU) -> masked sum -> {score [N, 1]}: an encoder block, with a bool input."""
    import keras

    rng = _rng(seed)
    sequence, keep = keras.Input((6, 8), name="sequence"), keras.Input((6,), dtype="bool", name="keep")
    attended = keras.layers.MultiHeadAttention(2, 4, name="attention")(sequence, sequence)
    x = keras.layers.LayerNormalization(name="norm")(keras.layers.Add(name="residual")([sequence, attended]))
    x = keras.layers.Dense(8, activation="gelu", name="feed_forward")(x)
    pooled = keras.ops.sum(x * keras.ops.expand_dims(keras.ops.cast(keep, "float32"), -1), axis=1)
    model = keras.Model(
        {"sequence": sequence, "keep": keep}, {"score": keras.layers.Dense(1, name="head")(pooled)}, name="encoder"
    )
    return model, {"sequence": rng.normal(0, 1, (ROWS, 6, 8)).astype(np.float32), "keep": rng.random((ROWS, 6)) > 0.3}


def mixed_dtypes(seed: int = 0):
    """x [N, 5] -> {probabilities float32 [N, 3], label int64 [N], confident bool [N]}: outputs of three dtypes."""
    import keras

    rng = _rng(seed)
    x = keras.Input((5,), name="x")
    probabilities = keras.layers.Dense(3, activation="softmax", name="probabilities")(x)
    label = keras.ops.cast(keras.ops.argmax(probabilities, axis=-1), "int64")
    confident = keras.ops.greater(keras.ops.max(probabilities, axis=-1), 0.4)
    model = keras.Model(x, {"probabilities": probabilities, "label": label, "confident": confident}, name="mixed")
    return model, {"x": rng.normal(0, 2, (ROWS, 5)).astype(np.float32)}


CORPUS = {
    "mlp": sequential_mlp,
    "list-io": functional_list_io,
    "dict-io": functional_dict_io,
    "nested": nested_model,
    "subclassed": subclassed_model,
    "subclassed-tokens": subclassed_tokens,
    "image": image_with_preprocessing,
    "tokens": token_gru,
    "lstm": token_lstm,
    "custom-layer": custom_layer_model,
    "transformer": transformer_block,
    "mixed": mixed_dtypes,
}
# Models whose builder takes the user's module of layers, loaded back with --custom-objects module.py:CUSTOM_OBJECTS.
CUSTOM_SOURCES = {"custom-layer": CUSTOM_LAYER_SOURCE}


def import_source(path, module_name: str):
    """The user's layers module at `path`, imported as `module_name` (registered in sys.modules while Keras saves)."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path} as a module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


# keras.applications architectures (weights=None: nothing downloaded) at the smallest input they take, 4 classes.
IMAGE = (32, 32, 3)
APPLICATION_ROWS = 16
APPLICATIONS = {
    "resnet50": "ResNet50",  # the residual bottleneck CNN; takes caffe-style inputs (no preprocessing inside)
    "efficientnetb0": "EfficientNetB0",  # Rescaling + Normalization inside, swish, squeeze-and-excitation
    "mobilenetv3small": "MobileNetV3Small",  # hard-swish and hard-sigmoid, Rescaling inside
    "densenet121": "DenseNet121",  # concatenation-heavy
    "convnexttiny": "ConvNeXtTiny",  # LayerNormalization, exact GELU, 7x7 depthwise convolutions, layer scale
}


def application(name: str, seed: int = 0):
    """keras.applications.<name> with random weights, its batch-norm statistics set from synthetic images (a fresh
    network's answer every row alike, so a parity check on it would say nothing), and 0..255 pixel rows."""
    import keras

    from export.sources import settle_batch_norm, synthetic_images

    _rng(seed)
    model = getattr(keras.applications, APPLICATIONS[name])(input_shape=IMAGE, weights=None, classes=4)
    images = (synthetic_images(APPLICATION_ROWS * 2, IMAGE, seed + 1) + 1) * 127.5
    settle_batch_norm(model, images[APPLICATION_ROWS:])
    return model, {model.layers[0].name: images[:APPLICATION_ROWS]}


TRAINING_SEEDS = (1, 2, 3, 4)  # rows from four more draws: 4 x 48 for a corpus model, 4 x 16 for an application


def training_inputs(name: str, model, layers=None) -> dict[str, np.ndarray]:
    """Rows of the same kind as corpus model `name`'s own rows, drawn with other seeds (each draw's model is
    dropped): what its pruned variant fine-tunes on, its own answers on them being the targets. `layers` is the
    user's module for the custom-layer model; `model` names an application's input."""
    if name.startswith("app-"):
        from export.sources import synthetic_images

        count = APPLICATION_ROWS * len(TRAINING_SEEDS)
        return {model.layers[0].name: (synthetic_images(count, IMAGE, seed=100 + TRAINING_SEEDS[0]) + 1) * 127.5}
    build: Any = CORPUS[name]  # the custom-layer builder takes the user's layers first
    draws = [(build(layers, seed=seed) if name in CUSTOM_SOURCES else build(seed=seed))[1] for seed in TRAINING_SEEDS]
    return {key: np.concatenate([rows[key] for rows in draws]) for key in draws[0]}


def string_lookup_model():
    """word string [N, 1] -> StringLookup -> Embedding -> Dense: text inside the model, which ONNX cannot hold."""
    import keras

    word = keras.Input((1,), dtype="string", name="word")
    ids = keras.layers.StringLookup(vocabulary=["red", "green", "blue"], name="vocabulary")(word)
    x = keras.layers.Flatten(name="flat")(keras.layers.Embedding(4, 3, name="embed")(ids))
    return keras.Model(word, keras.layers.Dense(2, name="colour")(x), name="words")


def python_step_model(layers):
    """x [N, 4] -> PythonStep (tf.py_function, from `layers`, the user's module) -> Dense."""
    import keras

    x = keras.Input((4,), name="x")
    return keras.Model(x, keras.layers.Dense(2, name="out")(layers.PythonStep(name="python_step")(x)), name="python")
