"""PromQL for one predictor of a SeldonDeployment, over the series the rendered PodMonitor's scrape gives.

The PodMonitor (deployments/base/podmonitor.yaml) scrapes MLServer's metrics port and copies the pod labels
`slipway.io/model` and `slipway.io/predictor` onto every series as `slipway_io_model` and
`slipway_io_predictor` (prometheus-operator turns every character a label name cannot hold into `_`);
Prometheus adds `namespace` and `pod`. Render names the SeldonDeployment after its model, so
`slipway_io_model` is the deployment's name.

What is measured, per predictor, summed over its pods:
- requests: MLServer's `model_infer_request_success_total` and `model_infer_request_failure_total`
  (a failure counter appears only after the first failure: no series means none failed);
- outputs: the runtime's `slipway_predicted_class_total` by class (how often each class wins), for a classifier;
- latency: `histogram_quantile` over the runtime's `slipway_request_seconds` buckets (each answered request, from
  its arrival at the REST layer or gRPC converter to its answer: decoding, queueing, pre- and post-processing and
  encoding included; the buckets start at 50 us, where MLServer's own request histograms start at 5 ms);
- beside it, the same quantiles of `slipway_inference_seconds` (time inside ONNX Runtime per run), which shows
  whether a slower canary is slower in the model's run or around it. Another histogram the pods export can be
  named as the judged one instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from deployments.render.autoscaling import REQUEST_COUNTER
from deployments.render.seldon import MODEL_LABEL, PREDICTOR_LABEL
from slipway.metric_names import CLASS_LABEL, INFERENCE_SECONDS, PREDICTED_CLASS, REQUEST_SECONDS

FAILURE_COUNTER = "model_infer_request_failure_total"
CLASS_COUNTER = f"{PREDICTED_CLASS}_total"
DEFAULT_LATENCY_HISTOGRAM = REQUEST_SECONDS
RUN_HISTOGRAM = INFERENCE_SECONDS  # the ONNX Runtime run's, reported beside the judged one
QUANTILES = {"p50_ms": 0.50, "p95_ms": 0.95, "p99_ms": 0.99}
_WINDOW = re.compile(r"^[1-9][0-9]*[smh]$")
_METRIC_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")


def scraped_label(pod_label: str) -> str:
    """The label name a pod label has on scraped series (`slipway.io/predictor` -> `slipway_io_predictor`)."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", pod_label)


MODEL_SERIES_LABEL = scraped_label(MODEL_LABEL)
PREDICTOR_SERIES_LABEL = scraped_label(PREDICTOR_LABEL)


def _quoted(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


@dataclass(frozen=True)
class PredictorQueries:
    """The PromQL that measures one predictor over a trailing `window` (a PromQL duration such as 5m)."""

    namespace: str
    deployment: str
    predictor: str
    window: str
    latency_histogram: str = DEFAULT_LATENCY_HISTOGRAM

    def __post_init__(self) -> None:
        if not _WINDOW.match(self.window):
            raise ValueError(f"window {self.window!r} must be a whole number of s, m or h (e.g. 5m)")
        if not _METRIC_NAME.match(self.latency_histogram):
            raise ValueError(f"latency histogram {self.latency_histogram!r} is not a metric name")

    @property
    def selector(self) -> str:
        return (
            f"namespace={_quoted(self.namespace)},{MODEL_SERIES_LABEL}={_quoted(self.deployment)},"
            f"{PREDICTOR_SERIES_LABEL}={_quoted(self.predictor)}"
        )

    def _increase(self, metric: str) -> str:
        return f"sum(increase({metric}{{{self.selector}}}[{self.window}]))"

    @property
    def successes(self) -> str:
        return self._increase(REQUEST_COUNTER)

    @property
    def failures(self) -> str:
        return self._increase(FAILURE_COUNTER)

    @property
    def latency_observations(self) -> str:
        return self._increase(f"{self.latency_histogram}_count")

    def latency(self, quantile: float, histogram: str | None = None) -> str:
        """The quantile in seconds of `histogram` (default: the judged one), over every pod's buckets added up."""
        return (
            f"histogram_quantile({quantile:g}, sum by (le) "
            f"(rate({histogram or self.latency_histogram}_bucket{{{self.selector}}}[{self.window}])))"
        )

    @property
    def predicted_classes(self) -> str:
        """Rows won by each class over the window, one sample per class."""
        return f"sum by ({CLASS_LABEL}) (increase({CLASS_COUNTER}{{{self.selector}}}[{self.window}]))"
