"""`deploy --engine kserve` against KServe's own controller: the manager of `github.com/kserve/kserve` v0.15.2 with its
webhooks and `inferenceservice-config` (RawDeployment), started as a process on the local control plane
(localcluster/kserve.py), making the predictor's Deployment and Service from what Slipway renders; kwok's nodes run
the pods (no container: a V2 request answered by a KServe pod needs the real node, tests/localcluster/test_real_node.py).

The module has a cluster of its own (module scope), since KServe is opt-in (`make cluster KSERVE=1`): the package's
shared cluster stays without it. What each rollout took, and how the HPA on the predictor scaled, lands in
reports/kserve-cluster.json (the HPA's last run also as reports/cluster-hpa-kserve.*, as `make cluster-hpa
ENGINE=kserve` writes them).
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from deployments.kserve import api as kserve
from deployments.rollout.apply import DIGEST_ANNOTATION
from slipway.paths import PROJECT_ROOT
from tests.conftest import run_module
from tests.localcluster.conftest import control_plane

pytestmark = pytest.mark.slow

MODEL = "tiny"
SELECTOR = f"{kserve.ISVC_POD_LABEL}={MODEL},{kserve.COMPONENT_LABEL}={kserve.PREDICTOR_COMPONENT}"
WAIT = "120"


@pytest.fixture(scope="module")
def kserve_cluster(tmp_path_factory):
    """A control plane with KServe's controller, stopped by PID afterwards. KServe is opt-in: where its manager is not
    built (`make cluster-build KSERVE=1`) the module skips, saying so, rather than build it here."""
    from localcluster.build import cached
    from localcluster.components import KSERVE

    if not cached(KSERVE):
        pytest.skip(
            f"KServe {KSERVE.version}'s controller is not built: it is opt-in, `make cluster-build KSERVE=1` builds it "
            "(docs/local-cluster.md)"
        )
    began = time.monotonic()
    with control_plane(tmp_path_factory, "kserve", with_kserve=True) as state:
        _report(new_run=True, cluster_up_s=round(time.monotonic() - began, 1))
        yield state


@pytest.fixture(scope="module")
def api(kserve_cluster):
    from localcluster.objects import client

    return client(kserve_cluster.kubeconfig)


@pytest.fixture(scope="module")
def env(kserve_cluster, reports_env) -> dict[str, str]:
    return {**reports_env, "KUBECONFIG": str(kserve_cluster.kubeconfig), "COLUMNS": "400"}


def _report(new_run: bool = False, **fields) -> None:
    """Add `fields` to this run's entry of reports/kserve-cluster.json (`new_run`: start one; the last five are kept),
    with the build record of KServe's manager (how long its last build took)."""
    from localcluster.build import component_dir
    from localcluster.components import KSERVE
    from slipway import atomic
    from slipway.paths import REPORTS_DIR

    path = REPORTS_DIR / "kserve-cluster.json"
    try:
        report = json.loads(path.read_text())
    except (OSError, ValueError):
        report = {"report": "kserve-cluster", "runs": []}
    build = json.loads((component_dir(KSERVE) / "build.json").read_text())
    report["build"] = {key: build[key] for key in ("version", "build_s", "cpu_count") if key in build}
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    if new_run or not report["runs"]:
        report["runs"] = [*report["runs"], {"at": now}][-5:]
    report["runs"][-1].update(fields)
    atomic.write_json(path, {**report, "created_at": now})


def _namespace(api, name: str) -> str:
    from localcluster.objects import create_namespace

    create_namespace(api, name, _storage_env(api))
    return name


def _storage_env(api) -> dict[str, str]:
    from deployments.rollout.storage_secret import DEFAULT_SECRET, read_settings

    settings = read_settings(api, DEFAULT_SECRET, "slipway") or {}
    return {
        "AWS_ACCESS_KEY_ID": settings["RCLONE_CONFIG_S3_ACCESS_KEY_ID"],
        "AWS_SECRET_ACCESS_KEY": settings["RCLONE_CONFIG_S3_SECRET_ACCESS_KEY"],
        "AWS_ENDPOINT_URL": settings["RCLONE_CONFIG_S3_ENDPOINT"],
    }


def _deploy(env: dict, namespace: str, *args: str, check: bool = True):
    return run_module(
        "deployments", "deploy", "--engine", "kserve", "--namespace", namespace, "--wait", WAIT, *args, env=env, check=check
    )


def _artifact(tmp_path: Path, offset: float, name: str = MODEL) -> Path:
    from tests.store.conftest import make_artifact

    return make_artifact(tmp_path / f"{name}-{offset}", offset, name)


def _serving(api, namespace: str) -> set[str]:
    from kubernetes import client

    pods = client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=SELECTOR).items
    return {pod.metadata.annotations[DIGEST_ANNOTATION] for pod in pods if pod.metadata.deletion_timestamp is None}


def _ours(api, namespace: str) -> list[str]:
    """Every object in `namespace` that deploy (or KServe, for it) could have made."""
    from kubernetes import client
    from kubernetes.dynamic import DynamicClient

    dynamic = DynamicClient(api)
    found = []
    for api_version, kind in (
        (kserve.ISVC_API_VERSION, kserve.ISVC_KIND),
        (kserve.RUNTIME_API_VERSION, kserve.RUNTIME_KIND),
        ("apps/v1", "Deployment"),
        ("v1", "Service"),
        ("v1", "Pod"),
        ("autoscaling/v2", "HorizontalPodAutoscaler"),
        ("policy/v1", "PodDisruptionBudget"),
        ("monitoring.coreos.com/v1", "PodMonitor"),
        ("networking.k8s.io/v1", "NetworkPolicy"),
    ):
        for item in dynamic.resources.get(api_version=api_version, kind=kind).get(namespace=namespace).items:
            found.append(f"{kind}/{item.metadata.name}")
    found += [
        f"ServiceAccount/{sa.metadata.name}"
        for sa in client.CoreV1Api(api).list_namespaced_service_account(namespace).items
        if sa.metadata.name != "default"
    ]
    return found


def _one_line_error(result) -> str:
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_deploy_returns_when_kserve_made_the_predictor_ready_with_the_version(api, env, tmp_path):
    from kubernetes import client

    namespace = _namespace(api, "kserve-deploy")
    began = time.monotonic()
    result = _deploy(env, namespace, "--model-dir", str(_artifact(tmp_path, 1.0)), "--out", str(tmp_path / "out"))
    deploy_s = time.monotonic() - began
    assert f"{MODEL} is Ready, its Ready pods serving default v" in result.stderr
    # uploaded with the keys of KServe's Secret (read back as rclone settings), not this machine's (it has none)
    assert "uploaded tiny v" in result.stderr and "from this machine's environment" not in result.stderr
    assert result.stdout.strip() == kserve.inference_url(namespace, MODEL, MODEL)

    isvc = client.CustomObjectsApi(api).get_namespaced_custom_object(
        kserve.GROUP, "v1beta1", namespace, "inferenceservices", MODEL
    )
    conditions = {c["type"]: c for c in isvc["status"]["conditions"]}
    assert conditions["Ready"]["status"] == conditions["PredictorReady"]["status"] == "True"
    created, ready = (
        datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
        for stamp in (isvc["metadata"]["creationTimestamp"], conditions["Ready"]["lastTransitionTime"])
    )
    digest = isvc["metadata"]["annotations"]["slipway.io/model-digest"]
    assert _serving(api, namespace) == {digest}

    # KServe's pod mutator added its storage initializer with its contract: <storageUri> /mnt/models, S3 keys from the
    # Secret the rendered ServiceAccount lists, the endpoint from its annotation
    pod = client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=SELECTOR).items[0]
    initializer = next(c for c in pod.spec.init_containers if c.name == "storage-initializer")
    uri = isvc["spec"]["predictor"]["model"]["storageUri"]
    assert initializer.args == [uri, kserve.MODEL_MOUNT] and initializer.image == "kserve/storage-initializer:v0.15.2"
    env_names = {item.name for item in initializer.env}
    assert {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "S3_ENDPOINT", "S3_USE_HTTPS"} <= env_names

    # the rendered HPA on KServe's predictor Deployment survives KServe's reconciles and holds it at its minimum
    apps, autoscaling = client.AppsV1Api(api), client.AutoscalingV2Api(api)
    hpa = autoscaling.read_namespaced_horizontal_pod_autoscaler(kserve.hpa_name(MODEL), namespace)
    assert hpa.spec.scale_target_ref.name == kserve.predictor_name(MODEL) and hpa.metadata.owner_references is None
    assert {m.container_resource.container for m in hpa.spec.metrics} == {kserve.CONTAINER_NAME}
    deployment = apps.read_namespaced_deployment(kserve.predictor_name(MODEL), namespace)
    assert deployment.metadata.owner_references[0].kind == kserve.ISVC_KIND
    assert deployment.status.ready_replicas == hpa.spec.min_replicas >= 2
    # the whole command (render, dry run, upload, apply, wait); and KServe's part, to the second the API server keeps
    _report(deploy_to_ready_s=round(deploy_s, 1), isvc_created_to_ready_s=(ready - created).total_seconds())


def test_rps_autoscaling_puts_slipway_s_hpa_on_kserve_s_predictor_deployment(api, env, tmp_path):
    """`--autoscaling rps`: the HPA on the request rate prometheus-adapter serves per pod, accepted by the API server,
    aimed at the Deployment KServe made (the HPA controller reads its scale, then asks the custom metrics API for the
    rate, which this cluster does not serve: no prometheus-adapter runs here), and KServe, under `autoscalerClass:
    external`, makes no HPA of its own beside it and leaves the replicas at the InferenceService's minimum."""
    from kubernetes import client

    from deployments.render.autoscaling import RPS_METRIC
    from tests.localcluster.conftest import until

    namespace = _namespace(api, "kserve-rps")
    result = _deploy(env, namespace, "--model-dir", str(_artifact(tmp_path, 1.0)), "--autoscaling", "rps")
    assert "autoscaling rps" in result.stderr, result.stderr
    autoscaling = client.AutoscalingV2Api(api)
    hpa = autoscaling.read_namespaced_horizontal_pod_autoscaler(kserve.hpa_name(MODEL), namespace)
    assert hpa.spec.scale_target_ref.name == kserve.predictor_name(MODEL) and hpa.metadata.owner_references is None
    assert [(m.type, m.pods.metric.name, m.pods.target.average_value) for m in hpa.spec.metrics] == [("Pods", RPS_METRIC, "50")]
    deployment = client.AppsV1Api(api).read_namespaced_deployment(kserve.predictor_name(MODEL), namespace)
    assert deployment.metadata.owner_references[0].kind == kserve.ISVC_KIND

    def conditions() -> dict:
        now = autoscaling.read_namespaced_horizontal_pod_autoscaler(kserve.hpa_name(MODEL), namespace)
        found = {c.type: c for c in (now.status.conditions or [])}
        return found if {"AbleToScale", "ScalingActive"} <= found.keys() else {}

    found = until(conditions, 60, "the HPA controller's first conditions")
    assert (found["AbleToScale"].status, found["AbleToScale"].reason) == ("True", "SucceededGetScale")
    assert (found["ScalingActive"].status, found["ScalingActive"].reason) == ("False", "FailedGetPodsMetric")
    assert RPS_METRIC in found["ScalingActive"].message
    assert [each.metadata.name for each in autoscaling.list_namespaced_horizontal_pod_autoscaler(namespace).items] == [
        kserve.hpa_name(MODEL)
    ]
    deployment = client.AppsV1Api(api).read_namespaced_deployment(kserve.predictor_name(MODEL), namespace)
    assert deployment.spec.replicas == deployment.status.ready_replicas == hpa.spec.min_replicas == 2


def test_a_manifest_only_kserve_s_webhook_refuses_fails_deploy_in_one_line_and_applies_nothing(api, env, tmp_path):
    """Slipway's names are DNS-1123 labels, which may start with a digit; KServe's validator takes only names that start
    with a letter. The server-side dry run asks the webhook before anything is stored or uploaded."""
    namespace = _namespace(api, "kserve-refused")
    line = _one_line_error(_deploy(env, namespace, "--model-dir", str(_artifact(tmp_path, 1.0, "7tiny")), check=False))
    assert "InferenceService/7tiny refused in the server-side dry run, nothing was applied" in line
    assert 'admission webhook "inferenceservice.kserve-webhook-server.validator" denied the request' in line
    assert "must start with alphabetical character" in line
    assert _ours(api, namespace) == []


def test_make_rollback_engine_kserve_returns_when_the_old_version_serves(api, env, tmp_path):
    """The path a user walks: publish two versions, deploy the tag, roll it back, all through `make`."""
    from tests.store.conftest import versions_json

    namespace = _namespace(api, "kserve-rollback")
    store = str(tmp_path / "store")
    first = versions_json("publish", str(_artifact(tmp_path, 1.0)), "--store", store, "--tag", "champion")
    second = versions_json("publish", str(_artifact(tmp_path, 2.0)), "--store", store)
    versions_json("promote", f"{MODEL}@champion", f"{MODEL}:2", "--store", store)
    common = [
        "ENGINE=kserve",
        f"STORE={store}",
        f"MODEL_NAME={MODEL}",
        f"NAMESPACE={namespace}",
        "TAG=champion",
        f"WAIT={WAIT}",
        f"RECORD={tmp_path / 'record.json'}",
    ]

    def make(*args: str) -> float:
        began = time.monotonic()
        result = subprocess.run(
            ["make", "--no-print-directory", *args, *common],
            cwd=PROJECT_ROOT,
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert result.returncode == 0, result.stdout + result.stderr
        return time.monotonic() - began

    deployed = make("deploy")
    assert _serving(api, namespace) == {f"sha256:{second['digest']}"}
    rolled_back = make("rollback")
    assert _serving(api, namespace) == {f"sha256:{first['digest']}"}
    _report(make_deploy_s=round(deployed, 1), make_rollback_s=round(rolled_back, 1))


def test_undeploy_waits_until_kserve_s_objects_and_the_pods_are_gone(api, env, tmp_path):
    namespace = _namespace(api, "kserve-undeploy")
    _deploy(env, namespace, "--model-dir", str(_artifact(tmp_path, 1.0)), "--autoscaling", "behavior")
    made = _ours(api, namespace)
    assert {f"InferenceService/{MODEL}", f"Deployment/{kserve.predictor_name(MODEL)}", "Pod"} <= {
        name if not name.startswith("Pod/") else "Pod" for name in made
    }
    began = time.monotonic()
    done = run_module("deployments", "undeploy", "--name", MODEL, "--namespace", namespace, env=env)
    undeploy_s = time.monotonic() - began
    assert "gone after" in done.stderr, done.stderr
    assert _ours(api, namespace) == []  # undeploy returns once KServe's objects and the pods are gone
    again = run_module("deployments", "undeploy", "--name", MODEL, "--namespace", namespace, env=env)
    assert f"nothing of Slipway's for model {MODEL} in namespace {namespace}" in again.stderr
    _report(undeploy_s=round(undeploy_s, 1))


def test_the_hpa_on_kserve_s_predictor_scales_it_up_on_usage_and_back_down(api, env, kserve_cluster, tmp_path):
    """`make cluster-hpa` on a model deployed with `--engine kserve`: kwok's simulated CPU usage on the model container,
    a real metrics-server and the real HPA controller moving the predictor Deployment that KServe made and reconciles
    (under `autoscalerClass: external` it leaves the replicas to Slipway's HPA)."""
    from kubernetes import client

    from slipway.paths import REPORTS_DIR
    from tests.localcluster.conftest import behavior_overlay, check_scaled_within_behavior

    namespace = _namespace(api, "kserve-hpa")
    overlay = behavior_overlay(tmp_path / "sre" / "overlay")
    _deploy(env, namespace, "--model-dir", str(_artifact(tmp_path, 1.0)), "--overlay", str(overlay))
    hpa = kserve.hpa_name(MODEL)
    result = run_module(
        "localcluster", "prove-hpa", "--dir", str(kserve_cluster.folder), "--namespace", namespace, "--timeout", "240", env=env
    )
    assert f"HPA {namespace}/{hpa} scaled 2 -> 4 -> 2" in result.stderr, result.stderr

    # KServe's own record, beside Seldon's reports/cluster-hpa.json rather than over it
    report = json.loads((Path(env["SLIPWAY_REPORTS_DIR"]) / "cluster-hpa-kserve.json").read_text())
    assert (Path(env["SLIPWAY_REPORTS_DIR"]) / "cluster-hpa-kserve.png").stat().st_size > 10_000
    assert report["engine"] == "kserve" and report["hpa"] == hpa and report["container"] == kserve.CONTAINER_NAME
    assert [(m["type"], m["container_resource"]["container"]) for m in report["metrics"]] == [
        ("ContainerResource", kserve.CONTAINER_NAME),
        ("ContainerResource", kserve.CONTAINER_NAME),
    ]
    check_scaled_within_behavior(report)
    # what scaled is KServe's own predictor Deployment, still KServe's, with no HPA of KServe's beside Slipway's
    deployment = client.AppsV1Api(api).read_namespaced_deployment(kserve.predictor_name(MODEL), namespace)
    assert deployment.metadata.owner_references[0].kind == kserve.ISVC_KIND
    assert deployment.spec.replicas == deployment.status.ready_replicas == 2
    autoscalers = client.AutoscalingV2Api(api).list_namespaced_horizontal_pod_autoscaler(namespace).items
    assert [each.metadata.name for each in autoscalers] == [hpa]

    samples = report["samples"]
    high = [s for s in samples if s["phase"] == "high"]
    low = [s for s in samples if s["phase"] == "low"]
    seen_low = next(s["seconds"] for s in low if s["utilization"] is not None and s["utilization"] < 70)
    _report(
        hpa={
            "hpa": hpa,
            "container": report["container"],
            "usage_per_pod": report["usage_per_pod"],
            "replicas": [report["min_replicas"], report["max_replicas"], report["min_replicas"]],
            "peak_utilization_pct": max(s["utilization"] or 0 for s in high),
            "up_to_max_s": round(high[-1]["seconds"] - report["phase_started_s"]["high"], 1),
            "held_after_low_seen_s": round(next(s["seconds"] for s in low if s["replicas"] < 4) - seen_low, 1),
            "down_to_min_s": round(low[-1]["seconds"] - report["phase_started_s"]["low"], 1),
            "scale_down_window_s": report["behavior"]["scale_down"]["stabilization_window_seconds"],
        }
    )
    for name in ("cluster-hpa-kserve.json", "cluster-hpa-kserve.png"):  # what `make cluster-hpa ENGINE=kserve` keeps
        shutil.copyfile(Path(env["SLIPWAY_REPORTS_DIR"]) / name, REPORTS_DIR / name)
