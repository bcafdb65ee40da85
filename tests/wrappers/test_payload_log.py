"""Payload logging against real collectors on loopback, from one real MLServer serving digits.

One server serves the same graph under several names, each logging to a collector that behaves
differently: one that takes every event (attributes, redaction, the size cap, sampling), one that
answers slowly, one that is down, one that fails every other way. What must hold: events arrive as
CloudEvents (parsed here by the `cloudevents` SDK), credentials and redacted fields never leave, and
inference answers every request as fast as the model that logs nothing, measured side by side.
"""

from __future__ import annotations

import contextlib
import http.client
import http.server
import json
import socket
import statistics
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import grpc
import numpy as np
import pytest
from cloudevents.core.bindings.http import HTTPMessage, from_http_event

from slipway.artifact import load_input_example
from slipway.local_server import LocalServer
from slipway.ports import LOOPBACK
from tests.wrappers.folders import model_folder
from tests.wrappers.v2 import GrpcClient, raw_output, raw_request, scrape

pytestmark = pytest.mark.slow

ENV = {"SLIPWAY_NAMESPACE": "ml", "SELDON_DEPLOYMENT_ID": "digits-prod", "PREDICTOR_ID": "default"}
SLOW_ANSWER_S = 0.5  # the slow collector's delay per event: within its model's timeout, so the queue fills
ROUNDS = 120  # latency rounds, each one request per model in turn
LATENCY_RATIO_LIMIT = 1.5  # median latency of a logging model over the silent one's, measured alternately
WAIT_S = 20.0
FLAKY_TIMEOUT_S = 0.2


@dataclass
class Collector:
    """A loopback HTTP collector: `behaviour(n)` says what to do with the n-th event (0-based)."""

    behaviour: str = "take"
    events: list[HTTPMessage] = field(default_factory=list)
    arrived: threading.Condition = field(default_factory=threading.Condition)
    count: int = 0

    def handle(self, handler: http.server.BaseHTTPRequestHandler) -> None:
        body = handler.rfile.read(int(handler.headers.get("Content-Length", 0)))
        with self.arrived:
            number, self.count = self.count, self.count + 1
        if self.behaviour == "slow":
            time.sleep(SLOW_ANSWER_S)
        if self.behaviour == "flaky" and number % 3 == 1:
            handler.send_response(503)
            handler.send_header("Content-Length", "0")
            handler.end_headers()
            return
        if self.behaviour == "flaky" and number % 3 == 2:
            time.sleep(FLAKY_TIMEOUT_S * 2)  # past the sender's timeout: it has hung up; no answer
            handler.close_connection = True
            return
        with self.arrived:
            self.events.append(HTTPMessage(headers={k.lower(): v for k, v in handler.headers.items()}, body=body))
            self.arrived.notify_all()
        with contextlib.suppress(ConnectionError):  # a sender stopped with its server hangs up on a slow answer
            handler.send_response(202)
            handler.send_header("Content-Length", "0")
            handler.end_headers()

    def wait_for(self, predicate, timeout_s: float = WAIT_S) -> list[HTTPMessage]:
        """The events once `predicate(events)` holds; fails after `timeout_s`."""
        with self.arrived:
            assert self.arrived.wait_for(lambda: predicate(self.events), timeout=timeout_s), (
                f"the collector got {len(self.events)} events: {[e.headers.get('ce-id') for e in self.events]}"
            )
            return list(self.events)


@contextlib.contextmanager
def collector(behaviour: str) -> Iterator[tuple[str, Collector]]:
    state = Collector(behaviour)
    handler = type(
        "Handler",
        (http.server.BaseHTTPRequestHandler,),
        {"do_POST": lambda self: state.handle(self), "log_message": lambda *args: None, "protocol_version": "HTTP/1.1"},
    )
    server = http.server.ThreadingHTTPServer((LOOPBACK, 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://{LOOPBACK}:{server.server_address[1]}/events", state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def closed_port() -> int:
    """A loopback port nothing listens on: connecting is refused at once."""
    with socket.socket() as sock:
        sock.bind((LOOPBACK, 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def served(tmp_path_factory, digits_artifact):
    """The server and its collectors; each model's settings name its collector."""
    root = tmp_path_factory.mktemp("payload-log")
    onnx = digits_artifact / "model.onnx"
    with (
        collector("take") as (take_url, taken),
        collector("take") as (capped_url, capped),
        collector("take") as (sampled_url, sampled),
        collector("slow") as (slow_url, slow),
        collector("flaky") as (flaky_url, flaky),
    ):
        logs = {
            "silent": None,
            "logged": {"url": take_url, "redact": ["x-user", "parameters/headers/x-trace"], "queue_size": 100},
            "secret": {"url": take_url, "redact": ["INPUT_NAME"]},
            "capped": {"url": capped_url, "max_bytes": 1024},
            "sampled": {"url": sampled_url, "sample": 0.5},
            "slow": {"url": slow_url, "queue_size": 4, "timeout_s": 5},
            "down": {"url": f"http://{LOOPBACK}:{closed_port()}/", "timeout_s": 0.5, "backoff_s": 1},
            "flaky": {"url": flaky_url, "backoff_s": 0, "timeout_s": FLAKY_TIMEOUT_S, "event_types": "kserve"},
        }
        inputs, _, _ = load_input_example(digits_artifact)
        input_name = next(iter(inputs))
        for name, log in logs.items():
            if log and log.get("redact") == ["INPUT_NAME"]:
                log["redact"] = [input_name.upper()]  # names compare case-insensitively
            model_folder(root, name, onnx, version="7", extra={"payload_log": log} if log else {})
        # under MLServer's adaptive batching, which merges requests before the runtime sees them
        model_folder(
            root,
            "batched",
            onnx,
            version="7",
            extra={"payload_log": {"url": take_url}},
            batching={"max_batch_size": 4, "max_batch_time": 0.05},
        )
        with LocalServer(root, extra_env=ENV) as server:
            yield (
                server,
                {
                    "logged": taken,
                    "secret": taken,
                    "batched": taken,
                    "capped": capped,
                    "sampled": sampled,
                    "slow": slow,
                    "flaky": flaky,
                },
                inputs,
            )


def _body(inputs: dict[str, np.ndarray], request_id: str | None = None, rows: int = 1) -> bytes:
    name, array = next(iter(inputs.items()))
    body = {
        "inputs": [{"name": name, "datatype": "FP32", "shape": [rows, *array.shape[1:]], "data": array[:rows].ravel().tolist()}]
    }
    if request_id:
        body["id"] = request_id
    return json.dumps(body).encode()


def _infer(connection: http.client.HTTPConnection, model: str, body: bytes, headers: dict | None = None) -> dict:
    connection.request(
        "POST", f"/v2/models/{model}/infer", body=body, headers={"Content-Type": "application/json", **(headers or {})}
    )
    answer = connection.getresponse()
    text = answer.read()
    assert answer.status == 200, text
    return json.loads(text)


def _of(events: list[HTTPMessage], request_id: str) -> dict[str, object]:
    """The CloudEvents of one request by ce-type's last word (request, response)."""
    parsed = [from_http_event(event) for event in events if event.headers.get("ce-id") == request_id]
    return {event.get_type().rsplit(".", 1)[1]: event for event in parsed}


def _data(event) -> dict:
    """An event's body: the SDK hands application/json data over parsed."""
    data = event.get_data()
    return data if isinstance(data, dict) else json.loads(data)


def test_request_and_response_arrive_as_cloudevents_with_credentials_and_redacted_fields_removed(served):
    server, collectors, inputs = served
    connection = http.client.HTTPConnection(LOOPBACK, server.http_port, timeout=30)
    answer = _infer(
        connection,
        "logged",
        _body(inputs, "req-1"),
        {"Authorization": "Bearer s3cret", "X-User": "bob", "X-Trace": "t-1", "X-Keep": "kept"},
    )
    connection.close()
    events = _of(collectors["logged"].wait_for(lambda got: len(_of(got, "req-1")) == 2), "req-1")
    request, response = events["request"], events["response"]
    for event in (request, response):
        assert event.get_id() == "req-1" and event.get_extension("requestid") == "req-1"
        assert event.get_specversion() == "1.0" and event.get_datacontenttype() == "application/json"
        assert event.get_source() == "/namespaces/ml/seldondeployments/digits-prod/predictors/default"
        assert event.get_extension("modelid") == "logged" and event.get_extension("modelversion") == "7"
        assert event.get_extension("inferenceservicename") == "digits-prod"
        assert event.get_extension("namespace") == "ml" and event.get_extension("endpoint") == "default"
        assert event.get_extension("truncated") is None
    assert request.get_type() == "io.seldon.serving.inference.request"
    assert response.get_type() == "io.seldon.serving.inference.response"
    assert request.get_time() <= response.get_time()
    sent = _data(request)
    headers = sent["parameters"]["headers"]
    assert headers["authorization"] == headers["x-user"] == headers["x-trace"] == "[redacted]"
    assert headers["x-keep"] == "kept"
    name, array = next(iter(inputs.items()))
    assert sent["inputs"][0]["name"] == name
    assert np.allclose(sent["inputs"][0]["data"], array[:1].ravel())
    assert _data(response)["outputs"] == answer["outputs"]
    assert "s3cret" not in str([event.body for event in collectors["logged"].events])


def test_a_redacted_tensor_leaves_without_its_data_also_from_the_raw_grpc_path(served):
    server, collectors, inputs = served
    name, array = next(iter(inputs.items()))
    client = GrpcClient(server.grpc_target)
    request = raw_request("secret", {name: ("FP32", [1, *array.shape[1:]], array[:1].astype(np.float32).tobytes())})
    request.id = "grpc-1"
    answer = raw_output(client.infer(request))
    client.close()
    events = _of(collectors["secret"].wait_for(lambda got: len(_of(got, "grpc-1")) == 2), "grpc-1")
    sent = _data(events["request"])
    assert sent["inputs"] == [{"name": name, "shape": [1, *array.shape[1:]], "datatype": "FP32", "data": "[redacted]"}]
    output = _data(events["response"])["outputs"][0]
    assert np.allclose(output["data"], answer.ravel()) and output["shape"] == list(answer.shape)


def test_requests_merged_by_mlservers_adaptive_batching_are_logged_one_by_one(served):
    server, collectors, inputs = served

    def send(number: int) -> dict:
        connection = http.client.HTTPConnection(LOOPBACK, server.http_port, timeout=30)
        try:
            return _infer(connection, "batched", _body(inputs, f"b-{number}"))
        finally:
            connection.close()

    threads_answers: dict[int, dict] = {}
    threads = [threading.Thread(target=lambda n=n: threads_answers.__setitem__(n, send(n))) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    ids = [f"b-{number}" for number in range(4)]
    events = collectors["batched"].wait_for(lambda got: all(len(_of(got, request_id)) == 2 for request_id in ids))
    for number, request_id in enumerate(ids):
        logged = _of(events, request_id)
        assert _data(logged["request"])["inputs"][0]["shape"][0] == 1
        assert _data(logged["response"])["outputs"] == threads_answers[number]["outputs"]


def test_a_body_over_max_bytes_is_sent_without_tensor_data_and_says_truncated(served):
    server, collectors, inputs = served
    connection = http.client.HTTPConnection(LOOPBACK, server.http_port, timeout=30)
    _infer(connection, "capped", _body(inputs, "big-1", rows=4))
    connection.close()
    events = _of(collectors["capped"].wait_for(lambda got: len(_of(got, "big-1")) == 2), "big-1")
    assert events["request"].get_extension("truncated") in (True, "true")
    sent = _data(events["request"])
    assert "data" not in sent["inputs"][0] and sent["inputs"][0]["shape"][0] == 4
    assert all(len(message.body) <= 1024 for message in collectors["capped"].events)


def test_sampling_sends_a_share_of_requests_with_their_responses(served):
    server, collectors, inputs = served
    connection = http.client.HTTPConnection(LOOPBACK, server.http_port, timeout=30)
    for number in range(40):
        _infer(connection, "sampled", _body(inputs, f"s-{number}"))
    connection.close()
    time.sleep(1.0)  # the sender has nothing left after this on an idle collector
    ids = [event.headers["ce-id"] for event in collectors["sampled"].events]
    assert 5 <= len(set(ids)) <= 35  # Binomial(40, 0.5) falls outside with probability under 1e-6
    assert all(ids.count(request_id) == 2 for request_id in ids)


def test_a_slow_or_down_collector_costs_inference_nothing_and_drops_are_counted(served):
    server, collectors, inputs = served
    body = _body(inputs)
    connection = http.client.HTTPConnection(LOOPBACK, server.http_port, timeout=30)
    seconds: dict[str, list[float]] = {"silent": [], "slow": [], "down": []}
    for _ in range(10):  # warm the connection and the routes
        for model in seconds:
            _infer(connection, model, body)
    for round_number in range(ROUNDS):
        order = list(seconds) if round_number % 2 else list(reversed(seconds))  # neither goes first always
        for model in order:
            started = time.perf_counter()
            _infer(connection, model, body)
            seconds[model].append(time.perf_counter() - started)
    connection.close()
    medians = {model: statistics.median(values) for model, values in seconds.items()}
    for model in ("slow", "down"):
        assert medians[model] / medians["silent"] < LATENCY_RATIO_LIMIT, medians
    metrics = scrape(server.metrics_url)

    def dropped(model: str, reason: str) -> float:
        key = f'slipway_payload_events_dropped_total{{model_name="{model}",model_version="7",reason="{reason}"}}'
        return metrics.get(key, 0.0)

    # the slow collector held at most the queue and one event in flight: most of 2 x 130 events dropped at the door
    assert dropped("slow", "queue_full") > 100
    # the down one: each refusal pauses sending for backoff_s, and what comes meanwhile is dropped
    assert dropped("down", "unreachable") >= 1 and dropped("down", "collector_down") > 100
    assert collectors["slow"].count < 20


def test_a_flaky_collector_gets_what_it_takes_and_the_rest_is_counted(served):
    server, collectors, inputs = served
    connection = http.client.HTTPConnection(LOOPBACK, server.http_port, timeout=30)
    for number in range(12):
        _infer(connection, "flaky", _body(inputs, f"f-{number}"))
    connection.close()
    flaky = collectors["flaky"]
    labels = 'model_name="flaky",model_version="7"'
    deadline = time.monotonic() + WAIT_S
    while True:  # every event offered once (backoff_s 0, no retries), then counted: 24 in all
        metrics = scrape(server.metrics_url)
        sent = sum(
            metrics.get(f'slipway_payload_events_sent_total{{{labels},type="{kind}"}}', 0) for kind in ("request", "response")
        )
        dropped = {
            reason: metrics.get(f'slipway_payload_events_dropped_total{{{labels},reason="{reason}"}}', 0)
            for reason in ("rejected", "timeout")
        }
        if sent + sum(dropped.values()) >= 24 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert (sent, dropped) == (8, {"rejected": 8, "timeout": 8})
    assert flaky.count == 24 and len(flaky.events) == 8
    assert all(event.headers["ce-type"].startswith("org.kubeflow.serving.inference.") for event in flaky.events)


def test_grpc_inference_is_unaffected_by_a_down_collector(served):
    server, _, inputs = served
    name, array = next(iter(inputs.items()))
    client = GrpcClient(server.grpc_target)
    try:
        for _ in range(20):
            request = raw_request("down", {name: ("FP32", [1, *array.shape[1:]], array[:1].astype(np.float32).tobytes())})
            assert raw_output(client.infer(request)).shape[0] == 1
    except grpc.RpcError as err:  # pragma: no cover - the assertion's message
        pytest.fail(f"gRPC inference failed with the collector down: {err}")
    finally:
        client.close()
