"""The `Source` every way into the export gives the pipeline: an fp32 ONNX graph, held-out rows (labelled when
possible) with the source model's own answers on them, rows to calibrate int8 on, and a baseline to time against.

A leaf of the export's own modules but the measurements: the ONNX import (`export.onnx_import`) and the
demo, Keras and MobileNet sources (`export.sources`) both make one, and the pipeline and its report read it.
"""

from __future__ import annotations

import hashlib
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import onnx

from export.data import Splits
from export.measure import Feeds, Runner, SizeStats, gzip_size, keras_runner, onnx_runner, onnx_size
from export.training_rows import TrainingRows


@dataclass
class Source:
    name: str
    kind: Literal["keras", "onnx"]
    description: str
    sha256: str | None
    onnx_model: onnx.ModelProto
    evaluation: Feeds
    labels: np.ndarray | None
    evaluation_note: str
    calibration: Feeds
    calibration_note: str
    calibration_synthetic: bool
    reference: np.ndarray  # the source model's first output on the evaluation rows
    fixed_batch: int | None = None
    keras_model: Any = None  # a keras.Model (Keras ships no types); None for an imported ONNX file
    splits: Splits | None = None  # the demo's data (its fingerprint is lineage)
    training: TrainingRows | None = None  # rows and loss to fine-tune pruned/slim on
    io_names: tuple[list[str], list[str]] | None = None  # a user model's input and output names (None: the demo's)
    original_bytes: bytes | None = None  # the ONNX file as imported
    keras_path: Path | None = None  # the trained Keras file: lineage finds its training config beside it
    references: dict[str, np.ndarray] | None = None  # every output of the source model by name (None: only `reference`)
    split: Any = None  # export.split_variants.SplitSource: the stages every variant keeps (`variants --split`)

    @property
    def baseline_name(self) -> str:
        return "keras" if self.kind == "keras" else "imported"

    def baseline_runner(self) -> Runner:
        if self.keras_model is not None:
            return keras_runner(self.keras_model, self.io_names[0] if self.io_names else list(self.evaluation))
        return onnx_runner(self._onnx_bytes())

    def baseline_size(self) -> SizeStats:
        if self.keras_model is None:
            return onnx_size(self._onnx_bytes())
        from export.prune import nonzero_parameters  # with TensorFlow's settings (export.tf_env)

        with tempfile.TemporaryDirectory(prefix="slipway-keras-size-") as tmp:
            path = Path(tmp) / "model.keras"
            self.keras_model.save(path)
            data = path.read_bytes()
        return SizeStats(len(data), gzip_size(data), int(self.keras_model.count_params()), nonzero_parameters(self.keras_model))

    def _onnx_bytes(self) -> bytes:
        if self.original_bytes is None:
            raise ValueError(f"source {self.name} has neither a Keras model nor the ONNX file it was imported from")
        return self.original_bytes


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
