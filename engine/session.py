"""Build the ONNX Runtime session: options sized to the container, providers falling back one by one.

No MLServer here: export, benchmarks and the server build their sessions the same way.
"""

from __future__ import annotations

import logging
from pathlib import Path

import onnxruntime as ort

from engine.cpu_limits import cpu_limit, threads_for_cpu_limit
from engine.providers import GPU_PROVIDERS, TENSORRT, choose_providers, load_gpu_libraries, provider_entries
from engine.tensorrt import prepare_tensorrt_cache
from slipway.runtime_settings import RuntimeSettings

logger = logging.getLogger(__name__)

_OPTIMIZATION_LEVELS = {
    "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}
_EXECUTION_MODES = {"sequential": ort.ExecutionMode.ORT_SEQUENTIAL, "parallel": ort.ExecutionMode.ORT_PARALLEL}


def session_options(settings: RuntimeSettings, providers: list[str] | None = None) -> ort.SessionOptions:
    """Session options from settings, with thread counts sized to the container, not the host. `providers`: the
    ones the session is built with (None: those `settings` asks for, as installed here)."""
    options = ort.SessionOptions()
    intra = settings.intra_op_threads
    options.intra_op_num_threads = intra if intra is not None else threads_for_cpu_limit(cpu_limit())
    options.inter_op_num_threads = settings.inter_op_threads
    options.execution_mode = _EXECUTION_MODES[settings.execution_mode]
    options.graph_optimization_level = _OPTIMIZATION_LEVELS[settings.graph_optimization_level]
    names = providers or choose_providers(settings.providers, warn=False)  # the session builder warns, once
    on_cpu = not any(name in GPU_PROVIDERS for name in names)
    within_runs = spins_within_runs(settings, options.intra_op_num_threads, on_cpu=on_cpu)
    options.add_session_config_entry("session.intra_op.allow_spinning", "1" if settings.allow_spinning or within_runs else "0")
    if within_runs:  # ONNX Runtime's threads stop spinning the moment the last run in flight returns
        options.add_session_config_entry("session.force_spinning_stop", "1")
    return options


def spins_within_runs(settings: RuntimeSettings, intra_op_threads: int, *, on_cpu: bool) -> bool:
    """Whether a session's intra-op threads spin only while a run is in flight: as `spin_within_runs` says, else
    (unset) where a run has several threads on the CPU (0 is ONNX Runtime's own count, every core); never where
    `allow_spinning` has them spin between runs too. The rule `wrappers.defaults.choice` reports for unset."""
    if settings.allow_spinning:
        return False
    if settings.spin_within_runs is not None:
        return bool(settings.spin_within_runs)
    return on_cpu and intra_op_threads != 1


def create_session(model_path: Path, settings: RuntimeSettings) -> ort.InferenceSession:
    """Create the session, falling back provider by provider, and log the providers it really uses.

    A GPU provider that is installed may still fail (no device, missing CUDA or TensorRT
    libraries): the session is then built with the next provider, with a warning that says why.
    """
    names = choose_providers(settings.providers)
    if any(name in GPU_PROVIDERS for name in names):
        load_gpu_libraries()
    if TENSORRT in names:
        settings = prepare_tensorrt_cache(settings)
    while True:
        try:  # enable_fallback=0: ONNX Runtime's own retry would go straight to CPU and drop every option
            session = ort.InferenceSession(
                str(model_path),
                sess_options=session_options(settings, names),
                providers=provider_entries(names, settings),
                enable_fallback=0,
            )
            break
        except Exception as err:  # ONNX Runtime raises its own exception types, not one base class
            if len(names) == 1:
                raise
            logger.warning("execution provider %s failed (%s); falling back to %s", names[0], err, names[1:])
            names = names[1:]
    used = session.get_providers()
    for name in names:
        if name not in used:
            logger.warning("execution provider %s was requested but the session does not use it", name)
    logger.info("ONNX Runtime session for %s uses providers %s", model_path, used)
    return session
