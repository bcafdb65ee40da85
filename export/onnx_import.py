"""Bring your own ONNX model (PyTorch's `torch.onnx.export`, tf2onnx, any exporter) down the same road.

The file is checked the way a runtime would meet it (parses as ONNX, passes the checker
with shape inference, uses a standard opset Slipway can quantize, loads in ONNX
Runtime); its inputs and outputs are read from the graph, and the user's sample rows
are checked against them, before anything is built. Every failure is one sentence
naming what was expected.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

from export.input_spec import InputSpec
from export.measure import Feeds
from export.model_source import Source, sha256_bytes
from export.optimize import STANDARD_DOMAINS
from slipway.artifact import MODEL_NAME
from slipway.cli import first_line

MIN_OPSET = 13  # per-channel int8 QuantizeLinear/DequantizeLinear need opset 13
SYNTHETIC_ROWS = 64
HELD_OUT_SHARE = 0.2
LABELS_KEY = "labels"


class ImportCheckError(ValueError):
    """The model or its data is not what the import needs; the message says what to send instead."""


@dataclass(frozen=True)
class CheckedModel:
    model: onnx.ModelProto
    data: bytes
    opset: int
    inputs: list[InputSpec]
    outputs: list[str]

    @property
    def fixed_batch(self) -> int | None:
        """The batch size the graph insists on, or None when the batch dimension is dynamic."""
        return self.inputs[0].shape[0] if self.inputs and self.inputs[0].shape else None


def check_name(name: str) -> str:
    if not MODEL_NAME.fullmatch(name):
        raise ImportCheckError(
            f"model name {name!r} cannot be used in /v2/models/<name>: use letters, digits, '.', '_' or '-' (at most 63)"
        )
    return name


def check_model(path: Path) -> CheckedModel:
    """Load and check an ONNX file; raise `ImportCheckError` with one line on the first problem."""
    path = Path(path)
    if not path.is_file():
        raise ImportCheckError(f"no ONNX file at {path}: pass the path of a .onnx file (e.g. from torch.onnx.export)")
    try:
        model = onnx.load(path)
    except Exception as err:  # protobuf's DecodeError, external data that is missing, ...
        raise ImportCheckError(
            f"{path} is not an ONNX file ({first_line(err)}): export one with torch.onnx.export or tf2onnx"
        ) from err
    if not model.graph.node or not model.graph.output:
        raise ImportCheckError(f"{path} is not an ONNX model: it has no graph nodes or no outputs")
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    newest = onnx.defs.onnx_opset_version()
    if opset is None:
        raise ImportCheckError(f"{path} declares no standard ONNX opset: re-export it with opset_version {MIN_OPSET}..{newest}")
    if opset < MIN_OPSET:
        raise ImportCheckError(
            f"{path} uses opset {opset}; Slipway needs opset >= {MIN_OPSET} (per-channel int8): "
            f"re-export with opset_version=17 (torch.onnx.export(..., opset_version=17))"
        )
    if opset > newest:
        raise ImportCheckError(
            f"{path} uses opset {opset}, newer than the newest this onnx knows ({newest}): re-export with opset {MIN_OPSET}..{newest}"
        )
    foreign = sorted({f"{node.domain}::{node.op_type}" for node in model.graph.node if node.domain not in STANDARD_DOMAINS})
    if foreign:
        raise ImportCheckError(
            f"{path} uses operators outside standard ONNX ({', '.join(foreign[:5])}): export without custom operators"
        )
    try:
        onnx.checker.check_model(model, full_check=True)  # full_check: strict shape inference too
    except Exception as err:
        raise ImportCheckError(f"{path} fails the ONNX checker: {first_line(err)}") from err
    inputs = _inputs(model)
    data = model.SerializeToString()
    try:
        import onnxruntime as ort

        ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    except Exception as err:
        raise ImportCheckError(f"ONNX Runtime cannot run {path}: {first_line(err)}") from err
    return CheckedModel(model, data, opset, inputs, [output.name for output in model.graph.output])


def _inputs(model: onnx.ModelProto) -> list[InputSpec]:
    initializers = {init.name for init in model.graph.initializer}
    specs = []
    for value in model.graph.input:
        if value.name in initializers:
            continue
        tensor = value.type.tensor_type
        if not value.type.HasField("tensor_type") or not tensor.HasField("shape"):
            raise ImportCheckError(
                f"input {value.name!r} has no tensor shape in the graph: export with a sample input so shapes are recorded"
            )
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type))
        shape = tuple(dim.dim_value if dim.HasField("dim_value") and dim.dim_value > 0 else None for dim in tensor.shape.dim)
        specs.append(InputSpec(value.name, dtype, shape))
    if not specs:
        raise ImportCheckError("the model has no inputs to feed")
    return specs


def read_rows(
    path: Path, inputs: list[InputSpec], *, what: str, with_labels: bool = False, optional_labels: bool = False
) -> tuple[Feeds, np.ndarray | None]:
    """Arrays from an .npz, one per model input (by name), checked against the graph's dtypes and shapes.

    `with_labels` requires a `labels` array; `optional_labels` checks and returns one when present.
    """
    path = Path(path)
    expected = ", ".join(f"{spec.name!r}: {spec.describe()}" for spec in inputs)
    try:
        with np.load(path, allow_pickle=False) as archive:
            arrays = {key: archive[key] for key in archive.files}
    except Exception as err:
        raise ImportCheckError(
            f"cannot read {what} data {path} as .npz ({first_line(err)}): save it with np.savez(path, {expected})"
        ) from err
    labels = arrays.pop(LABELS_KEY, None)
    if with_labels and labels is None:
        raise ImportCheckError(
            f"{what} data {path} has no {LABELS_KEY!r} array: save np.savez(path, {LABELS_KEY}=..., {expected})"
        )
    if len(inputs) == 1 and len(arrays) == 1:  # one input, one array: the key does not matter
        arrays = {inputs[0].name: next(iter(arrays.values()))}
    missing = [spec.name for spec in inputs if spec.name not in arrays]
    if missing:
        raise ImportCheckError(f"{what} data {path} has arrays {sorted(arrays)}; the model takes {expected}: missing {missing}")
    feeds = {}
    for spec in inputs:
        array = arrays[spec.name]
        fits = array.ndim == len(spec.shape) and all(
            want is None or want == got for want, got in zip(spec.shape[1:], array.shape[1:])
        )
        if array.dtype != spec.dtype or not fits or len(array) == 0:
            raise ImportCheckError(
                f"{what} array {spec.name!r} is {array.dtype} {list(array.shape)}; the model's input {spec.name!r} takes "
                f"{spec.describe()} (at least one row)"
                + (f": convert with .astype(np.{spec.dtype})" if fits and array.dtype != spec.dtype else "")
            )
        feeds[spec.name] = np.ascontiguousarray(array)
    rows = {len(array) for array in feeds.values()}
    if len(rows) != 1:
        raise ImportCheckError(f"{what} arrays in {path} have different numbers of rows: {sorted(rows)}")
    keep_labels = with_labels or optional_labels
    if labels is not None and keep_labels:
        count = rows.pop()
        if labels.ndim != 1 or labels.dtype.kind not in "iu" or len(labels) != count:
            raise ImportCheckError(
                f"{what} {LABELS_KEY!r} must be a 1-D integer array with one class index per row ({count} rows), "
                f"got {labels.dtype} {list(labels.shape)}"
            )
    return feeds, labels if keep_labels else None


def synthetic_rows(inputs: list[InputSpec], rows: int, seed: int) -> Feeds:
    """Uniform [0, 1) rows shaped like each input: a stand-in when the user sends no data."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for spec in inputs:
        if spec.dtype.kind != "f":
            raise ImportCheckError(
                f"input {spec.name!r} is {spec.dtype}: synthetic rows cannot stand in for it; pass --calibration DATA.npz"
            )
        sizes = [dim for dim in spec.shape[1:] if dim is not None]
        if len(sizes) < len(spec.shape) - 1:
            raise ImportCheckError(
                f"input {spec.name!r} has open dimensions {spec.describe()}: synthetic rows need fixed sizes; pass --calibration DATA.npz"
            )
        batch = spec.shape[0] or rows
        feeds[spec.name] = rng.random((batch, *sizes)).astype(spec.dtype)
    return feeds


def onnx_source(
    path: Path, name: str, *, calibration: Path | None, labels: Path | None, max_calibration_rows: int
) -> tuple[Source, list[str]]:
    """Check the model and its data, and describe it as an export source; returns it with warnings for the user."""
    from export.evaluate import predict
    from export.measure import onnx_runner

    checked = check_model(path)
    warnings: list[str] = []
    if calibration is not None:
        calibration_rows, _ = read_rows(calibration, checked.inputs, what="calibration")
        calibration_note, synthetic = f"{calibration}, {len(next(iter(calibration_rows.values())))} rows", False
    else:
        calibration_rows = synthetic_rows(checked.inputs, SYNTHETIC_ROWS, seed=0)
        calibration_note, synthetic = f"synthetic uniform [0, 1), {SYNTHETIC_ROWS} rows", True
        warnings.append(
            "no --calibration data: int8 is calibrated on synthetic uniform [0, 1) rows, so its accuracy on real data is unknown"
        )
    if labels is not None:
        evaluation, label_array = read_rows(labels, checked.inputs, what="labelled", with_labels=True)
        assert label_array is not None, "with_labels: read_rows refuses an archive without labels"
        evaluation_note = f"{labels}, {len(label_array)} labelled rows"
    elif not synthetic and len(next(iter(calibration_rows.values()))) >= 10:
        total = len(next(iter(calibration_rows.values())))
        held = max(1, int(total * HELD_OUT_SHARE))
        evaluation = {key: array[-held:] for key, array in calibration_rows.items()}
        calibration_rows = {key: array[:-held] for key, array in calibration_rows.items()}
        label_array, evaluation_note = (
            None,
            f"last {held} rows of {calibration}, held out of calibration (no labels: agreement with fp32 only)",
        )
    else:
        evaluation = calibration_rows if not synthetic else synthetic_rows(checked.inputs, SYNTHETIC_ROWS, seed=1)
        label_array, evaluation_note = (
            None,
            "no labels: agreement with the fp32 model only, on "
            + ("the calibration rows" if not synthetic else "synthetic rows"),
        )
    calibration_rows = {key: array[:max_calibration_rows] for key, array in calibration_rows.items()}
    if label_array is None:
        warnings.append("no --labels data: accuracy is unknown; the budget applies to top-1 agreement with the fp32 model")
    reference = predict(onnx_runner(checked.data), evaluation, fixed_batch=checked.fixed_batch)
    source = Source(
        name=name,
        kind="onnx",
        description=f"ONNX model {path} (opset {checked.opset})",
        sha256=sha256_bytes(Path(path).read_bytes()),
        onnx_model=checked.model,
        evaluation=evaluation,
        labels=label_array,
        evaluation_note=evaluation_note,
        calibration=calibration_rows,
        calibration_note=calibration_note,
        calibration_synthetic=synthetic,
        reference=reference,
        fixed_batch=checked.fixed_batch,
        original_bytes=checked.data,
    )
    return source, warnings
