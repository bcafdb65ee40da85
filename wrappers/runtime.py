"""`OnnxRuntime`: an MLServer runtime that serves an ONNX model with ONNX Runtime.

Point a `model-settings.json` at it with
`"implementation": "wrappers.runtime.OnnxRuntime"` and `"parameters": {"uri": "./model.onnx"}`.
The inputs and outputs it advertises come from the graph itself; requests are checked
against them and refused with HTTP 400 (gRPC INVALID_ARGUMENT) naming what was expected.
A request carries at least one row: zero rows are refused alike for every graph, where
padded runs, image decoding or the graph itself would each have failed them another way.

Where the time goes, and what this runtime does about it:
- decoding: raw gRPC contents become NumPy views (`wrappers.grpc_raw`), REST bodies are parsed
  by simdjson (`wrappers.rest_json`) and answered without FastAPI's per-request work
  (`wrappers.rest_infer`), JSON lists become arrays in one call (`wrappers.tensors`); every
  REST body is held to a size limit and inflated off the event loop (`wrappers.rest_bodies`);
- inference: on dedicated threads, merging requests that queued behind a run
  (`wrappers.batching`), so the event loop keeps serving; tiny models run inline instead;
- pre/post-processing: on a separate CPU pool, overlapped with inference;
- large tensors: optionally in shared memory instead of the request (`wrappers.shared_memory`);
- garbage collection: what loading left alive is frozen out of the collector's full passes.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import multiprocessing
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

import numpy as np
from mlserver import MLModel
from mlserver.errors import InferenceError, MLServerError
from mlserver.types import (
    InferenceRequest, InferenceResponse, MetadataTensor, Parameters, RequestInput, ResponseOutput, TensorData,
)
from mlserver.utils import get_model_uri
from onnxruntime.capi.onnxruntime_pybind11_state import Fail, InvalidArgument

from slipway.artifact import MANIFEST_NAME, ArtifactError, pinned_digest, read_manifest, sha256_file, verify_artifact
from wrappers import (
    busy_poll, cpu_pinning, fast_paths, grpc_raw, repository_api, rest_bodies, rest_infer, rest_json, shared_memory_api,
)
from wrappers import json_logs, payload_log
from wrappers.batching import BatchingConfigError, BatchStats, RowBatcher, fixed_batch_rows, gpu_buckets, run_in_buckets
from wrappers.heap import REFREEZE_AFTER_UNLOAD_S as REFREEZE_AFTER_UNLOAD_S  # re-exported: the tests wait on it
from wrappers.heap import freeze_loaded_heap as _freeze_loaded_heap
from wrappers.heap import thaw_heap_after_unload as _thaw_heap_after_unload
from wrappers.metrics import ModelMetrics, PredictedClasses
from wrappers.mlserver_compat import IncompatibleMLServer, check_version
from wrappers.mlserver_compat import model as mlserver_model
from wrappers.processing import LABELS_OUTPUT, SCORES_OUTPUT, ImagePreprocessor, ProcessingConfigError, TopK
from wrappers.request_rules import as_text as _as_text
from wrappers.request_rules import ort_message as _ort_message
from wrappers.request_rules import rows as _rows
from wrappers.request_rules import shape_text as _shape_text
from wrappers.session import (
    DYNAMIC, TENSORRT, SessionRunner, TensorSpec, cpu_limit, create_session, describe, session_options,
    tensorrt_batch_profile, with_tensorrt_cache,
)
from wrappers.settings import (
    TENSORRT_CACHE_ENV, RuntimeSettings, SettingsError, check_model_name, parse_runtime_settings,
)
from wrappers.shared_memory import BYTE_SIZE, OFFSET, REGION, REGIONS, Location, SharedMemoryError, location
from wrappers.shared_memory_api import SharedMemoryEndpoints
from wrappers.tensors import BYTES, V2_TO_NUMPY, TensorError, element_count, from_json

logger = logging.getLogger(__name__)

WELLKNOWN_MODEL_FILES = ["model.onnx"]
_FLOAT_KINDS = "f"
# What ONNX Runtime raises when a run fails on what it was fed. The session loaded and warmed up, so a
# run that fails with either failed on the request's input: HTTP 400, and merged requests are rerun apart.
INPUT_ERRORS = (InvalidArgument, Fail)


class ModelLoadError(MLServerError):
    """The artifact cannot be served; the message says which file or setting is wrong."""

    def __init__(self, msg: str):
        super().__init__(msg, status_code=500)


class OnnxRuntime(SharedMemoryEndpoints, MLModel):
    """Serve one ONNX graph: checked inputs, merged runs, optional CPU stages, metrics."""

    async def load(self) -> bool:
        _log_through_mlserver()
        # What earlier loads froze is invisible to the heap walks by which MLServer's REST app and gRPC server are found
        # below (`wrappers.mlserver_compat`); the heap is frozen again when this load ends.
        gc.unfreeze()
        extra = self.settings.parameters.extra if self.settings.parameters else None
        try:
            check_model_name(self.name)
            self._config: RuntimeSettings = parse_runtime_settings(extra)
            check_version()
            # MLServer's adaptive batching (max_batch_size/max_batch_time) wraps predict before load().
            self._mlserver_batching = mlserver_model.uses_adaptive_batching(self)
        except (SettingsError, IncompatibleMLServer) as err:
            raise ModelLoadError(f"model {self.name}: {err}") from err
        in_worker_process = multiprocessing.parent_process() is not None
        try:
            repository_api.check_guarded(in_worker_process)
        except repository_api.RepositoryApiError as err:
            raise ModelLoadError(f"model {self.name}: {err}") from err
        if self._config.shared_memory and in_worker_process:
            raise ModelLoadError(
                f"model {self.name}: shared_memory needs the model in the server's own process, where regions are "
                "registered; set MLServer's parallel_workers to 0 (MLSERVER_PARALLEL_WORKERS=0)"
            )
        if in_worker_process:
            logger.warning(
                "%s is loaded in an MLServer worker process (parallel_workers > 0): the raw gRPC path, the typed "
                "contents checks, the fast REST route and the request body limit work in the server's own process, "
                "so MLServer's own converters and routes serve this model; set parallel_workers to 0 "
                "(MLSERVER_PARALLEL_WORKERS=0) to have them", self.name,
            )
        model_path = Path(await get_model_uri(self.settings, wellknown_filenames=WELLKNOWN_MODEL_FILES))
        self._verify(model_path.parent)
        self._config = self._with_tensorrt_cache(model_path)
        session = create_session(model_path, self._config)
        self._runner = SessionRunner(session, io_binding=self._config.io_binding)
        self._graph_inputs, graph_outputs = describe(session)
        self._graph_output_names = [spec.name for spec in graph_outputs]
        try:
            batching = self._mlserver_batching or self._config.max_batch_rows > 1
            self._fixed_rows = fixed_batch_rows(self._graph_inputs, graph_outputs) if batching else None
            self._buckets = self._padding_buckets()
            self._give_tensorrt_a_profile(model_path)
            self._configure_stages(self._graph_inputs, graph_outputs, model_path.parent)
        except (BatchingConfigError, ProcessingConfigError) as err:
            raise ModelLoadError(f"model {self.name}: {err}") from err
        self._advertise(graph_outputs)
        self._classes = PredictedClasses.for_outputs(self.name, self.version, graph_outputs, self._scores_output)
        self._seconds_per_row = None
        self._warm_up_lock = threading.Lock()
        self._start_workers()  # every run slot warms up on its own thread here
        if self._config.intra_op_threads is None and self._runs_inline(1) and session_options(self._config).intra_op_num_threads > 1:
            # Inline runs happen on the event loop thread: extra intra-op threads only add hand-offs.
            logger.info("%s runs inline (under %s ms): using one intra-op thread", self.name, self._config.inline_below_ms)
            self._config = self._config.model_copy(update={"intra_op_threads": 1})
            self._runner = SessionRunner(create_session(model_path, self._config), io_binding=self._config.io_binding)
            self._seconds_per_row = None
            self._warm_up()  # on this thread: the event loop's, where inline runs happen
        try:
            self._extend_mlserver()
        except IncompatibleMLServer as err:
            raise ModelLoadError(f"model {self.name}: {err}") from err
        self._payload_log = payload_log.start(self._config.payload_log, self.name, self.version)
        if self._payload_log is not None:  # outermost: it logs each request as its client sent it
            self.predict = self._payload_log.wrap(self.predict)
        self._spin_s = self._config.event_loop_spin_us / 1e6
        if self._spin_s and not self._runs_inline(1):
            logger.warning("%s: event_loop_spin_us has no effect: the event loop polls after the runs it makes "
                           "itself (under inline_below_ms), and this model's runs go to inference threads", self.name)
        elif self._spin_s:
            logger.info("%s: the event loop polls for %d us after each inline run; a CPU-utilization HPA counts that "
                        "polling as load, so autoscale this model on requests/s", self.name, self._config.event_loop_spin_us)
        logger.info(
            "loaded %s (version %s) with providers %s%s: inputs %s, outputs %s, %d run(s) at a time merging up to %d "
            "rows%s%s",
            self.name,
            self.version,
            self._runner.session.get_providers(),
            " and IOBinding" if self._runner.uses_io_binding else "",
            [(s.name, s.datatype, s.shape) for s in self._input_specs],
            [(s.name, s.datatype, s.shape) for s in self._output_specs],
            self._config.inference_threads,
            self._config.max_batch_rows,
            f", runs padded to {self._buckets} rows" if self._buckets else "",
            " (under MLServer's adaptive batching)" if self._mlserver_batching else "",
        )
        _freeze_loaded_heap()
        return True

    def _padding_buckets(self) -> list[int]:
        """The row counts runs are padded up to (see `batch_buckets`); [] for none."""
        if self._fixed_rows:
            return [self._fixed_rows]
        dynamic = all(spec.shape and spec.shape[0] == DYNAMIC for spec in self._graph_inputs)
        configured = self._config.batch_buckets
        if configured is None:
            buckets = [] if self._runner.device == "cpu" else gpu_buckets(self._config.max_batch_rows)
        else:
            buckets = sorted(set(configured))
        if buckets and not dynamic:
            if configured:
                raise BatchingConfigError("batch_buckets needs graph inputs whose first (batch) dimension is dynamic; "
                                          "remove batch_buckets for this graph")
            return []
        if self._runner.fixed_outputs and (len(buckets) != 1 or self._config.inference_threads != 1):
            raise BatchingConfigError(
                "cuda.enable_cuda_graph replays one captured shape from one run slot: set parameters.extra."
                "batch_buckets to a single row count (e.g. [8]) and inference_threads to 1"
            )
        return buckets

    def _give_tensorrt_a_profile(self, model_path: Path) -> None:
        """Rebuild the session with one TensorRT profile over the padded row counts (`tensorrt_batch_profile`).

        Only where TensorRT runs, runs are padded, and the settings name no trt_profile_* of their own.
        TensorRT builds engines for dynamic inputs at their first run, so the session it replaces built none.
        """
        options = self._config.tensorrt.extra_options
        if (not self._buckets or TENSORRT not in self._runner.session.get_providers()
                or any(key.startswith("trt_profile_") for key in options)):
            return
        profile = tensorrt_batch_profile(self._graph_inputs, max(self._buckets))
        if not profile:
            logger.warning("%s: TensorRT gets no batch profile (an input has another dynamic dimension, or a name with "
                           "',' or ':'): it builds an engine per new shape; set tensorrt.extra_options trt_profile_*",
                           self.name)
            return
        tensorrt = self._config.tensorrt.model_copy(update={"extra_options": {**options, **profile}})
        self._config = self._config.model_copy(update={"tensorrt": tensorrt})
        self._runner = SessionRunner(create_session(model_path, self._config), io_binding=self._config.io_binding)
        logger.info("%s: TensorRT profile for 1 to %d rows: %s", self.name, max(self._buckets), profile)

    def _advertise(self, graph_outputs: list[TensorSpec]) -> None:
        """The inputs and outputs clients see: the graph's, as pre/post-processing and batching change them."""
        self._input_specs = [
            _batchable(spec, self._fixed_rows) for spec in self._graph_inputs if spec.name != self._image_input
        ]
        if self._preprocessor is not None:
            self._input_specs.insert(0, TensorSpec(self._image_input, BYTES, (DYNAMIC,)))
        self._output_specs = [
            _batchable(spec, self._fixed_rows) for spec in graph_outputs if spec.name != self._scores_output
        ]
        if self._topk is not None:
            k = self._config.postprocess.k
            self._output_specs += [
                TensorSpec(LABELS_OUTPUT, BYTES, (DYNAMIC, k)),
                TensorSpec(SCORES_OUTPUT, "FP32", (DYNAMIC, k)),
            ]
        self._inputs_by_name = {spec.name: spec for spec in self._input_specs}
        self._datatypes = {spec.name: spec.datatype for spec in self._output_specs}
        self.inputs = [_metadata(spec) for spec in self._input_specs]
        self.outputs = [_metadata(spec) for spec in self._output_specs]

    def _start_workers(self) -> None:
        """The inference threads (behind the batcher), the CPU pool for pre/post-processing, the metrics."""
        self._metrics = ModelMetrics.for_model(self.name, self.version)
        workers = self._config.cpu_workers or max(1, int(cpu_limit()))
        self._cpu_pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"cpu-{self.name}")
        self._batcher = RowBatcher(
            self._run_rows,
            max_rows=self._config.max_batch_rows,
            max_runs=self._config.inference_threads,
            on_run=self._observe_run,
            input_errors=INPUT_ERRORS,
            thread_name=f"ort-{self.name}",
            warm_up=self._warm_up,
        )

    def _with_tensorrt_cache(self, model_path: Path) -> RuntimeSettings:
        """The settings with TensorRT's caches where the pod says (`$SLIPWAY_TENSORRT_CACHE_DIR`), keyed by the
        content: the verified manifest's digest, else the graph file's sha256."""
        if not os.environ.get(TENSORRT_CACHE_ENV, "").strip():
            return self._config
        folder = model_path.parent
        digest = None
        if self._config.verify_manifest and (folder / MANIFEST_NAME).is_file():
            with contextlib.suppress(ArtifactError):
                digest = read_manifest(folder).digest  # verified just before
        try:
            return with_tensorrt_cache(self._config, model=self.name, digest=digest or sha256_file(model_path))
        except SettingsError as err:
            raise ModelLoadError(f"model {self.name}: {err}") from err

    def _verify(self, folder: Path) -> None:
        """Refuse a folder that does not match its manifest, or not the digest a deployment pins."""
        try:
            pinned = pinned_digest(self.name, self.version)
        except ArtifactError as err:
            raise ModelLoadError(f"model {self.name}: {err}") from err
        if not (self._config.verify_manifest or pinned):
            return
        if not (folder / MANIFEST_NAME).is_file():
            raise ModelLoadError(
                f"model {self.name}: {folder} has no {MANIFEST_NAME}; publish it with `python -m export` "
                "or set parameters.extra.verify_manifest=false to serve an unverified model"
            )
        try:
            verify_artifact(folder, expected_digest=pinned)
        except ArtifactError as err:
            raise ModelLoadError(f"model {self.name}: refusing to load: {err}") from err

    def _configure_stages(self, graph_inputs: list[TensorSpec], graph_outputs: list[TensorSpec], folder: Path) -> None:
        self._preprocessor = self._topk = None
        self._image_input = self._scores_output = None
        if self._config.preprocess is not None:
            spec = _pick(graph_inputs, self._config.preprocess.input, "preprocess.input", "input")
            self._preprocessor = ImagePreprocessor(self._config.preprocess, spec)
            self._image_input = spec.name
        if self._config.postprocess is not None:
            spec = _pick(graph_outputs, self._config.postprocess.output, "postprocess.output", "output")
            clash = {LABELS_OUTPUT, SCORES_OUTPUT} & {s.name for s in graph_outputs if s.name != spec.name}
            if clash:
                raise ProcessingConfigError(f"postprocess: the graph already has outputs named {sorted(clash)}")
            self._topk = TopK(self._config.postprocess, spec, folder)
            self._scores_output = spec.name

    def _warm_up(self) -> None:
        """Run the session at the expected batch sizes before reporting ready: first runs are slow.

        It runs on every run slot's own thread: measured on an H200, the first run of each batch
        size on each new thread cost about a second (ONNX Runtime's CUDA provider keeps
        per-thread state), and a server warmed on its loading thread alone stalled for seconds
        under its first concurrent load. The fastest run also tells how long a row takes, which
        decides whether small requests run inline on the event loop (see `inline_below_ms`).
        """
        sizes = self._buckets or self._config.warmup_batch_sizes  # padded runs meet only the buckets
        for rows in sizes if self._config.warmup_runs else []:
            feeds = {spec.name: _zeros(spec, rows) for spec in self._graph_inputs}
            timings = []
            try:
                for _ in range(self._config.warmup_runs + 1):  # the first run is the slow one; time the rest
                    started = time.perf_counter()
                    self._runner.run(self._graph_output_names, feeds)
                    timings.append(time.perf_counter() - started)
            except Exception as err:
                raise ModelLoadError(
                    f"model {self.name}: warm-up at batch size {rows} failed ({err}); set "
                    "parameters.extra.warmup_batch_sizes to sizes the graph accepts, or warmup_runs to 0"
                ) from err
            per_row = min(timings[1:]) / rows  # the largest per-row time decides: inline must stay cheap
            with self._warm_up_lock:  # run slots warm up side by side
                self._seconds_per_row = max(per_row, self._seconds_per_row or 0.0)
            logger.info("warmed up %s at batch size %d: %.3f ms per run (first %.0f ms, thread %s)", self.name, rows,
                        1000 * min(timings[1:]), 1000 * timings[0], threading.current_thread().name)

    def _runs_inline(self, rows: int) -> bool:
        """Tiny runs go on the event loop: the hop to a thread and back would cost more than they do."""
        if self._seconds_per_row is None or self._runner.device != "cpu":
            return False
        return 1000 * self._seconds_per_row * rows < self._config.inline_below_ms

    def _run_inline(self, feeds: dict[str, np.ndarray], rows: int) -> list[np.ndarray]:
        started = time.perf_counter()
        outputs = self._run_rows(feeds, rows)
        self._observe_run(BatchStats(rows, time.perf_counter() - started, [0.0]))
        if self._spin_s:
            busy_poll.poller.keep_polling(self._spin_s)
        return outputs

    def _extend_mlserver(self) -> None:
        """This model's fast paths and guards in MLServer (`wrappers.mlserver_compat` checks each target first).

        A fast path whose target is missing fails the load, or with `fast_path_fallback` is left off
        (`wrappers.fast_paths`); shared memory needs the raw gRPC path and the REST parser, so never falls back."""
        if self._mlserver_batching:
            self._check_before_mlserver_batching()
        fallback = self._config.fast_path_fallback and not self._config.shared_memory
        if not self.settings.cache_enabled:  # MLServer's response cache serialises requests to JSON: lists only
            fast_paths.turn_on(fast_paths.GRPC_RAW, partial(grpc_raw.fast_models.add, self), fallback=fallback)
        fast_paths.turn_on(fast_paths.REST_JSON, rest_json.install, fallback=fallback)
        rest_bodies.install()  # every route's body within a limit, inflated off the event loop
        if self._config.fast_rest_route:
            fast_paths.turn_on(fast_paths.REST_INFER, partial(rest_infer.fast_models.add, self), fallback=fallback)
        if self._config.shared_memory:
            shared_memory_api.enable(self)
            grpc_raw.shared_memory_models.add(self)
        self._pin_at_first_request = self._config.pin_event_loop and fast_paths.turn_on(  # by then gRPC's poller runs
            fast_paths.PIN_EVENT_LOOP, cpu_pinning.check_poller_thread, fallback=fallback)

    def _check_before_mlserver_batching(self) -> None:
        """Check each request before MLServer merges it: a bad one must not fail its neighbours."""

        def check(payload: InferenceRequest) -> None:
            if self._shared_outputs(payload):
                raise InferenceError(
                    f"model {self.name} is served with MLServer's adaptive batching, which cannot write outputs "
                    "into shared memory; request the outputs in the response"
                )
            for request_input in self._checked_inputs(payload):
                array = self._decode(request_input)
                if location(request_input.parameters, request_input.name):
                    request_input.parameters = None  # read already: MLServer merges the data, not the location
                request_input.data = TensorData.model_construct(root=array.reshape(-1))

        mlserver_model.check_before_batching(self, check)

    async def unload(self) -> bool:
        grpc_raw.fast_models.discard(self)
        grpc_raw.shared_memory_models.discard(self)
        rest_infer.fast_models.discard(self)
        shared_memory_api.disable(self)
        cpu_pinning.pinned_models.discard(self)
        if getattr(self, "_batcher", None) is not None:  # MLServer also unloads a model whose load failed
            self._batcher.close()
        if getattr(self, "_cpu_pool", None) is not None:
            self._cpu_pool.shutdown(wait=True)
        if getattr(self, "_payload_log", None) is not None:
            self._payload_log.close()
        _thaw_heap_after_unload()
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        json_logs.enter_request(payload.id, self.name, self.version)
        if self._pin_at_first_request:
            self._pin_at_first_request = False
            cpu_pinning.pinned_models.add(self)
        request_inputs = self._checked_inputs(payload)
        wanted = self._requested_outputs(payload)
        shared_outputs = self._shared_outputs(payload)
        arrays = {request_input.name: self._decode(request_input) for request_input in request_inputs}
        loop = asyncio.get_running_loop()
        if self._preprocessor is not None:
            arrays[self._image_input] = await loop.run_in_executor(self._cpu_pool, self._preprocess, arrays[self._image_input])
        rows = _rows(arrays)
        graph_outputs = self._graph_outputs_for(wanted)
        try:
            if self._runs_inline(rows):
                outputs = self._run_inline(arrays, rows)
            else:
                outputs = await self._batcher.submit(arrays, rows)
        except INPUT_ERRORS as err:  # inputs the metadata allows but the graph does not (a Reshape, a Gather's index)
            raise InferenceError(f"model {self.name} could not run on this input: {_ort_message(err)}") from err
        results = dict(zip(self._graph_output_names, outputs))
        if self._topk is not None and self._scores_output in graph_outputs:
            labels, scores = await loop.run_in_executor(self._cpu_pool, self._postprocess, results[self._scores_output])
            results.update({LABELS_OUTPUT: labels, SCORES_OUTPUT: scores})
        as_arrays = not self._mlserver_batching and any(
            isinstance(request_input.data.root, np.ndarray) for request_input in request_inputs
        )
        return InferenceResponse.model_construct(  # every field built here is already valid
            model_name=self.name,
            model_version=self.version,
            id=payload.id,
            outputs=[
                self._write_shared(name, results[name], shared_outputs[name])
                if name in shared_outputs
                else _encode(name, results[name], self._datatypes[name], as_arrays)
                for name in wanted
            ],
        )

    # -- checking and decoding ---------------------------------------------------------------

    def _checked_inputs(self, payload: InferenceRequest) -> list[RequestInput]:
        names = [request_input.name for request_input in payload.inputs]
        if len(names) == len(self._inputs_by_name) and set(names) == self._inputs_by_name.keys():
            return payload.inputs
        expected = sorted(self._inputs_by_name)
        unknown = sorted(set(names) - set(expected))
        missing = sorted(set(expected) - set(names))
        if unknown or missing or len(names) != len(set(names)):
            raise InferenceError(
                f"model {self.name} takes inputs {expected}, got {names}: "
                f"send each of {expected} exactly once" + (f" (unknown: {unknown})" if unknown else "")
            )
        return payload.inputs

    def _decode(self, request_input: RequestInput) -> np.ndarray:
        spec = self._inputs_by_name[request_input.name]
        if request_input.datatype != spec.datatype:
            raise InferenceError(
                f"input {spec.name!r} must have datatype {spec.datatype}, got {request_input.datatype}"
            )
        shape = tuple(request_input.shape)
        if not spec.accepts_shape(shape):
            raise InferenceError(f"input {spec.name!r} must have shape {_shape_text(spec.shape)}, got {list(shape)}")
        row_limit = self._config.max_request_rows * (self.settings.max_batch_size if self._mlserver_batching else 1)
        if shape and shape[0] > row_limit:
            raise InferenceError(
                f"input {spec.name!r} has {shape[0]} rows, over this model's limit of {row_limit}; "
                "split the request (or raise parameters.extra.max_request_rows)"
            )
        if shape and shape[0] == 0:
            raise InferenceError(f"input {spec.name!r} has 0 rows (shape {list(shape)}); send at least one row")
        data = request_input.data.root if isinstance(request_input.data, TensorData) else request_input.data
        try:
            where = location(request_input.parameters, spec.name)
            if where is not None:
                flat = self._read_shared(where, data, spec, shape)
            elif isinstance(data, np.ndarray):  # the raw gRPC path: already a checked view
                flat = data
            elif isinstance(data, list) and data and isinstance(data[0], np.ndarray):  # merged by MLServer
                flat = np.concatenate(data)
            else:
                flat = from_json(data, spec.datatype, list(shape), spec.name)
            if flat.size != element_count(shape, spec.name):  # merged arrays: each was checked, their sum not yet
                raise TensorError(f"input {spec.name!r}: data holds {flat.size} values, which does not fill shape "
                                  f"{list(shape)} exactly ({element_count(shape, spec.name)} needed)")
        except (TensorError, SharedMemoryError) as err:
            raise InferenceError(str(err)) from err
        if self._config.reject_non_finite and flat.dtype.kind in _FLOAT_KINDS and not np.isfinite(flat).all():
            raise InferenceError(
                f"input {spec.name!r} holds NaN or infinite values; send finite numbers "
                "(or set parameters.extra.reject_non_finite=false)"
            )
        if spec.datatype == BYTES and spec.name != self._image_input:  # encoded images stay bytes
            flat = _as_text(flat, spec.name)
        return flat.reshape(shape)

    def _read_shared(self, where: Location, data: object, spec: TensorSpec, shape: tuple[int, ...]) -> np.ndarray:
        self._check_shared_memory_on()
        if (isinstance(data, np.ndarray) and data.size) or (isinstance(data, list) and data):
            raise SharedMemoryError(
                f"input {spec.name!r} names a shared-memory region and carries data too; send one or the other"
            )
        return REGIONS.read(where, spec.datatype, list(shape), spec.name)

    def _check_shared_memory_on(self) -> None:
        if not self._config.shared_memory:
            raise SharedMemoryError(
                f"model {self.name} does not use shared memory; send the tensors' data in the request "
                "(or set parameters.extra.shared_memory=true)"
            )

    def _requested_outputs(self, payload: InferenceRequest) -> list[str]:
        names = [spec.name for spec in self._output_specs]
        if not payload.outputs:
            return names
        wanted = [output.name for output in payload.outputs]
        unknown = sorted(set(wanted) - set(names))
        if unknown:
            raise InferenceError(f"model {self.name} has outputs {names}; unknown outputs requested: {unknown}")
        return wanted

    def _shared_outputs(self, payload: InferenceRequest) -> dict[str, Location]:
        """The requested outputs to write into shared memory, checked before the run."""
        try:
            wanted = {output.name: location(output.parameters, output.name) for output in payload.outputs or []}
            shared = {name: where for name, where in wanted.items() if where is not None}
            if shared:
                self._check_shared_memory_on()
                for name, where in shared.items():
                    REGIONS.region(where.region).start(where, name)
        except SharedMemoryError as err:
            raise InferenceError(str(err)) from err
        return shared

    def _write_shared(self, name: str, array: np.ndarray, where: Location) -> ResponseOutput:
        """Write an output into its region; the response says where, and carries no data."""
        datatype = self._datatypes[name]
        try:
            written = REGIONS.write(where, array, datatype, name)
        except SharedMemoryError as err:
            raise InferenceError(str(err)) from err
        parameters = Parameters(**{REGION: where.region, OFFSET: where.offset, BYTE_SIZE: written})
        return ResponseOutput.model_construct(
            name=name, shape=list(array.shape), datatype=datatype, parameters=parameters,
            data=TensorData.model_construct(root=[]),
        )

    def _graph_outputs_for(self, wanted: list[str]) -> set[str]:
        needed = {name for name in wanted if name in self._graph_output_names}
        if self._topk is not None and {LABELS_OUTPUT, SCORES_OUTPUT} & set(wanted):
            needed.add(self._scores_output)
        return needed

    # -- work on the pools -------------------------------------------------------------------

    def _preprocess(self, encoded: np.ndarray) -> np.ndarray:
        started = time.perf_counter()
        try:
            return self._preprocessor(encoded)
        except TensorError as err:
            raise InferenceError(str(err)) from err
        finally:
            self._metrics.preprocess_seconds.observe(time.perf_counter() - started)

    def _postprocess(self, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        started = time.perf_counter()
        try:
            return self._topk(scores)
        finally:
            self._metrics.postprocess_seconds.observe(time.perf_counter() - started)

    def _run_rows(self, feeds: dict[str, np.ndarray], rows: int) -> list[np.ndarray]:
        """One run on the inference thread, padded up to a bucket where there are buckets (a fixed batch size is one)."""
        run = partial(self._runner.run, self._graph_output_names)
        outputs = run(feeds) if not self._buckets or rows in self._buckets else run_in_buckets(run, feeds, rows, self._buckets)
        if self._classes is not None:
            self._classes.count(outputs)
        return outputs

    def _observe_run(self, stats: BatchStats) -> None:
        self._metrics.inference_seconds.observe(stats.run_seconds)
        self._metrics.batch_rows.observe(stats.rows)
        for seconds in stats.queue_seconds:
            self._metrics.queue_seconds.observe(seconds)


def _log_through_mlserver() -> None:
    """Send `wrappers.*` logs (providers chosen, fallbacks, warm-up) to MLServer's handlers and format."""
    ours, theirs = logging.getLogger("wrappers"), logging.getLogger("mlserver")
    for handler in theirs.handlers:
        if handler not in ours.handlers:
            ours.addHandler(handler)
    ours.setLevel(theirs.level or logging.INFO)


def _pick(specs: list[TensorSpec], name: str | None, setting: str, kind: str) -> TensorSpec:
    if name is None:
        if len(specs) != 1:
            raise ProcessingConfigError(f"the graph has {len(specs)} {kind}s {[s.name for s in specs]}: set {setting}")
        return specs[0]
    for spec in specs:
        if spec.name == name:
            return spec
    raise ProcessingConfigError(f"{setting} {name!r} is not a graph {kind}; it has {[s.name for s in specs]}")


def _batchable(spec: TensorSpec, fixed_rows: int | None) -> TensorSpec:
    """Advertise any row count when fixed-size batches are run in padded chunks."""
    if fixed_rows is None:
        return spec
    return TensorSpec(spec.name, spec.datatype, (DYNAMIC, *spec.shape[1:]))


def _zeros(spec: TensorSpec, rows: int) -> np.ndarray:
    shape = [rows if axis == 0 else (1 if dim == DYNAMIC else dim) for axis, dim in enumerate(spec.shape)]
    if spec.datatype == BYTES:
        return np.full(shape, "", dtype=object)
    return np.zeros(shape, dtype=V2_TO_NUMPY[spec.datatype])


def _encode(name: str, array: np.ndarray, datatype: str, as_array: bool) -> ResponseOutput:
    """A response output: a flat array for the raw gRPC path (packed by `tobytes`), else a list for JSON."""
    if datatype == BYTES:
        data = [item.decode() if isinstance(item, bytes) else str(item) for item in array.ravel()]
        if as_array:
            data = [item.encode() for item in data]
    else:
        data = array.reshape(-1) if as_array else array.ravel().tolist()
    return ResponseOutput.model_construct(
        name=name, shape=list(array.shape), datatype=datatype, data=TensorData.model_construct(root=data)
    )


def _metadata(spec: TensorSpec) -> MetadataTensor:
    return MetadataTensor(name=spec.name, datatype=spec.datatype, shape=list(spec.shape))
