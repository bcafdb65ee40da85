"""JSON log lines in the rendered pods: every overlay sets them, the images hold the config, and a real
server started with that setting writes one JSON object per line naming model, version and request."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request

import numpy as np
import pytest

from deployments.render.overlay import DEPLOYMENTS_DIR, RenderOptions, render
from slipway.artifact import load_input_example
from slipway.local_server import LocalServer
from slipway.paths import PROJECT_ROOT
from tests.wrappers.folders import model_folder
from tests.wrappers.v2 import GrpcClient, raw_request

LOGGING_ENV = "MLSERVER_LOGGING_SETTINGS"
LOCAL_CONFIG = PROJECT_ROOT / "wrappers" / "logging.json"  # what the images copy to the manifests' path
KEYS = {"time", "level", "logger", "message", "model_name", "model_version", "request_id"}
VERSION = "5"


def _model_env(rendered) -> dict[str, str]:
    predictor = rendered.seldon_deployment["spec"]["predictors"][0]
    container = predictor["componentSpecs"][0]["spec"]["containers"][0]
    return {item["name"]: item.get("value") for item in container["env"]}


@pytest.mark.parametrize("overlay", ["cpu", "gpu"])
def test_every_overlay_turns_json_logs_on_from_a_file_the_images_hold(overlay, main_version):
    path = _model_env(render(overlay, RenderOptions(model=main_version)))[LOGGING_ENV]
    for image in ("cpu", "gpu"):
        dockerfile = (DEPLOYMENTS_DIR / "images" / f"{image}.Dockerfile").read_text()
        final_stage = dockerfile[dockerfile.rindex("\nFROM ") :]
        assert re.search(rf"^COPY --from=build /src/wrappers/logging\.json {re.escape(path)}$", final_stage, re.MULTILINE)
    assert json.loads(LOCAL_CONFIG.read_text())["formatters"]["json"]["()"] == "wrappers.operations.json_logs.JsonFormatter"


@pytest.mark.slow
def test_a_server_with_the_pods_logging_setting_writes_json_lines_naming_model_version_and_request(
    tmp_path, digits_artifact, main_version
):
    assert _model_env(render("cpu", RenderOptions(model=main_version)))[LOGGING_ENV]  # the setting this server takes, locally
    folder = model_folder(tmp_path, "digits", digits_artifact / "model.onnx", version=VERSION)
    inputs, _, _ = load_input_example(digits_artifact)
    name, array = next(iter(inputs.items()))
    env = {
        LOGGING_ENV: str(LOCAL_CONFIG),
        "MLSERVER_DEBUG": "true",  # MLServer's default where the manifests leave it unset: access lines too
        "MLSERVER_MODEL_NAME": "digits",
    }  # as Seldon sets it on the model container
    with LocalServer(folder, extra_env=env) as server:
        body = {
            "id": "json-rest-1",
            "inputs": [{"name": name, "datatype": "FP32", "shape": [1, *array.shape[1:]], "data": array[:1].ravel().tolist()}],
        }
        request = urllib.request.Request(
            f"{server.http_url}/v2/models/digits/infer",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30) as answer:
            assert answer.status == 200
        client = GrpcClient(server.grpc_target)
        wrong = raw_request("digits", {"not-an-input": ("FP32", [1], np.zeros(1, np.float32).tobytes())})
        wrong.id = "json-grpc-1"
        with pytest.raises(Exception, match="takes inputs"):
            client.infer(wrong)
        client.close()
        text = server.log_path.read_text()
    lines = text.splitlines()
    first = next(index for index, line in enumerate(lines) if line.startswith("{"))
    # before logging is configured only the interpreter may write (`python -m mlserver...`'s runpy warning)
    assert all("Warning" in line for line in lines[:first]), lines[:first]
    records = [json.loads(line) for line in lines[first:] if line.strip()]
    assert len(records) > 10 and all(record.keys() >= KEYS for record in records)
    assert all(record["model_name"] == "digits" for record in records)
    loaded = [record for record in records if record["message"].startswith("loaded digits")]
    assert loaded and loaded[0]["model_version"] == VERSION and loaded[0]["logger"] == "wrappers.runtime"
    access = [record for record in records if record["request_id"] == "json-rest-1"]
    assert [record["logger"] for record in access] == ["uvicorn.access"] and "/infer" in access[0]["message"]
    failed = [record for record in records if record["request_id"] == "json-grpc-1"]
    # a refused request: one WARNING line naming the error, no traceback (wrappers.operations.refusal_logs)
    assert failed and failed[0]["level"] == "WARNING" and "takes inputs" in failed[0]["message"]
    assert failed[0]["model_version"] == VERSION and "refused a request (InferenceError)" in failed[0]["message"]
    assert not failed[0].get("exception")
