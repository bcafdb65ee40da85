"""The Prometheus reader refuses plain HTTP off this machine unless told, before anything is sent."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from deployments.sizing.prometheus import ALLOW_HTTP_ENV, Prometheus, PrometheusError


class _Answers(BaseHTTPRequestHandler):
    """One instant vector for any query; remembers the Authorization header it got."""

    seen: list[str | None] = []

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.seen.append(self.headers.get("Authorization"))
        body = json.dumps(
            {"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}, "value": [0, "2.5"]}]}}
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def loopback_prometheus() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Answers)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)  # a quick shutdown
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.mark.parametrize("url", ["http://prometheus.monitoring:9090", "http://10.0.0.7:9090", "http://[2001:db8::1]:9090"])
def test_plain_http_to_another_host_is_refused_naming_the_fix(url):
    with pytest.raises(PrometheusError) as refused:
        Prometheus.from_env(env={"PROMETHEUS_URL": url, "PROMETHEUS_TOKEN": "secret"})
    message = str(refused.value)
    assert "\n" not in message and url in message
    assert "https://" in message and f"{ALLOW_HTTP_ENV}=1" in message
    assert "secret" not in message


def test_a_constructed_reader_refuses_at_the_first_query_before_sending():
    # 192.0.2.1 (TEST-NET-1) routes nowhere: were anything sent, this would time out, not refuse
    server = Prometheus("http://192.0.2.1:9090", token="secret", timeout_s=0.5)
    with pytest.raises(PrometheusError, match=ALLOW_HTTP_ENV):
        server.scalar("up", at=0)


@pytest.mark.parametrize(
    "url", ["https://prometheus.example.com", "http://localhost:9090", "http://127.0.0.9:9090", "http://[::1]:9090"]
)
def test_https_and_loopback_need_no_permission(url):
    assert Prometheus.from_env(env={"PROMETHEUS_URL": url}).url == url


def test_allow_http_lets_plain_http_through():
    server = Prometheus.from_env(env={"PROMETHEUS_URL": "http://prometheus.monitoring:9090", ALLOW_HTTP_ENV: "1"})
    assert server.allow_http
    server.check_transport()
    with pytest.raises(PrometheusError, match=ALLOW_HTTP_ENV):
        Prometheus.from_env(env={"PROMETHEUS_URL": "http://prometheus.monitoring:9090", ALLOW_HTTP_ENV: "0"})


def test_an_unclear_allow_http_value_is_refused():
    with pytest.raises(PrometheusError, match=f"{ALLOW_HTTP_ENV}='yes' is neither 1 nor 0"):
        Prometheus.from_env(env={"PROMETHEUS_URL": "https://p.example.com", ALLOW_HTTP_ENV: "yes"})


def test_a_loopback_server_is_queried_over_plain_http(loopback_prometheus):
    _Answers.seen.clear()
    server = Prometheus.from_env(env={"PROMETHEUS_URL": loopback_prometheus, "PROMETHEUS_TOKEN": "t0k"})
    assert server.scalar("sum(up)", at=0) == 2.5
    assert _Answers.seen == ["Bearer t0k"]
