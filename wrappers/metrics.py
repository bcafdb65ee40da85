"""Prometheus histograms of the runtime's own work, beside MLServer's on its metrics port.

MLServer's `mlserver.metrics.register` only makes histograms with Prometheus' default
buckets (5 ms .. 10 s): useless for a 20-microsecond model or for batch sizes. MLServer's
metrics endpoint serves `prometheus_client`'s default registry when `parallel_workers`
is 0 (and the multi-process files otherwise), so the histograms live there, labelled
like MLServer's own custom metrics (`model_name`, `model_version`).
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import REGISTRY, Histogram

LABELS = ("model_name", "model_version")
_SECONDS_BUCKETS = (
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
    0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip
_ROWS_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)

INFERENCE_SECONDS = "slipway_inference_seconds"
QUEUE_SECONDS = "slipway_queue_seconds"
BATCH_ROWS = "slipway_batch_rows"
PREPROCESS_SECONDS = "slipway_preprocess_seconds"
POSTPROCESS_SECONDS = "slipway_postprocess_seconds"

_HELP = {
    INFERENCE_SECONDS: "Time inside ONNX Runtime per run (one run may serve several merged requests)",
    QUEUE_SECONDS: "Time a request waited between arriving at the runtime and its run starting",
    BATCH_ROWS: "Rows per ONNX Runtime run (batch size after merging requests)",
    PREPROCESS_SECONDS: "Time decoding and normalising one request's inputs on the CPU pool",
    POSTPROCESS_SECONDS: "Time turning one request's outputs into top-k labels on the CPU pool",
}
_BUCKETS = {name: _SECONDS_BUCKETS for name in _HELP} | {BATCH_ROWS: _ROWS_BUCKETS}


_created: dict[str, Histogram] = {}


def _histogram(name: str) -> Histogram:
    """The process-wide histogram `name`, created on first use (models share it by label)."""
    if name not in _created:
        _created[name] = Histogram(name, _HELP[name], labelnames=LABELS, buckets=_BUCKETS[name], registry=REGISTRY)
    return _created[name]


@dataclass(frozen=True)
class ModelMetrics:
    """The histograms of one model version, with their labels already bound."""

    inference_seconds: Histogram
    queue_seconds: Histogram
    batch_rows: Histogram
    preprocess_seconds: Histogram
    postprocess_seconds: Histogram

    @classmethod
    def for_model(cls, name: str, version: str | None) -> ModelMetrics:
        labels = {"model_name": name, "model_version": version or ""}

        def bound(metric: str) -> Histogram:
            return _histogram(metric).labels(**labels)

        return cls(
            inference_seconds=bound(INFERENCE_SECONDS),
            queue_seconds=bound(QUEUE_SECONDS),
            batch_rows=bound(BATCH_ROWS),
            preprocess_seconds=bound(PREPROCESS_SECONDS),
            postprocess_seconds=bound(POSTPROCESS_SECONDS),
        )
