"""A stored version served by a real MLServer: versioned V2 endpoints, and integrity refused at load."""

import json
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from slipway.artifact import EXPECTED_DIGESTS_ENV, load_input_example
from slipway.local_server import LocalServer
from tests.conftest import refused_at_load
from tests.store.conftest import versions_json

pytestmark = pytest.mark.slow


def local_folder(record: dict) -> Path:
    return Path(record["uri"].removeprefix("file://"))


def test_a_stored_version_answers_on_its_versioned_endpoints(digits_artifact, tmp_path):
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient
    from tritonclient.utils import InferenceServerException

    store = ["--store", str(tmp_path / "store"), "--reports", str(tmp_path / "reports")]
    record = versions_json("publish", str(digits_artifact), "--model", "digits", "--tag", "champion", *store)
    inputs, outputs, _ = load_input_example(digits_artifact)
    image, expected = inputs["image"][:4], outputs["probabilities"][:4]
    pin = {EXPECTED_DIGESTS_ENV: f"digits:{record['version']}=sha256:{record['digest']}"}
    with LocalServer(local_folder(record), extra_env=pin) as server:
        http = httpclient.InferenceServerClient(server.http_url.removeprefix("http://"))
        tensor = httpclient.InferInput("image", list(image.shape), "FP32")
        tensor.set_data_from_numpy(image, binary_data=False)
        answer = http.infer(
            "digits",
            [tensor],
            model_version=record["version"],
            outputs=[httpclient.InferRequestedOutput("probabilities", binary_data=False)],
        )
        assert answer.get_response()["model_version"] == "1"
        np.testing.assert_allclose(answer.as_numpy("probabilities"), expected, atol=1e-5)

        grpc = grpcclient.InferenceServerClient(server.grpc_target)
        tensor = grpcclient.InferInput("image", list(image.shape), "FP32")
        tensor.set_data_from_numpy(image)
        answer = grpc.infer("digits", [tensor], model_version="1")
        assert answer.get_response().model_version == "1"
        np.testing.assert_allclose(answer.as_numpy("probabilities"), expected, atol=1e-5)
        with pytest.raises(InferenceServerException) as caught:
            grpc.infer("digits", [tensor], model_version="2")
        assert "NOT_FOUND" in str(caught.value.status())
        grpc.close()

        body = json.dumps(
            {"inputs": [{"name": "image", "datatype": "FP32", "shape": [1, 8, 8, 1], "data": image[0].ravel().tolist()}]}
        ).encode()
        request = urllib.request.Request(
            f"{server.http_url}/v2/models/digits/versions/1/infer", data=body, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            assert json.loads(response.read())["model_version"] == "1"
        missing = urllib.request.Request(
            f"{server.http_url}/v2/models/digits/versions/7/infer", data=body, headers={"Content-Type": "application/json"}
        )
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(missing, timeout=10)
        assert refused.value.code == 404


def test_the_server_refuses_an_added_file_and_a_replaced_version(artifact_factory, tmp_path):
    store = ["--store", str(tmp_path / "store"), "--reports", str(tmp_path / "reports")]
    first = versions_json("publish", str(artifact_factory(1.0)), *store)
    second = versions_json("publish", str(artifact_factory(2.0)), *store)

    added = local_folder(first) / "model.onnx_data"
    added.write_bytes(b"weights nobody published")
    refused_at_load(local_folder(first), r"was modified: model\.onnx_data is not listed in its manifest\.json")
    added.unlink()

    # The deployment pins version 1's digest; version 2's files (manifest and all) sit in its place.
    pin = {EXPECTED_DIGESTS_ENV: f"tiny=sha256:{first['digest']}"}
    refused_at_load(
        local_folder(second), r"is not the pinned version: its manifest digest is " + second["digest"][:12], extra_env=pin
    )
