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
from tests.commands import run_command

TRAIN_EPOCHS = "25"
# Folders whose tests one pytest-xdist worker runs together, in their order (see pytest_xdist_make_scheduler)
TOGETHER = (
    "tests/localcluster/",  # one control plane (package scope) for them all; they mostly wait on its controllers
    "tests/benchmarks/",  # one at a time: each measures, and test_bench checks /dev/shm for the psm_ blocks they make
)


@pytest.hookimpl(tryfirst=True, optionalhook=True)  # before xdist's own; optional: xdist may be absent
def pytest_xdist_make_scheduler(config, log):
    """`--dist loadgroup` (`make test`), with each folder of TOGETHER as one group: the worker that takes the cluster
    tests runs them against the one control plane they share while the other runs the rest of the suite; elsewhere
    each module is one group.

    A scheduler rather than `xdist_group` marks: pytest-xdist 3.8 groups by rewriting node IDs, which pytest 9.2
    no longer lets it do (pytest-dev/pytest-xdist#1386), so marked tests were spread over the workers.
    """
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class FoldersTogether(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            folder = next((folder for folder in TOGETHER if nodeid.startswith(folder)), None)
            grouped = super()._split_scope(nodeid)  # an xdist_group mark's name, else the node ID itself
            # else the test's module: its module-scoped fixtures (a wheel, MLServer imported in subprocesses) are
            # made once, not once on each worker
            return folder or (grouped if grouped != nodeid else nodeid.split("::", 1)[0])

    return FoldersTogether(config, log)


def refused_at_load(model_dir: Path, match: str, **server_options) -> None:
    """MLServer must refuse `model_dir` at load with an error matching `match` that names its log.

    The log is kept for a user to read; here it is checked, then removed.
    """
    from slipway.local_server import LocalServer, ServerError

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
    with serving(handler_class) as url:
        yield url


@contextlib.contextmanager
def serving(handler_class: type[http.server.BaseHTTPRequestHandler]) -> Iterator[str]:
    """A loopback threading HTTP server with `handler_class`, stopped on exit; yields its URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler_class)
    server.daemon_threads = True  # a handler told never to answer must not hold the shutdown
    # polled every 50 ms for the shutdown, not every 0.5 s: each `with` would otherwise end up to half a second late
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
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


def run_module(
    module: str, *args: str, env: dict[str, str] | None = None, check: bool = True, timeout: float = 600, warm: bool = True
):
    """Run `python -m module args...` from the project root, as a user would: a process of its own, forked from a
    warm interpreter (tests/commands.py) so it skips the third-party imports; `warm=False`, a fresh interpreter
    (for TensorFlow and PyTorch, which start threads and are not fork-safe)."""
    env, command = {**os.environ, **(env or {})}, [sys.executable, "-m", module, *args]
    result = (
        run_command(module, *args, env=env, cwd=PROJECT_ROOT, timeout=timeout)
        if warm
        else subprocess.run(command, cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    )
    if check and result.returncode != 0:
        raise AssertionError(
            f"python -m {module} {' '.join(args)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
        )
    return result


@pytest.fixture(scope="session")
def reports_env(tmp_path_factory) -> dict[str, str]:
    """Environment that sends reports and build outputs of test runs to a temporary folder."""
    root = tmp_path_factory.mktemp("slipway")
    return {"SLIPWAY_REPORTS_DIR": str(root / "reports"), "SLIPWAY_BUILD_DIR": str(root / "build")}


def made_once(tmp_path_factory, name: str, reports_env: dict[str, str], make: Callable[[Path, dict[str, str]], None]) -> Path:
    """A folder `make(folder, env)` fills once per test run, for session fixtures too costly to repeat on each worker;
    the reports it writes land in the caller's reports folder as if it had run there.

    Under pytest-xdist (`make test` runs `-n 2`) the workers share the run's temporary root: the first to ask makes
    the folder there under a file lock, the others wait for it and reuse it. A folder whose maker failed is made
    again by the next worker to ask (and fails it the same way). Without xdist it is a plain temporary folder.
    """
    worker = "PYTEST_XDIST_WORKER" in os.environ
    root = tmp_path_factory.getbasetemp().parent if worker else tmp_path_factory.mktemp(name)
    folder, reports, made = root / name, root / f"{name}-reports", root / f"{name}.made"
    with contextlib.ExitStack() as stack:
        if worker:
            from filelock import FileLock

            stack.enter_context(FileLock(root / f"{name}.lock"))  # root is pytest-N/, above each worker's popen-gwN/
        if not made.exists():
            for leftover in (folder, reports):
                shutil.rmtree(leftover, ignore_errors=True)
            folder.mkdir()
            make(folder, {**reports_env, "SLIPWAY_REPORTS_DIR": str(reports)})
            made.touch()
    if reports.is_dir():
        shutil.copytree(reports, reports_env["SLIPWAY_REPORTS_DIR"], dirs_exist_ok=True)
    return folder


@pytest.fixture(scope="session")
def trained_model(tmp_path_factory, reports_env) -> Path:
    """A digits CNN trained for real (a few epochs fewer than the demo), once per test run."""
    folder = made_once(
        tmp_path_factory,
        "train",
        reports_env,
        lambda out, env: run_module("export", "train", "--out", str(out), "--epochs", TRAIN_EPOCHS, env=env, warm=False),
    )
    return folder / "model.keras"


@pytest.fixture(scope="session")
def digits_artifact(tmp_path_factory, trained_model, reports_env) -> Path:
    """The trained model converted to ONNX and written as an artifact folder, once per test run."""
    folder = made_once(
        tmp_path_factory,
        "artifacts",
        reports_env,
        lambda out, env: run_module(
            "export", "convert", "--model", str(trained_model), "--out", str(out / "digits"), env=env, warm=False
        ),
    )
    return folder / "digits"


@pytest.fixture(scope="session")
def digits_server(digits_artifact):
    """A real MLServer on loopback serving the digits artifact, stopped by PID afterwards."""
    from slipway.local_server import LocalServer

    with LocalServer(digits_artifact) as server:
        yield server


@pytest.fixture(scope="session")
def seldon_crd_schema() -> dict:
    """The SeldonDeployment CRD's v1 schema from the vendored operator module (localcluster/third_party/)."""
    from deployments.render.validate import load_crd_schema

    schema = load_crd_schema(SELDON_CRD_SCHEMA)
    assert schema is not None, f"the Seldon CRD is missing from {SELDON_CRD_SCHEMA}"
    return schema
