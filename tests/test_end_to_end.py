"""The whole road on real parts: trained model -> ONNX artifact -> real MLServer -> V2 clients -> Locust -> manifests."""

from __future__ import annotations

import json
import shutil
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from loadtest.smoke import check_grpc, check_http
from tests.conftest import refused_at_load, run_module

pytestmark = pytest.mark.slow


def _report(env: dict, name: str) -> dict:
    return json.loads((Path(env["SLIPWAY_REPORTS_DIR"]) / f"{name}.json").read_text())


def post_json(url: str, body: bytes | dict) -> tuple[int, dict]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}")


def test_training_reaches_the_accuracy_bar_with_callbacks(trained_model, reports_env):
    report = _report(reports_env, "train")
    assert report["test_accuracy"] >= 0.95
    assert report["parameters"] >= 100_000
    assert Path(report["tensorboard_logs"]).is_dir()
    assert (trained_model.parent / "checkpoint.best.keras").is_file()
    assert report["data"]["sizes"]["test"] == 360


def test_conversion_is_faithful(digits_artifact, reports_env):
    report = _report(reports_env, "convert")
    assert report["opset"] >= 17
    assert report["parity"]["identical_predictions"] is True
    assert report["parity"]["max_abs_diff"] < 1e-4
    assert {p.name for p in digits_artifact.iterdir()} == {
        "model.onnx",
        "model-settings.json",
        "manifest.json",
        "input-example.npz",
    }


def test_metadata_comes_from_the_graph(digits_server):
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(digits_server.http_url.removeprefix("http://"))
    metadata = client.get_model_metadata("digits")
    assert metadata["inputs"] == [{"name": "image", "datatype": "FP32", "shape": [-1, 8, 8, 1]}]
    assert metadata["outputs"] == [{"name": "probabilities", "datatype": "FP32", "shape": [-1, 10]}]


def test_rest_and_grpc_answer_as_exported(digits_server, digits_artifact):
    for result in (
        check_http(digits_server.http_url, "digits", digits_artifact),
        check_grpc(digits_server.grpc_target, "digits", digits_artifact),
    ):
        assert result.predictions_match and result.max_abs_diff <= 1e-5 and result.rows == 32


GOOD = {"name": "image", "datatype": "FP32", "shape": [1, 8, 8, 1], "data": [0.5] * 64}


@pytest.mark.parametrize(
    "inputs, expected",
    [
        ([{**GOOD, "name": "pixels"}], "takes inputs ['image']"),
        ([{**GOOD, "datatype": "FP64"}], "must have datatype FP32, got FP64"),
        ([{**GOOD, "shape": [1, 64], "data": [0.5] * 64}], "must have shape [N, 8, 8, 1]"),
        ([{**GOOD, "data": [0.5] * 63}], "does not fill shape [1, 8, 8, 1]"),
        ([GOOD, GOOD], "exactly once"),
    ],
)
def test_bad_rest_requests_get_400_naming_what_was_expected(digits_server, inputs, expected):
    status, body = post_json(f"{digits_server.http_url}/v2/models/digits/infer", {"inputs": inputs})
    assert status == 400, body
    assert expected in body["error"]
    status, body = post_json(f"{digits_server.http_url}/v2/models/digits/infer", {"inputs": [GOOD]})
    assert status == 200 and body["outputs"][0]["shape"] == [1, 10]


def test_bad_grpc_request_is_invalid_argument(digits_server):
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    client = grpcclient.InferenceServerClient(digits_server.grpc_target)
    tensor = grpcclient.InferInput("image", [2, 8, 8], "FP32")
    tensor.set_data_from_numpy(np.zeros((2, 8, 8), dtype=np.float32))
    with pytest.raises(InferenceServerException) as caught:
        client.infer("digits", [tensor])
    assert "INVALID_ARGUMENT" in str(caught.value.status()) and "must have shape [N, 8, 8, 1]" in caught.value.message()
    client.close()


def test_a_tampered_artifact_is_refused_at_load(digits_artifact, tmp_path):
    tampered = tmp_path / "digits"
    shutil.copytree(digits_artifact, tampered)
    with open(tampered / "model.onnx", "ab") as handle:
        handle.write(b"\0")
    refused_at_load(tampered, r"model\.onnx does not match its sha256")


def test_a_server_stopped_cleanly_leaves_nothing_behind(digits_artifact):
    from slipway.local_server import LocalServer

    with LocalServer(digits_artifact) as server:
        assert server.log_path.is_file()
    assert not server.log_path.parent.exists() and server.pid is None


def test_locust_run_reports_throughput_and_latency(digits_artifact, reports_env):
    run_module("loadtest", "run", "--model-dir", str(digits_artifact), "--users", "2", "--duration", "5", env=reports_env)
    result = _report(reports_env, "loadtest")["result"]
    assert result["requests"] > 0 and result["failures"] == 0 and result["rps"] > 0
    assert 0 < result["p50_ms"] <= result["p95_ms"] <= result["p99_ms"]


def test_manifests_render_for_the_artifact(digits_artifact, reports_env, tmp_path):
    run_module("deployments", "render", "--model-dir", str(digits_artifact), "--out", str(tmp_path / "m"), env=reports_env)
    report = _report(reports_env, "manifests")
    assert report["validation"]["ok"]
    assert sorted(Path(f).name.split("-")[0] for f in report["files"]) == [
        "networkpolicy",
        "podmonitor",
        "seldondeployment",
        "serviceaccount",
    ]


def test_bad_command_input_is_one_line_and_non_zero(tmp_path, reports_env):
    result = run_module(
        "export",
        "convert",
        "--model",
        str(tmp_path / "missing.keras"),
        "--out",
        str(tmp_path / "a"),
        env=reports_env,
        check=False,
    )
    assert result.returncode == 2
    assert "no model at" in result.stderr and "pass a .keras file" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "a").exists()
