"""Typed runtime settings, read once from `model-settings.json` `parameters.extra`, and the model's name.

Unknown keys are refused at load, so a typo in a manifest fails loudly instead of
silently serving with defaults.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

# The implementation the settings file names and the model-name rule are the artifact contract's (shared core).
from slipway.artifact import MODEL_NAME, RUNTIME_IMPLEMENTATION
from slipway.cli import one_line

GraphOptimizationLevel = Literal["disable", "basic", "extended", "all"]
# Where the pod keeps TensorRT's engine and timing caches: the gpu overlay mounts a volume there and sets it
# (engine.tensorrt.with_tensorrt_cache); it wins over the artifact's engine_cache_path/timing_cache_path.
TENSORRT_CACHE_ENV = "SLIPWAY_TENSORRT_CACHE_DIR"
OptionValue = str | int | float | bool


class SettingsError(ValueError):
    """`parameters.extra` does not describe valid runtime settings."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TensorrtOptions(_Strict):
    """TensorRT provider options; engines take minutes to build, so cache them on a volume.

    Where the pod sets SLIPWAY_TENSORRT_CACHE_DIR (the gpu overlay does), both caches go under it, over the
    artifact's own paths.
    """

    device_id: int = Field(default=0, ge=0, description="The GPU to build and run engines on.")
    fp16: bool = Field(default=False, description="Let TensorRT pick FP16 kernels (trt_fp16_enable).")
    int8: bool = Field(default=False, description="Enable INT8 (trt_int8_enable); a QDQ graph carries its own scales.")
    engine_cache_path: str | None = Field(
        default=None, description="Folder for built engines; setting it turns the engine cache on."
    )
    timing_cache_path: str | None = Field(
        default=None, description="Folder for the kernel timing cache; setting it turns that cache on."
    )
    workspace_size_bytes: int | None = Field(default=None, gt=0, description="trt_max_workspace_size.")
    extra_options: dict[str, OptionValue] = Field(
        default_factory=dict, description="Any other TensorRT provider option, passed through as is."
    )

    def provider_options(self) -> dict[str, str]:
        options: dict[str, OptionValue] = {
            "device_id": self.device_id,
            "trt_fp16_enable": self.fp16,
            "trt_int8_enable": self.int8,
        }
        if self.engine_cache_path:
            options.update(trt_engine_cache_enable=True, trt_engine_cache_path=self.engine_cache_path)
        if self.timing_cache_path:
            options.update(trt_timing_cache_enable=True, trt_timing_cache_path=self.timing_cache_path)
        if self.workspace_size_bytes:
            options["trt_max_workspace_size"] = self.workspace_size_bytes
        options.update(self.extra_options)
        return _as_option_strings(options)


class CudaOptions(_Strict):
    """CUDA provider options."""

    device_id: int = Field(default=0, ge=0, description="The GPU to run on.")
    cudnn_conv_algo_search: Literal["EXHAUSTIVE", "HEURISTIC", "DEFAULT"] = Field(
        default="EXHAUSTIVE",
        description="How cuDNN picks convolution algorithms (EXHAUSTIVE: timed at a session's first run of each "
        "new input shape). Unset, where runs get a session per bucket: chosen at load by timing the largest bucket "
        "under EXHAUSTIVE and HEURISTIC (wrappers.defaults.gpu).",
    )
    enable_cuda_graph: bool | None = Field(
        default=None,
        description="Capture the graph once per padded row count and replay it (needs IOBinding and a session per "
        "bucket, or a single bucket). None (unset): where runs get a session per bucket, chosen at load by timing "
        "the smallest bucket with and without a graph (wrappers.defaults.gpu); else off.",
    )
    gpu_mem_limit_bytes: int | None = Field(
        default=None, gt=0, description="gpu_mem_limit of CUDA's memory arena; None: no limit."
    )
    extra_options: dict[str, OptionValue] = Field(
        default_factory=dict,
        description='Any other CUDA provider option, passed through as is ({"use_tf32": 0}: full fp32).',
    )

    def provider_options(self) -> dict[str, str]:
        options: dict[str, OptionValue] = {
            "device_id": self.device_id,
            "cudnn_conv_algo_search": self.cudnn_conv_algo_search,
            "enable_cuda_graph": bool(self.enable_cuda_graph),
        }
        if self.gpu_mem_limit_bytes:
            options["gpu_mem_limit"] = self.gpu_mem_limit_bytes
        options.update(self.extra_options)
        return _as_option_strings(options)


def _as_option_strings(options: dict[str, OptionValue]) -> dict[str, str]:
    """ONNX Runtime wants provider options as strings, booleans as "1"/"0"."""
    return {key: ("1" if value else "0") if isinstance(value, bool) else str(value) for key, value in options.items()}


class ImagePreprocessing(_Strict):
    """Decode encoded images (PNG, JPEG, ... sent as BYTES) into the tensor the graph expects.

    The graph input keeps its name; clients send one encoded image per element
    (raw bytes over gRPC, base64 strings over REST JSON).
    """

    input: str | None = Field(default=None, description="Graph input to feed; None: the model's only input.")
    layout: Literal["NHWC", "NCHW"] | None = Field(
        default=None, description="None: read from the graph (channels of 1 or 3 at the end: NHWC)."
    )
    size: tuple[int, int] | None = Field(
        default=None, description="(height, width) to resize to; None: the graph's fixed spatial size."
    )
    scale: float = Field(default=1 / 255, description="Pixels (0..255) are multiplied by this first...")
    mean: list[float] = Field(default_factory=lambda: [0.0], description="...then this is subtracted...")
    std: list[float] = Field(default_factory=lambda: [1.0], description="...and the result divided by this.")
    max_image_bytes: int = Field(default=16 << 20, gt=0, description="Larger encoded images are refused.")

    @model_validator(mode="after")
    def _check_normalisation(self) -> ImagePreprocessing:
        if any(value == 0 for value in self.std):
            raise ValueError("std must not contain 0")
        return self


class TopKPostprocessing(_Strict):
    """Turn the graph's scores into the k best labels with their scores."""

    output: str | None = Field(default=None, description="Graph output holding scores; None: the only output.")
    k: int = Field(default=5, ge=1, description="How many labels and scores to return per row.")
    labels_file: str | None = Field(
        default=None, description="Text file beside model.onnx, one label per line; None: class indices."
    )
    softmax: bool = Field(default=False, description="Apply a softmax first (for graphs that output logits).")


class GraphStage(_Strict):
    """A stage that is an ONNX graph of its own: layers `export convert --split` cut from the model's ends.

    Served only by a split graph's CPU nodes (`render --split cpu-gpu`), each running its graph on the
    tensors the node before it answered; the one-pod runtime serves model.onnx, which holds the stages itself.
    """

    graph: str = Field(
        description="ONNX file inside the model folder: its inputs are the tensors the node receives, its "
        "outputs the tensors it answers (named like the next node's inputs)."
    )


class PayloadLogging(_Strict):
    """Send each request and its response (or a sampled share) as CloudEvents to an HTTP collector.

    Off the request path (`wrappers.operations.payload_log`): a request only hands its payloads to a bounded queue, and one
    background thread builds and sends the events; a full queue, a slow or failing collector drops events
    (counted in slipway_payload_events_dropped_total) and never slows or fails an inference. As Seldon's
    executor and KServe's logger do: binary-mode CloudEvents, ce-id the request id, ce-type
    `<prefix>.inference.request` / `.response`, the V2 request or response as JSON in the body.
    """

    url: str = Field(
        description="The collector's http:// or https:// URL, which each event is POSTed to "
        "(e.g. a Knative broker, Seldon's request logger, KServe's message-dumper).",
        pattern=r"^https?://[^/\s]+",
    )
    sample: float = Field(
        default=1.0,
        ge=0,
        le=1,
        description="Share of requests logged, decided per request (a request's response goes with it); 1: all.",
    )
    max_bytes: int = Field(
        default=256 << 10,
        ge=1024,
        description="Largest event body sent; a request or response over it is sent with its tensors' names, "
        "shapes and datatypes but without their data, and the event says truncated=true.",
    )
    redact: list[str] = Field(
        default_factory=list,
        description="What never leaves the pod: a tensor name (its data), a parameter or header name (at any "
        'depth), or a path through the body such as "inputs/image" or "parameters/headers/x-user" '
        "(names compare case-insensitively). Authorization, Cookie, Proxy-Authorization and X-Api-Key headers are "
        "always redacted.",
    )
    queue_size: int = Field(
        default=1000,
        ge=1,
        le=100_000,
        description="Requests waiting to be sent at most; past it a request's events are dropped (reason "
        "queue_full) instead of holding memory or the request.",
    )
    timeout_s: float = Field(
        default=2.0,
        gt=0,
        le=60,
        description="Per event: connecting and the collector's answer. An event that fails is dropped, never "
        "retried, and the next events are dropped for backoff_s (reason collector_down) so that a collector "
        "that is down costs one timeout, not one per event.",
    )
    backoff_s: float = Field(
        default=5.0, ge=0, le=600, description="How long sending pauses after a failed event (see timeout_s)."
    )
    event_types: Literal["seldon", "kserve"] = Field(
        default="seldon",
        description="ce-type prefix: seldon sends io.seldon.serving.inference.request/.response (as Seldon's "
        "executor, which no-engine predictors lack), kserve org.kubeflow.serving.inference.request/.response.",
    )
    source: str | None = Field(
        default=None,
        description="ce-source; None: /namespaces/NAMESPACE/seldondeployments/DEPLOYMENT/predictors/PREDICTOR from "
        "the pod's SLIPWAY_NAMESPACE, SELDON_DEPLOYMENT_ID and PREDICTOR_ID (where unset: the model's name for the "
        "deployment, 'unknown' else).",
    )


class RuntimeSettings(_Strict):
    """How the ONNX Runtime session is built and how requests are checked."""

    providers: list[str] | None = Field(
        default=None,
        description="Execution providers in order of preference; None: TensorRT, CUDA where installed, then CPU.",
    )
    tensorrt: TensorrtOptions = Field(default_factory=TensorrtOptions, description="TensorRT provider options.")
    cuda: CudaOptions = Field(default_factory=CudaOptions, description="CUDA provider options.")
    intra_op_threads: int | None = Field(
        default=None,
        ge=0,
        description="Threads inside one operator. None (unset): chosen at load (see the serving page): 1 where runs "
        "go inline, else the CPU limit's whole CPUs.",
    )
    busy_intra_op_threads: int | None = Field(
        default=None,
        ge=0,
        description="Threads inside one operator for a run that starts while another run is in flight (a second "
        "session of the model on the CPU); a lone run keeps intra_op_threads. 0: every run uses intra_op_threads. "
        "None (unset): chosen at load (see the serving page): 1 where runs of several threads go to threads, so a "
        "lone request gets every core and runs side by side under load get the cores' better rows per CPU second.",
    )
    inter_op_threads: int = Field(
        default=1, ge=0, description="Threads running independent graph branches (with execution_mode parallel)."
    )
    execution_mode: Literal["sequential", "parallel"] = Field(
        default="sequential", description="parallel runs independent graph branches on inter_op_threads."
    )
    allow_spinning: bool = Field(
        default=False,
        description="Let idle intra-op threads spin between operators: a little faster for big models on idle "
        "cores, but the spinning burns CPU the server's own threads need (off by default).",
    )
    spin_within_runs: bool | None = Field(
        default=None,
        description="Let intra-op threads spin between operators only while a run is in flight, stopping the moment "
        "the last run returns (ONNX Runtime's force_spinning_stop): a run of several threads no longer waits at "
        "every operator for a sleeping thread to wake, and no CPU is spent between requests. None (unset): chosen at "
        "load (see the serving page): on where a lone run has several intra-op threads on the CPU. allow_spinning: "
        "true spins between runs too.",
    )
    graph_optimization_level: GraphOptimizationLevel = Field(
        default="all", description="ONNX Runtime's graph optimizations, applied when the session is built."
    )
    verify_manifest: bool = Field(default=True, description="Check every file against manifest.json at load.")
    io_binding: Literal["auto", "on", "off"] = Field(
        default="auto", description="Bind inputs and outputs to the device (auto: on when a GPU provider runs)."
    )
    inference_threads: int = Field(
        default=1,
        ge=1,
        description="Runs of the session allowed side by side. Unset: chosen at load (see the serving page) as the "
        "runs of intra_op_threads each that fit the CPU limit, plus one where several fit; 1 where nothing was "
        "measured. 1 gives each run every intra-op thread: lowest latency. For throughput under load: one or two "
        "more than the cores, with intra_op_threads 1 and max_batch_rows of a few rows (MobileNetV2 on 2 cores: 3 "
        "and 2), so that while one run's answers travel back the other runs keep every core busy.",
    )
    max_batch_rows: int = Field(
        default=1,
        ge=1,
        description="Merge requests that queue while the session is busy into one run of up to this many rows "
        "(1: never merge). No waiting window: an idle session runs a request at once. Unset: chosen at load from "
        "the model's measured time per row at 1, 2, 4 and 8 rows (see the serving page); 1 where nothing was "
        "measured or requests cannot be merged.",
    )
    batch_buckets: list[int] | None = Field(
        default=None,
        description="Row counts every run is padded up to with zero rows (their outputs dropped); a request with "
        "more rows than the largest runs in chunks of it. A GPU then meets only these shapes, each tuned at "
        "warm-up (cuDNN's algorithm search takes about a second per new shape), instead of stalling on the first "
        "request of every new size. None: on a GPU, powers of two up to max_batch_rows or 32, whichever is "
        "larger; on the CPU, none (padding costs CPU time there). []: never pad. Only for graphs whose batch "
        "dimension is dynamic.",
    )
    session_per_bucket: bool | None = Field(
        default=None,
        description="Give every bucket of batch_buckets a session of its own, so that each session meets one input "
        "shape: ONNX Runtime's CUDA convolutions re-plan (and under EXHAUSTIVE, re-time) their kernels at every "
        "change of shape from one run to the next, which merged runs of mixed sizes cause at almost every run. "
        "Costs a copy of the weights per bucket (and run slot) on the device. None (unset): on where runs are padded "
        "to several buckets and CUDA runs them (TensorRT builds one engine over every bucket from its profile).",
    )
    inline_below_ms: float = Field(
        default=0.5,
        ge=0,
        description="Run on the event loop itself when warm-up says a request takes less than this: for tiny "
        "models a hop to the inference thread costs more than the run (0: always use the thread). Unset: chosen at "
        "load as 16 measured hops to a thread and back where a 1-row run is shorter, else 0; 0.5 where nothing "
        "was measured.",
    )
    max_request_rows: int = Field(default=1024, ge=1, description="Requests with more rows are refused (HTTP 400).")
    reject_non_finite: bool = Field(default=True, description="Refuse float inputs holding NaN or infinity.")
    frontends: int = Field(
        default=1,
        ge=1,
        le=64,
        strict=True,
        description="Serving processes (each its own event loop, gRPC and REST servers, on the same ports) that "
        "decode requests and hand their rows through shared memory to one process owning the session, which merges "
        "them across front ends into runs (wrappers.frontends): for a GPU that one event loop cannot keep busy. "
        "Slipway's launcher (python -m wrappers.launch, slipway serve, the images) starts the session host and "
        "the front ends for an artifact folder that sets it. 1 (default): one process, no hand-off.",
    )
    shared_memory: bool = Field(
        default=False,
        description="Serve the V2 system shared-memory extension: clients on the same host (or pod) register "
        "regions of /dev/shm and send tensors as region, offset and size. Off by default: it lets network clients "
        "map the pod's shared memory and have outputs written into it.",
    )
    fast_rest_route: bool = Field(
        default=True,
        description="Answer REST infer requests by Slipway's route (wrappers.transport.rest_infer): the same answers as "
        "MLServer's, for ~0.1 ms less of the event loop per request. false: MLServer's FastAPI route.",
    )
    pin_event_loop: bool = Field(
        default=False,
        description="Keep the event loop and gRPC's poller thread on one CPU (wrappers.running.cpu_pinning): lower latency "
        "at low load over gRPC (digits at concurrency 1: 10-17% lower p50), 2-7% fewer requests/s under "
        "load. Only for CPUs the pod has to itself: a VM's, or a Guaranteed pod's under the static CPU manager.",
    )
    fast_path_fallback: bool = Field(
        default=False,
        description="Where the installed MLServer lacks what a fast path extends (the raw gRPC converters, the "
        "simdjson body parser, the fast REST route, the gRPC poller's pin; see the internals page), serve without "
        "that path, with an ERROR log and slipway_fast_path_enabled{path} at 0, instead of failing the load. "
        "The body limit and the repository API guard never fall back.",
    )
    event_loop_spin_us: int | None = Field(
        default=None,
        ge=0,
        le=100_000,
        description="After each request run inline, keep the event loop polling for this many microseconds instead "
        "of sleeping (wrappers.running.busy_poll): lower latency at low load where idle CPUs halt (digits at concurrency "
        "1 with 1000: gRPC p50 -20%, REST -12%), the same under load. Costs up to a core while requests keep "
        "coming, which a CPU-based HPA counts: autoscale on requests/s with it. 0: off. None: chosen at load "
        "(wrappers.defaults.choice): 2000 where runs are inline on 2 or more CPUs, polling only while requests come "
        "back to back within the window (wrappers.running.poll_gate), else 0.",
    )
    warmup_batch_sizes: list[int] = Field(
        default_factory=lambda: [1],
        description="Batch sizes run at load, on every run slot, before the model reports ready (where runs are "
        "padded to batch_buckets, the buckets instead).",
    )
    warmup_runs: int = Field(default=2, ge=0, description="Runs per warm-up batch size (0: no warm-up).")
    cpu_workers: int | None = Field(default=None, ge=1, description="Threads for pre/post-processing; None: the CPU limit.")
    preprocess: ImagePreprocessing | GraphStage | None = Field(
        default=None,
        description="Decode encoded images into the graph's input; None: clients send tensors. A GraphStage "
        "(an object with graph, written by export convert --split) runs only as a split's transformer node.",
    )
    postprocess: TopKPostprocessing | GraphStage | None = Field(
        default=None,
        description="Answer the top-k labels and scores; None: the graph's own outputs. A GraphStage runs only "
        "as a split's output-transformer node.",
    )
    split_model: str | None = Field(
        default=None,
        description="The graph a split's model node serves between the preprocess and postprocess graphs "
        "(export convert --split writes it beside model.onnx, which holds all three); None: model.onnx.",
    )
    payload_log: PayloadLogging | None = Field(
        default=None,
        description="Send requests and responses as CloudEvents to a collector, off the request path; None: off.",
    )

    @model_validator(mode="after")
    def _check_warmup(self) -> RuntimeSettings:
        if any(size < 1 for size in self.warmup_batch_sizes):
            raise ValueError("warmup_batch_sizes must hold positive batch sizes")
        if self.batch_buckets is not None and any(size < 1 for size in self.batch_buckets):
            raise ValueError("batch_buckets must hold positive row counts (or be [] for no padding)")
        return self

    def busy_waiting(self) -> list[str]:
        """The settings that keep a CPU busy while no request is being worked on: a CPU-utilization autoscaler
        reads that as load (rendering the manifests warns of it)."""
        found = []
        if self.event_loop_spin_us:
            found.append(f"event_loop_spin_us: {self.event_loop_spin_us} (the event loop polls after each inline run)")
        if self.allow_spinning and self.intra_op_threads != 1:
            found.append("allow_spinning: true (ONNX Runtime's idle intra-op threads spin)")
        return found


def parse_runtime_settings(extra: dict[str, Any] | None) -> RuntimeSettings:
    """Validate `parameters.extra`, turning pydantic's report into one readable message."""
    try:
        return RuntimeSettings.model_validate(extra or {})
    except ValidationError as err:
        raise SettingsError(f"invalid parameters.extra in model-settings.json: {one_line(err, whole='extra')}") from err


def check_model_name(name: str) -> None:
    """Refuse a name clients would have to escape in URLs: unescaped, a space or '/' breaks the request's path."""
    if not MODEL_NAME.fullmatch(name):
        raise SettingsError(
            f"model name {name!r} cannot appear unescaped in V2 URLs (/v2/models/<name>/infer): name it in "
            "model-settings.json with 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit"
        )


def busy_waiting_settings(model_settings: dict[str, Any]) -> list[str]:
    """`RuntimeSettings.busy_waiting` for a whole model-settings.json; [] for another runtime's model."""
    if model_settings.get("implementation") != RUNTIME_IMPLEMENTATION:
        return []
    return parse_runtime_settings((model_settings.get("parameters") or {}).get("extra")).busy_waiting()
