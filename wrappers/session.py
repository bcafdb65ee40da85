"""Build the ONNX Runtime session and read the model's real inputs and outputs from its graph.

No MLServer here: benchmarks and tests use the same session the server does.
"""

from __future__ import annotations

import contextlib
import functools
import io
import logging
import os
import threading
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
import onnxruntime as ort

from slipway.runtime_settings import TENSORRT_CACHE_ENV, RuntimeSettings, SettingsError
from wrappers.defaults_choice import threads_for_cpu_limit

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
        if len(shape) != len(self.shape):
            return False
        for axis, size in self._fixed_axes:  # called per request: no generator, only the fixed axes
            if shape[axis] != size:
                return False
        return True

    @cached_property
    def _fixed_axes(self) -> tuple[tuple[int, int], ...]:
        return tuple((axis, size) for axis, size in enumerate(self.shape) if size != DYNAMIC)


def _spec(node: ort.NodeArg) -> TensorSpec:
    datatype = ONNX_TO_V2.get(node.type)
    if datatype is None:
        raise ValueError(f"graph tensor {node.name!r} has type {node.type}, which the V2 protocol cannot carry")
    shape = tuple(dim if isinstance(dim, int) and dim > 0 else DYNAMIC for dim in node.shape)
    return TensorSpec(node.name, datatype, shape)


def describe(session: ort.InferenceSession) -> tuple[list[TensorSpec], list[TensorSpec]]:
    """The graph's inputs and outputs, in graph order."""
    return [_spec(node) for node in session.get_inputs()], [_spec(node) for node in session.get_outputs()]


CGROUP_ROOT = Path("/sys/fs/cgroup")


def cpu_limit(cgroup_root: Path = CGROUP_ROOT) -> float:
    """The CPUs this process may use: the cgroup quota when a container sets one, else the affinity mask.

    `os.cpu_count()` reports the host's cores; a pod limited to 2 CPUs on a 64-core node
    that sizes its thread pools from it thrashes.
    """
    available = float(len(os.sched_getaffinity(0))) if hasattr(os, "sched_getaffinity") else float(os.cpu_count() or 1)
    quota = cgroup_cpu_quota(cgroup_root)
    return min(available, quota) if quota else available


def cgroup_cpu_quota(root: Path = CGROUP_ROOT) -> float | None:
    """CPUs granted by the cgroup (v2 `cpu.max`, or v1 `cfs_quota_us / cfs_period_us`); None when unlimited."""
    v2 = root / "cpu.max"
    try:
        if v2.is_file():
            quota, period = v2.read_text().split()[:2]
            return None if quota == "max" else int(quota) / int(period)
        v1_quota = root / "cpu" / "cpu.cfs_quota_us"
        v1_period = root / "cpu" / "cpu.cfs_period_us"
        if v1_quota.is_file() and v1_period.is_file():
            quota_us = int(v1_quota.read_text())
            return None if quota_us <= 0 else quota_us / int(v1_period.read_text())
    except (OSError, ValueError):
        logger.warning("could not read the cgroup CPU quota under %s; sizing thread pools from the affinity mask", root)
    return None


TENSORRT = "TensorrtExecutionProvider"
CUDA = "CUDAExecutionProvider"
CPU = "CPUExecutionProvider"
GPU_PROVIDERS = (TENSORRT, CUDA)
_EXECUTION_MODES = {"sequential": ort.ExecutionMode.ORT_SEQUENTIAL, "parallel": ort.ExecutionMode.ORT_PARALLEL}


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


def with_tensorrt_cache(
    settings: RuntimeSettings, *, model: str, digest: str, environ: dict[str, str] | os._Environ = os.environ
) -> RuntimeSettings:
    """The settings with TensorRT's caches under `$SLIPWAY_TENSORRT_CACHE_DIR`, where the deployment sets it.

    The variable wins over the artifact's engine_cache_path and timing_cache_path: where a pod may write
    (the gpu overlay's volume) is the deployment's to say, and the artifact's settings are digest-pinned.
    Engines go to `engines/<model>-<digest>-ort<version>`: ONNX Runtime names a cached engine after the
    graph's structure, not its weights, so a cache shared across versions (a PersistentVolumeClaim) must
    never hand one version another's engine. The kernel timing cache (`timing/`) is per GPU and TensorRT
    version, not per model: every model shares it.
    """
    root = environ.get(TENSORRT_CACHE_ENV, "").strip()
    if not root:
        return settings
    if not os.path.isabs(root):
        raise SettingsError(f"{TENSORRT_CACHE_ENV}={root!r} must be an absolute path (the volume's mount path)")
    key = f"{model}-{digest.removeprefix('sha256:')[:16]}-ort{ort.__version__}"
    tensorrt = settings.tensorrt.model_copy(
        update={
            "engine_cache_path": os.path.join(root, "engines", key),
            "timing_cache_path": os.path.join(root, "timing"),
        }
    )
    return settings.model_copy(update={"tensorrt": tensorrt})


def prepare_tensorrt_cache(settings: RuntimeSettings) -> RuntimeSettings:
    """Create the cache folders TensorRT is pointed at (ONNX Runtime creates only the last level); one it
    cannot create is dropped with a warning: engines are then built at every start, but the model serves."""
    update = {}
    for field in ("engine_cache_path", "timing_cache_path"):
        folder = getattr(settings.tensorrt, field)
        if not folder:
            continue
        try:
            os.makedirs(folder, exist_ok=True)
        except OSError as err:
            logger.warning("TensorRT %s %s cannot be created (%s): running without it", field, folder, err)
            update[field] = None
    if not update:
        return settings
    return settings.model_copy(update={"tensorrt": settings.tensorrt.model_copy(update=update)})


def tensorrt_batch_profile(inputs: list[TensorSpec], max_rows: int) -> dict[str, str]:
    """TensorRT profile options for runs of 1 to `max_rows` rows: one engine for every padded run.

    Without a profile TensorRT builds an engine for the first batch size it meets, and builds again
    (minutes for a large model) whenever a run falls outside the sizes met so far. {} unless the batch
    dimension is every input's only dynamic one and the names fit the option's `name:1x2x3,...` format:
    other ranges are the user's to give as `tensorrt.extra_options` trt_profile_*.
    """

    def fits(spec: TensorSpec) -> bool:
        return (
            bool(spec.shape)
            and spec.shape[0] == DYNAMIC
            and DYNAMIC not in spec.shape[1:]
            and not any(mark in spec.name for mark in ",:")
        )

    if not inputs or not all(fits(spec) for spec in inputs):
        return {}

    def shapes(rows: int) -> str:
        return ",".join(f"{spec.name}:{'x'.join(str(size) for size in (rows, *spec.shape[1:]))}" for spec in inputs)

    return {
        "trt_profile_min_shapes": shapes(1),
        "trt_profile_opt_shapes": shapes(max_rows),
        "trt_profile_max_shapes": shapes(max_rows),
    }


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
    `allow_spinning` has them spin between runs too. The rule `wrappers.defaults_choice` reports for unset."""
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


_MAX_BINDINGS_PER_THREAD = 16


class SessionRunner:
    """Runs the session with or without IOBinding, so callers need not care which.

    With IOBinding on a GPU the inputs go into device buffers kept per inference thread
    while their shapes hold, and outputs stay on the device until one copy back, instead of
    ONNX Runtime staging both through its own host buffers. With CUDA graphs the buffers are
    the session's, not a thread's, and its runs take turns: a replayed graph reads and writes
    the addresses it was captured with, whichever thread replays it.
    """

    def __init__(self, session: ort.InferenceSession, *, io_binding: str = "auto"):
        self.session = session
        self.device, self.device_id = device_of(session)
        self.uses_io_binding = io_binding == "on" or (io_binding == "auto" and self.device != "cpu")
        self.fixed_outputs = session.get_provider_options().get(CUDA, {}).get("enable_cuda_graph") == "1"
        self._local = threading.local()  # device buffers per inference thread: runs may overlap
        self._graph_lock = threading.Lock() if self.fixed_outputs else None
        self._graph_bindings: dict[tuple, _DeviceBinding] = {}  # a captured graph's buffers, one set per session

    def run(self, output_names: list[str], feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        if not self.uses_io_binding:
            return self.session.run(output_names, feeds)
        if self.device != "cpu":
            return self._run_on_device(output_names, feeds)
        binding = self.session.io_binding()
        for name, array in feeds.items():
            binding.bind_cpu_input(name, array)
        for name in output_names:
            binding.bind_output(name)
        self.session.run_with_iobinding(binding)
        return binding.copy_outputs_to_cpu()

    def parts(self) -> tuple[SessionRunner, ...]:
        """This runner alone (a `wrappers.run_width.WidthRunner` has two): what warm-up runs on each thread."""
        return (self,)

    def _run_on_device(self, output_names: list[str], feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        if self._graph_lock is None:  # one per shape and thread: padded runs meet a few
            return self._bound_run(self._local.__dict__.setdefault("bindings", {}), output_names, feeds)
        with self._graph_lock:
            return self._bound_run(self._graph_bindings, output_names, feeds)

    def _bound_run(
        self, bindings: dict[tuple, _DeviceBinding], output_names: list[str], feeds: dict[str, np.ndarray]
    ) -> list[np.ndarray]:
        key = (tuple(output_names), tuple((name, array.shape, array.dtype.str) for name, array in feeds.items()))
        bound = bindings.get(key)
        if bound is None:
            if len(bindings) >= _MAX_BINDINGS_PER_THREAD:  # shapes without end (no buckets): keep memory bounded
                bindings.clear()
            bound = bindings[key] = _DeviceBinding(self, feeds, output_names)
        else:
            for name, array in feeds.items():
                bound.inputs[name].update_inplace(np.ascontiguousarray(array))
            if not self.fixed_outputs:  # outputs whose shape may depend on the data: allocated per run
                bound.binding.clear_binding_outputs()
                for name in output_names:
                    bound.binding.bind_output(name, self.device, self.device_id)
        self.session.run_with_iobinding(bound.binding)
        outputs = bound.binding.copy_outputs_to_cpu()
        if self.fixed_outputs and not bound.outputs_fixed:
            for name, value in zip(output_names, bound.binding.get_outputs()):
                bound.binding.bind_ortvalue_output(name, value)
            bound.outputs_fixed = True
        return outputs


class _DeviceBinding:
    """One thread's IOBinding and device input buffers for one set of input shapes."""

    def __init__(self, runner: SessionRunner, feeds: dict[str, np.ndarray], output_names: list[str]):
        self.binding = runner.session.io_binding()
        self.inputs = {
            name: ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(array), runner.device, runner.device_id)
            for name, array in feeds.items()
        }
        for name, value in self.inputs.items():
            self.binding.bind_ortvalue_input(name, value)
        for name in output_names:
            self.binding.bind_output(name, runner.device, runner.device_id)
        self.outputs_fixed = False
