"""Keras -> ONNX through a tf.function and tf2onnx, then a parity check against Keras.

`tf2onnx.convert.from_keras` breaks on Keras 3 models, so the model is wrapped in a
`tf.function` with a named input signature and a dict output: the ONNX graph then
keeps the names `image` and `probabilities` that clients use.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from export import tf_env  # noqa: F401
from export.model import INPUT_NAME, OUTPUT_NAME

DEFAULT_OPSET = 17


class ParityError(Exception):
    """The ONNX model does not predict what the Keras model predicts."""


@dataclass(frozen=True)
class Parity:
    """How closely ONNX Runtime reproduces Keras on the same inputs."""

    samples: int
    top1_agreement: float
    max_abs_diff: float
    identical_predictions: bool

    def as_dict(self) -> dict:
        return {
            "samples": self.samples,
            "top1_agreement": self.top1_agreement,
            "max_abs_diff": self.max_abs_diff,
            "identical_predictions": self.identical_predictions,
        }


def keras_to_onnx(model, opset: int = DEFAULT_OPSET):
    """Convert a Keras model with one image input and one output to an ONNX ModelProto."""
    import tensorflow as tf
    import tf2onnx

    if opset < DEFAULT_OPSET:
        raise ValueError(f"opset {opset} is too old: use {DEFAULT_OPSET} or newer")
    spec = tf.TensorSpec((None, *model.input_shape[1:]), tf.float32, name=INPUT_NAME)

    @tf.function(input_signature=[spec])
    def serve(image):
        return {OUTPUT_NAME: model(image, training=False)}

    onnx_model, _ = tf2onnx.convert.from_function(serve, input_signature=[spec], opset=opset)
    onnx_model.producer_name = "slipway"
    return onnx_model


def onnx_predict(onnx_bytes: bytes, x: np.ndarray, batch_size: int = 256) -> np.ndarray:
    """Run the ONNX model over `x` with ONNX Runtime on the CPU."""
    import onnxruntime as ort

    session = ort.InferenceSession(onnx_bytes, providers=["CPUExecutionProvider"])
    return np.concatenate(
        [session.run(None, {INPUT_NAME: x[start : start + batch_size]})[0] for start in range(0, len(x), batch_size)]
    )


def check_parity(keras_probabilities: np.ndarray, onnx_probabilities: np.ndarray) -> Parity:
    """Compare predictions class by class and value by value."""
    agree = keras_probabilities.argmax(axis=1) == onnx_probabilities.argmax(axis=1)
    return Parity(
        samples=len(agree),
        top1_agreement=float(agree.mean()),
        max_abs_diff=float(np.abs(keras_probabilities - onnx_probabilities).max()),
        identical_predictions=bool(agree.all()),
    )
