"""Prometheus histograms of the runtime's own work, beside MLServer's on its metrics port.

MLServer's `mlserver.metrics.register` only makes histograms with Prometheus' default
buckets (5 ms .. 10 s): useless for a 20-microsecond model or for batch sizes. MLServer's
metrics endpoint serves `prometheus_client`'s default registry when `parallel_workers`
is 0 (and the multi-process files otherwise), so the histograms live there, labelled
like MLServer's own custom metrics (`model_name`, `model_version`).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Literal

import numpy as np
from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily

# The series' names and labels are the contract with the dashboards, alerts and canary queries: the core's.
from slipway.metric_names import (
    BATCH_ROWS,
    CLASS_LABEL,
    INFERENCE_SECONDS,
    LABELS,
    POLLING,
    POSTPROCESS_SECONDS,
    PREDICTED_CLASS,
    PREPROCESS_SECONDS,
    PROTOCOL_LABEL,
    QUEUE_SECONDS,
    REQUEST_SECONDS,
    SETTING,
    UNKNOWN_MODEL_REQUESTS,
)

_SECONDS_BUCKETS = (
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
    0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip
_ROWS_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


@dataclass
class BatchStats:
    """What one run did, as the metrics record it: its rows and each request's wait (`wrappers.running.batching`
    reports each of its runs so)."""

    rows: int
    run_seconds: float
    queue_seconds: list[float]


MAX_CLASSES = 1000  # a scores output wider than this is not counted: a series per class would flood Prometheus
_FLOAT_TYPES = {"FP16", "FP32", "FP64", "BF16"}

_HELP = {
    INFERENCE_SECONDS: "Time inside ONNX Runtime per run (one run may serve several merged requests)",
    QUEUE_SECONDS: "Time a request waited between arriving at the runtime and its run starting",
    BATCH_ROWS: "Rows per ONNX Runtime run (batch size after merging requests)",
    PREPROCESS_SECONDS: "Time decoding and normalising one request's inputs on the CPU pool",
    POSTPROCESS_SECONDS: "Time turning one request's outputs into top-k labels on the CPU pool",
    REQUEST_SECONDS: "Time from an inference request's arrival (REST layer, gRPC converter) to its answer, "
    "for answered requests, by protocol",
}
_BUCKETS = {name: _SECONDS_BUCKETS for name in _HELP} | {BATCH_ROWS: _ROWS_BUCKETS}
_LABELS = {REQUEST_SECONDS: (*LABELS, PROTOCOL_LABEL)}
_SOURCES = ("measured", "explicit", "default")


class MetricSeries:
    """The histograms, counters and gauges the runtime creates as it serves (its own, the payload log's, the fast
    paths'), one of each name per registry: held by the process's state (`wrappers.process_state`), so that a test
    can count in a registry of its own."""

    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        self.registry = registry
        self._created: dict[str, Histogram] = {}
        self._unknown: Counter | None = None  # created at the first request for an unknown model
        self._requests: dict[tuple[str, str, str], Histogram] = {}
        self._counters: dict[str, Counter] = {}
        self._gauges: dict[str, Gauge] = {}
        # Served from the state's start (as from the module's import before): the class tallies and two gauges.
        self.class_tallies = _ClassTallies()
        registry.register(self.class_tallies)
        self._settings_gauge = Gauge(
            SETTING,
            "A serving setting's value at load, and where it came from (source: measured at load, "
            "explicit in model-settings.json, or the fixed default)",
            labelnames=(*LABELS, "setting", "source"),
            registry=registry,
        )
        self._polling_gauge = Gauge(
            POLLING,
            "1 while the event loop polls after this model's inline runs because its requests "
            "come back to back within the window (event_loop_spin_us chosen at load), else 0",
            labelnames=LABELS,
            registry=registry,
        )

    def publish_settings(self, name: str, version: str | None, values: dict[str, tuple[float, str]]) -> None:
        """Set slipway_setting for each `setting: (value, source)`, dropping the series a previous load of the
        same model version left under another source."""
        for setting, (value, source) in values.items():
            for other in _SOURCES:
                if other != source:
                    try:
                        self._settings_gauge.remove(name, version or "", setting, other)
                    except KeyError:
                        pass
            self._settings_gauge.labels(name, version or "", setting, source).set(value)

    def publish_polling(self, name: str, version: str | None, polling: bool) -> None:
        """Set slipway_event_loop_polling for one model version."""
        self._polling_gauge.labels(name, version or "").set(1 if polling else 0)

    def counter(self, name: str, documentation: str, labelnames: tuple[str, ...]) -> Counter:
        """The counter `name`, created on first use (models share it by label; other modules name their own)."""
        if name not in self._counters:
            self._counters[name] = Counter(name, documentation, labelnames=labelnames, registry=self.registry)
        return self._counters[name]

    def gauge(
        self, name: str, documentation: str, labelnames: tuple[str, ...], multiprocess_mode: Literal["all", "max"] = "all"
    ) -> Gauge:
        """The gauge `name`, created on first use."""
        if name not in self._gauges:
            self._gauges[name] = Gauge(
                name, documentation, labelnames=labelnames, registry=self.registry, multiprocess_mode=multiprocess_mode
            )
        return self._gauges[name]

    def count_unknown_model(self) -> None:
        """An inference request named a model or version this server does not serve. Counted in one series:
        MLServer labels its own request metrics with the name a client sent, a series per name, unbounded
        (`servers.build`)."""
        if self._unknown is None:
            self._unknown = Counter(
                UNKNOWN_MODEL_REQUESTS,
                "Inference requests for a model or version this server does not serve (answered 404 / NOT_FOUND)",
                registry=self.registry,
            )
        self._unknown.inc()

    def histogram(self, name: str) -> Histogram:
        """The histogram `name`, created on first use (models share it by label)."""
        if name not in self._created:
            labels = _LABELS.get(name, LABELS)
            self._created[name] = Histogram(name, _HELP[name], labelnames=labels, buckets=_BUCKETS[name], registry=self.registry)
        return self._created[name]

    def observe_request(self, model: str, version: str | None, protocol: str, seconds: float) -> None:
        """One answered inference request for `model` (as the client named it; only a served model answers, so
        the series stay as many as the models served), `protocol` "rest" or "grpc"."""
        key = (model, version or "", protocol)
        child = self._requests.get(key)
        if child is None:
            child = self._requests[key] = self.histogram(REQUEST_SECONDS).labels(*key)
        child.observe(seconds)


@dataclass(frozen=True)
class ModelMetrics:
    """The histograms of one model version, with their labels already bound."""

    inference_seconds: Histogram
    queue_seconds: Histogram
    batch_rows: Histogram
    preprocess_seconds: Histogram
    postprocess_seconds: Histogram

    @classmethod
    def for_model(cls, series: MetricSeries, name: str, version: str | None) -> ModelMetrics:
        labels = {"model_name": name, "model_version": version or ""}

        def bound(metric: str) -> Histogram:
            return series.histogram(metric).labels(**labels)

        return cls(
            inference_seconds=bound(INFERENCE_SECONDS),
            queue_seconds=bound(QUEUE_SECONDS),
            batch_rows=bound(BATCH_ROWS),
            preprocess_seconds=bound(PREPROCESS_SECONDS),
            postprocess_seconds=bound(POSTPROCESS_SECONDS),
        )

    def observe_run(self, stats: BatchStats) -> None:
        """One run: its seconds and rows, and how long each request merged into it waited."""
        self.inference_seconds.observe(stats.run_seconds)
        self.batch_rows.observe(stats.rows)
        for seconds in stats.queue_seconds:
            self.queue_seconds.observe(seconds)


class PredictedClasses:
    """How often each class wins (the arg-max of a classifier's scores, per row), by model version.

    Two predictors that get the same requests (a shadow is mirrored the stable's) should pick classes in the same
    proportions; the canary controller compares these counts to see a new version's outputs drift before it takes
    any traffic. Counted on the run's thread into a plain list under a lock (about a microsecond a run, where a
    labelled prometheus_client Counter costs several) and exported as a counter when the metrics port is scraped.
    Like every custom collector it is served from the server's own process (parallel_workers 0, as deployed).
    """

    def __init__(self, name: str, version: str | None, output_index: int, classes: int) -> None:
        self.labels = (name, version or "")
        self._index = output_index
        self._counts = [0] * classes
        self._lock = threading.Lock()

    @classmethod
    def for_outputs(
        cls, series: MetricSeries, name: str, version: str | None, outputs: list, scores: str | None = None
    ) -> PredictedClasses | None:
        """Counting for the scores output (`scores`, else the graph's first output) where it looks like one:
        floats shaped [rows, classes] with 2 to MAX_CLASSES classes; None for any other model. A model loaded
        again under the same name and version keeps counting where it was."""
        index = next((i for i, spec in enumerate(outputs) if spec.name == scores), 0 if outputs else None)
        if index is None:
            return None
        spec = outputs[index]
        if spec.datatype not in _FLOAT_TYPES or len(spec.shape) != 2 or not 2 <= spec.shape[1] <= MAX_CLASSES:
            return None
        counter = cls(name, version, index, spec.shape[1])
        previous = series.class_tallies.tallies.get(counter.labels)
        if previous is not None and len(previous._counts) == len(counter._counts):
            previous._index = index
            return previous
        series.class_tallies.tallies[counter.labels] = counter
        return counter

    def count(self, outputs: list[np.ndarray]) -> None:
        scores = outputs[self._index]
        if scores.ndim != 2 or scores.shape[0] == 0 or scores.shape[1] != len(self._counts):
            return
        if scores.shape[0] == 1:  # the common request: one arg-max, one increment
            winner = int(scores[0].argmax())
            with self._lock:
                self._counts[winner] += 1
            return
        tally = np.bincount(np.argmax(scores, axis=1), minlength=len(self._counts)).tolist()
        with self._lock:
            self._counts = [a + b for a, b in zip(self._counts, tally)]

    def snapshot(self) -> list[tuple[int, int]]:
        """(class, rows won) for every class that won at least once."""
        with self._lock:
            return [(winner, count) for winner, count in enumerate(self._counts) if count]


class _ClassTallies:
    """The prometheus_client collector that exports every model's PredictedClasses at scrape time."""

    def __init__(self) -> None:
        self.tallies: dict[tuple[str, str], PredictedClasses] = {}

    def collect(self):
        family = CounterMetricFamily(
            PREDICTED_CLASS,
            "Rows whose highest score was this class (arg-max of the scores output)",
            labels=(*LABELS, CLASS_LABEL),
        )
        for labels, tally in list(self.tallies.items()):
            for winner, count in tally.snapshot():
                family.add_metric([*labels, str(winner)], count)
        yield family
