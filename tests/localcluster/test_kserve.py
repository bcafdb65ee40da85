"""`render --engine kserve`'s objects on the local control plane, with KServe v0.15.2's CRDs installed: the API
server's own checks (server-side dry run) take what the offline validation takes, and refuse what it refuses; and
`deploy --engine kserve` where KServe's controller does not run (the default `make cluster`) says so before anything
is sent. With the controller: tests/localcluster/test_kserve_controller.py."""

from __future__ import annotations

import copy

import pytest

from deployments.kserve import api as kserve
from deployments.kserve.render import render_kserve
from deployments.kserve.validate import validate_kserve
from deployments.render.records import ModelVersion
from deployments.rollout.apply import DeployError, apply
from tests.conftest import run_module
from tests.deployments.conftest import record
from tests.deployments.rendering import rendering
from tests.localcluster.conftest import make_namespace
from tests.store.conftest import make_artifact

render = rendering(render_kserve)


@pytest.fixture(scope="module")
def version() -> ModelVersion:
    return ModelVersion.model_validate(record("3", "ab"))


@pytest.fixture(scope="module")
def namespace(api) -> str:
    return make_namespace(api, "kserve-dry-run", secret=False)


@pytest.mark.parametrize("overlay,mode,dashboard", [("cpu", "cpu", True), ("gpu", "behavior", False)])
def test_the_rendered_objects_pass_the_api_server_s_dry_run(api, namespace, version, overlay, mode, dashboard):
    docs = render(overlay, model=version, namespace=namespace, autoscaling_mode=mode, dashboard=dashboard).docs
    assert validate_kserve(docs).ok
    applied = apply(api, docs, namespace=namespace, dry_run=True)
    assert {"ServingRuntime/slipway-digits", "InferenceService/digits", "HorizontalPodAutoscaler/digits-predictor-hpa"} <= set(
        applied
    )


@pytest.mark.parametrize(
    "change,server_says",
    [
        (lambda isvc: isvc["spec"]["predictor"].update(minReplicas="two"), "minReplicas"),
        (lambda isvc: isvc["spec"]["predictor"]["model"].update(storageURI="s3://x/y"), "storageURI"),
        (lambda isvc: isvc["spec"]["predictor"]["model"].update(modelFormat={"version": "1"}), "name"),
    ],
)
def test_what_the_api_server_refuses_the_offline_validation_refuses_first(api, namespace, version, change, server_says):
    docs = copy.deepcopy(render("cpu", model=version, namespace=namespace).docs)
    change(next(doc for doc in docs if doc["kind"] == kserve.ISVC_KIND))
    assert not validate_kserve(docs).ok
    with pytest.raises(DeployError, match=server_says) as refused:
        apply(api, docs, namespace=namespace, dry_run=True)
    assert "InferenceService/digits refused in the server-side dry run" in str(refused.value)


def test_deploy_engine_kserve_without_kserve_s_controller_stops_in_one_line_before_anything_is_applied(
    api, cluster_env, tmp_path
):
    from kubernetes import client

    namespace = make_namespace(api, "kserve-no-controller")
    artifact = make_artifact(tmp_path / "tiny", 1.0)
    args = ("--engine", "kserve", "--namespace", namespace, "--model-dir", str(artifact))
    result = run_module("deployments", "deploy", *args, env=cluster_env, check=False)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert result.returncode == 2 and len(errors) == 1, result.stderr
    assert "has no KServe controller (no ConfigMap kserve/inferenceservice-config)" in errors[0]
    assert "make cluster KSERVE=1" in errors[0]
    stored = client.CustomObjectsApi(api).list_namespaced_custom_object(kserve.GROUP, "v1beta1", namespace, "inferenceservices")
    assert stored["items"] == []
