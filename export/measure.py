"""Size and speed of a model, measured the same way for every variant in one run.

Speed is timed in interleaved rounds (every model once per round, round after round),
so a burst of load from another process on a shared machine falls on all of them
alike instead of on whichever happened to run then. ONNX models run in the very
session the server builds (`engine.session`), with its defaults.
"""

from __future__ import annotations

import gzip
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx

Feeds = dict[str, np.ndarray]
Runner = Callable[[Feeds], object]

CPU_PROVIDER = "CPUExecutionProvider"
LATENCY_BATCH = 1
THROUGHPUT_BATCH = 32
_QDQ_OPS = ("QuantizeLinear", "DequantizeLinear")
_WEIGHT_TYPES = {
    onnx.TensorProto.FLOAT,
    onnx.TensorProto.FLOAT16,
    onnx.TensorProto.DOUBLE,
    onnx.TensorProto.BFLOAT16,
    onnx.TensorProto.INT8,
    onnx.TensorProto.UINT8,
    onnx.TensorProto.INT32,
}


@dataclass(frozen=True)
class SizeStats:
    file_bytes: int
    gzip_bytes: int
    parameters: int
    nonzero_parameters: int


@dataclass(frozen=True)
class SpeedStats:
    """p50/p95 latency of one call at the latency batch; images/s at the throughput batch."""

    latency_batch: int
    p50_latency_ms: float
    p95_latency_ms: float
    throughput_batch: int
    throughput: float


def gzip_size(data: bytes) -> int:
    """What the file costs to ship compressed: where unstructured sparsity pays."""
    return len(gzip.compress(data, compresslevel=9, mtime=0))


def onnx_size(model_bytes: bytes) -> SizeStats:
    """File sizes and parameter counts of an ONNX model.

    Parameters are the weight and bias initializers; the scales and zero points of
    Q/DQ nodes and integer shape constants are bookkeeping, not parameters.
    """
    model = onnx.ModelProto.FromString(model_bytes)
    bookkeeping = {name for node in model.graph.node if node.op_type in _QDQ_OPS for name in node.input[1:]}
    total = nonzero = 0
    for init in model.graph.initializer:
        if init.name in bookkeeping or init.data_type not in _WEIGHT_TYPES or not init.dims:
            continue
        values = onnx.numpy_helper.to_array(init)
        total += values.size
        nonzero += int(np.count_nonzero(values))
    return SizeStats(len(model_bytes), gzip_size(model_bytes), total, nonzero)


def onnx_runner(model_bytes: bytes) -> Runner:
    """A callable running the model in the session the server would build (same options)."""
    import onnxruntime as ort

    from engine.providers import choose_providers
    from engine.session import session_options
    from slipway.runtime_settings import RuntimeSettings

    settings = RuntimeSettings(providers=[CPU_PROVIDER])
    session = ort.InferenceSession(
        model_bytes, sess_options=session_options(settings), providers=choose_providers(settings.providers)
    )
    return lambda feeds: session.run(None, feeds)


def gpu_runner(model_bytes: bytes, provider: str) -> Runner | None:
    """A callable running the model on a GPU `provider` (as the server would), or None where this onnxruntime
    build or machine cannot: the provider is missing, or the session falls back to the CPU (no device)."""
    import onnxruntime as ort

    from engine.providers import choose_providers
    from engine.session import session_options
    from slipway.runtime_settings import RuntimeSettings

    if provider not in ort.get_available_providers():
        return None
    settings = RuntimeSettings(providers=[provider])
    try:
        session = ort.InferenceSession(
            model_bytes, sess_options=session_options(settings), providers=choose_providers(settings.providers)
        )
    except Exception:  # a GPU provider that is installed may still fail to start: no GPU timing then
        return None
    if session.get_providers()[0] != provider:
        return None
    return lambda feeds: session.run(None, feeds)


def keras_runner(model, input_names: list[str]) -> Runner:
    """The Keras model as a compiled `tf.function` over its inputs (in order, called the way the model was built),
    results copied to host like ONNX Runtime's: one array, or a list in the model's output order."""
    import tensorflow as tf

    from export.keras_io import read_interface

    interface = read_interface(model)

    @tf.function(reduce_retracing=True)
    def call(*tensors):
        return list(interface.call(model, tensors).values())

    def run(feeds):
        answers = [a.numpy() for a in call(*[tf.convert_to_tensor(feeds[name]) for name in input_names])]
        return answers if len(answers) > 1 else answers[0]

    return run


def _time_calls(run: Runner, feeds: Feeds, calls: int) -> list[float]:
    times = []
    for _ in range(calls):
        started = time.perf_counter()
        run(feeds)
        times.append(time.perf_counter() - started)
    return times


def measure_speed(
    runners: dict[str, Runner],
    latency_feeds: Feeds,
    throughput_feeds: Feeds,
    *,
    rounds: int,
    seconds_per_round: float,
    on_round: Callable[[], None] | None = None,
) -> dict[str, SpeedStats]:
    """Time every runner at both batches, `rounds` times interleaved; ~`seconds_per_round` per runner and batch."""
    feeds = {"latency": latency_feeds, "throughput": throughput_feeds}
    calls: dict[tuple[str, str], int] = {}
    for name, run in runners.items():  # warm up, and size each burst to the time it may take
        for kind, feed in feeds.items():
            run(feed)
            probe = _time_calls(run, feed, 3)
            calls[name, kind] = int(min(2000, max(3, seconds_per_round / max(min(probe), 1e-6))))
    samples: dict[tuple[str, str], list[float]] = {key: [] for key in calls}
    for _ in range(rounds):
        for name, run in runners.items():
            for kind, feed in feeds.items():
                samples[name, kind].extend(_time_calls(run, feed, calls[name, kind]))
        if on_round:
            on_round()
    latency_rows = len(next(iter(latency_feeds.values())))
    throughput_rows = len(next(iter(throughput_feeds.values())))
    results = {}
    for name in runners:
        latency = sorted(samples[name, "latency"])
        results[name] = SpeedStats(
            latency_batch=latency_rows,
            p50_latency_ms=statistics.median(latency) * 1e3,
            p95_latency_ms=latency[min(len(latency) - 1, int(0.95 * len(latency)))] * 1e3,
            throughput_batch=throughput_rows,
            throughput=throughput_rows / statistics.median(samples[name, "throughput"]),
        )
    return results
