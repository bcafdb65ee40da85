"""`export.keras_io`: a Keras model's inputs and outputs read from the model itself, and what ONNX cannot take refused.

In-memory models only (nothing is converted): the corpus test (test_keras_corpus.py) converts and serves.
"""

from __future__ import annotations

import numpy as np
import pytest

from export import tf_env  # noqa: F401
from export.keras_io import KerasInterfaceError, layer_of, read_interface


def test_a_dict_model_is_named_by_its_keys_and_called_with_a_dict():
    import keras

    a, b = keras.Input((2,), name="alpha"), keras.Input((3,), name="beta")
    joined = keras.layers.Concatenate()([a, b])
    model = keras.Model(
        {"beta": b, "alpha": a},
        {"total": keras.layers.Dense(1, name="sum_layer")(joined), "copy": keras.layers.Identity(name="copy_layer")(a)},
    )
    interface = read_interface(model)
    assert [(spec.name, spec.shape) for spec in interface.inputs] == [("alpha", (None, 2)), ("beta", (None, 3))]
    assert interface.output_names == ["copy", "total"]  # the keys clients use, not the layers' names
    alpha, beta = np.ones((4, 2), np.float32), np.zeros((4, 3), np.float32)
    answers = interface.call(model, [alpha, beta])
    np.testing.assert_array_equal(np.asarray(answers["copy"]), alpha)  # each tensor reached the input it is named after
    np.testing.assert_allclose(np.asarray(answers["total"]), np.asarray(model({"alpha": alpha, "beta": beta})["total"]))


def test_an_unnamed_input_takes_its_input_layer_s_name_before_and_after_saving(tmp_path):
    import keras

    for _ in range(2):  # more unnamed tensors in this process: their counter moves, the layer's name stays
        pixels = keras.Input((3,))
    model = keras.Model(pixels, keras.layers.Dense(2, name="out")(pixels))
    (layer,) = [layer for layer in model.layers if isinstance(layer, keras.layers.InputLayer)]
    assert pixels.name != layer.name  # Keras 3 names the bare tensor by its own counter
    model.save(tmp_path / "m.keras")
    loaded = keras.saving.load_model(tmp_path / "m.keras")
    assert [spec.name for spec in read_interface(model).inputs] == [layer.name]
    assert [spec.name for spec in read_interface(loaded).inputs] == [layer.name]


def test_a_subclassed_model_is_read_from_the_dict_it_was_built_on():
    import keras

    class TwoParts(keras.Model):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.dense = keras.layers.Dense(2)

        def call(self, parts):
            return {"mixed": self.dense(parts["left"]) + parts["right"], "left_sum": keras.ops.sum(parts["left"], axis=-1)}

    model = TwoParts()
    model({"left": np.zeros((1, 5), np.float32), "right": np.zeros((1, 2), np.float32)})
    interface = read_interface(model)
    assert [(spec.name, spec.shape) for spec in interface.inputs] == [("left", (None, 5)), ("right", (None, 2))]
    assert interface.output_names == ["left_sum", "mixed"]
    answers = interface.call(model, [np.ones((3, 5), np.float32), np.ones((3, 2), np.float32)])
    np.testing.assert_allclose(np.asarray(answers["left_sum"]), np.full(3, 5.0))


def test_a_subclassed_model_with_one_input_takes_the_name_of_call_s_argument():
    import keras

    class Scores(keras.Model):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.dense = keras.layers.Dense(3)

        def call(self, readings):
            return self.dense(readings)

    model = Scores()
    model(np.zeros((2, 4), np.float32))
    interface = read_interface(model)
    assert [(spec.name, spec.dtype, spec.shape) for spec in interface.inputs] == [("readings", np.dtype("float32"), (None, 4))]
    assert interface.output_names == ["output_0"]


@pytest.mark.parametrize(
    "options, expected",
    [
        (
            {"ragged": True, "dtype": "int64"},
            "input 'ids' is ragged, which an ONNX graph cannot take: pad the rows to one length",
        ),
        ({"sparse": True}, "input 'ids' is sparse, which an ONNX graph cannot take: pass it dense"),
    ],
)
def test_ragged_and_sparse_inputs_are_refused_with_the_fix(options, expected):
    import keras

    ids = keras.Input((None,) if options.get("ragged") else (3,), name="ids", **options)
    layer = keras.layers.Embedding(5, 2) if options.get("ragged") else keras.layers.Dense(2)
    with pytest.raises(KerasInterfaceError, match="^" + expected.replace("(", r"\(")) as caught:
        read_interface(keras.Model(ids, layer(ids)))
    assert "\n" not in str(caught.value)


def test_a_text_layer_is_refused_by_name_even_inside_a_nested_model():
    import keras

    words = keras.Input((1,), dtype="string", name="words")
    inner = keras.Model(words, keras.layers.StringLookup(vocabulary=["a", "b"], name="lookup")(words), name="text")
    outer_in = keras.Input((1,), dtype="string", name="sentence")
    model = keras.Model(outer_in, keras.layers.Embedding(3, 2)(inner(outer_in)))
    with pytest.raises(KerasInterfaceError) as caught:
        read_interface(model)
    assert str(caught.value).startswith(
        "StringLookup layer 'lookup' works on strings, which an ONNX graph cannot: move it "
        "into a pre-processing stage before the model"
    )


def test_an_op_is_traced_back_to_its_innermost_layer():
    names = {"encoder", "dense", "python_step"}
    assert layer_of("functional_1/encoder_1/dense_2/MatMul", names) == "dense"
    assert layer_of("functional_1/python_step_1/EagerPyFunc", names) == "python_step"
    assert layer_of("StatefulPartitionedCall/Lgamma", names) is None


@pytest.mark.parametrize(
    "make, expected",
    [
        (
            lambda keras: keras.layers.IntegerLookup(vocabulary=[7, 11, 13], name="codes"),
            "IntegerLookup layer 'codes' looks its values up in a hash table, which an ONNX graph cannot hold: map the "
            "values to indices in a pre-processing stage before the model",
        ),
        (
            lambda keras: keras.layers.Hashing(num_bins=5, name="hash"),
            "Hashing layer 'hash' hashes the text of its values, which an ONNX graph cannot: hash in a pre-processing stage",
        ),
    ],
)
def test_a_lookup_or_hashing_layer_over_integers_is_refused_by_name_with_the_fix(make, expected):
    """tf2onnx would stop at LookupTableFindV2 or AsString, naming an op and 'replace them with standard ops'."""
    import keras

    ids = keras.Input((3,), dtype="int64", name="ids")
    inner = keras.Model(ids, make(keras)(ids), name="codes_model")  # nested: found inside too
    outer = keras.Input((3,), dtype="int64", name="ids")
    model = keras.Model(outer, keras.layers.Embedding(6, 2)(inner(outer)))
    with pytest.raises(KerasInterfaceError) as caught:
        read_interface(model)
    assert str(caught.value).startswith(expected) and "\n" not in str(caught.value)
