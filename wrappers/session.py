"""Build the ONNX Runtime session and read the model's real inputs and outputs from its graph.

No MLServer here: benchmarks and tests use the same session the server does.
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort

from wrappers.settings import RuntimeSettings

logger = logging.getLogger(__name__)

# ONNX element types as ONNX Runtime names them, and the V2 protocol datatype of each.
ONNX_TO_V2 = {
    "tensor(float)": "FP32",
    "tensor(double)": "FP64",
    "tensor(float16)": "FP16",
    "tensor(int8)": "INT8",
    "tensor(int16)": "INT16",
    "tensor(int32)": "INT32",
    "tensor(int64)": "INT64",
    "tensor(uint8)": "UINT8",
    "tensor(uint16)": "UINT16",
    "tensor(uint32)": "UINT32",
    "tensor(uint64)": "UINT64",
    "tensor(bool)": "BOOL",
    "tensor(string)": "BYTES",
}
V2_TO_NUMPY = {
    "FP32": np.float32,
    "FP64": np.float64,
    "FP16": np.float16,
    "INT8": np.int8,
    "INT16": np.int16,
    "INT32": np.int32,
    "INT64": np.int64,
    "UINT8": np.uint8,
    "UINT16": np.uint16,
    "UINT32": np.uint32,
    "UINT64": np.uint64,
    "BOOL": np.bool_,
    "BYTES": np.object_,
}
_OPTIMIZATION_LEVELS = {
    "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}
DYNAMIC = -1


@dataclass(frozen=True)
class TensorSpec:
    """One graph input or output as the V2 protocol describes it; -1 marks a dynamic dimension."""

    name: str
    datatype: str
    shape: tuple[int, ...]

    def accepts_shape(self, shape: tuple[int, ...]) -> bool:
        return len(shape) == len(self.shape) and all(
            want == DYNAMIC or want == got for want, got in zip(self.shape, shape)
        )


def _spec(node: ort.NodeArg) -> TensorSpec:
    datatype = ONNX_TO_V2.get(node.type)
    if datatype is None:
        raise ValueError(f"graph tensor {node.name!r} has type {node.type}, which the V2 protocol cannot carry")
    shape = tuple(dim if isinstance(dim, int) and dim > 0 else DYNAMIC for dim in node.shape)
    return TensorSpec(node.name, datatype, shape)


def describe(session: ort.InferenceSession) -> tuple[list[TensorSpec], list[TensorSpec]]:
    """The graph's inputs and outputs, in graph order."""
    return [_spec(node) for node in session.get_inputs()], [_spec(node) for node in session.get_outputs()]


def cpu_limit() -> float:
    """The CPUs this process may use: the cgroup quota when a container sets one, else the affinity mask.

    `os.cpu_count()` reports the host's cores; a pod limited to 2 CPUs on a 64-core node
    that sizes its thread pools from it thrashes.
    """
    available = float(len(os.sched_getaffinity(0))) if hasattr(os, "sched_getaffinity") else float(os.cpu_count() or 1)
    quota = _cgroup_quota()
    return min(available, quota) if quota else available


def _cgroup_quota() -> float | None:
    v2 = Path("/sys/fs/cgroup/cpu.max")
    try:
        if v2.is_file():
            quota, period = v2.read_text().split()[:2]
            return None if quota == "max" else int(quota) / int(period)
        v1_quota = Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us")
        v1_period = Path("/sys/fs/cgroup/cpu/cpu.cfs_period_us")
        if v1_quota.is_file() and v1_period.is_file():
            quota_us = int(v1_quota.read_text())
            return None if quota_us <= 0 else quota_us / int(v1_period.read_text())
    except (OSError, ValueError):
        logger.warning("could not read the cgroup CPU quota; sizing thread pools from the affinity mask")
    return None


def choose_providers(requested: list[str] | None) -> list[str]:
    """Keep the requested providers that this onnxruntime build has, in order, ending with CPU.

    A provider that is not installed is skipped with a warning, never a crash.
    """
    available = ort.get_available_providers()
    wanted = requested or available
    chosen = []
    for name in wanted:
        if name in available:
            chosen.append(name)
        else:
            logger.warning("execution provider %s is not available here (have %s); skipping it", name, available)
    if "CPUExecutionProvider" not in chosen:
        chosen.append("CPUExecutionProvider")
    return chosen


def session_options(settings: RuntimeSettings) -> ort.SessionOptions:
    """Session options from settings, with thread counts sized to the container, not the host."""
    options = ort.SessionOptions()
    intra = settings.intra_op_threads
    options.intra_op_num_threads = intra if intra is not None else max(1, math.floor(cpu_limit()))
    options.inter_op_num_threads = settings.inter_op_threads
    options.graph_optimization_level = _OPTIMIZATION_LEVELS[settings.graph_optimization_level]
    options.add_session_config_entry("session.intra_op.allow_spinning", "1" if settings.allow_spinning else "0")
    return options


def create_session(model_path: Path, settings: RuntimeSettings) -> ort.InferenceSession:
    """Create the session and log the providers it really uses."""
    session = ort.InferenceSession(
        str(model_path), sess_options=session_options(settings), providers=choose_providers(settings.providers)
    )
    logger.info("ONNX Runtime session for %s uses providers %s", model_path, session.get_providers())
    return session
