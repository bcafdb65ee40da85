"""What a payload-log event says: one V2 request or response as a CloudEvent in HTTP binary mode.

Shaped as Seldon's executor and KServe's logger send theirs, so their consumers (Seldon's request
logger, alibi-detect servers, Knative triggers filtering on ce-type) take Slipway's too: ce-id and the
`requestid` extension are the request's id (MLServer's: the body's "id", else a generated UUID, which the
response carries too), ce-type `<prefix>.inference.request` or `.response`, the extensions
`inferenceservicename`, `namespace`, `endpoint` (the predictor), `modelid` and `modelversion`, and the
V2 body as JSON. A request and its response share ce-id, as KServe's do; ce-type tells them apart.

Built on the sender's thread (`wrappers.operations.payload_log`), never on the event loop: redaction first (what is
redacted is never converted), then the size cap, checked on the tensors' raw sizes before any JSON is
written, so an oversized image costs no encoding.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Literal

import numpy as np
from cloudevents.core.bindings.http import HTTPMessage, to_binary_event
from cloudevents.core.v1.event import CloudEvent

from slipway.cluster_names import NAMESPACE_ENV
from slipway.runtime_settings import PayloadLogging

Kind = Literal["request", "response"]
TYPE_PREFIXES = {"seldon": "io.seldon.serving", "kserve": "org.kubeflow.serving"}
# Set in the pod: Seldon's operator sets the last two on every model container, the manifests the first.
DEPLOYMENT_ENV, PREDICTOR_ENV = "SELDON_DEPLOYMENT_ID", "PREDICTOR_ID"
UNKNOWN = "unknown"
REDACTED = "[redacted]"
# Credentials a client may send in headers (which MLServer copies into parameters.headers): never logged.
ALWAYS_REDACTED = ("authorization", "cookie", "proxy-authorization", "x-api-key")
JSON = "application/json"


@dataclass(frozen=True)
class Origin:
    """Who sends: the attributes every event of one model version carries."""

    model: str
    version: str
    namespace: str
    deployment: str
    predictor: str
    source: str
    type_prefix: str

    @classmethod
    def for_model(cls, model: str, version: str | None, settings: PayloadLogging, env: Mapping[str, str] | None = None) -> Origin:
        """The model's origin, from the pod's environment where Seldon and the manifests describe it."""
        env = os.environ if env is None else env
        namespace = env.get(NAMESPACE_ENV) or UNKNOWN
        deployment = env.get(DEPLOYMENT_ENV) or model
        predictor = env.get(PREDICTOR_ENV) or UNKNOWN
        source = settings.source or f"/namespaces/{namespace}/seldondeployments/{deployment}/predictors/{predictor}"
        return cls(model, version or "", namespace, deployment, predictor, source, TYPE_PREFIXES[settings.event_types])

    def event_type(self, kind: Kind) -> str:
        return f"{self.type_prefix}.inference.{kind}"


class Redaction:
    """Which parts of a body never leave the pod: names anywhere, or paths from the body's root.

    A name ("image", "x-user") matches a tensor by its name (its data is replaced) or a parameter or header key
    at any depth (its value is replaced); an entry with "/" ("inputs/image", "parameters/headers/x-user") matches
    only that path, where a tensor's path segment is its name. Case-insensitive: HTTP headers are.
    """

    def __init__(self, entries: list[str]) -> None:
        self._names = {entry.lower() for entry in entries if "/" not in entry} | set(ALWAYS_REDACTED)
        self._paths = {entry.strip("/").lower() for entry in entries if "/" in entry}

    def hides(self, path: tuple[str, ...]) -> bool:
        return path[-1].lower() in self._names or "/".join(path).lower() in self._paths

    def mapping(self, values: Mapping[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
        """A copy of `values` (parameters, headers) with matching keys' values replaced, nested mappings too."""
        out: dict[str, Any] = {}
        for key, value in values.items():
            where = (*path, str(key))
            if self.hides(where):
                out[key] = REDACTED
            elif isinstance(value, Mapping):
                out[key] = self.mapping(value, where)
            else:
                out[key] = value
        return out


def build(
    kind: Kind, message: Any, request_id: str, at: float, origin: Origin, redaction: Redaction, max_bytes: int
) -> HTTPMessage:
    """The HTTP message (ce-* headers and JSON body) for one request or response; over `max_bytes` the tensors
    go without their data and the event carries truncated=true."""
    tensors_key = "inputs" if kind == "request" else "outputs"
    tensors = getattr(message, tensors_key, None) or []
    body = _envelope(kind, message, redaction)
    described = [_describe(tensor, tensors_key, redaction) for tensor in tensors]
    raw_bytes = sum(_raw_size(tensor.data) for tensor, (_, hidden) in zip(tensors, described) if not hidden)
    text = None
    if raw_bytes <= max_bytes:
        body[tensors_key] = [
            {**entry, "data": REDACTED if hidden else _json_data(tensor.data)}
            for tensor, (entry, hidden) in zip(tensors, described)
        ]
        text = json.dumps(body, separators=(",", ":"), default=str).encode()
    truncated = text is None or len(text) > max_bytes
    if truncated:
        body[tensors_key] = [entry for entry, _ in described]
        text = json.dumps(body, separators=(",", ":"), default=str).encode()
    attributes = {
        "id": request_id,
        "source": origin.source,
        "type": origin.event_type(kind),
        "time": datetime.fromtimestamp(at, tz=timezone.utc),
        "datacontenttype": JSON,
        "requestid": request_id,
        "modelid": origin.model,
        "inferenceservicename": origin.deployment,
        "namespace": origin.namespace,
        "endpoint": origin.predictor,
    }
    if origin.version:
        attributes["modelversion"] = origin.version
    if truncated:
        attributes["truncated"] = "true"  # a string: the SDK would write a boolean as "True"
    return to_binary_event(CloudEvent(attributes, data=text))


def _envelope(kind: Kind, message: Any, redaction: Redaction) -> dict[str, Any]:
    """The body without its tensors: id, model, parameters (the request's headers among them)."""
    body: dict[str, Any] = {}
    if message.id is not None:
        body["id"] = message.id
    if kind == "response":
        body["model_name"] = message.model_name
        if message.model_version:
            body["model_version"] = message.model_version
    parameters = _parameters(message.parameters)
    if kind == "response":
        parameters.pop("headers", None)  # MLServer's own ce-* answer headers, set while this event is built
    if parameters:
        body["parameters"] = redaction.mapping(parameters, ("parameters",))
    if kind == "request" and message.outputs:
        body["outputs"] = [{"name": output.name} for output in message.outputs]
    return body


def _describe(tensor: Any, where: str, redaction: Redaction) -> tuple[dict[str, Any], bool]:
    """A tensor's name, shape, datatype and parameters, and whether its data is redacted."""
    path = (where, tensor.name)
    entry: dict[str, Any] = {"name": tensor.name, "shape": list(tensor.shape), "datatype": tensor.datatype}
    parameters = _parameters(tensor.parameters)
    if parameters:
        entry["parameters"] = redaction.mapping(parameters, (*path, "parameters"))
    return entry, redaction.hides(path)


def _parameters(parameters: Any) -> dict[str, Any]:
    if parameters is None:
        return {}
    return {key: value for key, value in parameters.model_dump(exclude_none=True).items()}


def _raw_size(data: Any) -> int:
    """About what a tensor's data weighs before JSON: arrays by bytes, lists by items (each a byte or more)."""
    root = getattr(data, "root", data)
    if isinstance(root, np.ndarray):
        return root.nbytes if root.dtype != object else sum(len(item) for item in root.ravel() if hasattr(item, "__len__"))
    if isinstance(root, list):
        return sum(len(item) if isinstance(item, (bytes, str)) else 1 for item in root)
    return 0


def _json_data(data: Any) -> Any:
    """A tensor's data as JSON values: arrays (the raw gRPC path) as lists, bytes as text."""
    root = getattr(data, "root", data)
    if isinstance(root, np.ndarray):
        root = root.tolist()
    if isinstance(root, list) and root and isinstance(root[0], (bytes, np.ndarray)):
        return [_json_item(item) for item in root]
    return root


def _json_item(item: Any) -> Any:
    if isinstance(item, bytes):
        return item.decode("utf-8", errors="backslashreplace")
    if isinstance(item, np.ndarray):
        return _json_data(item)
    return item
