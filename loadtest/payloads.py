"""V2 request bodies built from an artifact's input example, so load looks like real traffic."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from wrappers.artifact import load_input_example

NUMPY_TO_V2 = {
    np.dtype(np.float32): "FP32",
    np.dtype(np.float64): "FP64",
    np.dtype(np.float16): "FP16",
    np.dtype(np.int8): "INT8",
    np.dtype(np.int16): "INT16",
    np.dtype(np.int32): "INT32",
    np.dtype(np.int64): "INT64",
    np.dtype(np.uint8): "UINT8",
    np.dtype(np.bool_): "BOOL",
}


def v2_json_body(inputs: dict[str, np.ndarray]) -> dict[str, Any]:
    """A V2 REST inference request body for these arrays (row-major flattened data)."""
    return {
        "inputs": [
            {"name": name, "datatype": NUMPY_TO_V2[array.dtype], "shape": list(array.shape), "data": array.ravel().tolist()}
            for name, array in inputs.items()
        ]
    }


def example_batch(model_dir: Path, batch_size: int = 1, offset: int = 0) -> dict[str, np.ndarray]:
    """`batch_size` rows of the input example, wrapping around when it has fewer."""
    inputs, _, _ = load_input_example(model_dir)
    batch = {}
    for name, array in inputs.items():
        rows = np.arange(offset, offset + batch_size) % len(array)
        batch[name] = np.ascontiguousarray(array[rows])
    return batch
