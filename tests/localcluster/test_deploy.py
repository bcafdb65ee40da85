"""`deploy`, `undeploy` and the preflight against the local control plane: a real kube-apiserver, kube-controller-
manager, kube-scheduler, kwok's nodes and pods, metrics-server and the Seldon Core 1.17.1 operator with its webhooks.

Each test works in its own namespace and reads back what the operator created from the API server.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path

import pytest
import yaml

from slipway.paths import PROJECT_ROOT
from tests.conftest import run_module
from tests.localcluster.conftest import MODEL, SECRET, digest_of, make_namespace, records, until

pytestmark = pytest.mark.slow

WAIT = "120"


def _deploy(env: dict, namespace: str, *args: str, check: bool = True):
    return run_module("deployments", "deploy", "--namespace", namespace, "--wait", WAIT, *args, env=env, check=check)


def _one_line_error(result) -> str:
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, result.stderr
    return lines[0]


def _sdep(api, namespace: str) -> dict:
    from kubernetes.dynamic import DynamicClient

    resource = DynamicClient(api).resources.get(api_version="machinelearning.seldon.io/v1", kind="SeldonDeployment")
    return resource.get(name=MODEL, namespace=namespace).to_dict()


def _nothing_of_ours(api, namespace: str) -> list[str]:
    """Every object in `namespace` that deploy (or Seldon, for it) could have made."""
    from kubernetes import client
    from kubernetes.dynamic import DynamicClient

    dynamic = DynamicClient(api)
    found = []
    for api_version, kind in (
        ("machinelearning.seldon.io/v1", "SeldonDeployment"),
        ("apps/v1", "Deployment"),
        ("v1", "Service"),
        ("v1", "Pod"),
        ("autoscaling/v2", "HorizontalPodAutoscaler"),
        ("policy/v1", "PodDisruptionBudget"),
        ("monitoring.coreos.com/v1", "PodMonitor"),
        ("networking.k8s.io/v1", "NetworkPolicy"),
        ("keda.sh/v1alpha1", "ScaledObject"),
    ):
        for item in dynamic.resources.get(api_version=api_version, kind=kind).get(namespace=namespace).items:
            found.append(f"{kind}/{item.metadata.name}")
    found += [
        f"ServiceAccount/{sa.metadata.name}"
        for sa in client.CoreV1Api(api).list_namespaced_service_account(namespace).items
        if sa.metadata.name != "default"
    ]
    return found


def _rendered_sdep(out: Path) -> dict:
    return next(doc for doc in yaml.safe_load_all((out / "all.yaml").read_text()) if doc["kind"] == "SeldonDeployment")


# ------------------------------------------------------------------ the control plane itself


def test_the_control_plane_is_real_and_refuses_a_second_start(cluster, api):
    from kubernetes import client

    from localcluster.control_plane import ClusterError, up

    assert client.VersionApi(api).get_code().git_version == "v1.35.4"
    nodes = client.CoreV1Api(api).list_node().items
    assert {node.metadata.name for node in nodes} >= {"slipway-cpu-1", "slipway-gpu-1"}
    gpu = next(node for node in nodes if node.metadata.name == "slipway-gpu-1")
    assert gpu.status.allocatable["nvidia.com/gpu"] == "2" and gpu.spec.taints[0].key == "nvidia.com/gpu"
    with pytest.raises(ClusterError, match="still running .*cluster-down"):
        up(cluster.folder, api_port=cluster.api_port)


# ------------------------------------------------------------------ 1. deploy, and what the operator made of it


def test_deploy_reaches_available_with_what_the_overlay_meant(api, cluster_env, digits_artifact, tmp_path):
    from kubernetes import client

    namespace = make_namespace(api, "cpu")
    out = tmp_path / "manifests"
    result = _deploy(cluster_env, namespace, "--model-dir", str(digits_artifact), "--out", str(out))
    assert "is Available" in result.stderr and result.stdout.strip().endswith("/infer")
    # Ready pods on kwok's nodes: no server to ask through the Service, and deploy says so rather than pretend
    assert (
        f"default: its pods are on kwok's nodes, where no container runs: /v2/models/{MODEL} was not asked "
        f"through Service {MODEL}-default"
    ) in result.stderr
    rendered = _rendered_sdep(out)
    rendered_pod = rendered["spec"]["predictors"][0]["componentSpecs"][0]["spec"]
    rendered_container = rendered_pod["containers"][0]
    assert _sdep(api, namespace)["status"]["state"] == "Available"

    deployments = (
        client.AppsV1Api(api).list_namespaced_deployment(namespace, label_selector=f"seldon-deployment-id={MODEL}").items
    )
    assert len(deployments) == 1  # seldon.io/no-engine: MLServer alone, no executor container
    pod_spec = deployments[0].spec.template.spec
    container = next(c for c in pod_spec.containers if c.name == MODEL)
    assert container.image == rendered_container["image"]
    env = {item.name: item.value for item in container.env}
    assert all(env.get(item["name"]) == item["value"] for item in rendered_container["env"])
    assert {(p.name, p.container_port) for p in container.ports} == {
        (p["name"], p["containerPort"]) for p in rendered_container["ports"]
    }
    assert container.readiness_probe.http_get.path == "/v2/health/ready"
    assert container.liveness_probe.http_get.path == "/v2/health/live"
    assert container.resources.requests == rendered_container["resources"]["requests"]
    assert container.resources.limits == rendered_container["resources"]["limits"]
    security = container.security_context
    assert security.read_only_root_filesystem and security.run_as_non_root and security.capabilities.drop == ["ALL"]
    assert not security.allow_privilege_escalation
    assert pod_spec.security_context.run_as_user == rendered_pod["securityContext"]["runAsUser"]
    assert pod_spec.service_account_name == rendered_pod["serviceAccountName"]
    # 1.17.1's operator adds the storage initializer to a custom image: it pulls modelUri with the Secret's rclone settings
    initializer = next(c for c in pod_spec.init_containers if "storage-initializer" in c.image)
    graph = rendered["spec"]["predictors"][0]["graph"]
    assert initializer.image == graph["storageInitializerImage"] and graph["modelUri"] in initializer.args
    assert initializer.env_from[0].secret_ref.name == SECRET

    services = client.CoreV1Api(api).list_namespaced_service(namespace, label_selector=f"seldon-deployment-id={MODEL}").items
    assert any({p.port for p in service.spec.ports} >= {9000, 9500} for service in services)

    hpa = client.AutoscalingV2Api(api).list_namespaced_horizontal_pod_autoscaler(namespace).items
    rendered_hpa = rendered["spec"]["predictors"][0]["componentSpecs"][0]["hpaSpec"]
    assert len(hpa) == 1 and hpa[0].spec.scale_target_ref.name == deployments[0].metadata.name
    assert (hpa[0].spec.min_replicas, hpa[0].spec.max_replicas) == (rendered_hpa["minReplicas"], rendered_hpa["maxReplicas"])
    # the operator copied hpaSpec.metricsv2 as it was rendered: CPU and memory of the model container alone
    assert [
        (
            m.type,
            m.container_resource.name,
            m.container_resource.container,
            m.container_resource.target.type,
            m.container_resource.target.average_utilization,
        )
        for m in hpa[0].spec.metrics
    ] == [("ContainerResource", "cpu", MODEL, "Utilization", 70), ("ContainerResource", "memory", MODEL, "Utilization", 80)]

    policy = client.NetworkingV1Api(api).read_namespaced_network_policy(f"{MODEL}-ingress", namespace)
    sources = {tuple(port.port for port in rule.ports): rule._from for rule in policy.spec.ingress}
    assert [s.namespace_selector.match_labels for s in sources[(9000, 9500)] if s.namespace_selector] == [
        {"kubernetes.io/metadata.name": "istio-system"}
    ]
    assert [s.namespace_selector.match_labels for s in sources[(6000,)]] == [{"kubernetes.io/metadata.name": "monitoring"}]

    budgets = client.PolicyV1Api(api).list_namespaced_pod_disruption_budget(namespace).items
    assert len(budgets) == 1 and budgets[0].spec.max_unavailable == 1

    pods = client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=f"seldon-deployment-id={MODEL}").items
    assert len(pods) == rendered_hpa["minReplicas"]
    assert all(pod.status.phase == "Running" and pod.spec.node_name.startswith("slipway-cpu") for pod in pods)


def test_seldon_stuck_on_a_service_it_already_deleted_is_mended_by_the_rollout_wait(api, cluster_env, digits_artifact):
    """What a lost status write leaves (a canary's weights patched while Seldon removed the shadow's Services): the
    status lists a Service of a predictor no longer in the spec, which Seldon 1.17.1 deleted, and every reconcile
    stops at it and reports Failed. The rollout wait drops it from the status, and Seldon's next reconcile ends
    Available; without that the wait ran out after 120 s (a CI run of 2026-12-06)."""
    from kubernetes.dynamic import DynamicClient

    from deployments.rollout.apply import wait_rolled_out

    namespace = make_namespace(api, "stale-service")
    _deploy(cluster_env, namespace, "--model-dir", str(digits_artifact))
    resource = DynamicClient(api).resources.get(api_version="machinelearning.seldon.io/v1", kind="SeldonDeployment")
    ghost = f"{MODEL}-shadow"
    served = next(iter(_sdep(api, namespace)["status"]["serviceStatus"].values()))
    resource.status.patch(
        name=MODEL,
        namespace=namespace,
        body=[{"op": "add", "path": f"/status/serviceStatus/{ghost}", "value": {**served, "svcName": ghost}}],
        content_type="application/json-patch+json",
    )
    stuck = until(
        lambda: (status := _sdep(api, namespace)["status"])["state"] == "Failed" and status, timeout_s=60, what="Seldon stuck"
    )
    assert stuck["description"] == f'Service "{ghost}" not found', stuck

    status = wait_rolled_out(api, namespace=namespace, name=MODEL, digests={}, timeout_s=60)
    assert status["state"] == "Available" and ghost not in status["serviceStatus"], status


@pytest.mark.parametrize("mode", ["rps", "keda", "behavior"])
def test_every_autoscaling_mode_applies_and_makes_its_autoscaler(api, cluster_env, digits_artifact, mode):
    from kubernetes import client
    from kubernetes.dynamic import DynamicClient

    namespace = make_namespace(api, f"autoscaling-{mode}")
    _deploy(cluster_env, namespace, "--model-dir", str(digits_artifact), "--autoscaling", mode)
    deployment = client.AppsV1Api(api).list_namespaced_deployment(namespace).items[0]
    hpas = client.AutoscalingV2Api(api).list_namespaced_horizontal_pod_autoscaler(namespace).items
    if mode == "keda":
        scaled = (
            DynamicClient(api).resources.get(api_version="keda.sh/v1alpha1", kind="ScaledObject").get(namespace=namespace).items
        )
        assert len(scaled) == 1 and scaled[0].spec.scaleTargetRef.name == deployment.metadata.name
        assert scaled[0].spec.triggers[0].type == "prometheus" and not hpas  # KEDA itself would make the HPA
        return
    assert len(hpas) == 1 and hpas[0].spec.scale_target_ref.name == deployment.metadata.name
    if mode == "rps":
        assert hpas[0].spec.metrics[0].pods.metric.name == "mlserver_infer_requests_per_second"
    else:  # a standalone HPA of ours, aimed at the Deployment the operator really made, reading its model container
        assert hpas[0].metadata.labels["app.kubernetes.io/managed-by"] == "slipway"
        containers = {c.name for c in deployment.spec.template.spec.containers}
        assert [(m.type, m.container_resource.container) for m in hpas[0].spec.metrics] == [("ContainerResource", MODEL)] * 2
        assert MODEL in containers
        assert hpas[0].spec.behavior.scale_down.stabilization_window_seconds == 300


@pytest.mark.parametrize(
    "placement",
    [
        [],  # the overlay's: GPU Feature Discovery's label, the nvidia.com/gpu taint tolerated
        [
            "--gpu-node-selector",
            "cloud.google.com/gke-accelerator=nvidia-l4",
            "--gpu-toleration",
            "nvidia.com/gpu=present:NoSchedule",
        ],
    ],
    ids=["gpu-feature-discovery", "gke-labels"],
)
def test_the_gpu_overlay_lands_on_the_gpu_node_serving_from_mlserver_s_own_process(api, cluster_env, digits_artifact, placement):
    from kubernetes import client

    namespace = make_namespace(api, "gpu" if not placement else "gpu-gke")
    _deploy(cluster_env, namespace, "--model-dir", str(digits_artifact), "--overlay", "gpu", *placement)
    pods = client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=f"seldon-deployment-id={MODEL}").items
    assert pods and all(pod.spec.node_name == "slipway-gpu-1" for pod in pods)  # the only node with GPUs, tainted
    if placement:
        assert pods[0].spec.node_selector == {"cloud.google.com/gke-accelerator": "nvidia-l4"}
    container = next(c for c in pods[0].spec.containers if c.name == MODEL)
    assert container.resources.limits["nvidia.com/gpu"] == "1"
    env = {e.name: e.value for e in container.env}
    assert {"MLSERVER_PARALLEL_WORKERS": "0", "SLIPWAY_TENSORRT_CACHE_DIR": "/var/cache/slipway/tensorrt"}.items() <= env.items()
    mounts = {m.mount_path: m.name for m in container.volume_mounts}
    assert mounts["/var/cache/slipway/tensorrt"] == "tensorrt-cache"  # the operator kept the overlay's cache volume
    assert next(v for v in pods[0].spec.volumes if v.name == "tensorrt-cache").empty_dir.size_limit == "4Gi"


# ------------------------------------------------------------------ 2. the real webhook


WEBHOOK_CASES = {
    "traffic that does not add up to 100": lambda sdep: sdep["spec"]["predictors"][0].update(traffic=60),
    "two predictors of one name": lambda sdep: sdep["spec"]["predictors"].append(copy.deepcopy(sdep["spec"]["predictors"][0])),
    "a graph naming no container": lambda sdep: sdep["spec"]["predictors"][0]["graph"].update(name="nobody"),
}


@pytest.mark.parametrize("case", WEBHOOK_CASES)
def test_seldon_s_webhook_and_the_offline_validation_refuse_the_same_deployments(api, digits_artifact, case):
    from deployments.render.overlay import RenderOptions, render
    from deployments.render.records import ModelVersion
    from deployments.render.validate import validate_documents
    from deployments.rollout.apply import DeployError, apply

    namespace = make_namespace(api, f"webhook-{list(WEBHOOK_CASES).index(case)}")
    rendered = render(
        "cpu", RenderOptions(model=ModelVersion.from_artifact(digits_artifact, uri="s3://models/digits/1"), namespace=namespace)
    )
    docs = copy.deepcopy(rendered.docs)
    sdep = next(doc for doc in docs if doc["kind"] == "SeldonDeployment")
    WEBHOOK_CASES[case](sdep)
    assert not validate_documents(docs).ok
    with pytest.raises(
        DeployError,
        match="refused in the server-side dry run, nothing was applied: .*admission webhook "
        '"v1.vseldondeployment.kb.io" denied the request',
    ):
        apply(api, docs, namespace=namespace)
    assert _nothing_of_ours(api, namespace) == []


def test_a_deployment_only_the_webhook_refuses_fails_deploy_in_one_line_with_its_message(
    api, cluster_env, digits_artifact, tmp_path
):
    """An SRE pins the Service name in the CPU overlay; the canary overlay copies it onto the second predictor.
    Slipway's own validation does not know that rule (`validate.py` mirrors what our overlays can break): the
    operator's webhook, in the server-side dry run, is the final word, and its message is the error."""
    namespace = make_namespace(api, "webhook-cli")
    overlay = tmp_path / "sre" / "overlay"
    overlay.mkdir(parents=True)
    (overlay / "kustomization.yaml").write_text(
        f"resources: [{os.path.relpath(PROJECT_ROOT / 'deployments' / 'overlays' / 'canary', overlay)}]\n"
        "patches:\n  - target: {kind: SeldonDeployment}\n    patch: |-\n"
        + "".join(
            f"      - {{op: add, path: /spec/predictors/{i}/annotations/seldon.io~1svc-name, value: digits-stable}}\n"
            for i in (0, 1)
        )
    )
    main, canary = records(tmp_path, digits_artifact, "1", "2")
    line = _one_line_error(
        _deploy(
            cluster_env,
            namespace,
            "--overlay",
            str(overlay),
            "--version-record",
            str(main),
            "--model-uri",
            "s3://models/digits/1",
            "--canary-record",
            str(canary),
            "--canary-model-uri",
            "s3://models/digits/2",
            check=False,
        )
    )
    assert "SeldonDeployment/digits refused in the server-side dry run, nothing was applied" in line
    assert 'admission webhook "v1.vseldondeployment.kb.io" denied the request' in line
    assert "Found duplicate service name in seldon.io/svc-name with value digits-stable" in line
    assert _nothing_of_ours(api, namespace) == []


# ------------------------------------------------------------------ 3. a version change is waited for on the pods


def test_a_new_version_returns_only_when_the_ready_pods_serve_it(api, cluster_env, digits_artifact, tmp_path):
    from kubernetes import client

    from deployments.rollout.apply import DIGEST_ANNOTATION

    namespace = make_namespace(api, "rollout")
    first, second = records(tmp_path, digits_artifact, "1", "2")
    _deploy(cluster_env, namespace, "--version-record", str(first))
    assert _sdep(api, namespace)["status"]["state"] == "Available"  # what a wait on the status alone would take as done
    result = _deploy(cluster_env, namespace, "--version-record", str(second))
    assert "serving default v2" in result.stderr
    pods = client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=f"seldon-deployment-id={MODEL}").items
    ready = [pod for pod in pods if pod.metadata.deletion_timestamp is None]
    assert ready and {pod.metadata.annotations[DIGEST_ANNOTATION] for pod in ready} == {digest_of(second)}


def test_make_rollback_moves_the_tag_back_and_returns_when_the_old_version_serves(api, cluster_env, tmp_path):
    """The path a user walks: publish two versions, deploy the tag, roll it back, all through `make`."""
    import subprocess

    from kubernetes import client

    from deployments.rollout.apply import DIGEST_ANNOTATION
    from tests.store.conftest import make_artifact, versions_json

    namespace = make_namespace(api, "rollback")
    store = str(tmp_path / "store")
    first = versions_json("publish", str(make_artifact(tmp_path / "v1", 1.0)), "--store", store, "--tag", "champion")
    second = versions_json("publish", str(make_artifact(tmp_path / "v2", 2.0)), "--store", store)
    versions_json("promote", "tiny@champion", "tiny:2", "--store", store)
    common = [
        f"STORE={store}",
        "MODEL_NAME=tiny",
        f"NAMESPACE={namespace}",
        "TAG=champion",
        "WAIT=120",
        f"RECORD={tmp_path / 'record.json'}",
    ]

    def make(*args: str) -> subprocess.CompletedProcess:
        result = subprocess.run(
            ["make", "--no-print-directory", *args, *common],
            cwd=PROJECT_ROOT,
            env={**os.environ, **cluster_env},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert result.returncode == 0, result.stdout + result.stderr
        return result

    def serving() -> set[str]:
        pods = client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector="seldon-deployment-id=tiny").items
        return {pod.metadata.annotations[DIGEST_ANNOTATION] for pod in pods if pod.metadata.deletion_timestamp is None}

    make("deploy")
    assert serving() == {f"sha256:{second['digest']}"}
    make("rollback")
    assert serving() == {f"sha256:{first['digest']}"}


# ------------------------------------------------------------------ 4. a canary's split as the operator sees it


def _ambassador_weights(api, namespace: str) -> dict[str, int]:
    """Predictor -> traffic weight, from the Ambassador mappings the operator writes on each predictor's Service."""
    from kubernetes import client

    weights = {}
    for service in client.CoreV1Api(api).list_namespaced_service(namespace, label_selector=f"seldon-deployment-id={MODEL}").items:
        config = (service.metadata.annotations or {}).get("getambassador.io/config")
        for mapping in yaml.safe_load_all(config or ""):
            if mapping and mapping.get("kind") == "Mapping" and "weight" in mapping:
                weights[service.metadata.name.removeprefix(f"{MODEL}-")] = mapping["weight"]  # <model>-<predictor>
    return weights


def test_a_canary_splits_traffic_and_a_new_share_changes_only_the_split(api, cluster_env, digits_artifact, tmp_path):
    from kubernetes import client

    namespace = make_namespace(api, "canary")
    main, canary = records(tmp_path, digits_artifact, "1", "2")
    args = ("--overlay", "canary", "--version-record", str(main), "--canary-record", str(canary))
    _deploy(cluster_env, namespace, *args, "--canary-percent", "20")
    assert [(p["name"], p["traffic"]) for p in _sdep(api, namespace)["spec"]["predictors"]] == [("default", 80), ("canary", 20)]
    assert until(lambda: _ambassador_weights(api, namespace).get("canary"), what="the operator's canary weight") == 20

    apps = client.AppsV1Api(api)
    # one HPA per predictor, each reading the model container of the Deployment it scales
    deployments = {d.metadata.name: d for d in apps.list_namespaced_deployment(namespace).items}
    hpas = client.AutoscalingV2Api(api).list_namespaced_horizontal_pod_autoscaler(namespace).items
    assert sorted(h.spec.scale_target_ref.name for h in hpas) == sorted(deployments) and len(hpas) == 2
    for hpa in hpas:
        containers = {c.name for c in deployments[hpa.spec.scale_target_ref.name].spec.template.spec.containers}
        assert {(m.type, m.container_resource.container) for m in hpa.spec.metrics} == {("ContainerResource", MODEL)}
        assert MODEL in containers
    before = {d.metadata.name: d.metadata.generation for d in apps.list_namespaced_deployment(namespace).items}
    pods_before = {pod.metadata.name for pod in client.CoreV1Api(api).list_namespaced_pod(namespace).items}
    _deploy(cluster_env, namespace, *args, "--canary-percent", "30")
    assert [p["traffic"] for p in _sdep(api, namespace)["spec"]["predictors"]] == [70, 30]
    assert until(lambda: _ambassador_weights(api, namespace).get("canary") == 30, what="the new weight")
    assert {d.metadata.name: d.metadata.generation for d in apps.list_namespaced_deployment(namespace).items} == before
    assert {pod.metadata.name for pod in client.CoreV1Api(api).list_namespaced_pod(namespace).items} == pods_before


# ------------------------------------------------------------------ 5. undeploy leaves nothing of ours


def test_undeploy_removes_everything_deploy_made(api, cluster_env, digits_artifact):
    namespace = make_namespace(api, "undeploy")
    _deploy(cluster_env, namespace, "--model-dir", str(digits_artifact), "--autoscaling", "behavior")
    assert len(_nothing_of_ours(api, namespace)) >= 8
    done = run_module("deployments", "undeploy", "--name", MODEL, "--namespace", namespace, env=cluster_env)
    # undeploy returns once the operator's objects and the pods are gone: a deploy right after races nothing
    assert _nothing_of_ours(api, namespace) == []
    assert "gone after" in done.stderr, done.stderr  # the console's notes go to stderr
    again = run_module("deployments", "undeploy", "--name", MODEL, "--namespace", namespace, env=cluster_env)
    assert f"nothing of Slipway's for model {MODEL} in namespace {namespace}" in again.stderr


# ------------------------------------------------------------------ 7. preflight on the real API server


def test_a_missing_namespace_or_secret_stops_deploy_before_anything_is_applied(api, cluster_env, digits_artifact):
    line = _one_line_error(_deploy(cluster_env, "nowhere", "--model-dir", str(digits_artifact), check=False))
    assert "namespace 'nowhere' does not exist" in line
    namespace = make_namespace(api, "no-secret", secret=False)
    line = _one_line_error(_deploy(cluster_env, namespace, "--model-dir", str(digits_artifact), check=False))
    assert f"Secret '{SECRET}' (the models' envSecretRefName) does not exist in namespace 'no-secret'" in line
    assert _nothing_of_ours(api, namespace) == []


def test_an_open_repository_api_needs_its_token_secret_before_anything_is_applied(api, cluster_env, digits_artifact):
    from kubernetes import client

    namespace = make_namespace(api, "repository-token")
    args = ("--model-dir", str(digits_artifact), "--repository-api", "open", "--repository-token-secret", "repo-token")
    line = _one_line_error(_deploy(cluster_env, namespace, *args, check=False))
    assert (f"Secret 'repo-token', which the model containers read token from, does not exist in namespace '{namespace}'") in line
    assert _nothing_of_ours(api, namespace) == []

    client.CoreV1Api(api).create_namespaced_secret(
        namespace, {"metadata": {"name": "repo-token"}, "stringData": {"token": "t" * 32}}
    )
    _deploy(cluster_env, namespace, *args)
    deployment = client.AppsV1Api(api).list_namespaced_deployment(namespace).items[0]
    model = next(c for c in deployment.spec.template.spec.containers if c.name == MODEL)
    env = {item.name: item for item in model.env}
    assert env["SLIPWAY_REPOSITORY_API"].value == "open"
    assert env["SLIPWAY_REPOSITORY_TOKEN"].value_from.secret_key_ref.name == "repo-token"


def test_an_operator_older_than_1_17_1_stops_deploy(api, cluster_env, digits_artifact):
    """The version comes from the operator's Deployment (its image tag), else Helm's label on seldon-config."""
    from kubernetes import client

    from localcluster.objects import OPERATOR_DEPLOYMENT, SELDON_CONFIGMAP, SELDON_NAMESPACE, register_operator

    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    namespace = make_namespace(api, "old-operator")

    def refused() -> str:
        line = _one_line_error(_deploy(cluster_env, namespace, "--model-dir", str(digits_artifact), check=False))
        assert _nothing_of_ours(api, namespace) == []
        return line

    def label(version: str | None) -> None:
        core.patch_namespaced_config_map(
            SELDON_CONFIGMAP, SELDON_NAMESPACE, {"metadata": {"labels": {"app.kubernetes.io/version": version}}}
        )

    operator = apps.read_namespaced_deployment(OPERATOR_DEPLOYMENT, SELDON_NAMESPACE)
    operator.spec.template.spec.containers[0].image = "seldonio/seldon-core-operator:1.16.0"
    apps.replace_namespaced_deployment(OPERATOR_DEPLOYMENT, SELDON_NAMESPACE, operator)
    try:
        by_image = refused()
        apps.delete_namespaced_deployment(OPERATOR_DEPLOYMENT, SELDON_NAMESPACE)
        label("1.16.0")
        by_label = refused()
        label(None)
        unknown = _deploy(cluster_env, namespace, "--model-dir", str(digits_artifact), "--dry-run", "server")
        assert "warning: cannot tell the Seldon Core operator's version" in unknown.stderr  # and it goes on
        assert "server dry run passed" in unknown.stderr
    finally:
        label("1.17.1")
        register_operator(api)
    assert (
        f"the Seldon Core operator (Deployment {SELDON_NAMESPACE}/{OPERATOR_DEPLOYMENT}) is 1.16.0; Slipway needs 1.17.1"
    ) in by_image
    assert (
        f"the Seldon Core operator (ConfigMap {SELDON_NAMESPACE}/{SELDON_CONFIGMAP}) is 1.16.0; Slipway needs 1.17.1" in by_label
    )


def test_without_seldon_s_crd_deploy_says_what_to_install(api, cluster, cluster_env, digits_artifact):
    """Last: it removes the CRD (and with it every SeldonDeployment) and installs it again."""
    from kubernetes import client

    from localcluster.build import build_all
    from localcluster.objects import install_crds

    namespace = make_namespace(api, "no-crd")
    extensions = client.ApiextensionsV1Api(api)
    extensions.delete_custom_resource_definition("seldondeployments.machinelearning.seldon.io")
    until(
        lambda: (
            "seldondeployments.machinelearning.seldon.io"
            not in {crd.metadata.name for crd in extensions.list_custom_resource_definition().items}
        ),
        what="the CRD gone",
    )
    try:
        line = _one_line_error(_deploy(cluster_env, namespace, "--model-dir", str(digits_artifact), check=False))
    finally:
        install_crds(api, build_all())
    assert (
        "does not serve machinelearning.seldon.io/v1 SeldonDeployment (install the Seldon Core operator, 1.17.1 or later)"
    ) in line
    assert _nothing_of_ours(api, namespace) == []
