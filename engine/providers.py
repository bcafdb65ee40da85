"""Execution providers: which ones this onnxruntime build has, their options, the GPU libraries they load."""

from __future__ import annotations

import contextlib
import functools
import io
import logging

import onnxruntime as ort

from slipway.runtime_settings import RuntimeSettings

logger = logging.getLogger(__name__)

TENSORRT = "TensorrtExecutionProvider"
CUDA = "CUDAExecutionProvider"
CPU = "CPUExecutionProvider"
GPU_PROVIDERS = (TENSORRT, CUDA)


def choose_providers(requested: list[str] | None, *, warn: bool = True) -> list[str]:
    """Keep the requested providers that this onnxruntime build has, in order, ending with CPU.

    With nothing requested: TensorRT and CUDA where this build has them, then CPU.
    A provider that is not installed is skipped with a warning (`warn`), never a crash.
    """
    available = ort.get_available_providers()
    wanted = requested or [name for name in (*GPU_PROVIDERS, CPU) if name in available]
    chosen = []
    for name in wanted:
        if name in available:
            chosen.append(name)
        elif warn:
            logger.warning("execution provider %s is not available here (have %s); skipping it", name, available)
    if CPU not in chosen:
        chosen.append(CPU)
    return chosen


def provider_entries(names: list[str], settings: RuntimeSettings) -> list[tuple[str, dict[str, str]]]:
    """Each provider with its options from settings, as ONNX Runtime takes them."""
    options = {TENSORRT: settings.tensorrt.provider_options(), CUDA: settings.cuda.provider_options()}
    return [(name, options.get(name, {})) for name in names]


@functools.cache
def load_gpu_libraries() -> None:
    """Load CUDA and cuDNN from NVIDIA's pip packages once, where onnxruntime-gpu can do it.

    Without this the CUDA provider's library finds them only through LD_LIBRARY_PATH or
    an earlier `import torch`; what fails to load is logged, and the session falls back.
    """
    preload = getattr(ort, "preload_dlls", None)
    if preload is None:
        return
    printed = io.StringIO()  # it prints what it could not load: send that to the log instead
    try:
        with contextlib.redirect_stdout(printed):
            preload()
    except Exception as err:  # a missing library must cost the GPU provider, never the server
        logger.warning("could not preload the GPU libraries (%s); the session may fall back to the CPU", err)
    for line in printed.getvalue().splitlines():
        if line.strip():
            logger.warning("loading GPU libraries: %s", line.strip())


def device_of(session: ort.InferenceSession) -> tuple[str, int]:
    """Where the session's first provider keeps tensors: ("cuda", id) on a GPU, ("cpu", 0) otherwise."""
    first = session.get_providers()[0]
    if first in GPU_PROVIDERS:
        return "cuda", int(session.get_provider_options().get(first, {}).get("device_id", 0))
    return "cpu", 0
