"""`render --engine kserve`'s objects on the local control plane, with KServe v0.15.2's CRDs installed: the API
server's own checks (server-side dry run) take what the offline validation takes, and refuse what it refuses."""

from __future__ import annotations

import copy

import pytest

from deployments.kserve import api as kserve
from deployments.kserve.render import render_kserve
from deployments.kserve.validate import validate_kserve
from deployments.render.records import ModelVersion
from deployments.rollout.apply import DeployError, apply
from tests.deployments.conftest import record
from tests.deployments.rendering import rendering
from tests.localcluster.conftest import make_namespace

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
