"""The README's request examples, run as a user pastes them, against a real `make serve` of the digits model.

Each snippet sits under a `<!-- readme-test: NAME -->` line. The server is the command `make serve` runs
(`python -m wrappers serve`), on free loopback ports written into the snippets in place of 8080 and 8081.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request

import pytest

from slipway.paths import PROJECT_ROOT
from slipway.ports import LOOPBACK, free_port

README = PROJECT_ROOT / "README.md"
SERVING_PAGE = PROJECT_ROOT / "docs" / "serving.md"
SNIPPET = re.compile(r"<!-- readme-test: (\w+) -->\n```\w*\n(.*?)```", re.DOTALL)
READY_S = 120


def snippets() -> dict[str, str]:
    found = dict(SNIPPET.findall(README.read_text()))
    assert set(found) == {"curl", "python"}, f"README.md's tested snippets: {sorted(found)}"
    return found


def test_the_serving_page_shows_the_readme_s_tested_snippets_unchanged():
    page = SERVING_PAGE.read_text()
    for name, code in snippets().items():
        assert code in page, f"docs/serving.md lacks the README's {name} snippet as it is tested"


@pytest.fixture(scope="module")
def served(digits_artifact, tmp_path_factory):
    """`make serve MODEL_DIR=<artifact> HTTP_PORT=... GRPC_PORT=... METRICS_PORT=...`, stopped by its PID."""
    http_port, grpc_port, metrics_port = free_port(), free_port(), free_port()
    command = [
        sys.executable,
        "-m",
        "wrappers",
        "serve",
        "--model-dir",
        str(digits_artifact),
        "--host",
        LOOPBACK,
        "--http-port",
        str(http_port),
        "--grpc-port",
        str(grpc_port),
        "--metrics-port",
        str(metrics_port),
    ]
    log = tmp_path_factory.mktemp("serve") / "serve.log"  # a file, not a pipe nobody reads while it fills
    with log.open("w") as out:
        process = subprocess.Popen(command, cwd=PROJECT_ROOT, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + READY_S
        while not _ready(http_port):
            assert process.poll() is None, f"the server stopped:\n{log.read_text()}"
            assert time.monotonic() < deadline, f"the digits model is not ready after {READY_S} s"
            time.sleep(0.3)
        yield {"8080": str(http_port), "8081": str(grpc_port)}
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _ready(http_port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://{LOOPBACK}:{http_port}/v2/models/digits/ready", timeout=1) as answer:
            return answer.status == 200
    except OSError:
        return False


def _on_ports(code: str, ports: dict[str, str]) -> str:
    for default, port in ports.items():
        assert f"127.0.0.1:{default}" in code or default == "8081", f"the snippet does not address 127.0.0.1:{default}"
        code = code.replace(f"127.0.0.1:{default}", f"127.0.0.1:{port}")
    return code


@pytest.mark.slow
def test_the_curl_snippet_gets_the_digit_0_back(served):
    assert shutil.which("curl"), "the README's curl snippet needs curl on the PATH: install curl"
    code = _on_ports(snippets()["curl"], served)
    result = subprocess.run(["bash", "-euo", "pipefail", "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout)
    assert answer["model_name"] == "digits"
    [output] = answer["outputs"]
    assert (output["name"], output["datatype"], output["shape"]) == ("probabilities", "FP32", [1, 10])
    assert max(range(10), key=output["data"].__getitem__) == 0


@pytest.mark.slow
def test_the_tritonclient_snippet_prints_what_the_readme_says(served):
    code = _on_ports(snippets()["python"], served)
    assert "127.0.0.1:8081" not in code and served["8081"] in code
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=PROJECT_ROOT, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["REST: [0 1 2 3]", "gRPC: [0 1 2 3]", "labels: [0 1 2 3]"], result.stdout
    assert "It prints `[0 1 2 3]` three times." in README.read_text()
