"""The rendered pod's container, run for real on loopback: our env plus what the Seldon operator adds.

It proves what the manifests assume of MLServer: the probes' paths answer, the metrics are where
the PodMonitor scrapes them, and the request counter that the RPS adapter rule and the KEDA
query read exists under that name and counts every inference.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from deployments.render import autoscaling, seldon
from deployments.render.overlay import RenderOptions, render
from deployments.render.records import ModelVersion
from loadtest.payloads import example_batch
from slipway.local_server import LocalServer
from slipway.paths import PROJECT_ROOT
from slipway.v2_requests import json_request

REQUESTS = 4


def _model_container(rendered) -> dict:
    return rendered.seldon_deployment["spec"]["predictors"][0]["componentSpecs"][0]["spec"]["containers"][0]


@pytest.fixture(scope="module")
def pod_server(digits_artifact, tmp_path_factory):
    # Pinned to the artifact it serves: the container's digest pin must match what is loaded.
    rendered = render(
        "cpu", RenderOptions(model=ModelVersion.from_artifact(digits_artifact), engine="builtin", autoscaling_mode="rps")
    )
    container = _model_container(rendered)
    env = {item["name"]: item["value"] for item in container["env"]}
    env["MLSERVER_LOGGING_SETTINGS"] = str(PROJECT_ROOT / "wrappers" / "logging.json")  # the images' copy of it
    env["MLSERVER_METRICS_DIR"] = str(tmp_path_factory.mktemp("metrics"))  # the pod's emptyDir
    env.update(
        {  # what the operator adds to the container (deployments/render/seldon.py)
            "MLSERVER_MODEL_NAME": container["name"],
            "MLSERVER_MODEL_URI": str(digits_artifact),  # the storage initializer's mount, here the artifact itself
            "MLSERVER_METRICS_ENDPOINT": seldon.METRICS_PATH,
            "PREDICTOR_ID": "default",
            "SELDON_DEPLOYMENT_ID": rendered.name,
        }
    )
    with LocalServer(digits_artifact, extra_env=env) as server:
        yield server, rendered


def _get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.status, response.read().decode()


@pytest.mark.slow  # starts MLServer on the trained digits model
def test_the_probes_paths_answer(pod_server):
    server, rendered = pod_server
    container = _model_container(rendered)
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"]["port"] == "http"
        status, _ = _get(server.http_url + container[probe]["httpGet"]["path"])
        assert status == 200


@pytest.mark.slow  # starts MLServer on the trained digits model
def test_mlserver_counts_requests_where_the_autoscalers_read_them(pod_server, digits_artifact):
    server, rendered = pod_server
    body = json.dumps(json_request(example_batch(digits_artifact, batch_size=2))).encode()
    for _ in range(REQUESTS):
        request = urllib.request.Request(
            f"{server.http_url}/v2/models/{rendered.name}/infer", data=body, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.status == 200
    status, text = _get(f"http://127.0.0.1:{server.metrics_port}{seldon.METRICS_PATH}")
    assert status == 200
    samples = [
        s
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == autoscaling.REQUEST_COUNTER and s.labels.get("model") == rendered.name
    ]
    assert [s.value for s in samples] == [REQUESTS]
    rule = rendered.adapter_rules["rules"]["custom"][0]
    assert re.match(rule["name"]["matches"], samples[0].name)
    keda = render("cpu", RenderOptions(model=rendered.models["default"], engine="builtin", autoscaling_mode="keda"))
    query = keda.seldon_deployment["spec"]["predictors"][0]["componentSpecs"][0]["kedaSpec"]["triggers"][0]["metadata"]["query"]
    assert query.startswith(f"sum(rate({samples[0].name}{{")


@pytest.mark.slow  # starts MLServer on the trained digits model
def test_the_pod_refuses_the_model_repository_api_and_keeps_serving(pod_server):
    """The rendered env closes MLServer's repository API: one anonymous request no longer unloads the model."""
    server, rendered = pod_server
    request = urllib.request.Request(f"{server.http_url}/v2/repository/models/{rendered.name}/unload", data=b"", method="POST")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 403
    assert "repository API (index, load, unload) is closed" in json.loads(refused.value.read())["error"]
    assert _get(f"{server.http_url}/v2/models/{rendered.name}/ready")[0] == 200
