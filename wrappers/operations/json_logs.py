"""JSON log lines for MLServer and the runtime, each naming its model, version and request.

A cluster's log pipeline (Loki, Elasticsearch, Cloud Logging) reads one JSON object per line without a
parsing rule, and a line that names its model version and request can be found from a payload-log event,
a trace or a client's complaint. `wrappers/logging.json` (MLServer's `MLSERVER_LOGGING_SETTINGS`, set in
the rendered pods) routes MLServer's, uvicorn's and the runtime's loggers through `JsonFormatter`.

Every line has the same keys: time (UTC, RFC 3339), level, logger, message, model_name, model_version and
request_id (null where a line belongs to none, such as start-up), and exception where there is one.
The model comes from MLServer's own context (set around loads and inferences), else from the request
the runtime is answering, else, once the server has loaded exactly one model (as a Slipway pod does), from
that model; before the first load the name is MLSERVER_MODEL_NAME's, which Seldon sets on the container. The
request id is MLServer's (the V2 body's "id", else the UUID MLServer made, which the response and the
payload-log events carry); the runtime marks it at the start of `predict`, and it stays on the lines that
request's task writes afterwards (MLServer's error lines, uvicorn's access line).
"""

from __future__ import annotations

import json
import logging
import os
from contextvars import ContextVar
from datetime import datetime, timezone

from wrappers.mlserver_compat import model_context

# The request the current task answers: (request id, model name, model version). A contextvar: each HTTP request
# and gRPC call runs in a task of its own, so what one request sets is never seen by another.
_REQUEST: ContextVar[tuple[str | None, str, str | None] | None] = ContextVar("slipway_request", default=None)
MODEL_NAME_ENV = "MLSERVER_MODEL_NAME"


def enter_request(request_id: str | None, model: str, version: str | None) -> None:
    """Mark the current task's log lines as `request_id`'s, of `model` `version`."""
    _REQUEST.set((request_id, model, version))


class JsonFormatter(logging.Formatter):
    """One JSON object per record, with the model and request it belongs to."""

    def __init__(self) -> None:
        super().__init__()
        model_context.check_model_context()  # built as MLServer reads its logging settings: a moved target fails the start
        self._models: set[tuple[str, str | None]] = set()  # seen in MLServer's context: the server's models

    def format(self, record: logging.LogRecord) -> str:
        request_id, model, version = _REQUEST.get() or (None, None, None)
        if model is None and (current := model_context.current_model()) is not None:
            model, version = current
            self._models.add((model, version))
        elif model is None and len(self._models) == 1:
            model, version = next(iter(self._models))
        line = {
            "time": datetime.fromtimestamp(record.created, tz=timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "model_name": model or os.environ.get(MODEL_NAME_ENV) or None,
            "model_version": version or None,
            "request_id": request_id,
        }
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exception"] = record.exc_text
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return json.dumps(line, default=str, ensure_ascii=False)
