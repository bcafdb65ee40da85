"""Image decoding before the graph and top-k labels after it, on real PNG/JPEG bytes."""

import base64
import io

import numpy as np
import pytest
from PIL import Image

from engine.tensor_specs import TensorSpec
from slipway.runtime_settings import ImagePreprocessing, TopKPostprocessing
from slipway.v2_wire import TensorError
from wrappers.model.processing import ImagePreprocessor, ProcessingConfigError, TopK


def encoded(pixels: np.ndarray, fmt: str = "PNG") -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format=fmt)
    return buffer.getvalue()


def test_png_bytes_and_base64_strings_become_the_graph_tensor():
    pixels = np.arange(64, dtype=np.uint8).reshape(8, 8) * 4
    pre = ImagePreprocessor(ImagePreprocessing(), TensorSpec("image", "FP32", (-1, 8, 8, 1)))
    batch = pre(np.array([encoded(pixels), base64.b64encode(encoded(pixels)).decode()], dtype=object))
    assert batch.shape == (2, 8, 8, 1) and batch.dtype == np.float32
    np.testing.assert_allclose(batch[0, ..., 0], pixels / 255, atol=1e-6)
    np.testing.assert_array_equal(batch[0], batch[1])


def test_rgb_jpeg_is_resized_normalised_and_laid_out_nchw():
    pixels = np.random.default_rng(0).integers(0, 255, (40, 30, 3), dtype=np.uint8)
    settings = ImagePreprocessing(mean=[0.5, 0.5, 0.5], std=[0.25, 0.25, 0.25])
    pre = ImagePreprocessor(settings, TensorSpec("x", "FP32", (-1, 3, 16, 16)))
    assert pre.layout == "NCHW"
    batch = pre(np.array([encoded(pixels, "JPEG")], dtype=object))
    assert batch.shape == (1, 3, 16, 16)
    assert -2.01 <= batch.min() and batch.max() <= 2.01  # (x/255 - 0.5) / 0.25


@pytest.mark.parametrize(
    "item, message",
    [
        (b"not an image", "could not be decoded"),
        ("%%%not base64", "not base64"),
        (encoded(np.zeros((8, 8), np.uint8))[:40], "could not be decoded"),
    ],
)
def test_broken_images_are_named(item, message):
    pre = ImagePreprocessor(ImagePreprocessing(), TensorSpec("image", "FP32", (-1, 8, 8, 1)))
    with pytest.raises(TensorError, match=message):
        pre(np.array([item], dtype=object))


def test_no_images_are_refused_by_name():
    pre = ImagePreprocessor(ImagePreprocessing(), TensorSpec("image", "FP32", (-1, 8, 8, 1)))
    with pytest.raises(TensorError, match="input 'image' holds no images; send at least one"):
        pre(np.array([], dtype=object))


def test_oversized_images_are_refused_before_decoding():
    pre = ImagePreprocessor(ImagePreprocessing(max_image_bytes=100), TensorSpec("image", "FP32", (-1, 8, 8, 1)))
    with pytest.raises(TensorError, match="over the 100 allowed"):
        pre(np.array([encoded(np.random.default_rng(0).integers(0, 255, (64, 64), dtype=np.uint8))], dtype=object))


@pytest.mark.parametrize(
    "spec, settings, message",
    [
        (TensorSpec("x", "INT64", (-1, 8, 8, 1)), ImagePreprocessing(), "images feed only"),
        (TensorSpec("x", "FP32", (-1, 64)), ImagePreprocessing(), "4-D"),
        (TensorSpec("x", "FP32", (-1, 8, 8, 5)), ImagePreprocessing(), "cannot tell the layout"),
        (TensorSpec("x", "FP32", (-1, -1, -1, 3)), ImagePreprocessing(), "set preprocess.size"),
        (TensorSpec("x", "FP32", (-1, 8, 8, 3)), ImagePreprocessing(mean=[0, 0]), "needs 1 or 3 values"),
    ],
)
def test_preprocessing_that_does_not_fit_the_graph_is_refused(spec, settings, message):
    with pytest.raises(ProcessingConfigError, match=message):
        ImagePreprocessor(settings, spec)


def test_top_k_returns_best_labels_first(tmp_path):
    (tmp_path / "labels.txt").write_text("zero\none\ntwo\nthree\n")
    topk = TopK(TopKPostprocessing(k=2, labels_file="labels.txt"), TensorSpec("p", "FP32", (-1, 4)), tmp_path)
    labels, scores = topk(np.array([[0.1, 0.5, 0.3, 0.1], [0.7, 0.0, 0.1, 0.2]], dtype=np.float32))
    assert labels.tolist() == [["one", "two"], ["zero", "three"]]
    np.testing.assert_allclose(scores, [[0.5, 0.3], [0.7, 0.2]])
    softmax = TopK(TopKPostprocessing(k=1, softmax=True), TensorSpec("p", "FP32", (-1, 2)), tmp_path)
    labels, scores = softmax(np.array([[0.0, np.log(3.0)]], dtype=np.float32))
    assert labels.tolist() == [["1"]] and scores[0, 0] == pytest.approx(0.75)


def test_top_k_refuses_labels_that_do_not_match_the_classes(tmp_path):
    (tmp_path / "labels.txt").write_text("a\nb\n")
    with pytest.raises(ProcessingConfigError, match="has 2 labels but output 'p' has 4 classes"):
        TopK(TopKPostprocessing(labels_file="labels.txt"), TensorSpec("p", "FP32", (-1, 4)), tmp_path)
    with pytest.raises(ProcessingConfigError, match="not a file inside the model folder"):
        TopK(TopKPostprocessing(labels_file="../outside.txt"), TensorSpec("p", "FP32", (-1, 4)), tmp_path)
    (tmp_path / "labels.txt").write_bytes("chat\nchien\nsouris\n".encode("latin-1") + b"\xe9l\xe9phant\n")
    with pytest.raises(
        ProcessingConfigError,
        match=r"^postprocess.labels_file is not UTF-8 text \(byte 0xe9 at line 4, "
        r"column 1: invalid continuation byte\): write one label per line",
    ):
        TopK(TopKPostprocessing(labels_file="labels.txt"), TensorSpec("p", "FP32", (-1, 4)), tmp_path)
