"""`export.convert`: a traced function becomes an ONNX graph with only its own inputs; parity says where it strays.

Plain tf.functions and arrays, no trained model: the corpus test (test_keras_corpus.py) converts real ones.
"""

from __future__ import annotations

import numpy as np
import pytest

from export import tf_env  # noqa: F401
from export.convert import UnsupportedOpsError, function_to_onnx, outputs_parity


def _run(graph, feeds: dict) -> list:
    import onnxruntime as ort

    return ort.InferenceSession(graph.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def test_captured_tensors_become_constants_not_graph_inputs():
    """The root of the adapted-Normalization failure: a traced function's captured eager tensors (a small one is
    captured as a constant, a large one as a placeholder; both are listed among the function's inputs) must be
    folded into the graph, leaving the signature's inputs alone."""
    import tensorflow as tf

    small = tf.constant(np.arange(3, dtype=np.float32))  # an adapted Normalization's mean: an eager tensor, not a variable
    large = tf.constant(np.linspace(1, 2, 300, dtype=np.float32).reshape(100, 3))  # over TensorFlow's 128-element const limit
    graph = function_to_onnx(
        lambda t: {"shifted": t - small, "scaled": tf.matmul(large, t, transpose_b=True)},
        [tf.TensorSpec((None, 3), tf.float32, name="t")],
        output_order=["shifted", "scaled"],
    )
    assert [i.name for i in graph.graph.input] == ["t"] and [o.name for o in graph.graph.output] == ["shifted", "scaled"]
    rows = np.random.default_rng(0).normal(0, 1, (5, 3)).astype(np.float32)
    shifted, scaled = _run(graph, {"t": rows})
    np.testing.assert_allclose(shifted, rows - np.arange(3), atol=1e-6)
    np.testing.assert_allclose(scaled, large.numpy() @ rows.T, atol=1e-5)


def test_keras_argmax_converts_and_keeps_its_answer_for_negative_zero():
    """keras.ops.argmax finds -0.0 through a bitcast ONNX lacks; the rewritten graph answers as Keras does."""
    import keras
    import tensorflow as tf

    graph = function_to_onnx(lambda t: {"label": keras.ops.argmax(t, axis=-1)}, [tf.TensorSpec((None, 2), tf.float32, name="t")])
    assert "Bitcast" not in {node.op_type for node in graph.graph.node}
    rows = np.array([[-0.0, 0.0], [0.0, -0.0], [-1.0, -2.0], [3.0, 5.0], [-np.inf, -0.0]], np.float32)
    np.testing.assert_array_equal(_run(graph, {"t": rows})[0], np.asarray(keras.ops.argmax(rows, axis=-1)))


def test_parity_names_the_output_and_row_where_onnx_strays_most():
    rows = np.random.default_rng(0).random((6, 3)).astype(np.float32)
    score = np.arange(6, dtype=np.float32)[:, None]
    strayed = score.copy()
    strayed[4, 0] += 0.25
    parity = outputs_parity({"cls": rows, "score": score}, {"cls": rows + 1e-6, "score": strayed})
    assert (parity.worst_output, parity.worst_row, parity.identical_predictions) == ("score", 4, True)
    assert parity.worst() == "output 'score', row 4: abs diff 2.50e-01"
    assert parity.as_dict()["worst_row"] == 4


def test_exact_gelu_converts_through_erf():
    """Keras' exact GELU uses TensorFlow's Erfc, which tf2onnx cannot convert; as 1 - Erf it answers as Keras does."""
    import keras
    import tensorflow as tf

    graph = function_to_onnx(
        lambda t: {"y": keras.activations.gelu(t, approximate=False)}, [tf.TensorSpec((None, 4), tf.float32, name="t")]
    )
    assert "Erfc" not in {node.op_type for node in graph.graph.node}
    rows = np.linspace(-4, 4, 20, dtype=np.float32).reshape(5, 4)
    np.testing.assert_allclose(
        _run(graph, {"t": rows})[0], np.asarray(keras.activations.gelu(rows, approximate=False)), atol=1e-6
    )


def test_a_grouped_convolution_compiled_with_xla_is_inlined_and_converts():
    """Keras runs Conv2D(groups=...) through a jit_compile tf.function, which TensorFlow never inlines by itself."""
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(0)
    grouped = keras.layers.Conv2D(6, 3, groups=3, padding="same", name="grouped")
    grouped.build((None, 5, 5, 3))
    graph = function_to_onnx(lambda t: {"y": grouped(t)}, [tf.TensorSpec((None, 5, 5, 3), tf.float32, name="t")])
    assert not {node.op_type for node in graph.graph.node} & {"StatefulPartitionedCall", "PartitionedCall"}
    rows = np.random.default_rng(0).normal(0, 1, (2, 5, 5, 3)).astype(np.float32)
    np.testing.assert_allclose(_run(graph, {"t": rows})[0], np.asarray(grouped(rows)), atol=1e-5)


def test_a_model_that_fails_when_traced_is_refused_in_one_line():
    import tensorflow as tf

    with pytest.raises(UnsupportedOpsError) as caught:  # the batch is None while traced: None * 3 fails
        function_to_onnx(lambda t: {"y": tf.reshape(t, [t.shape[0] * 3])}, [tf.TensorSpec((None, 3), tf.float32, name="t")])
    message = str(caught.value)
    assert message.startswith("the model fails when traced on t: float32 [N, 3] with the batch size left open (TypeError: ")
    assert "keras.ops.shape(x)[0]" in message and "\n" not in message
