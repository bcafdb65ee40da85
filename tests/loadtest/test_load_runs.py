"""Real, short Locust runs against a real MLServer on loopback, through the command a user runs.

Each run is a few seconds: a step load over REST that must pass a generous SLO, a soak over
gRPC that cannot meet its throughput limit and must fail naming it, and a spike through a
stand-in for Seldon's ingress (a prefix-stripping proxy) with tensors built from metadata.
"""

from __future__ import annotations

import http.server
import json
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import run_module

pytestmark = pytest.mark.slow

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _report(env: dict, name: str) -> dict:
    return json.loads((Path(env["SLIPWAY_REPORTS_DIR"]) / f"{name}.json").read_text())


def _check_steps(report: dict) -> None:
    assert report["steps"], report["stopped"]
    for step in report["steps"]:
        assert step["requests"] > 0 and step["rps"] > 0
        assert 0 <= step["p50_ms"] <= step["p90_ms"] <= step["p95_ms"] <= step["p99_ms"]
    assert Path(report["plot"]).read_bytes().startswith(PNG_MAGIC)
    assert Path(report["locust_html"]).stat().st_size > 0 and Path(report["locust_csv"]).is_file()


def test_step_load_over_rest_rises_measures_each_step_and_passes_a_slo_that_holds(digits_server, reports_env, tmp_path):
    slo = tmp_path / "slo.yaml"
    slo.write_text("p95_ms: 5000\nmax_error_rate: 0.01\nmin_rps: 1\n")
    result = run_module(
        "loadtest",
        "run",
        "--host",
        digits_server.http_url,
        "--model",
        "digits",
        "--shape",
        "step",
        "--step-seconds",
        "2",
        "--max-users",
        "8",
        "--slo",
        str(slo),
        "--name",
        "step-rest",
        env=reports_env,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    report = _report(reports_env, "step-rest")
    _check_steps(report)
    users = [step["users"] for step in report["steps"]]
    assert users == [1, 2, 4, 8][: len(users)]
    saturation = report["saturation"]
    assert saturation["saturated"] == report["stopped"].startswith("saturated")
    if saturation["saturated"]:
        assert saturation["users"] in users and saturation["rps"] >= 0.95 * max(s["rps"] for s in report["steps"])
    assert report["slo"]["passed"] and report["slo"]["judged_on"].startswith("step ")
    assert report["payload"]["source"] == "random, from the model's metadata"
    assert "SLO holds" in result.stderr


def test_soak_over_grpc_fails_the_gate_naming_the_limit_and_by_how_much(digits_server, reports_env):
    result = run_module(
        "loadtest",
        "run",
        "--host",
        digits_server.grpc_target,
        "--protocol",
        "grpc",
        "--model",
        "digits",
        "--shape",
        "soak",
        "--users",
        "2",
        "--duration",
        "4",
        "--window-seconds",
        "2",
        "--min-rps",
        "10000000",
        "--max-error-rate",
        "0",
        "--name",
        "soak-grpc",
        env=reports_env,
        check=False,
    )
    assert result.returncode == 1, result.stderr
    assert "SLO broken on the whole run" in result.stderr and "< min_rps 1e+07 (short by" in result.stderr
    report = _report(reports_env, "soak-grpc")
    _check_steps(report)
    assert [step["name"] for step in report["steps"]] == ["window 1", "window 2"]
    assert report["result"]["failures"] == 0 and report["protocol"] == "grpc"
    assert [breach["limit"] for breach in report["slo"]["breaches"]] == ["min_rps"]
    assert report["findings"]["windows"] == 2


def test_constant_load_over_rest_with_binary_tensors_is_answered(digits_server, reports_env, tmp_path):
    out_dir = tmp_path / "locust"
    result = run_module(
        "loadtest",
        "run",
        "--host",
        digits_server.http_url,
        "--model",
        "digits",
        "--rest-body",
        "binary",
        "--shape",
        "constant",
        "--users",
        "2",
        "--duration",
        "3",
        "--max-error-rate",
        "0",
        "--name",
        "binary-rest",
        "--out-dir",
        str(out_dir),
        env=reports_env,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    report = _report(reports_env, "binary-rest")
    _check_steps(report)
    assert report["result"]["failures"] == 0 and report["rest_body"] == "binary"
    # What Locust sent: a JSON header of the announced length, then one row's 64 float32s as bytes.
    headers, body = report["payload"]["headers"], (out_dir / "request.bin").read_bytes()
    header_length = int(headers["Inference-Header-Content-Length"])
    header = json.loads(body[:header_length])
    assert header["inputs"][0]["parameters"]["binary_data_size"] == len(body) - header_length == 64 * 4
    # The same body without its header is not a V2 JSON request: the run's zero failures were the binary route's answers.
    refused = urllib.request.Request(
        f"{digits_server.http_url}/v2/models/digits/infer", data=body, headers={"Content-Type": "application/json"}
    )
    with pytest.raises(urllib.error.HTTPError) as answer:
        urllib.request.urlopen(refused, timeout=10)
    assert 400 <= answer.value.code < 500


class _IngressProxy(http.server.ThreadingHTTPServer):
    """Serves `/seldon/<ns>/<name>/...` by forwarding to MLServer without the prefix, like Seldon's ingress."""

    def __init__(self, upstream: str, prefix: str):
        self.upstream, self.prefix, self.seen = upstream, prefix, []
        super().__init__(("127.0.0.1", 0), _ProxyHandler)


class _ProxyHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _forward(self, method: str) -> None:
        server: _IngressProxy = self.server
        server.seen.append(self.path)
        if not self.path.startswith(server.prefix + "/"):
            return self._answer(404, b'{"error": "no route"}')
        body = self.rfile.read(int(self.headers.get("Content-Length", 0))) if method == "POST" else None
        request = urllib.request.Request(
            server.upstream + self.path[len(server.prefix) :],
            data=body,
            method=method,
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                self._answer(response.status, response.read())
        except urllib.error.HTTPError as err:
            self._answer(err.code, err.read())

    def _answer(self, status: int, data: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):  # noqa: N802 (http.server's naming)
        self._forward("GET")

    def do_POST(self):  # noqa: N802
        self._forward("POST")

    def log_message(self, *args):
        pass


def test_spike_through_the_seldon_ingress_prefix(digits_server, reports_env):
    proxy = _IngressProxy(digits_server.http_url, "/seldon/models/digits")
    thread = threading.Thread(target=proxy.serve_forever, daemon=True)
    thread.start()
    try:
        host = f"http://127.0.0.1:{proxy.server_address[1]}/seldon/models/digits"
        result = run_module(
            "loadtest",
            "run",
            "--host",
            host,
            "--model",
            "digits",
            "--shape",
            "spike",
            "--users",
            "1",
            "--spike-users",
            "3",
            "--duration",
            "6",
            "--spike-seconds",
            "2",
            "--batch-size",
            "2",
            "--name",
            "spike-seldon",
            env=reports_env,
            check=False,
        )
    finally:
        proxy.shutdown()
        proxy.server_close()
    assert result.returncode == 0, result.stderr
    report = _report(reports_env, "spike-seldon")
    _check_steps(report)
    assert [(s["name"], s["users"]) for s in report["steps"]] == [("baseline", 1), ("spike", 3), ("recovery", 1)]
    assert report["result"]["failures"] == 0 and report["payload"]["rows_per_request"] == 2
    assert all(path.startswith("/seldon/models/digits/v2/models/digits") for path in proxy.seen)
    assert set(report["findings"]["p95_ms"]) == {"baseline", "spike", "recovery"}


@pytest.mark.parametrize(
    "args, message",
    [
        (["--host", "http://127.0.0.1:9", "--model", "digits"], "cannot reach http://127.0.0.1:9/v2/models/digits"),
        (["--model", "nope"], "answered HTTP 404: is model 'nope' served there?"),
        (["--model", "digits", "--shape", "step", "--step-seconds", "0.5"], "too short to measure"),
        (["--model", "digits", "--protocol", "grpc", "--rest-body", "binary"], "--rest-body binary is for --protocol rest"),
    ],
)
def test_bad_targets_are_one_line_before_any_load(digits_server, reports_env, args, message):
    if "--host" not in args:
        args = ["--host", digits_server.http_url, *args]
    result = run_module("loadtest", "run", *args, "--name", "bad", env=reports_env, check=False)
    assert result.returncode == 2
    assert message in result.stderr and "Traceback" not in result.stderr
    assert not (Path(reports_env["SLIPWAY_REPORTS_DIR"]) / "bad.json").exists()
