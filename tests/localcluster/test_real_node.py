"""A real node beside the kwok nodes (localcluster/node.py): a kubelet from the control plane's Kubernetes
module, containerd with runc and the CNI bridge run a pod of the serving image `make image` builds, with a readiness
probe on MLServer's /v2/health/ready, and the pod answers a V2 request from inside the pod network (its IP, through
the node's bridge), and through a ClusterIP Service (kube-proxy's iptables rules), exactly as the same model answers on
loopback. Pod create -> Ready lands in reports/real-node.json.

The node has a cluster of its own (module scope): the package's shared cluster stays kwok only. Where this machine's
kernel cannot run containers the test skips with the one line the node gave; any other failure fails it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from slipway.ports import free_port
from tests.deployments.canary.series import prometheus_tools  # noqa: F401 (a fixture: the Prometheus build)
from tests.localcluster.conftest import MODEL

IMAGE_TAG = "slipway/mlserver-onnx:0.1.0"  # what `make image` builds (Makefile's IMAGE_CPU)
IMAGE = f"localhost/{IMAGE_TAG}"
HTTP_PORT = 8080  # MLServer's default: the image sets no MLSERVER_HTTP_PORT
READY_TIMEOUT_S = 300.0
PIXELS = {"name": "image", "datatype": "FP32", "shape": [1, 8, 8, 1], "data": [(i % 17) / 16 for i in range(64)]}


def test_a_kernel_without_what_a_node_needs_is_named_in_one_line(monkeypatch, tmp_path):
    """What `up --real-node` reports instead of a node (and the test below skips with): the feature, in one line."""
    from localcluster import node

    monkeypatch.setattr(node.os, "geteuid", lambda: 1000)
    with pytest.raises(node.NodeUnavailable, match="needs root") as refused:
        node.check_kernel()
    assert "\n" not in str(refused.value)
    monkeypatch.setattr(node.os, "geteuid", lambda: 0)
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "tasks").touch()
    monkeypatch.setattr(node, "CGROUP_ROOT", tmp_path)
    with pytest.raises(node.NodeUnavailable) as refused:
        node.check_kernel()
    assert str(refused.value) == f"cgroup v1 controllers cpuacct, cpuset, memory, pids are not mounted under {tmp_path}"


def test_a_missing_runtime_is_not_a_kernel_feature(monkeypatch):
    """A runtime that is not installed fails the cluster (make node-tools installs it): it is never a reason to skip."""
    from localcluster import node

    monkeypatch.setattr(node.shutil, "which", lambda name, path=None: None)
    with pytest.raises(node.NodeError, match="make node-tools") as refused:
        node.tools()
    assert not isinstance(refused.value, node.NodeUnavailable)


def test_a_second_real_node_is_refused_before_anything_starts(monkeypatch, tmp_path):
    """kube-proxy's iptables chains are the machine's: while one runs, `up --real-node` starts nothing."""
    from localcluster import control_plane, node

    monkeypatch.setattr(node, "processes_named", lambda name: [4242] if name == "kube-proxy" else [])
    with pytest.raises(control_plane.ClusterError, match=r"kube-proxy \(pid 4242\) already runs .*make cluster-down"):
        control_plane.up(tmp_path / "state", api_port=free_port(), real_node=True)
    assert not (tmp_path / "state").exists()


def test_importing_the_serving_image_without_a_real_node_is_refused_in_one_line(tmp_path):
    """`make cluster-image` (load-image) names what is missing: a running cluster, then its real node."""
    from localcluster.control_plane import ClusterState
    from localcluster.processes import Process
    from tests.conftest import run_module

    result = run_module("localcluster", "load-image", "--dir", str(tmp_path / "none"), check=False)
    assert result.returncode == 2 and "no local cluster runs from" in result.stderr and "NODE=real" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    folder = tmp_path / "kwok-only"
    folder.mkdir()
    # a cluster whose only recorded process is this one (never stopped: nothing here calls `down`)
    this = Process("pytest", os.getpid(), sys.executable, str(folder / "pytest.log"))
    ClusterState(folder, 16443, [this], node={"unavailable": "cgroup v1 controllers pids are not mounted"}).save()
    result = run_module("localcluster", "load-image", "--dir", str(folder), check=False)
    assert result.returncode == 2, result
    assert result.stderr.strip() == (
        f"error: the local cluster in {folder} has no real node (cgroup v1 controllers pids are not mounted): "
        "start it with make cluster NODE=real"
    )


def test_the_storage_initializer_refuses_a_destination_without_a_registry_in_one_line(tmp_path):
    from localcluster import storage_initializer

    with pytest.raises(storage_initializer.InitializerError, match="names no registry host") as refused:
        storage_initializer.push(tmp_path / "image.tar", "team/rclone-storage-initializer:1")
    assert "\n" not in str(refused.value)
    with pytest.raises(storage_initializer.InitializerError, match="make cluster-build"):
        storage_initializer.archive(tmp_path / "no-rclone", tmp_path / "image.tar")
    assert not (tmp_path / "image.tar").exists()


@pytest.mark.slow  # builds rclone from its module where `make cluster-build` has not
def test_the_storage_initializer_image_keeps_seldons_contract_and_its_rclone_runs(tmp_path):
    """What the operator relies on (entrypoint `rclone copy`, so that its args are `<modelUri> /mnt/models`) and what
    Seldon's image sets (user 8888, RCLONE_VERBOSE=1); the binary in the layer runs on its own (static, no libc)."""
    import tarfile

    from localcluster import storage_initializer
    from localcluster.build import build_all
    from localcluster.components import COMPONENTS

    rclone = build_all(tuple(c for c in COMPONENTS if c.name == "rclone"))["rclone"] / "bin" / "rclone"
    archive = storage_initializer.archive(rclone, tmp_path / "image.tar", "registry.example.com/init:1")
    with tarfile.open(archive) as image:
        (manifest,) = json.loads(image.extractfile("manifest.json").read())
        config = json.loads(image.extractfile(manifest["Config"]).read())["config"]
        assert manifest["RepoTags"] == ["registry.example.com/init:1"]
        with tarfile.open(fileobj=image.extractfile(manifest["Layers"][0])) as layer:
            binary = layer.getmember("usr/local/bin/rclone")
            assert binary.mode & 0o111 and layer.getmember("tmp").isdir()
            layer.extract(binary, tmp_path / "root", filter="fully_trusted")
    assert config["Entrypoint"] == ["rclone", "copy"] and config["User"] == storage_initializer.USER == "8888"
    assert "RCLONE_VERBOSE=1" in config["Env"]
    result = subprocess.run(
        [str(tmp_path / "root" / "usr/local/bin/rclone"), "version"], env={}, capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 0 and result.stdout.startswith(f"rclone v{storage_initializer.TAG}"), result


@pytest.fixture(scope="module")
def real_cluster(tmp_path_factory):
    """A control plane with a real node, stopped by PID afterwards; nothing of the node is left behind."""
    from localcluster.build import cached
    from localcluster.components import KSERVE
    from localcluster.control_plane import down, up
    from localcluster.processes import running
    from slipway.ports import free_port

    folder = tmp_path_factory.mktemp("real-node") / "state"
    began = time.monotonic()
    # with KServe's controller where it is built (opt-in: `make cluster-build KSERVE=1`), for its predictor's pod
    state = up(folder, api_port=free_port(), tied=True, real_node=True, with_kserve=cached(KSERVE))
    started_s = time.monotonic() - began
    if "unavailable" in state.node:
        down(folder)
        pytest.skip(f"no real node on this machine: {state.node['unavailable']}")
    record = dict(state.node)
    processes = list(state.processes)
    try:
        yield state, started_s
    finally:
        down(folder)
        assert not any(running(process) for process in processes) and not folder.exists()
        links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
        assert f" {record['bridge']}:" not in links
        assert not Path("/sys/fs/cgroup/memory", record["cgroup_root"].lstrip("/")).exists()
        mounts = Path("/proc/self/mountinfo").read_text()
        assert str(folder) not in mounts
        # runc's state of the node's containers lived in the folder, not in the machine's shared /run/containerd/runc
        shared = Path("/run/containerd/runc/k8s.io")
        assert not any(str(folder) in path.read_text() for path in shared.glob("*/state.json"))
        # kube-proxy's chains and the kubelet's are gone from the machine's tables
        for table in ("nat", "filter", "mangle"):
            rules = subprocess.run(["iptables", "-t", table, "-S"], capture_output=True, text=True, check=True).stdout
            assert "KUBE-" not in rules, rules


@pytest.fixture(scope="module")
def serving_image(real_cluster, tmp_path_factory):
    """The serving image `make image` builds, imported into the node's containerd once: (built, import seconds)."""
    from deployments.rollout import image_build
    from localcluster.node import NODE_NAME
    from tests.conftest import run_module

    state, _ = real_cluster
    built = image_build.build_cpu(IMAGE_TAG)  # every layer cached after the first `make image`: seconds
    began = time.monotonic()
    # what `make cluster-image` runs
    result = run_module("localcluster", "load-image", "--dir", str(state.folder), "--image", IMAGE)
    assert f"imported {IMAGE} into {NODE_NAME}'s containerd" in result.stdout + result.stderr, result
    return built, time.monotonic() - began


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    """A CNCF Distribution registry on a free loopback port (the node's containerd pulls from it over HTTP)."""
    from localcluster.build import build_all
    from localcluster.components import COMPONENTS
    from tests.deployments.test_image_check import _registry

    binary = build_all(tuple(c for c in COMPONENTS if c.name == "registry"))["registry"] / "bin" / "registry"
    with _registry(binary, tmp_path_factory.mktemp("registry")) as host:
        yield host


@pytest.fixture(scope="module")
def initializer_image(real_cluster, registry, tmp_path_factory):
    """The rclone storage initializer built here, pushed to the registry and named in seldon-config:
    (reference, digest, archive MB, seconds to build and push)."""
    from localcluster import storage_initializer
    from localcluster.build import build_all
    from localcluster.components import COMPONENTS
    from localcluster.objects import client as api_client

    state, _ = real_cluster
    rclone = build_all(tuple(c for c in COMPONENTS if c.name == "rclone"))["rclone"] / "bin" / "rclone"
    image = f"{registry}/{storage_initializer.REPOSITORY}:{storage_initializer.TAG}"
    began = time.monotonic()
    archive = storage_initializer.archive(rclone, tmp_path_factory.mktemp("initializer") / "image.tar", image)
    digest = storage_initializer.push(archive, image)
    seconds = time.monotonic() - began
    storage_initializer.configure_operator(api_client(state.kubeconfig), image)
    return image, digest, round(archive.stat().st_size / 1e6, 1), round(seconds, 1)


def _report(**fields) -> None:
    """Add `fields` to reports/real-node.json (each test of this module writes its own)."""
    from slipway import atomic
    from slipway.paths import REPORTS_DIR

    path = REPORTS_DIR / "real-node.json"
    try:
        report = json.loads(path.read_text())
    except (OSError, ValueError):
        report = {"report": "real-node"}
    atomic.write_json(path, {**report, **fields, "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})


def _post(url: str, body: dict) -> dict:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.loads(answer.read())


def _models_folder(artifact: Path, folder: Path) -> Path:
    """The digits artifact, readable by the image's user (10001): a hostPath mount shows the folder as it is."""
    shutil.copytree(artifact, folder)
    for path in (folder, *folder.rglob("*")):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return folder


def _pod(namespace: str, models: Path) -> dict:
    from localcluster.node import NODE_LABEL, NODE_LABEL_VALUE

    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": MODEL, "namespace": namespace, "labels": {"app": MODEL}},
        "spec": {
            "nodeSelector": {NODE_LABEL: NODE_LABEL_VALUE},
            "tolerations": [{"key": NODE_LABEL, "operator": "Equal", "value": NODE_LABEL_VALUE, "effect": "NoSchedule"}],
            "automountServiceAccountToken": False,
            "containers": [
                {
                    "name": "mlserver",
                    "image": IMAGE,
                    "imagePullPolicy": "Never",  # imported into containerd, from no registry
                    "ports": [{"name": "http", "containerPort": HTTP_PORT}],
                    "readinessProbe": {"httpGet": {"path": "/v2/health/ready", "port": HTTP_PORT}, "periodSeconds": 1},
                    "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"memory": "2Gi"}},
                    "volumeMounts": [{"name": "models", "mountPath": "/mnt/models", "readOnly": True}],
                }
            ],
            "volumes": [{"name": "models", "hostPath": {"path": str(models), "type": "Directory"}}],
        },
    }


def _service(namespace: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": MODEL, "namespace": namespace},
        "spec": {"selector": {"app": MODEL}, "ports": [{"name": "http", "port": 80, "targetPort": HTTP_PORT}]},
    }


def _post_until_routed(url: str, body: dict, timeout_s: float = 30.0) -> dict:
    """The first answer through a Service: kube-proxy writes its rules within a second or so of the EndpointSlice."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return _post(url, body)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _wait_ready(core, namespace: str) -> object:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        pod = core.read_namespaced_pod(MODEL, namespace)
        if any(c.type == "Ready" and c.status == "True" for c in (pod.status.conditions or [])):
            return pod
        for status in pod.status.container_statuses or []:
            waiting = status.state.waiting
            if status.restart_count or (waiting and waiting.reason in ("ErrImageNeverPull", "CreateContainerError")):
                logs = ""
                if status.restart_count:
                    logs = core.read_namespaced_pod_log(MODEL, namespace, previous=True, tail_lines=20)
                pytest.fail(f"the pod did not start: {status.state} {status.last_state}\n{logs}")
        time.sleep(0.2)
    pytest.fail(f"the pod was not Ready within {READY_TIMEOUT_S:.0f}s: {pod.status}")


@pytest.mark.slow
def test_a_pod_of_the_serving_image_answers_on_the_real_node(
    real_cluster, serving_image, digits_artifact, digits_server, tmp_path
):
    from kubernetes import client

    from localcluster.components import KUBERNETES_VERSION
    from localcluster.node import NODE_NAME
    from localcluster.objects import client as api_client

    state, started_s = real_cluster
    built, import_s = serving_image
    core = client.CoreV1Api(api_client(state.kubeconfig))
    core.create_namespace({"metadata": {"name": "real-node"}})
    models = _models_folder(digits_artifact, tmp_path / "models")

    began = time.monotonic()
    core.create_namespaced_pod("real-node", _pod("real-node", models))
    pod = _wait_ready(core, "real-node")
    ready_s = time.monotonic() - began

    assert pod.spec.node_name == NODE_NAME
    address = pod.status.pod_ip
    assert address and address != state.node["address"]
    base = f"http://{address}:{HTTP_PORT}"
    with urllib.request.urlopen(f"{base}/v2/health/ready", timeout=10) as answer:
        assert answer.status == 200
    began = time.monotonic()
    in_pod = _post(f"{base}/v2/models/{MODEL}/infer", {"inputs": [PIXELS]})
    first_answer_s = time.monotonic() - began
    on_loopback = _post(f"{digits_server.http_url}/v2/models/{MODEL}/infer", {"inputs": [PIXELS]})
    assert in_pod["model_name"] == MODEL
    assert [output["data"] for output in in_pod["outputs"]] == [output["data"] for output in on_loopback["outputs"]]

    # through a ClusterIP Service: kube-proxy's DNAT from the host to the pod, masqueraded to the node's bridge address
    service = core.create_namespaced_service("real-node", _service("real-node"))
    cluster_ip = service.spec.cluster_ip
    assert cluster_ip and cluster_ip != address
    began = time.monotonic()
    routed = _post_until_routed(f"http://{cluster_ip}/v2/models/{MODEL}/infer", {"inputs": [PIXELS]})
    service_routed_s = time.monotonic() - began
    assert [output["data"] for output in routed["outputs"]] == [output["data"] for output in on_loopback["outputs"]]
    # the kubelet's own API, through the API server (its client certificate, the node's serving certificate)
    assert core.read_namespaced_pod_log(MODEL, "real-node", container="mlserver", tail_lines=50)

    _report(
        kubernetes=KUBERNETES_VERSION,
        containerd=state.node["containerd"],
        runc=state.node["runc"],
        image={"tag": IMAGE, "id": built.image_id, "size_mb": round(built.size_bytes / 1e6, 1)},
        cluster_with_node_up_s=round(started_s, 1),
        image_import_s=round(import_s, 1),
        pod_create_to_ready_s=round(ready_s, 1),
        first_answer_s=round(first_answer_s, 3),
        service_create_to_first_answer_s=round(service_routed_s, 2),
        cpu_count=os.cpu_count(),
    )


# what the model container runs after the storage initializer: each file under /mnt/models and its sha256, as JSON
HASH_FILES = (
    "import hashlib, json, pathlib; root = pathlib.Path('/mnt/models'); "
    "print(json.dumps({str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() "
    "for p in sorted(root.rglob('*')) if p.is_file()}))"
)


def _initializer_pod(name: str, namespace: str, image: str, uri: str, secret: str) -> dict:
    """A pod on the real node whose init container is what Seldon 1.17.1's operator adds for a `modelUri`
    (controllers/model_initializer_injector.go): `<uri> /mnt/models` as its arguments, an emptyDir there, the Secret
    as its environment; Slipway's pod security context (uid 10001)."""
    from localcluster.node import NODE_LABEL, NODE_LABEL_VALUE
    from localcluster.storage_initializer import MOUNT_PATH

    volume = "digits-provision-location"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "nodeSelector": {NODE_LABEL: NODE_LABEL_VALUE},
            "tolerations": [{"key": NODE_LABEL, "operator": "Equal", "value": NODE_LABEL_VALUE, "effect": "NoSchedule"}],
            "automountServiceAccountToken": False,
            "restartPolicy": "Never",
            "securityContext": {"runAsNonRoot": True, "runAsUser": 10001, "runAsGroup": 10001, "fsGroup": 10001},
            "initContainers": [
                {
                    "name": "digits-model-initializer",
                    "image": image,
                    "imagePullPolicy": "IfNotPresent",
                    "args": [uri, MOUNT_PATH],
                    "envFrom": [{"secretRef": {"name": secret}}],
                    "volumeMounts": [{"name": volume, "mountPath": MOUNT_PATH}],
                }
            ],
            "containers": [
                {
                    "name": "digits",
                    "image": IMAGE,
                    "imagePullPolicy": "Never",
                    "command": ["python", "-c", HASH_FILES],
                    "volumeMounts": [{"name": volume, "mountPath": MOUNT_PATH, "readOnly": True}],
                }
            ],
            "volumes": [{"name": volume, "emptyDir": {}}],
        },
    }


@pytest.mark.slow
def test_up_names_the_initializer_it_imported_into_the_node_in_seldon_config(real_cluster):
    """Without any registry: `up --real-node` imports the initializer into the node and points the operator at it."""
    from localcluster import storage_initializer
    from localcluster.node import ctr
    from localcluster.objects import client as api_client

    state, _ = real_cluster
    assert storage_initializer.configured_image(api_client(state.kubeconfig)) == storage_initializer.NODE_IMAGE
    assert storage_initializer.NODE_IMAGE in ctr(state.node, "images", "ls", "--quiet").stdout.split()


@pytest.mark.slow
def test_the_storage_initializer_image_pulls_the_models_bytes_into_a_pod(
    real_cluster, serving_image, initializer_image, digits_artifact, tmp_path
):
    """The rclone storage initializer, built here and pushed to a registry, configured as the operator's image in
    seldon-config; containerd pulls it, and it copies the version from the S3 store into the pod with the Secret."""
    from fsspec.core import url_to_fs
    from kubernetes import client

    from deployments.rollout.storage_secret import DEFAULT_SECRET, fsspec_options, read_settings
    from localcluster import storage_initializer
    from localcluster.objects import client as api_client
    from slipway.cluster_names import DEFAULT_NAMESPACE, STORAGE_BUCKET

    state, _ = real_cluster
    api = api_client(state.kubeconfig)
    image, digest, size_mb, built_s = initializer_image
    assert storage_initializer.configured_image(api) == image

    # the namespace's Secret names the store where pods reach it (the node's bridge address, not 127.0.0.1)
    settings = read_settings(api, DEFAULT_SECRET, DEFAULT_NAMESPACE)
    assert settings is not None
    assert settings["RCLONE_CONFIG_S3_ENDPOINT"] == state.object_store["pods_endpoint"]
    assert state.node["address"] in settings["RCLONE_CONFIG_S3_ENDPOINT"]
    fs, _ = url_to_fs("s3://", **fsspec_options("s3", settings))
    expected = {}
    for path in sorted(digits_artifact.rglob("*")):
        if path.is_file():
            name = str(path.relative_to(digits_artifact))
            fs.put_file(str(path), f"{STORAGE_BUCKET}/initializer/digits/{name}")
            expected[name] = hashlib.sha256(path.read_bytes()).hexdigest()

    core = client.CoreV1Api(api)
    uri = f"s3://{STORAGE_BUCKET}/initializer/digits"
    # the pushed image (pulled from the registry: the digest skopeo pushed), then the one `up` imported into the node
    for name, source in (("initializer", image), ("initializer-node", storage_initializer.NODE_IMAGE)):
        core.create_namespaced_pod(DEFAULT_NAMESPACE, _initializer_pod(name, DEFAULT_NAMESPACE, source, uri, DEFAULT_SECRET))
        deadline = time.monotonic() + READY_TIMEOUT_S
        while (pod := core.read_namespaced_pod(name, DEFAULT_NAMESPACE)).status.phase not in ("Succeeded", "Failed"):
            assert time.monotonic() < deadline, f"the pod did not finish within {READY_TIMEOUT_S:.0f}s: {pod.status}"
            time.sleep(0.5)
        initializer = core.read_namespaced_pod_log(name, DEFAULT_NAMESPACE, container="digits-model-initializer")
        assert pod.status.phase == "Succeeded", initializer
        if source == image:
            assert pod.status.init_container_statuses[0].image_id.endswith(digest), pod.status.init_container_statuses[0]
        hashes = json.loads(core.read_namespaced_pod_log(name, DEFAULT_NAMESPACE, container="digits").strip().splitlines()[-1])
        assert hashes == expected
        core.delete_namespaced_pod(name, DEFAULT_NAMESPACE, grace_period_seconds=0)
    _report(
        storage_initializer={
            "image": image,
            "digest": digest,
            "size_mb": size_mb,
            "build_and_push_s": built_s,
        }
    )


# The digits demo's cpu overlay, placed on the real node: a user's overlay on top of it (as `make deploy OVERLAY=` takes
# one) selecting the node's label and tolerating its taint (kwok's nodes would take the pods otherwise), dropping the
# base's pin of Seldon's public initializer image (the graph's storageInitializerImage wins over seldon-config) so
# that the operator injects the one seldon-config names, and sized for a 2-core node (one replica of half a core; the
# cpu overlay asks 2 x 1).
REAL_NODE_PATCH = """\
- op: add
  path: /spec/predictors/0/componentSpecs/0/spec/nodeSelector
  value: {{"{label}": "{value}"}}
- op: add
  path: /spec/predictors/0/componentSpecs/0/spec/tolerations
  value: [{{key: "{label}", operator: Equal, value: "{value}", effect: NoSchedule}}]
- op: remove
  path: /spec/predictors/0/graph/storageInitializerImage
- op: replace
  path: /spec/predictors/0/componentSpecs/0/spec/containers/0/resources/requests
  value: {{cpu: 500m, memory: 512Mi}}
- op: replace
  path: /spec/predictors/0/componentSpecs/0/hpaSpec/minReplicas
  value: 1
- op: replace
  path: /spec/predictors/0/componentSpecs/0/hpaSpec/maxReplicas
  value: 2
"""
LATENCY_REQUESTS = 200  # the short bounded run: in the cluster (through the Service) and on loopback, one at a time


def _real_node_overlay(folder: Path) -> Path:
    from localcluster.node import NODE_LABEL, NODE_LABEL_VALUE
    from slipway.paths import PROJECT_ROOT

    folder.mkdir(parents=True)
    cpu = os.path.relpath(PROJECT_ROOT / "deployments" / "overlays" / "cpu", folder)  # kustomize takes no absolute path
    (folder / "kustomization.yaml").write_text(
        f"resources: [{cpu}]\npatches:\n  - path: real-node.yaml\n    target:\n      kind: SeldonDeployment\n"
    )
    (folder / "real-node.yaml").write_text(REAL_NODE_PATCH.format(label=NODE_LABEL, value=NODE_LABEL_VALUE))
    return folder


def _latencies(call, count: int) -> dict[str, float]:
    import statistics

    seconds = []
    for _ in range(count):
        began = time.perf_counter()
        call()
        seconds.append(time.perf_counter() - began)
    cuts = statistics.quantiles(seconds, n=100)
    return {"p50_ms": round(cuts[49] * 1000, 2), "p99_ms": round(cuts[98] * 1000, 2), "requests": count}


def _deploy_digits(env: dict, overlay: Path, artifact: Path, *engine: str):
    """`deploy` (what `make deploy` runs) of the digits demo onto the real node, with the serving image imported into
    the node's containerd (serving_image: no registry holds it); (its result, seconds)."""
    from slipway.cluster_names import DEFAULT_NAMESPACE
    from tests.conftest import run_module

    began = time.monotonic()
    result = run_module(
        "deployments",
        "deploy",
        *engine,
        "--namespace",
        DEFAULT_NAMESPACE,
        "--wait",
        str(int(READY_TIMEOUT_S)),
        "--model-dir",
        str(artifact),
        "--overlay",
        str(overlay),
        "--image",
        IMAGE,
        "--image-pull-policy",
        "IfNotPresent",
        env=env,
    )
    return result, time.monotonic() - began


def _ready_with_the_pinned_digest(pods: list, container_name: str, artifact: Path) -> tuple[object, float]:
    """The first of the model's pods, each on the real node, checked Ready with Slipway's runtime given the digest
    render pinned (it loaded what the initializer pulled only after checking it); (the pod, seconds created->Ready)."""
    from localcluster.node import NODE_NAME
    from slipway.artifact import EXPECTED_DIGESTS_ENV, verify_artifact

    assert pods and all(pod.spec.node_name == NODE_NAME for pod in pods)
    pod = pods[0]
    ready = next(c for c in pod.status.conditions if c.type == "Ready")
    assert ready.status == "True"
    container = next(c for c in pod.spec.containers if c.name == container_name)
    pinned = {item.name: item.value for item in container.env}[EXPECTED_DIGESTS_ENV]
    assert pinned.startswith(f"{MODEL}=") and pinned.endswith(verify_artifact(artifact).digest)
    return pod, (ready.last_transition_time - pod.metadata.creation_timestamp).total_seconds()


def _answers_as_on_loopback(service, loopback_url: str) -> tuple[str, float]:
    """V2 REST and gRPC through `service`'s ClusterIP answer what the model answers on loopback; (the REST infer URL,
    seconds until the first REST answer)."""
    import numpy as np

    from tests.wrappers.v2 import GrpcClient, raw_output, raw_request

    ports = {port.name: port.port for port in service.spec.ports}
    rest = f"http://{service.spec.cluster_ip}:{ports['http']}/v2/models/{MODEL}/infer"
    began = time.monotonic()
    in_cluster = _post_until_routed(rest, {"inputs": [PIXELS]})
    first_answer_s = time.monotonic() - began
    on_loopback = _post(f"{loopback_url}/v2/models/{MODEL}/infer", {"inputs": [PIXELS]})
    assert [o["data"] for o in in_cluster["outputs"]] == [o["data"] for o in on_loopback["outputs"]]
    pixels = np.array(PIXELS["data"], dtype=np.float32)
    grpc = GrpcClient(f"{service.spec.cluster_ip}:{ports['grpc']}")
    try:
        answer = grpc.infer(raw_request(MODEL, {"image": ("FP32", PIXELS["shape"], pixels.tobytes())}))
        assert raw_output(answer).ravel().tolist() == on_loopback["outputs"][0]["data"]
    finally:
        grpc.close()
    return rest, first_answer_s


@pytest.mark.slow
def test_make_deploy_serves_the_digits_model_from_the_real_node(
    real_cluster, serving_image, initializer_image, digits_artifact, digits_server, reports_env
):
    """`deploy` (what `make deploy` runs) of the digits demo onto the real node: the operator's Deployment, the storage
    initializer pulling the version from the S3 store with the Secret, Slipway's runtime Ready; V2 REST and gRPC
    through the Service's ClusterIP answer what the model answers on loopback; `undeploy` returns once the pods are
    gone."""
    from kubernetes import client

    from localcluster import storage_initializer
    from localcluster.objects import client as api_client
    from slipway.cluster_names import DEFAULT_NAMESPACE
    from tests.conftest import run_module

    state, _ = real_cluster
    image, digest, _, _ = initializer_image
    core = client.CoreV1Api(api_client(state.kubeconfig))
    env = {**reports_env, "KUBECONFIG": str(state.kubeconfig), "COLUMNS": "400"}
    overlay = _real_node_overlay(Path(reports_env["SLIPWAY_BUILD_DIR"]).parent / "real-node-overlay")
    result, deploy_s = _deploy_digits(env, overlay, digits_artifact)
    # deploy asked the Service itself (through the API server's service proxy) before it returned
    assert f"default: Service {MODEL}-default answers /v2/models/{MODEL}" in result.stderr, result.stderr

    pods = core.list_namespaced_pod(DEFAULT_NAMESPACE, label_selector=f"seldon-deployment-id={MODEL}").items
    pod, create_to_ready_s = _ready_with_the_pinned_digest(pods, MODEL, digits_artifact)
    # the operator injected the initializer seldon-config names (the pushed one), and containerd pulled its digest
    assert [c.image for c in pod.spec.init_containers] == [image] == [storage_initializer.configured_image(core.api_client)]
    (initializer,) = pod.status.init_container_statuses
    assert initializer.image_id.endswith(digest) and initializer.state.terminated.exit_code == 0

    service = core.read_namespaced_service(f"{MODEL}-default", DEFAULT_NAMESPACE)
    ports = {port.name: port.port for port in service.spec.ports}
    rest, first_answer_s = _answers_as_on_loopback(service, digits_server.http_url)
    latency = {
        "in_cluster": _latencies(lambda: _post(rest, {"inputs": [PIXELS]}), LATENCY_REQUESTS),
        "loopback": _latencies(
            lambda: _post(f"{digits_server.http_url}/v2/models/{MODEL}/infer", {"inputs": [PIXELS]}), LATENCY_REQUESTS
        ),
    }

    # `make loadtest HOST=` against the in-cluster endpoint: headless Locust, bounded, every request answered
    result = run_module(
        "loadtest",
        "run",
        "--host",
        f"http://{service.spec.cluster_ip}:{ports['http']}",
        "--model-dir",
        str(digits_artifact),
        "--users",
        "2",
        "--duration",
        "10",
        "--name",
        "real-node-loadtest",
        env=env,
    )
    whole = re.search(
        r"whole run: (\d+) requests, ([\d.]+) req/s, p50 ([\d.]+) ms, p95 ([\d.]+) ms, p99 ([\d.]+) ms, (\d+) failures",
        result.stdout + result.stderr,
    )
    assert whole and int(whole[1]) > 0 and whole[6] == "0", result.stdout + result.stderr
    loadtest = {"requests": int(whole[1]), "rps": float(whole[2]), "p50_ms": float(whole[3]), "p99_ms": float(whole[5])}

    began = time.monotonic()
    result = run_module("deployments", "undeploy", "--name", MODEL, "--namespace", DEFAULT_NAMESPACE, env=env)
    undeploy_s = time.monotonic() - began
    assert "gone after" in result.stderr, result.stderr
    assert not core.list_namespaced_pod(DEFAULT_NAMESPACE, label_selector=f"seldon-deployment-id={MODEL}").items
    _report(
        deploy={
            "deploy_s": round(deploy_s, 1),
            "pod_create_to_ready_s": create_to_ready_s,
            "first_answer_through_service_s": round(first_answer_s, 3),
            "rest_latency": latency,
            "loadtest_2_users_10s": loadtest,
            "undeploy_s": round(undeploy_s, 1),
        }
    )


@pytest.mark.slow
def test_make_deploy_engine_kserve_serves_the_digits_model_from_the_real_node(
    real_cluster, serving_image, digits_artifact, digits_server, reports_env
):
    """`deploy --engine kserve` (what `make deploy ENGINE=kserve` runs) onto the real node: KServe's controller makes
    the predictor's Deployment, its pod mutator adds the storage initializer `inferenceservice-config` names (the rclone
    image that takes KServe's AWS_* credentials), which pulls the version from the S3 store with KServe's Secret;
    Slipway's runtime is Ready with it; V2 REST and gRPC through the predictor Service's ClusterIP answer what the
    model answers on loopback; `undeploy` returns once the pods are gone."""
    from kubernetes import client

    from deployments.kserve import api as kserve
    from localcluster import storage_initializer
    from localcluster.objects import client as api_client
    from slipway.cluster_names import DEFAULT_NAMESPACE
    from tests.conftest import run_module

    state, _ = real_cluster
    if not any(process.name == "kserve-manager" for process in state.processes):
        pytest.skip("KServe's controller is not built: it is opt-in, `make cluster-build KSERVE=1` builds it")
    core = client.CoreV1Api(api_client(state.kubeconfig))
    env = {**reports_env, "KUBECONFIG": str(state.kubeconfig), "COLUMNS": "400"}
    overlay = _real_node_overlay(Path(reports_env["SLIPWAY_BUILD_DIR"]).parent / "real-node-overlay-kserve")
    selector = f"{kserve.ISVC_POD_LABEL}={MODEL}"
    _, deploy_s = _deploy_digits(env, overlay, digits_artifact, "--engine", "kserve")

    pods = core.list_namespaced_pod(DEFAULT_NAMESPACE, label_selector=selector).items
    pods = [pod for pod in pods if not pod.metadata.deletion_timestamp]
    pod, create_to_ready_s = _ready_with_the_pinned_digest(pods, kserve.CONTAINER_NAME, digits_artifact)
    # KServe's pod mutator injected the initializer inferenceservice-config names, and it pulled the version
    assert [c.image for c in pod.spec.init_containers] == [storage_initializer.KSERVE_NODE_IMAGE]
    (initializer,) = pod.status.init_container_statuses
    assert initializer.state.terminated.exit_code == 0

    service = core.read_namespaced_service(kserve.predictor_name(MODEL), DEFAULT_NAMESPACE)
    rest, _ = _answers_as_on_loopback(service, digits_server.http_url)
    latency = _latencies(lambda: _post(rest, {"inputs": [PIXELS]}), LATENCY_REQUESTS)

    began = time.monotonic()
    result = run_module("deployments", "undeploy", "--name", MODEL, "--namespace", DEFAULT_NAMESPACE, env=env)
    undeploy_s = time.monotonic() - began
    assert "gone after" in result.stderr, result.stderr
    assert not core.list_namespaced_pod(DEFAULT_NAMESPACE, label_selector=selector).items
    _report(
        kserve_deploy={
            "deploy_s": round(deploy_s, 1),
            "pod_create_to_ready_s": create_to_ready_s,
            "rest_latency_in_cluster": latency,
            "undeploy_s": round(undeploy_s, 1),
        }
    )


# The HPA on the model container's real CPU: the real-node overlay plus the standalone HPA of the autoscaling-behavior
# component (Seldon 1.17.1's hpaSpec has no `behavior`), sized for the test: 1 -> 2 replicas, one pod at a time, and
# down 30 s after the load instead of the component's 300 s window, at most 100% per 15 s. The controller-manager's
# HPA sync period is the local cluster's 2 s (HPA_SYNC_S), metrics-server's scrape 10 s (METRIC_RESOLUTION_S).
# The model container asks for 200m: on two cores shared with the load generator (and, in `make test`, the rest of
# the suite) it got 300-320m under the load, short of 70% of the real-node overlay's 500m.
HPA_WINDOW_DOWN_S = 30
HPA_CPU_REQUEST_M = 200
HPA_REQUEST_PATCH = f"""
- op: replace
  path: /spec/predictors/0/componentSpecs/0/spec/containers/0/resources/requests/cpu
  value: {HPA_CPU_REQUEST_M}m
"""
HPA_PATCH = f"""
- op: replace
  path: /spec/minReplicas
  value: 1
- op: replace
  path: /spec/maxReplicas
  value: 2
- op: replace
  path: /spec/behavior
  value:
    scaleUp:
      stabilizationWindowSeconds: 0
      policies: [{{type: Pods, value: 1, periodSeconds: 15}}]
    scaleDown:
      stabilizationWindowSeconds: {HPA_WINDOW_DOWN_S}
      policies: [{{type: Percent, value: 100, periodSeconds: 15}}]
"""
# The bounded load: `loadtest run --host` (what `make loadtest HOST=` runs: headless Locust) against the Service's
# ClusterIP for LOAD_S; Locust's users keep their connections, so the pod the HPA adds may see little of it.
LOAD_USERS = 2
LOAD_S = 90
HPA_TIMEOUT_S = 180.0  # each phase's wait for the replicas the HPA should reach


def _hpa_overlay(folder: Path) -> Path:
    """The real-node overlay with the standalone-HPA component and the test's behaviour (HPA_PATCH)."""
    from slipway.paths import PROJECT_ROOT

    placed = _real_node_overlay(folder / "real-node")
    component = os.path.relpath(PROJECT_ROOT / "deployments" / "components" / "autoscaling-behavior", folder / "hpa")
    (folder / "hpa").mkdir()
    (folder / "hpa" / "kustomization.yaml").write_text(
        f"resources: [{os.path.relpath(placed, folder / 'hpa')}]\ncomponents: [{component}]\n"
        "patches:\n  - path: behavior.yaml\n    target: {kind: HorizontalPodAutoscaler}\n"
        "  - path: request.yaml\n    target: {kind: SeldonDeployment}\n"
    )
    (folder / "hpa" / "behavior.yaml").write_text(HPA_PATCH)
    (folder / "hpa" / "request.yaml").write_text(HPA_REQUEST_PATCH)
    return folder / "hpa"


def _top(api, namespace: str, selector: str, container: str) -> dict[str, dict[str, int]]:
    """What `kubectl top pod --containers` shows of `container`: per pod, metrics-server's CPU (millicores) and memory
    (MiB) from the kubelet's /metrics/resource."""
    from kubernetes import client
    from kubernetes.utils import parse_quantity

    listed = client.CustomObjectsApi(api).list_namespaced_custom_object(
        "metrics.k8s.io", "v1beta1", namespace, "pods", label_selector=selector
    )
    return {
        item["metadata"]["name"]: {
            "cpu_m": int(parse_quantity(usage["usage"]["cpu"]) * 1000),
            "memory_mib": int(parse_quantity(usage["usage"]["memory"]) / 2**20),
        }
        for item in listed["items"]
        for usage in item["containers"]
        if usage["name"] == container
    }


@pytest.mark.slow
def test_the_hpa_scales_the_model_container_on_its_real_cpu(
    real_cluster, serving_image, initializer_image, digits_artifact, reports_env, tmp_path
):
    """metrics-server reads the real kubelet's /metrics/resource, so the model container's CPU is what
    `kubectl top` shows; the rendered HPA (ContainerResource cpu at 70% of the request) takes the Deployment 1 -> 2
    under a bounded load through the Service's ClusterIP and back to 1 once the load stops and its window passes.
    Each change of replicas, with what the HPA and metrics-server read then, lands in reports/real-node.json (`hpa`)
    and reports/real-node-hpa.png."""
    from dataclasses import asdict

    from kubernetes import client

    from localcluster import autoscaling_proof
    from localcluster.control_plane import HPA_SYNC_S, METRIC_RESOLUTION_S
    from localcluster.node import NODE_NAME
    from localcluster.objects import client as api_client
    from slipway.cluster_names import DEFAULT_NAMESPACE
    from slipway.paths import PROJECT_ROOT, REPORTS_DIR
    from tests.conftest import run_module

    state, _ = real_cluster
    api = api_client(state.kubeconfig)
    core, autoscaling = client.CoreV1Api(api), client.AutoscalingV2Api(api)
    env = {**reports_env, "KUBECONFIG": str(state.kubeconfig), "COLUMNS": "400"}
    run_module(
        "deployments",
        "deploy",
        "--namespace",
        DEFAULT_NAMESPACE,
        "--wait",
        str(int(READY_TIMEOUT_S)),
        "--model-dir",
        str(digits_artifact),
        "--overlay",
        str(_hpa_overlay(tmp_path / "overlays")),
        "--image",
        IMAGE,
        "--image-pull-policy",
        "IfNotPresent",
        env=env,
    )
    hpa_name = f"{MODEL}-default"
    hpa = autoscaling.read_namespaced_horizontal_pod_autoscaler(hpa_name, DEFAULT_NAMESPACE)
    target = client.AppsV1Api(api).read_namespaced_deployment(hpa.spec.scale_target_ref.name, DEFAULT_NAMESPACE)
    selector = ",".join(f"{key}={value}" for key, value in target.spec.selector.match_labels.items())
    service = core.read_namespaced_service(f"{MODEL}-default", DEFAULT_NAMESPACE)
    http = next(port.port for port in service.spec.ports if port.name == "http")

    began = time.monotonic()
    samples: list[dict] = []
    phases: dict[str, float] = {}

    def sample(phase: str) -> dict:
        hpa = autoscaling.read_namespaced_horizontal_pod_autoscaler(hpa_name, DEFAULT_NAMESPACE)
        now = asdict(autoscaling_proof.sample(api, DEFAULT_NAMESPACE, hpa, began, phase))
        now["top"] = _top(api, DEFAULT_NAMESPACE, selector, MODEL)
        samples.append(now)
        return now

    def wait_for(phase: str, until, timeout_s: float) -> dict:
        deadline = time.monotonic() + timeout_s
        while not until(now := sample(phase)):
            assert time.monotonic() < deadline, f"{phase}: not reached within {timeout_s:.0f}s: {samples[-5:]}"
            time.sleep(autoscaling_proof.SAMPLE_EVERY_S)
        return now

    # idle: metrics-server has the container's usage from the kubelet, and the HPA reads it (below its target)
    phases["idle"] = 0.0
    idle = wait_for("idle", lambda s: s["top"] and s["utilization"] is not None, 6 * METRIC_RESOLUTION_S)
    assert idle["replicas"] == 1 and idle["utilization"] < 70, idle
    log = tmp_path / "loadtest.log"
    with log.open("w") as out:
        load = subprocess.Popen(
            [sys.executable, "-m", "loadtest", "run", "--host", f"http://{service.spec.cluster_ip}:{http}"]
            + ["--model-dir", str(digits_artifact), "--users", str(LOAD_USERS), "--duration", str(LOAD_S)]
            + ["--name", "real-node-hpa"],
            cwd=PROJECT_ROOT,
            env={**os.environ, **env},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        phases["load"] = round(time.monotonic() - began, 1)
        wait_for("load", lambda s: load.poll() is not None, LOAD_S + 60)
    finally:
        if load.poll() is None:
            load.kill()
        load.wait()
    output = log.read_text()
    phases["after"] = round(time.monotonic() - began, 1)
    wait_for("after", lambda s: s["replicas"] == 1 and s["ready"] == 1, HPA_WINDOW_DOWN_S + HPA_TIMEOUT_S)

    whole = re.search(r"whole run: (\d+) requests, ([\d.]+) req/s, .*?, (\d+) failures", output)
    assert whole and int(whole[1]) > 0 and whole[3] == "0", output
    pods = core.list_namespaced_pod(DEFAULT_NAMESPACE, label_selector=selector).items
    assert all(pod.spec.node_name == NODE_NAME for pod in pods)
    loaded = [s for s in samples if s["phase"] == "load"]
    after = [s for s in samples if s["phase"] == "after"]
    # why it scaled: the model container's real CPU, above 70% of its request, as the HPA and `top` read it
    assert max(s["utilization"] or 0 for s in loaded) > 70
    assert max(top["cpu_m"] for s in loaded for top in s["top"].values()) > 0.7 * HPA_CPU_REQUEST_M
    # up to both replicas Ready during the load, never past the maximum; down only after the load and its window
    assert any(s["replicas"] == 2 and s["ready"] == 2 for s in loaded) and max(s["replicas"] for s in samples) == 2
    seen_low = next(s["seconds"] for s in after if s["utilization"] is not None and s["utilization"] < 70)
    first_down = next(s["seconds"] for s in after if s["replicas"] < 2)
    assert first_down - seen_low >= HPA_WINDOW_DOWN_S - HPA_SYNC_S - 2 * autoscaling_proof.SAMPLE_EVERY_S

    run_module("deployments", "undeploy", "--name", MODEL, "--namespace", DEFAULT_NAMESPACE, env=env)
    events = [
        {
            "seconds": b["seconds"],
            "phase": b["phase"],
            "replicas": [a["replicas"], b["replicas"]],
            "hpa_cpu_utilization_percent": b["utilization"],
            "top": b["top"],
        }
        for a, b in zip(samples, samples[1:])
        if a["replicas"] != b["replicas"]
    ]
    result = {
        "hpa": hpa_name,
        "metrics": [metric.to_dict() for metric in hpa.spec.metrics],
        "behavior": hpa.spec.behavior.to_dict(),
        "min_replicas": hpa.spec.min_replicas,
        "max_replicas": hpa.spec.max_replicas,
        "cpu_request_m": HPA_CPU_REQUEST_M,
        "hpa_sync_s": HPA_SYNC_S,
        "metric_resolution_s": METRIC_RESOLUTION_S,
        "load": {"users": LOAD_USERS, "seconds": LOAD_S, "requests": int(whole[1]), "rps": float(whole[2]), "failures": 0},
        "phase_started_s": phases,
        "scale_events": events,
        "load_to_scale_up_s": round(events[0]["seconds"] - phases["load"], 1),
        "load_end_to_scale_down_s": round(events[-1]["seconds"] - phases["after"], 1),
        "samples": samples,
    }
    autoscaling_proof.plot(
        result,
        REPORTS_DIR / "real-node-hpa.png",
        title=f"HPA {DEFAULT_NAMESPACE}/{hpa_name} on the real node (the container's CPU, from the kubelet)",
        phase_labels={"idle": "idle", "load": f"Locust, {LOAD_USERS} users", "after": "load stopped"},
    )
    _report(hpa=result)


# The canary on live pods: the real-node overlay with the stable predictor at one replica (the canary's HPA, the canary
# overlay's 1-2 replicas, may add a second canary pod on the 2-core node), Prometheus scraping the pods as
# prometheus-operator would from the rendered PodMonitor (every second here instead of its 15 s), the canary stepping
# 25 -> 50 -> 100, each step judged over a trailing minute after 30 s.
CANARY_ROOT = "s3://slipway-models/real-node-canary"
# the SLO's limits as loadtest/slo.example.yaml's; against the stable, latency may double or add 5 ms: both pods share
# two cores with the load and the rest of the machine, whose noise is not the canary's
CANARY_SLO = (
    "p50_ms: 20\np95_ms: 50\nmax_error_rate: 0.01\n"
    "canary:\n  min_requests: 200\n  latency_tolerance: 1.0\n  latency_slack_ms: 5\n"
)
ONE_REPLICA = """
- op: replace
  path: /spec/predictors/0/componentSpecs/0/hpaSpec/maxReplicas
  value: 1
"""
SPLIT_THREADS = 2
SPLIT_ROUTE_POLL_S = 0.5  # how often the split load reads the shares and the Services' Ready endpoints
SPLIT_MAX_S = 400.0  # the split load's bounds: it stops with the canary, or at these
SPLIT_MAX_REQUESTS = 200_000


class _SplitLoad:
    """What no ingress does here: Seldon's operator writes each predictor's `traffic` share as Ambassador Mappings on
    the predictors' Services, and no Ambassador runs. These clients play its part: every half second they read the
    shares from the SeldonDeployment (a single predictor takes all; one whose Service is not there has no Mapping, so
    takes none), and send each request to the Service of one predictor (its ClusterIP, kube-proxy to a pod) drawn by
    them, as Envoy would, whether or not the Service has a Ready endpoint then, retrying a refused connection as many
    times as the SeldonDeployment's `seldon.io/ambassador-retries` says (Ambassador's connect-failure retries; a
    request that reached a server is never retried). Bounded by SPLIT_MAX_S and
    SPLIT_MAX_REQUESTS. They keep each change of the shares with the Service's Ready endpoints (`seen`), and each
    failure with its time and error."""

    def __init__(self, api, namespace: str, deployment: str) -> None:
        import threading

        from kubernetes import client

        self.core, self.custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        self.namespace, self.deployment = namespace, deployment
        self.stopped, self.lock = threading.Event(), threading.Lock()
        self.routes: list[tuple[str, str, int]] = []  # (predictor, url, weight)
        self.retries = 0  # connect-failure retries, as the SeldonDeployment asks its ingress
        self.seen: list[dict] = []  # each change of the routes: at, {predictor: [weight, ready endpoints' pods]}
        self.answered: dict[str, list[float]] = {}  # predictor -> seconds of each answered request
        self.failures: dict[str, list[dict]] = {}  # predictor -> each failure (at, error)
        self.threads = [threading.Thread(target=self._route, daemon=True)]
        self.threads += [threading.Thread(target=self._send, daemon=True) for _ in range(SPLIT_THREADS)]

    def _routes(self) -> tuple[list[tuple[str, str, int]], dict[str, list]]:
        from kubernetes.client import ApiException

        sdep = self.custom.get_namespaced_custom_object(
            "machinelearning.seldon.io", "v1", self.namespace, "seldondeployments", self.deployment
        )
        self.retries = int(sdep["metadata"].get("annotations", {}).get("seldon.io/ambassador-retries", 0))
        predictors = [p for p in sdep["spec"]["predictors"] if not p.get("shadow")]
        routes, seen = [], {}
        for predictor in predictors:
            name = f"{self.deployment}-{predictor['name']}"
            try:
                service = self.core.read_namespaced_service(name, self.namespace)
                endpoints = self.core.read_namespaced_endpoints(name, self.namespace)
            except ApiException as err:
                if err.status == 404:
                    continue
                raise
            port = next(port.port for port in service.spec.ports if port.name == "http")
            weight = 100 if len(predictors) == 1 else predictor.get("traffic", 0)
            routes.append((predictor["name"], f"http://{service.spec.cluster_ip}:{port}/v2/models/{MODEL}/infer", weight))
            ready = sorted(
                address.target_ref.name if address.target_ref else address.ip
                for subset in endpoints.subsets or []
                for address in subset.addresses or []
            )
            seen[predictor["name"]] = [weight, ready]
        return routes, seen

    def _route(self) -> None:
        from kubernetes.client import ApiException

        while not self.stopped.wait(SPLIT_ROUTE_POLL_S):
            try:
                routes, seen = self._routes()
            except ApiException:  # the API server busy: the last shares stand until the next read
                continue
            with self.lock:
                self.routes = routes
                if not self.seen or self.seen[-1]["routes"] != seen:
                    self.seen.append({"at": time.time(), "routes": seen})

    def _send(self) -> None:
        import random
        import urllib.error

        deadline = time.monotonic() + SPLIT_MAX_S
        while not self.stopped.is_set() and time.monotonic() < deadline:
            with self.lock:
                routes = list(self.routes)
                if self.requests() >= SPLIT_MAX_REQUESTS:
                    return
            if not sum(weight for _, _, weight in routes):
                time.sleep(0.1)
                continue
            predictor, url, _ = random.choices(routes, [weight for _, _, weight in routes])[0]
            began = time.perf_counter()
            try:
                self._post_retrying(url)
            except urllib.error.HTTPError as err:
                failure = {"at": time.time(), "error": f"HTTP {err.code}: {err.read()[:200].decode(errors='replace')}"}
            except OSError as err:
                failure = {"at": time.time(), "error": repr(err)[:200]}
            else:
                with self.lock:
                    self.answered.setdefault(predictor, []).append(time.perf_counter() - began)
                continue
            with self.lock:
                self.failures.setdefault(predictor, []).append(failure)

    def _post_retrying(self, url: str) -> None:
        import urllib.error

        for attempt in range(self.retries + 1):
            try:
                _post(url, {"inputs": [PIXELS]})
                return
            except urllib.error.URLError as err:
                refused = isinstance(err.reason, ConnectionRefusedError)
                if not refused or attempt == self.retries:
                    raise
            time.sleep(0.025 * 2**attempt)  # Envoy's retry back-off: 25 ms base interval, doubling

    def requests(self) -> int:
        return sum(map(len, self.answered.values())) + sum(map(len, self.failures.values()))

    def __enter__(self) -> _SplitLoad:
        self.routes, routes = self._routes()
        self.seen.append({"at": time.time(), "routes": routes})
        for _, url, weight in self.routes:  # the load begins once the ingress's first routes answer
            if weight:
                _post_until_routed(url, {"inputs": [PIXELS]})
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopped.set()
        for thread in self.threads:
            thread.join(timeout=60)


@pytest.mark.slow
def test_make_canary_steps_live_pods_judged_from_prometheus_scraping_them(
    real_cluster,
    serving_image,
    initializer_image,
    prometheus_tools,  # noqa: F811 (the fixture imported above)
    digits_artifact,
    reports_env,
    tmp_path,
):
    """`canary` (what `make canary` runs) of digits v2 beside a live v1 on the real node: its predictor's pod pulls v2,
    Prometheus scrapes both predictors' pods (discovered through the API server, labelled as the rendered PodMonitor
    says), each step is judged from those series, and v2 is promoted: the stable predictor's pod then serves it."""
    import yaml

    from deployments.delivery.canary.controller import SETTLE_S
    from deployments.rollout.kube_api import dynamic_client
    from export.store.refs import parse_ref
    from export.store.store import ModelStore
    from localcluster.objects import client as api_client
    from localcluster.pod_monitor import scrape_jobs
    from slipway.cluster_names import DEFAULT_NAMESPACE
    from slipway.paths import REPORTS_DIR
    from tests.conftest import run_module
    from tests.deployments.canary.series import prometheus
    from tests.localcluster.test_canary import _copy

    state, _ = real_cluster
    api = api_client(state.kubeconfig)
    store = tmp_path / "store"
    with ModelStore.open(store, create=True) as opened:
        for number in (1, 2):
            opened.publish(
                _copy(digits_artifact, tmp_path / f"digits-{number}", f"v{number}"),
                MODEL,
                tag="champion" if number == 1 else None,
            )
        record = tmp_path / "v1.json"
        record.write_text(opened.get(parse_ref(f"{MODEL}:1")).model_dump_json())
    overlay = tmp_path / "overlay"
    placed = _real_node_overlay(tmp_path / "real-node")
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(
        f"resources: [{os.path.relpath(placed, overlay)}]\npatches:\n  - path: one.yaml\n    target: {{kind: SeldonDeployment}}\n"
    )
    (overlay / "one.yaml").write_text(ONE_REPLICA)
    slo = tmp_path / "slo.yaml"
    slo.write_text(CANARY_SLO)
    env = {**reports_env, "KUBECONFIG": str(state.kubeconfig), "COLUMNS": "400"}
    image = ["--image", IMAGE, "--image-pull-policy", "IfNotPresent"]
    run_module(
        "deployments",
        "deploy",
        "--namespace",
        DEFAULT_NAMESPACE,
        "--wait",
        str(int(READY_TIMEOUT_S)),
        "--storage-root",
        CANARY_ROOT,
        "--version-record",
        str(record),
        "--overlay",
        str(overlay),
        *image,
        env=env,
    )
    monitor = dynamic_client(api).resources.get(api_version="monitoring.coreos.com/v1", kind="PodMonitor")
    (pod_monitor,) = monitor.get(namespace=DEFAULT_NAMESPACE).to_dict()["items"]
    folder = tmp_path / "prometheus"
    folder.mkdir()
    (folder / "prometheus.yml").write_text(
        yaml.safe_dump({"scrape_configs": scrape_jobs(pod_monitor, state.kubeconfig, interval="1s")})
    )
    binary = prometheus_tools["prometheus"]
    args = [f"--config.file={folder / 'prometheus.yml'}", f"--storage.tsdb.path={folder / 'data'}", "--log.level=warn"]
    with prometheus(binary, folder, args) as url, _SplitLoad(api, DEFAULT_NAMESPACE, MODEL) as load:
        began = time.monotonic()
        result = run_module(
            "deployments",
            "canary",
            "--namespace",
            DEFAULT_NAMESPACE,
            "--ref",
            f"{MODEL}:2",
            "--store",
            str(store),
            "--slo",
            str(slo),
            "--steps",
            "25,50,100",
            "--interval",
            "30s",
            "--window",
            "1m",
            "--drain",
            "2s",
            "--wait",
            str(int(READY_TIMEOUT_S)),
            "--storage-root",
            CANARY_ROOT,
            env={**env, "PROMETHEUS_URL": url},
            check=False,
            timeout=600,
        )
        canary_s = time.monotonic() - began
        # the series the judge read: MLServer's counter from each predictor's pods, as Prometheus labelled them
        scraped = _series(
            url,
            f'last_over_time(model_infer_request_success_total{{namespace="{DEFAULT_NAMESPACE}",slipway_io_model="{MODEL}"}}[10m])',
        )
        unknown = _query(url, f'last_over_time(slipway_unknown_model_requests_total{{namespace="{DEFAULT_NAMESPACE}"}}[10m])')
    report = json.loads((Path(reports_env["SLIPWAY_REPORTS_DIR"]) / "canary.json").read_text())
    failed = {predictor: len(failures) for predictor, failures in load.failures.items()}
    diagnosis = tmp_path / "split-load.json"
    diagnosis.write_text(
        json.dumps(
            {
                "failed": failed,
                "answered": {predictor: len(seconds) for predictor, seconds in load.answered.items()},
                "events": report["events"],
                "routes": load.seen,
                "failures": {predictor: failures[:40] + failures[-10:] for predictor, failures in load.failures.items()},
                "unknown_model": unknown,
            },
            indent=1,
        )
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "promoted" in result.stderr, result.stderr
    assert not failed, f"failed requests {failed}: {diagnosis.read_text()[-6000:]}"
    assert not unknown, unknown  # no pod answered 404 for the model it serves
    # the ingress's view: the canary took a share only once its Service had had a Ready endpoint for `--settle`
    for seen in load.seen:
        weight, ready = seen["routes"].get("canary", (0, []))
        assert ready or not weight, load.seen
    listed = next(seen["at"] for seen in load.seen if seen["routes"].get("canary", (0, []))[1])
    given = next(seen["at"] for seen in load.seen if seen["routes"].get("canary", (0, []))[0])
    assert given - listed >= SETTLE_S - 2 * SPLIT_ROUTE_POLL_S, load.seen  # each seen up to a poll late
    answered = {predictor: sorted(seconds) for predictor, seconds in load.answered.items()}
    assert len(answered.get("default", [])) > 0 and len(answered.get("canary", [])) > 0, failed
    assert {series["slipway_io_predictor"] for series in scraped} == {"default", "canary"}
    assert all(series["pod"].startswith(f"{MODEL}-{series['slipway_io_predictor']}-") for series in scraped), scraped
    decisions = [event for event in report["events"] if event["kind"] == "decision"]
    # each step before the last judged (the last, 100%, is the promotion)
    assert [(event["weight"], event["decision"]) for event in decisions] == [(25, "promote-step"), (50, "promote-step")]
    assert all(event["canary"]["requests"] >= 200 and event["stable"]["requests"] >= 200 for event in decisions)
    assert report["outcome"] == "promoted"
    # the stable predictor's pod now serves v2, on the real node; the canary's is gone
    sdep = dynamic_client(api).resources.get(api_version="machinelearning.seldon.io/v1", kind="SeldonDeployment")
    (predictor,) = sdep.get(name=MODEL, namespace=DEFAULT_NAMESPACE).to_dict()["spec"]["predictors"]
    assert predictor["name"] == "default" and predictor["annotations"]["slipway.io/model-version"] == "2"
    run_module("deployments", "undeploy", "--name", MODEL, "--namespace", DEFAULT_NAMESPACE, env=env)

    began_at = report["events"][0]["at"]
    promoting = next(e["at"] for e in report["events"] if e["kind"] == "weights" and e["phase"] == "promoting")
    shutil.copyfile(Path(reports_env["SLIPWAY_REPORTS_DIR"]) / "canary.png", REPORTS_DIR / "real-node-canary.png")
    _report(
        canary={
            "steps": [25, 50, 100],
            "interval_s": 30,
            "window": "1m",
            "scrape_interval_s": 1,
            "canary_s": round(canary_s, 1),
            "outcome": report["outcome"],
            "canary_serves_s": round(
                next(e["at"] for e in report["events"] if e["kind"] == "weights" and e["weights"]["canary"]) - began_at, 1
            ),
            "promote_s": round(report["events"][-1]["at"] - promoting, 1),
            "decisions": [
                {
                    "at_s": round(event["at"] - began_at, 1),
                    "weight": event["weight"],
                    "decision": event["decision"],
                    **{
                        side: {
                            "requests": round(event[side]["requests"]),
                            "p50_ms": round(event[side]["latency_ms"]["p50_ms"], 2),
                            "p95_ms": round(event[side]["latency_ms"]["p95_ms"], 2),
                        }
                        for side in ("canary", "stable")
                    },
                }
                for event in decisions
            ],
            "timeline": [
                {"at_s": round(event["at"] - began_at, 1), "kind": event["kind"], "weights": event["weights"]}
                for event in report["events"]
                if event["kind"] in ("begin", "weights")
            ],
            # the test's weighted client (the ingress's part), per predictor's Service, the whole canary long
            "split_load": {
                predictor: {
                    "requests": len(seconds) + failed.get(predictor, 0),
                    "failed": failed.get(predictor, 0),
                    "p50_ms": round(seconds[len(seconds) // 2] * 1000, 2),
                    "p99_ms": round(seconds[int(len(seconds) * 0.99)] * 1000, 2),
                }
                for predictor, seconds in answered.items()
            },
            "scraped_pods": sorted({series["pod"] for series in scraped}),
        }
    )


def _query(url: str, query: str) -> list[dict]:
    """What `query` gives now (each series: its labels and value), from Prometheus's query API."""
    import urllib.parse

    with urllib.request.urlopen(f"{url}/api/v1/query?{urllib.parse.urlencode({'query': query})}", timeout=5) as answer:
        return json.loads(answer.read())["data"]["result"]


def _series(url: str, selector: str) -> list[dict[str, str]]:
    """The label sets of the series `selector` matches now."""
    return [item["metric"] for item in _query(url, selector)]


@pytest.mark.slow
def test_a_killed_node_leaves_nothing_behind(real_cluster):
    """A run killed half way (kube-proxy, the kubelet and containerd SIGKILLed while the pod above still runs under its
    shim): `down` still kills the containers and the shims by PID and removes the mounts, the bridge, the cgroup root
    and the iptables chains (the fixture's teardown checks those)."""
    import signal

    from localcluster.control_plane import down
    from localcluster.node import _leftover_pids, pinned_netns
    from localcluster.processes import running

    state, _ = real_cluster
    for process in state.processes:
        if process.name in ("kube-proxy", "kubelet", "containerd"):
            os.kill(process.pid, signal.SIGKILL)
            while running(process):
                time.sleep(0.05)
    leftovers = _leftover_pids(state.node)
    assert leftovers, "the pod's shim and containers should have outlived containerd"
    netns = pinned_netns(leftovers)
    assert netns, "the pod's sandbox network namespace, pinned under /run/netns"
    down(state.folder)
    assert not any(path.exists() for path in netns)
    alive = [
        pid
        for pid in leftovers
        if Path(f"/proc/{pid}/stat").exists() and Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    ]
    assert not alive
