"""`deploy --split cpu-gpu` against the real Seldon 1.17.1 operator: one Deployment and one HPA per graph node."""

from __future__ import annotations

import json
import shutil

import pytest

from slipway.artifact import SETTINGS_FILE, write_manifest
from tests.localcluster.conftest import MODEL, make_namespace
from tests.localcluster.test_deploy import _deploy

pytestmark = pytest.mark.slow


def test_the_split_graph_gets_a_deployment_and_an_hpa_per_node_and_the_gpu_only_on_the_model(
    api, cluster_env, digits_artifact, tmp_path
):
    from kubernetes import client

    artifact = tmp_path / MODEL
    shutil.copytree(digits_artifact, artifact)
    settings = json.loads((artifact / SETTINGS_FILE).read_text())
    settings["parameters"]["extra"] = {"preprocess": {}, "postprocess": {"k": 3}}
    (artifact / SETTINGS_FILE).write_text(json.dumps(settings))
    write_manifest(artifact)
    namespace = make_namespace(api, "split")
    result = _deploy(cluster_env, namespace, "--model-dir", str(artifact), "--overlay", "gpu", "--split", "cpu-gpu")
    assert "is Available" in result.stderr

    deployments = (
        client.AppsV1Api(api).list_namespaced_deployment(namespace, label_selector=f"seldon-deployment-id={MODEL}").items
    )
    by_container = {
        name: deployment
        for deployment in deployments
        for name in (c.name for c in deployment.spec.template.spec.containers)
        if name.startswith(MODEL)
    }
    assert len(deployments) == 3 and set(by_container) == {MODEL, f"{MODEL}-pre", f"{MODEL}-post"}
    for name, deployment in by_container.items():
        pod = deployment.spec.template.spec
        container = next(c for c in pod.containers if c.name == name)
        gpus = (container.resources.limits or {}).get("nvidia.com/gpu")
        assert (gpus == "1") == (name == MODEL), name
        assert (pod.node_selector or {}).get("nvidia.com/gpu.present") == ("true" if name == MODEL else None)
        assert container.args[:4] == [
            "python",
            "-m",
            "wrappers.roles.serve",
            {MODEL: "model", f"{MODEL}-pre": "transformer", f"{MODEL}-post": "output-transformer"}[name],
        ]
    # the executor, which runs the graph, sits in the first component's pods: the model's
    assert "seldon-container-engine" in {c.name for c in by_container[MODEL].spec.template.spec.containers}

    hpas = client.AutoscalingV2Api(api).list_namespaced_horizontal_pod_autoscaler(namespace).items
    assert sorted(hpa.spec.scale_target_ref.name for hpa in hpas) == sorted(d.metadata.name for d in deployments)
    for hpa in hpas:
        container = next(name for name, d in by_container.items() if d.metadata.name == hpa.spec.scale_target_ref.name)
        assert {m.container_resource.container for m in hpa.spec.metrics} == {container}
    pods = client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=f"seldon-deployment-id={MODEL}").items
    assert len(pods) == 3  # each autoscaler's minimum: 1
    for pod in pods:  # the model's on the tainted GPU node, the CPU stages' elsewhere
        assert (pod.spec.node_name == "slipway-gpu-1") == (MODEL in {c.name for c in pod.spec.containers})
