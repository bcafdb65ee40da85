"""`OnnxRuntime`: an MLServer runtime that serves an ONNX model with ONNX Runtime.

Point a `model-settings.json` at it with
`"implementation": "wrappers.runtime.OnnxRuntime"` and `"parameters": {"uri": "./model.onnx"}`.
The inputs and outputs it advertises come from the graph itself; requests are checked
against them and refused with HTTP 400 (gRPC INVALID_ARGUMENT) naming what was expected.
A request carries at least one row: zero rows are refused alike for every graph, where
padded runs, image decoding or the graph itself would each have failed them another way.

This module is the model class alone, which puts its parts together (docs/internals.md lists them):
the session is this process's or the session host's (`wrappers.frontends.hosted`, which also has the unset
settings chosen where the model is timed, `wrappers.defaults.resolve`), requests are decoded by
`wrappers.protocol.v2_codec` under `wrappers.protocol.request_rules`, runs planned by `wrappers.running.planning` and merged on
threads of their own by `wrappers.running.batching` (tiny ones inline on the event loop), pre/post-processing runs on
a CPU pool (`wrappers.model.interface`), tensors may come and go through shared memory
(`wrappers.protocol.shared_tensors`), MLServer is met in `wrappers.mlserver_glue`, run metrics go to `wrappers.operations.metrics`
and the loaded heap is frozen out of the collector's passes (`wrappers.operations.heap`)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from mlserver import MLModel
from mlserver.errors import InferenceError, MLServerError
from mlserver.types import InferenceRequest, InferenceResponse, MetadataModelResponse, MetadataTensor, Parameters
from mlserver.utils import get_model_uri
from onnxruntime.capi.onnxruntime_pybind11_state import Fail, InvalidArgument
from prometheus_client import Histogram

from engine.cpu_limits import cpu_limit
from engine.runner import SessionRunner
from engine.tensor_specs import TensorSpec, describe
from slipway.artifact import ArtifactError
from slipway.runtime_settings import RuntimeSettings, SettingsError, check_model_name, parse_runtime_settings
from slipway.v2_wire import TensorError
from wrappers import mlserver_glue, process_state
from wrappers.defaults import gpu as gpu_choice
from wrappers.defaults import resolve as serving_defaults
from wrappers.defaults.choice import EVENT_LOOP_SPIN_US, MEASURED
from wrappers.frontends import hosted, with_pod_frontends
from wrappers.frontends.client import HostClient
from wrappers.mlserver_compat import IncompatibleMLServer, check_version
from wrappers.mlserver_compat import model as mlserver_model
from wrappers.model.artifact_checks import verify_folder, with_content_keyed_cache
from wrappers.model.interface import graph_outputs_for, interface
from wrappers.model.processing import LABELS_OUTPUT, SCORES_OUTPUT, ProcessingConfigError
from wrappers.operations import json_logs, payload_log
from wrappers.operations.heap import REFREEZE_AFTER_UNLOAD_S as REFREEZE_AFTER_UNLOAD_S  # re-exported: the tests wait on it
from wrappers.operations.heap import freeze_loaded_heap, thaw_heap_after_unload
from wrappers.operations.metrics import BatchStats, ModelMetrics, PredictedClasses
from wrappers.protocol.request_rules import ort_message
from wrappers.protocol.shared_tensors import SharedTensors
from wrappers.protocol.v2_codec import RequestDecoder, encode, let_go_of_json_data, rows
from wrappers.repository_api import RepositoryApiError
from wrappers.running import busy_poll, cpu_pinning
from wrappers.running import planning as run_planning
from wrappers.running.batching import RowBatcher, run_in_buckets
from wrappers.running.bucket_sessions import BucketRunner
from wrappers.running.planning import BatchingConfigError
from wrappers.running.warm_up import WarmUp, WarmUpError
from wrappers.running.width import WidthRunner
from wrappers.transport.shm_endpoints import SharedMemoryEndpoints

logger = logging.getLogger(__name__)

WELLKNOWN_MODEL_FILES = ["model.onnx"]
# What ONNX Runtime raises when a run fails on what it was fed. The session loaded and warmed up, so a
# run that fails with either failed on the request's input: HTTP 400, and merged requests are rerun apart.
INPUT_ERRORS = (InvalidArgument, Fail)
# What a load can be refused for, each in a message that says what to change; the model's name goes first.
_REFUSALS = (
    SettingsError,
    IncompatibleMLServer,
    RepositoryApiError,
    mlserver_glue.ProcessError,
    ArtifactError,
    BatchingConfigError,
    ProcessingConfigError,
    WarmUpError,
)


class ModelLoadError(MLServerError):
    """The artifact cannot be served; the message says which file or setting is wrong."""

    def __init__(self, msg: str):
        super().__init__(msg, status_code=500)


class OnnxRuntime(SharedMemoryEndpoints, MLModel):
    """Serve one ONNX graph: checked inputs, merged runs, optional CPU stages, metrics."""

    # Set at load (`_build`), read by every request.
    _config: RuntimeSettings
    _runner: SessionRunner | WidthRunner | hosted.HostRunner | BucketRunner
    _input_specs: list[TensorSpec]
    _output_specs: list[TensorSpec]
    _buckets: list[int]
    _batcher: RowBatcher | HostClient
    _payload_log: payload_log.PayloadLog | None

    async def load(self) -> bool:
        mlserver_glue.log_through_mlserver()
        try:
            check_model_name(self.name)
            self._config = with_pod_frontends(  # $SLIPWAY_FRONTENDS, set by the manifests, wins
                parse_runtime_settings(self.settings.parameters.extra if self.settings.parameters else None)
            )
            check_version()
            # MLServer's adaptive batching (max_batch_size/max_batch_time) wraps predict before load().
            self._mlserver_batching = mlserver_model.uses_adaptive_batching(self)
            mlserver_glue.check_process(self.name, self._config.shared_memory)
            self._build(Path(await get_model_uri(self.settings, wellknown_filenames=WELLKNOWN_MODEL_FILES)))
        except _REFUSALS as err:
            raise ModelLoadError(f"model {self.name}: {err}") from err
        logger.info(
            "loaded %s (version %s) with providers %s%s: inputs %s, outputs %s, %d run(s) at a time merging up to %d rows%s%s",
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
        freeze_loaded_heap()
        return True

    def _build(self, model_path: Path) -> None:
        """The verified session, its run plans, the interface, the warmed-up workers, then MLServer's extensions."""
        verify_folder(model_path.parent, self.name, self.version, self._config.verify_manifest)
        runner = self._use(with_content_keyed_cache(self._config, self.name, model_path), model_path)
        self._graph_inputs, graph_outputs = describe(runner.session)
        self._graph_output_names = [spec.name for spec in graph_outputs]
        chosen = hosted.chosen_settings(
            self._config,
            runner,
            self._graph_inputs,
            graph_outputs,
            model=self.name,
            version=self.version,
            mlserver_batching=self._mlserver_batching,
            model_path=model_path,
        )
        self._chosen = chosen.choices  # the unset settings, chosen from the model timed here (`metadata`)
        if chosen.rebuild_session:  # other intra-op threads than the session's, or a second session (run_width)
            self._use(chosen.settings, model_path, keep_lone_session=chosen.keeps_lone_session)
        self._config = chosen.settings
        plan = run_planning.plan_runs(
            self._config,
            self._graph_inputs,
            graph_outputs,
            merging=self._mlserver_batching or self._config.max_batch_rows > 1,
            on_cpu=self._runner.device == "cpu",
            fixed_outputs=self._runner.fixed_outputs,
            providers=self._runner.session.get_providers(),
            model=self.name,
        )
        self._buckets = plan.buckets
        if plan.settings is not self._config:  # TensorRT builds engines at a first run: the session replaced built none
            self._use(plan.settings, model_path)
        bucketed = gpu_choice.plan_buckets(
            model_path,
            self._config,
            self._buckets,
            self._runner.session.get_providers(),
            self._graph_inputs,
            self._graph_output_names,
            model=self.name,
            version=self.version,
        )
        if bucketed is not None:  # a session per bucket, each meeting one shape, its kernels' settings timed here
            self._config, self._runner = bucketed.settings, bucketed.runner
            self._chosen = {**self._chosen, **bucketed.choices}
        served = interface(self._config, self._graph_inputs, graph_outputs, plan.fixed_rows, model_path.parent)
        self._preprocessor, self._image_input = served.stages.preprocessor, served.stages.image_input
        self._topk, self._scores_output = served.stages.topk, served.stages.scores_output
        self._input_specs, self._output_specs = served.inputs, served.outputs
        self.inputs, self.outputs = (
            [MetadataTensor(name=t.name, datatype=t.datatype, shape=list(t.shape)) for t in specs]
            for specs in (served.inputs, served.outputs)
        )
        self._datatypes = {spec.name: spec.datatype for spec in self._output_specs}
        self._shared = SharedTensors(self.name, self._config.shared_memory)
        self._decoder = RequestDecoder(
            self.name,
            self._input_specs,
            self._output_specs,
            reject_non_finite=self._config.reject_non_finite,
            row_limit=run_planning.request_row_limit(
                self._config.max_request_rows, self.settings.max_batch_size, self._mlserver_batching
            ),
            image_input=self._image_input,
            shared=self._shared,
        )
        self._classes = PredictedClasses.for_outputs(
            process_state.current().metrics, self.name, self.version, graph_outputs, self._scores_output
        )
        sizes = run_planning.warm_up_sizes(self._buckets, self._config.warmup_batch_sizes, self._config.warmup_runs)
        self._warm = WarmUp(self.name, self._graph_inputs, self._graph_output_names, sizes, self._config.warmup_runs)
        self._start_workers()  # every run slot warms up on its own thread here
        if self._mlserver_batching:
            mlserver_glue.check_before_mlserver_batching(self, self._decoder, self._shared)
        self._pin_at_first_request = mlserver_glue.extend_mlserver(self, self._config)
        self._payload_log = payload_log.start(self._config.payload_log, self.name, self.version, process_state.current().metrics)
        if self._payload_log is not None:  # outermost: it logs each request as its client sent it
            # an instance attribute shadows the method (MLServer calls self.predict); setattr: mypy forbids assigning it
            setattr(self, "predict", self._payload_log.wrap(self.predict))  # noqa: B010
        self._polling = busy_poll.for_model(
            self._config,
            chosen=self._chosen[EVENT_LOOP_SPIN_US].source == MEASURED,
            inline=self._runs_inline(1),
            model=self.name,
            version=self.version,
        )

    def _use(
        self, config: RuntimeSettings, model_path: Path, *, keep_lone_session: bool = False
    ) -> SessionRunner | WidthRunner | hosted.HostRunner:
        """Serve with a runner for these settings (at load, and again where a plan changed them); returns it."""
        self._config, runner = hosted.runner_for(
            config, model_path, getattr(self, "_runner", None), keep_lone_session=keep_lone_session
        )
        self._runner = runner
        return runner

    def _start_workers(self) -> None:
        """The inference threads (behind the batcher, each warmed up), the CPU pool for pre/post-processing, the metrics."""
        self._metrics = ModelMetrics.for_model(process_state.current().metrics, self.name, self.version)
        workers = self._config.cpu_workers or max(1, int(cpu_limit()))
        self._cpu_pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"cpu-{self.name}")
        runner = self._runner
        if isinstance(runner, hosted.HostRunner):  # runs go to the session host, merged there
            self._batcher = hosted.start(runner, self._metrics)
            return
        self._batcher = RowBatcher(
            self._run_rows,
            max_rows=self._config.max_batch_rows,
            max_runs=self._config.inference_threads,
            on_run=self._metrics.observe_run,
            input_errors=INPUT_ERRORS,
            thread_name=f"ort-{self.name}",
            warm_up=lambda: self._warm.run(runner),
            buckets=self._buckets,
        )

    def _runs_inline(self, rows: int) -> bool:
        return run_planning.runs_inline(
            self._warm.seconds_per_row, self._runner.device == "cpu", rows, self._config.inline_below_ms
        )

    async def metadata(self) -> MetadataModelResponse:
        """MLServer's answer, with each setting chosen at load and where it came from (`wrappers.defaults.resolve`)."""
        response = await super().metadata()
        known = response.parameters.model_dump(exclude_none=True) if response.parameters else {}
        response.parameters = Parameters(**known, **serving_defaults.metadata_parameters(self._chosen))
        return response

    async def unload(self) -> bool:
        mlserver_glue.withdraw(self)
        if getattr(self, "_batcher", None) is not None:  # MLServer also unloads a model whose load failed
            self._batcher.close()
        if getattr(self, "_cpu_pool", None) is not None:
            self._cpu_pool.shutdown(wait=True)
        log = getattr(self, "_payload_log", None)
        if log is not None:
            log.close()
        thaw_heap_after_unload()
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        json_logs.enter_request(payload.id, self.name, self.version)
        if self._pin_at_first_request:
            self._pin_at_first_request = False
            cpu_pinning.pinned_models().add(self)
        request_inputs = self._decoder.checked_inputs(payload)
        wanted = self._decoder.requested_outputs(payload)
        shared_outputs = self._shared.outputs(payload)
        arrays = {request_input.name: self._decoder.decode(request_input) for request_input in request_inputs}
        as_arrays = not self._mlserver_batching and any(isinstance(item.data.root, np.ndarray) for item in request_inputs)
        if self._payload_log is None and not self._mlserver_batching:  # else the log or the batch reads them later
            let_go_of_json_data(request_inputs)
        loop = asyncio.get_running_loop()
        if self._preprocessor is not None:
            arrays[self._image_input] = await loop.run_in_executor(
                self._cpu_pool, self._on_cpu, self._preprocessor, self._metrics.preprocess_seconds, arrays[self._image_input]
            )
        count = rows(arrays)
        graph_outputs = graph_outputs_for(wanted, self._graph_output_names, self._scores_output)
        try:
            inline = self._runs_inline(count)
            outputs = self._run_inline(arrays, count) if inline else await self._batcher.submit(arrays, count)
        except INPUT_ERRORS as err:  # inputs the metadata allows but the graph does not (a Reshape, a Gather's index)
            raise InferenceError(f"model {self.name} could not run on this input: {ort_message(err)}") from err
        results = dict(zip(self._graph_output_names, outputs))
        if self._topk is not None and self._scores_output in graph_outputs:
            labels, scores = await loop.run_in_executor(
                self._cpu_pool, self._on_cpu, self._topk, self._metrics.postprocess_seconds, results[self._scores_output]
            )
            results.update({LABELS_OUTPUT: labels, SCORES_OUTPUT: scores})
        return InferenceResponse.model_construct(  # every field built here is already valid
            model_name=self.name,
            model_version=self.version,
            id=payload.id,
            outputs=[
                self._shared.write(name, results[name], self._datatypes[name], shared_outputs[name])
                if name in shared_outputs
                else encode(name, results[name], self._datatypes[name], as_arrays)
                for name in wanted
            ],
        )

    def _on_cpu(self, stage: Callable[[np.ndarray], Any], seconds: Histogram, tensor: np.ndarray) -> Any:
        """A pre/post-processing stage on the CPU pool, timed; what it refuses in a request (TensorError) is HTTP 400."""
        started = time.perf_counter()
        try:
            return stage(tensor)
        except TensorError as err:
            raise InferenceError(str(err)) from err
        finally:
            seconds.observe(time.perf_counter() - started)

    def _run_rows(self, feeds: dict[str, np.ndarray], rows: int) -> list[np.ndarray]:
        """One run on the inference thread, padded up to a bucket where there are buckets (a fixed batch size is one)."""
        run = partial(self._runner.run, self._graph_output_names)
        outputs = run(feeds) if not self._buckets or rows in self._buckets else run_in_buckets(run, feeds, rows, self._buckets)
        if self._classes is not None:
            self._classes.count(outputs)
        return outputs

    def _run_inline(self, feeds: dict[str, np.ndarray], rows: int) -> list[np.ndarray]:
        self._polling.run_started()
        started = time.perf_counter()
        outputs = self._run_rows(feeds, rows)
        self._metrics.observe_run(BatchStats(rows, time.perf_counter() - started, [0.0]))
        self._polling.run_ended()
        return outputs
