"""The names of the runtime's own Prometheus series and their labels: what the dashboards, the alert rules and the
canary's queries (`deployments`) read, and what the runtime (`wrappers.operations.metrics`) writes, named once in the core.
"""

from __future__ import annotations

LABELS = ("model_name", "model_version")
INFERENCE_SECONDS = "slipway_inference_seconds"
# One answered inference request, from its arrival at the REST layer or gRPC converter to its answer: decoding,
# queueing, pre- and post-processing and encoding included, which INFERENCE_SECONDS (ONNX Runtime's run) leaves out
REQUEST_SECONDS = "slipway_request_seconds"
PROTOCOL_LABEL = "protocol"  # REQUEST_SECONDS's third label: "rest" or "grpc"
QUEUE_SECONDS = "slipway_queue_seconds"
BATCH_ROWS = "slipway_batch_rows"
PREPROCESS_SECONDS = "slipway_preprocess_seconds"
POSTPROCESS_SECONDS = "slipway_postprocess_seconds"
SETTING = "slipway_setting"
POLLING = "slipway_event_loop_polling"
PREDICTED_CLASS = "slipway_predicted_class"  # exported as slipway_predicted_class_total
CLASS_LABEL = "class"
# Inference requests for a model (or version) this server does not serve: one series, whatever names clients send
UNKNOWN_MODEL_REQUESTS = "slipway_unknown_model_requests"  # exported as slipway_unknown_model_requests_total
