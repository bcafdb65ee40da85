"""Pruning in Keras 3 without tensorflow-model-optimization: schedules, masks, filter removal."""

import numpy as np
import pytest

from export.prune import FineTune, PruneError, magnitude_mask, polynomial_sparsity, prune_filters, prune_magnitude


def test_polynomial_schedule_starts_fast_and_ends_at_the_target():
    values = [polynomial_sparsity(step, final=0.8, begin=10, end=110) for step in range(0, 130, 10)]
    assert values[0] == values[1] == 0.0 and values[-1] == values[-2] == pytest.approx(0.8)
    assert all(a <= b for a, b in zip(values, values[1:]))
    assert values[2] > 0.8 * 0.25  # cubic: a quarter of the target after a tenth of the way


def test_magnitude_mask_drops_exactly_the_smallest():
    weights = np.array([[0.5, -0.1], [0.05, -2.0], [0.3, 0.01]], dtype=np.float32)
    mask = magnitude_mask(weights, 0.5)
    assert mask.sum() == 3
    np.testing.assert_array_equal(mask, [[1, 0], [0, 1], [1, 0]])


def small_cnn():
    import keras

    keras.utils.set_random_seed(0)
    inputs = keras.Input(shape=(6, 6, 2), name="image")
    x = keras.layers.Conv2D(8, 3, padding="same", activation="relu", name="c1")(inputs)
    x = keras.layers.BatchNormalization(name="bn")(x)
    x = keras.layers.MaxPooling2D(2, name="pool")(x)
    x = keras.layers.Flatten(name="flat")(x)
    x = keras.layers.Dense(6, activation="relu", name="hidden")(x)
    outputs = keras.layers.Dense(3, activation="softmax", name="out")(x)
    return keras.Model(inputs, outputs)


def test_prune_filters_removes_the_weakest_and_keeps_the_answers_they_did_not_change():
    model = small_cnn()
    kernel, bias = model.get_layer("c1").get_weights()
    dead = [1, 4, 6, 7]  # filters that contribute nothing: L1 norm 0 and bias 0
    kernel[..., dead] = 0
    bias[dead] = 0
    model.get_layer("c1").set_weights([kernel, bias])
    bn = model.get_layer("bn").get_weights()
    bn[1][dead] = 0  # beta 0: the batch norm keeps dead channels at zero
    model.get_layer("bn").set_weights(bn)
    hidden_kernel, hidden_bias = model.get_layer("hidden").get_weights()
    hidden_kernel[:, [0, 3, 5]] *= 1e-3  # the three weakest hidden units
    model.get_layer("hidden").set_weights([hidden_kernel * 1, hidden_bias * 0])

    narrow = prune_filters(model, 0.5)
    assert narrow.get_layer("c1").filters == 4 and narrow.get_layer("hidden").units == 3
    assert narrow.get_layer("out").units == 3  # the output layer keeps every class
    x = np.random.default_rng(0).random((16, 6, 6, 2)).astype(np.float32)
    full = model.predict(x, verbose=0)
    # Only the tiny hidden units changed anything: answers agree, values are close.
    assert (narrow.predict(x, verbose=0).argmax(1) == full.argmax(1)).all()
    np.testing.assert_allclose(narrow.predict(x, verbose=0), full, atol=2e-2)
    assert narrow.count_params() < model.count_params() / 2


def test_prune_filters_refuses_a_model_whose_filters_are_all_tied_to_its_input():
    import keras

    inputs = keras.Input(shape=(4, 4, 3))
    a = keras.layers.Conv2D(3, 1, name="a")(inputs)
    merged = keras.layers.Add(name="add")([a, inputs])  # a's channels must stay aligned with the input's
    model = keras.Model(inputs, keras.layers.Flatten()(merged))
    with pytest.raises(PruneError, match="no filters of model .* can be removed"):
        prune_filters(model, 0.5)


def test_a_subclassed_or_variable_length_model_has_no_filters_to_slim_and_says_why():
    import keras

    from export.prune import can_slim

    class Scorer(keras.Model):
        def __init__(self):
            super().__init__()
            self.dense = keras.layers.Dense(3)

        def call(self, rows):
            return self.dense(rows)

    subclassed = Scorer()
    subclassed(np.zeros((1, 4), np.float32))
    tokens = keras.Input((None,), dtype="int64", name="tokens")
    hidden = keras.layers.GRU(4)(keras.layers.Embedding(10, 4)(tokens))
    variable = keras.Model(tokens, keras.layers.Dense(2, name="out")(hidden))
    # `export variants` asks first, and leaves slim out of its defaults rather than fail on either
    assert not can_slim(subclassed) and not can_slim(variable)
    with pytest.raises(PruneError, match="Scorer is a subclassed model: it has no graph of layers to follow"):
        prune_filters(subclassed, 0.5)
    with pytest.raises(PruneError, match="tensor 'tokens' has no fixed size on its last axis"):
        prune_filters(variable, 0.5)


def branchy_cnn():
    """A residual addition, a concatenation, a depthwise convolution and batch norm: channel groups that shrink together."""
    import keras

    keras.utils.set_random_seed(0)
    inputs = keras.Input(shape=(6, 6, 2), name="image")
    a = keras.layers.Conv2D(8, 3, padding="same", activation="relu", name="a")(inputs)
    x = keras.layers.BatchNormalization(name="a_bn")(a)
    x = keras.layers.DepthwiseConv2D(3, padding="same", name="dw")(x)
    x = keras.layers.BatchNormalization(name="dw_bn")(x)
    b = keras.layers.Conv2D(8, 1, name="b")(x)
    added = keras.layers.Add(name="add")([a, b])
    c = keras.layers.Conv2D(4, 1, activation="relu", name="c")(inputs)
    joined = keras.layers.Concatenate(name="join")([added, c])
    x = keras.layers.GlobalAveragePooling2D(name="pool")(joined)
    outputs = keras.layers.Dense(3, activation="softmax", name="out")(x)
    return keras.Model(inputs, outputs)


def test_prune_filters_shrinks_channel_groups_across_additions_concatenations_and_depthwise_convolutions():
    model = branchy_cnn()
    weak = [0, 2, 5, 7]  # weakest in both convolutions the addition ties together: the group drops them
    for name in ("a", "b"):
        kernel, bias = model.get_layer(name).get_weights()
        kernel[..., weak] *= 1e-3
        model.get_layer(name).set_weights([kernel, bias])
    narrow = prune_filters(model, 0.5)
    assert narrow.get_layer("a").filters == 4 and narrow.get_layer("b").filters == 4 and narrow.get_layer("c").filters == 2
    assert narrow.get_layer("dw").get_weights()[0].shape[2] == 4 and narrow.get_layer("a_bn").get_weights()[0].shape == (4,)
    assert narrow.get_layer("out").get_weights()[0].shape == (6, 3)  # 4 + 2 channels joined; every class kept
    kept = [1, 3, 4, 6]
    np.testing.assert_array_equal(narrow.get_layer("a").get_weights()[0], model.get_layer("a").get_weights()[0][..., kept])
    np.testing.assert_array_equal(
        narrow.get_layer("b").get_weights()[0], model.get_layer("b").get_weights()[0][np.ix_([0], [0], kept, kept)]
    )
    np.testing.assert_array_equal(narrow.get_layer("dw").get_weights()[0], model.get_layer("dw").get_weights()[0][:, :, kept])
    x = np.random.default_rng(0).random((5, 6, 6, 2)).astype(np.float32)
    assert narrow.predict(x, verbose=0).shape == (5, 3) and np.isfinite(narrow.predict(x, verbose=0)).all()
    assert narrow.count_params() < model.count_params() / 2


@pytest.mark.slow  # fine-tunes (trains) the model
def test_magnitude_pruning_reaches_the_sparsity_and_keeps_it_through_training():
    import tensorflow as tf

    model = small_cnn()
    rng = np.random.default_rng(0)
    x = rng.random((64, 6, 6, 2)).astype(np.float32)
    y = rng.integers(0, 3, 64).astype(np.int32)
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(16)
    prune_magnitude(model, data, data, sparsity=0.6, fine_tune=FineTune(epochs=3), steps_per_epoch=4)
    for name in ("c1", "hidden", "out"):
        kernel = model.get_layer(name).kernel.numpy()
        assert 1 - np.count_nonzero(kernel) / kernel.size == pytest.approx(0.6, abs=1 / kernel.size)
        assert model.get_layer(name).kernel.constraint is None  # the mask does not leak into saved models


def test_sparsity_out_of_range_is_refused():
    with pytest.raises(PruneError, match="between 0 and 1"):
        prune_magnitude(small_cnn(), None, None, sparsity=1.0, fine_tune=FineTune(), steps_per_epoch=1)


@pytest.mark.slow
def test_mobilenet_v2_slims_to_a_valid_onnx_graph_with_the_same_outputs():
    """Inverted residuals (additions), depthwise convolutions and batch norm throughout: every block narrows."""
    import keras
    import onnx
    import onnxruntime as ort

    from export.convert import keras_to_onnx

    keras.utils.set_random_seed(0)
    model = keras.applications.MobileNetV2(weights=None, input_shape=(64, 64, 3), alpha=0.35, classes=10)
    narrow = prune_filters(model, 0.5)
    assert narrow.count_params() < 0.45 * model.count_params()
    added = [layer for layer in narrow.layers if type(layer).__name__ == "Add"]
    assert added and all(layer.output.shape[-1] < model.get_layer(layer.name).output.shape[-1] for layer in added)
    graph = keras_to_onnx(narrow)
    onnx.checker.check_model(graph, full_check=True)
    x = np.random.default_rng(0).random((2, 64, 64, 3)).astype(np.float32)
    answers = ort.InferenceSession(graph.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"image": x})[0]
    assert answers.shape == (2, 10)
    np.testing.assert_allclose(answers, narrow.predict(x, verbose=0), atol=1e-4)
