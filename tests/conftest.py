"""Shared fixtures: a real trained digits artifact and a real MLServer serving it.

The artifact is trained once per test session through the real commands
(`python -m export train/convert`), with reports redirected to a temporary folder.
MLServer always runs as its own process: never import `mlserver` or
`wrappers.runtime` in the test process (their gRPC protos clash with tritonclient's).
"""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from slipway.paths import PROJECT_ROOT, SELDON_CRD_SCHEMA

TRAIN_EPOCHS = "25"


def refused_at_load(model_dir: Path, match: str, **server_options) -> None:
    """MLServer must refuse `model_dir` at load with an error matching `match` that names its log.

    The log is kept for a user to read; here it is checked, then removed.
    """
    from wrappers.server import LocalServer, ServerError

    refused = LocalServer(model_dir, ready_timeout_s=60, **server_options)
    with pytest.raises(ServerError, match=match) as caught:
        refused.start()
    assert str(refused.log_path) in str(caught.value) and refused.log_path.is_file()
    shutil.rmtree(refused.log_path.parent)


@contextlib.contextmanager
def http_server(**methods: Callable[[http.server.BaseHTTPRequestHandler], None]) -> Iterator[str]:
    """A loopback HTTP server that hands each request of the methods named (`get=`, `post=`) to its function,
    with the request's handler, and answers others 501; stopped on exit; yields its URL."""
    handlers = {f"do_{method.upper()}": handle for method, handle in methods.items()}
    handler_class = type("Handler", (http.server.BaseHTTPRequestHandler,), {**handlers, "log_message": lambda *args: None})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler_class)
    server.daemon_threads = True  # a handler told never to answer must not hold the shutdown
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def send_body(handler: http.server.BaseHTTPRequestHandler, body: bytes, content_type: str = "application/json") -> None:
    """Answer 200 with `body`."""
    handler.send_response(200)
    handler.send_header("Content-Type", content_type)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


def json_http_server(answer: Callable[[str], object]):
    """A loopback HTTP server answering every GET with `answer(path)` as JSON (a context manager yielding its URL)."""
    return http_server(get=lambda handler: send_body(handler, json.dumps(answer(handler.path)).encode()))


def run_module(module: str, *args: str, env: dict[str, str] | None = None, check: bool = True, timeout: float = 600):
    """Run `python -m module args...` from the project root, as a user would."""
    result = subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=PROJECT_ROOT,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if check and result.returncode != 0:
        raise AssertionError(f"python -m {module} {' '.join(args)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return result


@pytest.fixture(scope="session")
def reports_env(tmp_path_factory) -> dict[str, str]:
    """Environment that sends reports and build outputs of test runs to a temporary folder."""
    root = tmp_path_factory.mktemp("slipway")
    return {"SLIPWAY_REPORTS_DIR": str(root / "reports"), "SLIPWAY_BUILD_DIR": str(root / "build")}


@pytest.fixture(scope="session")
def trained_model(tmp_path_factory, reports_env) -> Path:
    """A digits CNN trained for real (a few epochs fewer than the demo)."""
    out = tmp_path_factory.mktemp("train")
    run_module("export", "train", "--out", str(out), "--epochs", TRAIN_EPOCHS, env=reports_env)
    return out / "model.keras"


@pytest.fixture(scope="session")
def digits_artifact(tmp_path_factory, trained_model, reports_env) -> Path:
    """The trained model converted to ONNX and written as an artifact folder."""
    out = tmp_path_factory.mktemp("artifacts") / "digits"
    run_module("export", "convert", "--model", str(trained_model), "--out", str(out), env=reports_env)
    return out


@pytest.fixture(scope="session")
def digits_server(digits_artifact):
    """A real MLServer on loopback serving the digits artifact, stopped by PID afterwards."""
    from wrappers.server import LocalServer

    with LocalServer(digits_artifact) as server:
        yield server


@pytest.fixture(scope="session")
def seldon_crd_schema() -> dict:
    """The SeldonDeployment CRD's v1 schema from the vendored operator module (third_party/)."""
    from deployments.validate import load_crd_schema

    schema = load_crd_schema(SELDON_CRD_SCHEMA)
    assert schema is not None, f"the Seldon CRD is missing from {SELDON_CRD_SCHEMA}"
    return schema
