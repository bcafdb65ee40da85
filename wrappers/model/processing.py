"""CPU stages around the graph: encoded images -> tensors before it, scores -> top-k labels after it.

They run on the runtime's CPU thread pool, not on the inference thread, so one request's
JPEG decoding overlaps another's inference (Pillow and NumPy release the GIL while
they work) and an accelerator is never left waiting on a decoder.
"""

from __future__ import annotations

import base64
import binascii
import io
from pathlib import Path

import numpy as np

from engine.tensor_specs import DYNAMIC, TensorSpec
from slipway.files import FileProblem, read_text
from slipway.runtime_settings import ImagePreprocessing, TopKPostprocessing
from slipway.v2_wire import TensorError

MAX_IMAGE_PIXELS = 40_000_000  # decoding more would take seconds and gigabytes: refuse instead
IMAGE_DATATYPES = {"FP32": np.float32, "FP16": np.float16, "FP64": np.float64, "UINT8": np.uint8}
LABELS_OUTPUT = "labels"
SCORES_OUTPUT = "scores"


class ProcessingConfigError(ValueError):
    """Pre/post-processing settings do not fit the graph; the message says what to change."""


class ImagePreprocessor:
    """Encoded images (one per element of a BYTES input) -> the graph's image batch."""

    def __init__(self, settings: ImagePreprocessing, graph_input: TensorSpec):
        self.name = graph_input.name
        if graph_input.datatype not in IMAGE_DATATYPES:
            raise ProcessingConfigError(
                f"preprocess: graph input {self.name!r} is {graph_input.datatype}; images feed only "
                f"{sorted(IMAGE_DATATYPES)} inputs"
            )
        if len(graph_input.shape) != 4:
            raise ProcessingConfigError(
                f"preprocess: graph input {self.name!r} has shape {list(graph_input.shape)}; an image batch is 4-D"
            )
        self.layout = settings.layout or _guess_layout(graph_input.shape, self.name)
        height_axis, width_axis, channel_axis = (1, 2, 3) if self.layout == "NHWC" else (2, 3, 1)
        self.channels = graph_input.shape[channel_axis]
        if self.channels not in (1, 3):
            raise ProcessingConfigError(
                f"preprocess: graph input {self.name!r} has {self.channels} channels in {self.layout}; "
                "images have 1 (grayscale) or 3 (RGB): set preprocess.layout"
            )
        graph_size = (graph_input.shape[height_axis], graph_input.shape[width_axis])
        self.size = settings.size or graph_size
        if DYNAMIC in self.size:
            raise ProcessingConfigError(
                f"preprocess: graph input {self.name!r} has no fixed height and width; set preprocess.size"
            )
        self.dtype = IMAGE_DATATYPES[graph_input.datatype]
        self.mode = "L" if self.channels == 1 else "RGB"
        self.settings = settings
        for label, values in (("mean", settings.mean), ("std", settings.std)):
            if len(values) not in (1, self.channels):
                raise ProcessingConfigError(f"preprocess.{label} needs 1 or {self.channels} values, got {len(values)}")
        self._mean = np.asarray(settings.mean, dtype=np.float32)
        self._std = np.asarray(settings.std, dtype=np.float32)

    def __call__(self, encoded: np.ndarray) -> np.ndarray:
        from PIL import Image

        if not encoded.size:  # np.stack has nothing to stack (the runtime refuses zero rows before this)
            raise TensorError(f"input {self.name!r} holds no images; send at least one")
        pixels = np.stack([self._decode(Image, item, index) for index, item in enumerate(encoded.ravel())])
        if self.dtype != np.uint8:
            pixels = (pixels * np.float32(self.settings.scale) - self._mean) / self._std
        if self.layout == "NCHW":
            pixels = pixels.transpose(0, 3, 1, 2)
        return np.ascontiguousarray(pixels, dtype=self.dtype)

    def _decode(self, image_module, item: bytes | str, index: int) -> np.ndarray:
        data = _image_bytes(item, index, self.name)
        if len(data) > self.settings.max_image_bytes:
            raise TensorError(
                f"input {self.name!r}: image {index} is {len(data)} bytes, over the {self.settings.max_image_bytes} allowed"
            )
        height, width = self.size
        try:
            with image_module.open(io.BytesIO(data)) as image:
                if image.width * image.height > MAX_IMAGE_PIXELS:
                    raise TensorError(
                        f"input {self.name!r}: image {index} is {image.width}x{image.height} pixels, "
                        f"over the {MAX_IMAGE_PIXELS} allowed; send it downscaled"
                    )
                image.draft(self.mode, (width, height))  # JPEG: decode at a reduced scale, much faster
                image = image.convert(self.mode)
                if image.size != (width, height):
                    image = image.resize((width, height), image_module.Resampling.BILINEAR)
                pixels = np.asarray(image, dtype=np.float32)
        except TensorError:
            raise
        except Exception as err:  # Pillow raises many types for broken files (OSError, SyntaxError, ValueError...)
            raise TensorError(
                f"input {self.name!r}: image {index} could not be decoded ({type(err).__name__}: {err}); send PNG or JPEG bytes"
            ) from err
        return pixels[..., np.newaxis] if pixels.ndim == 2 else pixels


def _image_bytes(item: bytes | str, index: int, name: str) -> bytes:
    """gRPC carries raw bytes; JSON cannot, so REST clients send base64 strings."""
    if isinstance(item, bytes):
        return item
    try:
        return base64.b64decode(item, validate=True)
    except (binascii.Error, ValueError) as err:
        raise TensorError(
            f"input {name!r}: image {index} is a string but not base64; over REST send images base64-encoded"
        ) from err


def _guess_layout(shape: tuple[int, ...], name: str) -> str:
    if shape[3] in (1, 3):
        return "NHWC"
    if shape[1] in (1, 3):
        return "NCHW"
    raise ProcessingConfigError(
        f"preprocess: cannot tell the layout of graph input {name!r} {list(shape)}; set preprocess.layout"
    )


class TopK:
    """Scores [rows, classes] -> the k best labels and their scores, best first."""

    def __init__(self, settings: TopKPostprocessing, graph_output: TensorSpec, model_dir: Path):
        self.name = graph_output.name
        if len(graph_output.shape) != 2 or graph_output.datatype not in ("FP32", "FP16", "FP64"):
            raise ProcessingConfigError(
                f"postprocess: graph output {self.name!r} is {graph_output.datatype} {list(graph_output.shape)}; "
                "top-k needs float scores shaped [rows, classes]"
            )
        self.k = settings.k
        self.softmax = settings.softmax
        self.labels: np.ndarray | None = None
        classes = graph_output.shape[1]
        if settings.labels_file:
            path = (model_dir / settings.labels_file).resolve()
            if not path.is_relative_to(model_dir.resolve()) or not path.is_file():
                raise ProcessingConfigError(
                    f"postprocess.labels_file {settings.labels_file!r} is not a file inside the model folder {model_dir}"
                )
            try:
                names = [line.strip() for line in read_text(path, "postprocess.labels_file").splitlines() if line.strip()]
            except FileProblem as err:
                raise ProcessingConfigError(f"{err}: write one label per line, as UTF-8") from err
            if classes != DYNAMIC and len(names) != classes:
                raise ProcessingConfigError(
                    f"postprocess.labels_file has {len(names)} labels but output {self.name!r} has {classes} classes"
                )
            self.labels = np.asarray(names, dtype=object)

    def __call__(self, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        scores = scores.astype(np.float32, copy=False)
        if self.softmax:
            shifted = np.exp(scores - scores.max(axis=1, keepdims=True))
            scores = shifted / shifted.sum(axis=1, keepdims=True)
        k = min(self.k, scores.shape[1])
        best = np.argpartition(-scores, k - 1, axis=1)[:, :k]
        order = np.take_along_axis(scores, best, axis=1).argsort(axis=1)[:, ::-1]
        best = np.take_along_axis(best, order, axis=1)
        if self.labels is not None:
            if len(self.labels) != scores.shape[1]:
                raise RuntimeError(f"output {self.name!r} has {scores.shape[1]} classes but {len(self.labels)} labels")
            names = self.labels[best]
        else:
            names = best.astype(str).astype(object)
        return names, np.take_along_axis(scores, best, axis=1)
