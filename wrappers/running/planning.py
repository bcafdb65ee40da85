"""Run planning: which row counts a model's runs are padded to, warmed up at and run inline, as pure functions.

They decide from the graph's shapes and the settings alone (no session, no server), so each rule is tested on
its own: a bucket is the smallest padded size that holds a chunk, chunks cover every row once, warm-up meets
exactly the sizes runs will have, only a CPU run cheaper than `inline_below_ms` stays on the event loop, and
TensorRT gets one profile over the padded sizes. `wrappers.running.batching`, `wrappers.running.warm_up` and the runtime (which
rebuilds the session with the profile) carry the plans out.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from engine.providers import TENSORRT
from engine.tensor_specs import DYNAMIC, TensorSpec
from engine.tensorrt import tensorrt_batch_profile
from slipway.runtime_settings import RuntimeSettings

logger = logging.getLogger(__name__)
GPU_LARGEST_BUCKET = 32  # a GPU's throughput at 32 MobileNetV2 rows is near its peak (make bench-gpu)
_TURN_OFF = "set max_batch_size to 1 in model-settings.json and parameters.extra.max_batch_rows to 1"


class BatchingConfigError(ValueError):
    """The graph's shapes do not allow merging requests; the message says what to set instead."""


def fixed_batch_rows(inputs: list, outputs: list) -> int | None:
    """The graph's fixed batch size (None when dynamic), for graphs whose requests may be merged.

    `inputs` and `outputs` are `TensorSpec`s (-1 marks a dynamic dimension). A scalar has no
    row axis to merge on, and inputs or outputs that disagree on a fixed first dimension
    cannot be split back per request: both are refused.
    """
    for spec in [*inputs, *outputs]:
        if not spec.shape:
            raise BatchingConfigError(
                f"{spec.name!r} is a scalar with no batch dimension, so requests cannot be merged: {_TURN_OFF}"
            )
    fixed = {spec.shape[0] for spec in [*inputs, *outputs] if spec.shape[0] != DYNAMIC}
    if len(fixed) > 1:
        raise BatchingConfigError(
            f"inputs and outputs disagree on the batch size ({sorted(fixed)}), so requests cannot be merged: {_TURN_OFF}"
        )
    return fixed.pop() if fixed else None


def gpu_buckets(max_batch_rows: int) -> list[int]:
    """Powers of two up to max(max_batch_rows, GPU_LARGEST_BUCKET), and that bound itself."""
    largest = max(max_batch_rows, GPU_LARGEST_BUCKET)
    sizes = {1 << power for power in range(largest.bit_length()) if 1 << power <= largest}
    return sorted(sizes | {largest})


def gpu_merge_rows(inputs: list[TensorSpec], outputs: list[TensorSpec], configured: list[int] | None) -> tuple[int, str]:
    """How many rows merge into one run on a GPU where max_batch_rows is unset, and why.

    A GPU runs 32 rows in about the time of one, so queued requests merge up to the largest bucket runs are padded
    to (`gpu_buckets`, or `batch_buckets` as set). A fixed batch dimension is its own bound; a graph whose requests
    cannot be merged runs them alone.
    """
    try:
        fixed = fixed_batch_rows(inputs, outputs)
    except BatchingConfigError as err:
        return 1, f"requests cannot be merged ({err})"
    if fixed:
        return fixed, f"the graph's batch dimension is fixed at {fixed}: runs of up to {fixed} rows"
    largest = max(configured) if configured else GPU_LARGEST_BUCKET  # the largest of `gpu_buckets`; []: no padding
    return largest, (
        f"on a GPU provider requests that queue merge up to the largest batch bucket ({largest} rows): "
        "a GPU runs them in about the time of one"
    )


def padding_buckets(
    *,
    fixed_rows: int | None,
    input_shapes: Iterable[Sequence[int]],
    configured: list[int] | None,
    on_cpu: bool,
    max_batch_rows: int,
    fixed_outputs: bool,
    session_per_bucket: bool | None,
) -> list[int]:
    """The row counts runs are padded up to, ascending; [] for none.

    A fixed batch size is the one bucket; otherwise the configured buckets, or on a GPU powers of two
    (`gpu_buckets`). Padding needs a dynamic first dimension on every input, and a replayed CUDA graph
    one shape per session (a single bucket, or a session per bucket: `wrappers.running.bucket_sessions`, unset on a
    GPU): both refused in one line naming the setting to change.
    """
    if fixed_rows:
        return [fixed_rows]
    dynamic = all(shape and shape[0] == DYNAMIC for shape in input_shapes)
    if configured is None:
        buckets = [] if on_cpu else gpu_buckets(max_batch_rows)
    else:
        buckets = sorted(set(configured))
    if buckets and not dynamic:
        if configured:
            raise BatchingConfigError(
                "batch_buckets needs graph inputs whose first (batch) dimension is dynamic; remove batch_buckets for this graph"
            )
        return []
    per_bucket = session_per_bucket if session_per_bucket is not None else not on_cpu  # CUDA's enable_cuda_graph
    if fixed_outputs and len(buckets) != 1 and not (per_bucket and buckets):
        raise BatchingConfigError(
            "cuda.enable_cuda_graph replays one captured shape per session: set parameters.extra.batch_buckets to a "
            "single row count (e.g. [8]), or session_per_bucket to true for a graph per bucket"
        )
    return buckets


def bucket_for(count: int, buckets: Sequence[int]) -> int:
    """The smallest bucket that holds `count` rows (`buckets` ascending, its last at least `count`)."""
    return next(bucket for bucket in buckets if bucket >= count)


def bucket_chunks(rows: int, buckets: Sequence[int]) -> list[tuple[int, int, int]]:
    """(start, rows, padded size) per run: chunks of at most the largest bucket, in order, covering every row
    once, each padded to `bucket_for` it. Zero rows are one padded chunk (for the graph's zero-row outputs)."""
    largest = buckets[-1]
    chunks = []
    for start in range(0, max(rows, 1), largest):
        count = min(largest, rows - start)
        chunks.append((start, count, bucket_for(count, buckets)))
    return chunks


def warm_up_sizes(buckets: Sequence[int], configured: Sequence[int], runs: int) -> list[int]:
    """The batch sizes warm-up runs: padded runs meet only the buckets; none when `runs` is 0."""
    return list(buckets or configured) if runs else []


def warm_up_shape(shape: Sequence[int], rows: int) -> list[int]:
    """An input's shape for a warm-up run of `rows` rows: other dynamic dimensions at 1."""
    return [rows if axis == 0 else (1 if dim == DYNAMIC else dim) for axis, dim in enumerate(shape)]


def runs_inline(seconds_per_row: float | None, on_cpu: bool, rows: int, inline_below_ms: float) -> bool:
    """Tiny CPU runs go on the event loop: the hop to a thread and back would cost more than they do.
    Unknown until warm-up has timed a run (None), and never on a GPU."""
    if seconds_per_row is None or not on_cpu:
        return False
    return 1000 * seconds_per_row * rows < inline_below_ms


def wants_tensorrt_profile(
    buckets: Sequence[int], providers: Sequence[str], tensorrt: str, extra_options: Mapping[str, object]
) -> bool:
    """A TensorRT batch profile is built where TensorRT runs, runs are padded, and the settings name no
    trt_profile_* of their own."""
    return bool(buckets) and tensorrt in providers and not any(key.startswith("trt_profile_") for key in extra_options)


def request_row_limit(max_request_rows: int, max_batch_size: int, mlserver_batching: bool) -> int:
    """The rows one request may carry: under MLServer's adaptive batching, a merged request holds up to
    `max_batch_size` of them."""
    return max_request_rows * (max_batch_size if mlserver_batching else 1)


def with_tensorrt_profile(
    config: RuntimeSettings, inputs: list[TensorSpec], buckets: Sequence[int], providers: Sequence[str], model: str
) -> RuntimeSettings:
    """The settings with one TensorRT profile over the padded row counts (`tensorrt_batch_profile`), where
    `wants_tensorrt_profile`; the same settings object where not, or where the inputs' shapes allow none
    (logged: TensorRT then builds an engine per new shape)."""
    options = config.tensorrt.extra_options
    if not wants_tensorrt_profile(buckets, providers, TENSORRT, options):
        return config
    profile = tensorrt_batch_profile(inputs, max(buckets))
    if not profile:
        logger.warning(
            "%s: TensorRT gets no batch profile (an input has another dynamic dimension, or a name with "
            "',' or ':'): it builds an engine per new shape; set tensorrt.extra_options trt_profile_*",
            model,
        )
        return config
    logger.info("%s: TensorRT profile for 1 to %d rows: %s", model, max(buckets), profile)
    tensorrt = config.tensorrt.model_copy(update={"extra_options": {**options, **profile}})
    return config.model_copy(update={"tensorrt": tensorrt})


@dataclass(frozen=True)
class RunPlan:
    """How a model's runs go: the graph's fixed batch size where requests are merged (else None), the row counts
    runs are padded to, and the settings, with a TensorRT profile over those where `with_tensorrt_profile` adds one."""

    fixed_rows: int | None
    buckets: list[int]
    settings: RuntimeSettings


def plan_runs(
    config: RuntimeSettings,
    inputs: list[TensorSpec],
    outputs: list[TensorSpec],
    *,
    merging: bool,
    on_cpu: bool,
    fixed_outputs: bool,
    providers: Sequence[str],
    model: str,
) -> RunPlan:
    """The run plan for a session (the runtime's and the session host's alike): `merging` where requests may be merged
    into one run. A plan whose settings are not `config` itself needs the session built again (TensorRT builds its
    engines at a first run, so the session replaced has built none)."""
    fixed_rows = fixed_batch_rows(inputs, outputs) if merging else None
    buckets = padding_buckets(
        fixed_rows=fixed_rows,
        input_shapes=[spec.shape for spec in inputs],
        configured=config.batch_buckets,
        on_cpu=on_cpu,
        max_batch_rows=config.max_batch_rows,
        fixed_outputs=fixed_outputs,
        session_per_bucket=config.session_per_bucket,
    )
    return RunPlan(fixed_rows, buckets, with_tensorrt_profile(config, inputs, buckets, providers, model))


def with_inline_threads(config: RuntimeSettings, inline: bool, intra_op_threads: int, model: str) -> RuntimeSettings:
    """One intra-op thread for a model whose runs are inline (on the event loop thread, where extra intra-op
    threads only add hand-offs), unless the settings chose a count; the same settings object otherwise."""
    if config.intra_op_threads is not None or not inline or intra_op_threads <= 1:
        return config
    logger.info("%s runs inline (under %s ms): using one intra-op thread", model, config.inline_below_ms)
    return config.model_copy(update={"intra_op_threads": 1})
