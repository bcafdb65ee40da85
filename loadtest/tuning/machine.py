"""What this machine can run: the execution providers a GPU tuning space asks for, checked before any trial.

A GPU trial on a machine without one would not fail: ONNX Runtime falls back to the CPU and the
tuner would rank CPU figures as GPU ones. So explicit GPU providers are refused up front with the
missing piece named, and `auto` keeps what is here and says, in a line of the report, what it left out.
"""

from __future__ import annotations

import shutil
import subprocess
from typing import Literal, get_args

Provider = Literal["cpu", "cuda", "tensorrt"]  # where a tuned graph runs
PROVIDERS: tuple[Provider, ...] = get_args(Provider)
ORT_PROVIDERS = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider", "tensorrt": "TensorrtExecutionProvider"}
GPU_PROVIDERS: tuple[Provider, ...] = ("cuda", "tensorrt")
AUTO = "auto"


class MachineError(ValueError):
    """A provider asked for that this machine cannot run; the message names what is missing."""


def provider_named(name: str) -> Provider:
    """`name` as a provider; MachineError naming the choices when it is none of them."""
    for provider in PROVIDERS:
        if provider == name:
            return provider
    raise MachineError(f"{name!r} is not an execution provider: choose from {', '.join(PROVIDERS)}")


def gpu_name() -> str | None:
    """The first GPU's name from nvidia-smi, or None where there is none (no driver, no card)."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        result = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return result.stdout.strip().splitlines()[0] if result.returncode == 0 and result.stdout.strip() else None


def available_providers() -> list[str]:
    import onnxruntime as ort

    return list(ort.get_available_providers())


def missing_for(provider: str, available: list[str], gpu: str | None) -> str | None:
    """What this machine lacks to run `provider` (one phrase), or None when it has it all."""
    if provider not in GPU_PROVIDERS:
        return None
    if gpu is None:
        return "a CUDA GPU (nvidia-smi finds none)"
    if ORT_PROVIDERS[provider] not in available:
        return (
            f"{ORT_PROVIDERS[provider]} in this onnxruntime (it has {', '.join(available)}): install the GPU "
            "build (make setup GPU=1)"
        )
    return None


def resolve_providers(requested: list[str], available: list[str], gpu: str | None) -> tuple[list[Provider], list[str]]:
    """(providers to tune, report lines): `auto` is every GPU provider this machine runs, else the CPU; an explicit
    GPU provider this machine cannot run is refused."""
    if requested == [AUTO]:
        kept = [p for p in GPU_PROVIDERS if missing_for(p, available, gpu) is None]
        notes = [
            f"providers auto: {p} skipped, this machine lacks {missing_for(p, available, gpu)}"
            for p in GPU_PROVIDERS
            if p not in kept
        ]
        return (kept or ["cpu"]), notes + ([] if kept else ["providers auto: tuning on the CPU only"])
    if AUTO in requested:
        raise MachineError("--providers auto stands alone: give auto, or a list from cpu, cuda, tensorrt")
    providers = [provider_named(name) for name in requested]
    for provider in providers:
        if missing := missing_for(provider, available, gpu):
            raise MachineError(
                f"--providers {provider}: this machine lacks {missing}; tune it on a GPU machine, "
                "or give --providers auto to tune what is here"
            )
    return providers, []
