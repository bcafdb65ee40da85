"""Start and stop the local control plane: the order, the flags, the health checks, the state.

`up` starts etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok, metrics-server,
the Seldon operator and an S3 object store (versitygw), each after the one it needs answers; a
failure or Ctrl-C half way stops everything already started. `down` stops every recorded PID and
removes the state folder. The state (`state.json`, the kubeconfig, certificates, logs, etcd's
data, the store's objects) lives in one folder, `build/cluster/` by default, readable by its owner only.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import shutil
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from localcluster import keda, kserve, node, objects
from localcluster.build import build_all, cache_root, component_dir
from localcluster.components import CLUSTER_COMPONENTS, KEDA, KSERVE, KUBERNETES_VERSION, NODE_COMPONENTS
from localcluster.pki import ClusterPKI
from localcluster.processes import Process, last_lines, running, start, stop
from slipway import atomic, local_cluster
from slipway.cli import first_line
from slipway.cluster_names import DEFAULT_NAMESPACE, STORAGE_BUCKET
from slipway.ports import free_port, port_in_use

DEFAULT_API_PORT = 16443
SERVICE_CIDR = "10.96.0.0/16"
READY_TIMEOUT_S = 90.0
# How often the HPA controller acts (kube-controller-manager's default: 15 s). A Deployment Seldon creates starts at
# 1 replica and waits for the HPA's first sync to reach minReplicas, so each deploy waited up to a period for it.
HPA_SYNC_S = 2
# metrics-server's scrape period (its least; it was 15 s), above its kubelet request timeout: the HPA sees usage sooner
METRIC_RESOLUTION_S = 10


class ClusterError(RuntimeError):
    """The cluster cannot start (or stop); the message names what to do."""


def default_state_dir() -> Path:
    return local_cluster.state_dir()


@dataclass
class ClusterState:
    """What a running local cluster is: its folder, API port, processes and object store."""

    folder: Path
    api_port: int
    processes: list[Process]
    object_store: dict[str, str] = field(default_factory=dict)  # endpoint, access_key, secret_key
    # the real node (node.py): its name, bridge, subnet, cgroup root, containerd socket; or `unavailable`, the reason
    node: dict[str, str] = field(default_factory=dict)

    @property
    def kubeconfig(self) -> Path:
        return self.folder / local_cluster.KUBECONFIG_FILE

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.api_port}"

    def save(self) -> None:
        atomic.write_json(
            self.folder / local_cluster.STATE_FILE,
            {
                "api_port": self.api_port,
                "kubernetes": KUBERNETES_VERSION,
                "processes": [process.as_dict() for process in self.processes],
                "object_store": self.object_store,
                "node": self.node,
            },
        )

    @classmethod
    def load(cls, folder: Path) -> ClusterState | None:
        try:
            record = json.loads((folder / local_cluster.STATE_FILE).read_text())
        except (OSError, ValueError):
            return None
        return cls(
            folder,
            int(record["api_port"]),
            [Process(**process) for process in record["processes"]],
            record.get("object_store") or {},
            record.get("node") or {},
        )

    def storage_environment(self) -> dict[str, str]:
        """The object store's address and keys as the AWS variables `make secret` (and any S3 tool) reads: with a real
        node, the address its pods reach it at (which this machine reaches too)."""
        return {
            "AWS_ACCESS_KEY_ID": self.object_store["access_key"],
            "AWS_SECRET_ACCESS_KEY": self.object_store["secret_key"],
            "AWS_ENDPOINT_URL": self.object_store.get("pods_endpoint") or self.object_store["endpoint"],
        }

    def alive(self) -> list[Process]:
        return [process for process in self.processes if running(process)]


def running_cluster(folder: Path | None = None) -> ClusterState | None:
    """The local cluster recorded in `folder` when all its processes still run; else None."""
    state = ClusterState.load(folder or default_state_dir())
    if state is None or not state.processes or len(state.alive()) != len(state.processes):
        return None
    return state


# ------------------------------------------------------------------ health checks


def _get(url: str, *, context: ssl.SSLContext | None = None, timeout_s: float = 2.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, context=context, timeout=timeout_s) as answer:
            return answer.status, answer.read().decode(errors="replace")
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode(errors="replace")


def _answers_ok(url: str, context: ssl.SSLContext) -> Callable[[], bool]:
    """A readiness check for `_wait`: `url` answers 200."""
    return lambda: _get(url, context=context)[0] == 200


def _wait(process: Process, ready: Callable[[], bool], what: str, timeout_s: float = READY_TIMEOUT_S) -> None:
    """Poll `ready` until it holds; raise naming the process's log if it exits or the time runs out."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not running(process):
            raise ClusterError(f"{process.name} exited while starting: {last_lines(process)} (log: {process.log})")
        try:
            if ready():
                return
        except (OSError, ssl.SSLError, urllib.error.URLError):
            pass
        time.sleep(0.2)
    raise ClusterError(
        f"{process.name} did not become {what} within {timeout_s:.0f}s: {last_lines(process)} (log: {process.log})"
    )


def _unverified() -> ssl.SSLContext:
    """For components' self-signed health endpoints (controller-manager, scheduler): reachability, not identity."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def _admin_context(pki: ClusterPKI) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki.ca.cert))
    admin = pki.pair("admin")
    context.load_cert_chain(str(admin.cert), str(admin.key))
    return context


# ------------------------------------------------------------------ the kubeconfig


def write_kubeconfig(path: Path, server: str, pki: ClusterPKI) -> None:
    """An admin kubeconfig for the local cluster, with its context current."""
    admin = pki.pair("admin")
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "slipway-local",
        "clusters": [{"name": "slipway-local", "cluster": {"server": server, "certificate-authority": str(pki.ca.cert)}}],
        "users": [{"name": "slipway-admin", "user": {"client-certificate": str(admin.cert), "client-key": str(admin.key)}}],
        "contexts": [{"name": "slipway-local", "context": {"cluster": "slipway-local", "user": "slipway-admin"}}],
    }
    atomic.write_json(path, config)  # JSON is YAML: kubectl, client-go and the Python client read it
    path.chmod(0o600)


# ------------------------------------------------------------------ up / down


class _Starter:
    """Starts processes into a ClusterState, saving it after each so that `down` finds them all."""

    def __init__(self, state: ClusterState, bins: dict[str, Path], pki: ClusterPKI, on_step: Callable[[str], None], tied: bool):
        self.state, self.bins, self.pki, self.on_step, self.tied = state, bins, pki, on_step, tied
        self.logs = state.folder / "logs"

    def start(self, name: str, component: str, args: list[str], env: dict[str, str] | None = None) -> Process:
        self.on_step(f"starting {name}")
        return self.launch(name, self.bins[component] / "bin" / name, args, env)

    def launch(self, name: str, binary: Path, args: list[str], env: dict[str, str] | None = None) -> Process:
        """Start any binary (the node's containerd is the system's) and record it."""
        process = start(name, binary, args, log_dir=self.logs, env=env, tied=self.tied)
        self.state.processes.append(process)
        self.state.save()
        return process

    def kube_args(self, port: int) -> list[str]:
        """What kube-controller-manager, kube-scheduler and metrics-server share: who they are and where they serve."""
        kubeconfig = str(self.state.kubeconfig)
        return [
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
        ]


def up(
    folder: Path | None = None,
    *,
    api_port: int = DEFAULT_API_PORT,
    tied: bool = False,
    real_node: bool = False,
    with_keda: bool = False,
    with_kserve: bool = False,
    on_step: Callable[[str], None] = lambda step: None,
) -> ClusterState:
    """Build what is missing, then start the whole control plane; return its state. `tied`: every process
    stops when this one dies (tests); otherwise the cluster outlives the command until `down`. `real_node`: also one
    node that runs containers (node.py); where the kernel cannot, `state.node["unavailable"]` says why, in one line,
    and the rest comes up. `with_keda`: also KEDA's operator, metrics API server and webhooks (keda.py).
    `with_kserve`: also KServe's controller and its webhooks (kserve.py)."""
    folder = folder or default_state_dir()
    previous = ClusterState.load(folder)
    if previous is not None and previous.alive():
        names = ", ".join(f"{process.name} (pid {process.pid})" for process in previous.alive())
        raise ClusterError(
            f"a local cluster from {folder} is still running ({names}): use it with "
            f"KUBECONFIG={previous.kubeconfig}, or stop it first with `make cluster-down`"
        )
    if port_in_use(api_port):
        raise ClusterError(
            f"port {api_port} on 127.0.0.1 is in use: stop what listens there or choose another "
            f"port (make cluster CLUSTER_PORT=...)"
        )
    if real_node:
        try:
            node.check_no_other_node()  # before anything starts: a second real node would share its iptables chains
        except node.NodeError as err:
            raise ClusterError(str(err)) from err
    bins = build_all(
        CLUSTER_COMPONENTS
        + (NODE_COMPONENTS if real_node else ())
        + ((KEDA,) if with_keda else ())
        + ((KSERVE,) if with_kserve else ())
    )
    if previous is not None and previous.node and "unavailable" not in previous.node:
        node.clean_up(previous.node, folder)  # a killed run's node: its containers, mounts, bridge and cgroups
    if folder.exists():
        shutil.rmtree(folder)  # a stopped cluster's leftovers: nothing of it runs (checked above)
    folder.mkdir(parents=True, mode=0o700)  # keys and the store's credentials
    state = ClusterState(folder, api_port, [])
    try:
        _start_all(state, bins, on_step, tied)
        if with_keda:
            _start_keda(state, bins, on_step, tied)
        if with_kserve:
            _start_kserve(state, bins, on_step, tied)
        if real_node:
            _start_node(state, bins, on_step, tied)
    except BaseException as err:
        stopped = _stop_all(state)
        state.processes.clear()
        state.save()
        if isinstance(err, (ClusterError, OSError, node.NodeError)) or (
            isinstance(err, Exception) and type(err).__module__.startswith("kubernetes")
        ):
            raise ClusterError(
                f"{first_line(err)}; stopped what had started ({', '.join(stopped) or 'nothing'}), logs in {folder / 'logs'}"
            ) from err
        raise
    return state


def _start_all(state: ClusterState, bins: dict[str, Path], on_step: Callable[[str], None], tied: bool) -> None:
    on_step("making certificates")
    pki = ClusterPKI.create(state.folder / "pki")
    starter = _Starter(state, bins, pki, on_step, tied)

    etcd_port, etcd_peer = free_port(), free_port()
    etcd = starter.start(
        "etcd",
        "etcd",
        [
            "--name=slipway",
            f"--data-dir={state.folder / 'etcd'}",
            f"--listen-client-urls=http://127.0.0.1:{etcd_port}",
            f"--advertise-client-urls=http://127.0.0.1:{etcd_port}",
            f"--listen-peer-urls=http://127.0.0.1:{etcd_peer}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer}",
            f"--initial-cluster=slipway=http://127.0.0.1:{etcd_peer}",
            "--log-level=warn",
            "--unsafe-no-fsync",  # a throwaway cluster: losing it on a power cut is fine, waiting on the disk is not
        ],
    )
    _wait(etcd, lambda: '"health":"true"' in _get(f"http://127.0.0.1:{etcd_port}/health")[1], "healthy")

    apiserver_pair, front_proxy = pki.pair("apiserver"), pki.pair("front-proxy-client")
    apiserver = starter.start(
        "kube-apiserver",
        "kubernetes",
        [
            f"--etcd-servers=http://127.0.0.1:{etcd_port}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={state.api_port}",
            f"--tls-cert-file={apiserver_pair.cert}",
            f"--tls-private-key-file={apiserver_pair.key}",
            f"--client-ca-file={pki.ca.cert}",
            "--authorization-mode=Node,RBAC",
            f"--service-account-key-file={pki.service_account_public_key}",
            f"--service-account-signing-key-file={pki.service_account_key}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            # the aggregation layer, for metrics-server's metrics.k8s.io
            f"--requestheader-client-ca-file={pki.front_proxy_ca.cert}",
            "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--proxy-client-cert-file={front_proxy.cert}",
            f"--proxy-client-key-file={front_proxy.key}",
            # to a real node's kubelet (logs, exec, port-forward): a client certificate it accepts, at its InternalIP
            # (the node's Hostname resolves nowhere)
            f"--kubelet-client-certificate={pki.pair('apiserver-kubelet-client').cert}",
            f"--kubelet-client-key={pki.pair('apiserver-kubelet-client').key}",
            "--kubelet-preferred-address-types=InternalIP,Hostname",
            "--profiling=false",
            "--enable-priority-and-fairness=false",
        ],
    )
    admin = _admin_context(pki)
    _wait(apiserver, _answers_ok(f"{state.server}/readyz", admin), "ready")
    write_kubeconfig(state.kubeconfig, state.server, pki)

    controller_manager_port, scheduler_port = free_port(), free_port()
    controller_manager = starter.start(
        "kube-controller-manager",
        "kubernetes",
        [
            *starter.kube_args(controller_manager_port),
            "--leader-elect=false",
            f"--service-account-private-key-file={pki.service_account_key}",
            f"--root-ca-file={pki.ca.cert}",
            "--use-service-account-credentials=false",
            f"--horizontal-pod-autoscaler-sync-period={HPA_SYNC_S}s",
        ],
    )
    scheduler = starter.start("kube-scheduler", "kubernetes", [*starter.kube_args(scheduler_port), "--leader-elect=false"])
    for process, port in ((controller_manager, controller_manager_port), (scheduler, scheduler_port)):
        _wait(process, _answers_ok(f"https://127.0.0.1:{port}/healthz", _unverified()), "healthy")

    on_step("installing CRDs, nodes and the Seldon operator's configuration")
    api = objects.client(state.kubeconfig)
    objects.install_crds(api, bins)

    kwok_port = free_port()
    kwok_pair = pki.pair("kwok")
    kwok_config = objects.write_kwok_config(state.folder / "kwok.yaml", bins)
    kwok = starter.start(
        "kwok",
        "kwok",
        [
            f"--kubeconfig={state.kubeconfig}",
            f"--config={kwok_config}",
            # kwok's own nodes only: a real node's status and pods are its kubelet's
            f"--manage-nodes-with-annotation-selector={objects.KWOK_NODE_ANNOTATION}",
            "--node-ip=127.0.0.1",
            f"--node-port={kwok_port}",
            f"--server-address=127.0.0.1:{kwok_port}",
            f"--tls-cert-file={kwok_pair.cert}",
            f"--tls-private-key-file={kwok_pair.key}",
            f"--enable-crds={','.join(objects.KWOK_CRDS)}",
            "--node-lease-duration-seconds=40",  # kwok renews each node's Lease: the heartbeat the node controller reads
        ],
    )
    _wait(kwok, _answers_ok(f"https://127.0.0.1:{kwok_port}/healthz", _unverified()), "healthy")
    objects.create_nodes(api, bins)
    _wait(kwok, lambda: objects.nodes_ready(api), "Ready on every node")

    metrics_port = free_port()
    metrics_pair = pki.pair("metrics-server")
    metrics_server = starter.start(
        "metrics-server",
        "metrics-server",
        [
            *starter.kube_args(metrics_port),
            f"--tls-cert-file={metrics_pair.cert}",
            f"--tls-private-key-file={metrics_pair.key}",
            f"--kubelet-certificate-authority={pki.ca.cert}",
            "--kubelet-use-node-status-port",
            "--kubelet-preferred-address-types=InternalIP",
            f"--metric-resolution={METRIC_RESOLUTION_S}s",
            f"--kubelet-request-timeout={METRIC_RESOLUTION_S // 2}s",
        ],
    )
    objects.register_metrics_api(api, metrics_port, pki.ca.cert)
    _wait(metrics_server, lambda: objects.api_service_available(api, objects.METRICS_API_SERVICE), "Available")

    webhook_port = free_port()
    operator_tmp = objects.write_webhook_certs(state.folder / "seldon-operator", pki)
    objects.install_seldon_config(api, webhook_port, pki.ca.cert)
    operator = starter.start(
        "seldon-operator",
        "seldon-operator",
        [
            f"--webhook-port={webhook_port}",
            f"--metrics-addr=127.0.0.1:{free_port()}",
            f"--operator-namespace={objects.SELDON_NAMESPACE}",
        ],
        env={**objects.seldon_operator_env(), "KUBECONFIG": str(state.kubeconfig), "TMPDIR": str(operator_tmp)},
    )
    _wait(operator, lambda: objects.webhook_answers(webhook_port, pki.ca.cert), "serving its webhooks")
    objects.register_operator(api)

    _start_object_store(state, starter)
    on_step(f"making namespace {DEFAULT_NAMESPACE}, bucket {STORAGE_BUCKET} and the storage Secret")
    objects.create_bucket(state.storage_environment(), STORAGE_BUCKET)
    objects.create_namespace(api, DEFAULT_NAMESPACE, state.storage_environment())


def _start_keda(state: ClusterState, bins: dict[str, Path], on_step: Callable[[str], None], tied: bool) -> None:
    """KEDA's objects, then its three processes, with the `keda` certificate in a folder of the state."""
    pki = ClusterPKI(state.folder / "pki")
    starter = _Starter(state, bins, pki, on_step, tied)
    api = objects.client(state.kubeconfig)
    adapter_port, webhook_port = free_port(), free_port()
    on_step("installing KEDA's CRDs, external metrics API and webhooks")
    keda.install(api, bins["keda"] / "share", adapter_port=adapter_port, webhook_port=webhook_port, ca=pki.ca.cert)
    keda.start(
        lambda name, args, env: starter.start(name, "keda", args, env),
        lambda process, ready, what: _wait(process, ready, what),
        api=api,
        kubeconfig=state.kubeconfig,
        certs=keda.write_certs(state.folder / "keda-certs", pki),
        ca=pki.ca.cert,
        adapter_port=adapter_port,
        webhook_port=webhook_port,
        free_port=free_port,
        status=lambda url: _get(url)[0],
    )


def _start_kserve(state: ClusterState, bins: dict[str, Path], on_step: Callable[[str], None], tied: bool) -> None:
    """KServe's CRDs, ConfigMap and webhooks, then its manager, with the `kserve-webhook` certificate in its TMPDIR."""
    pki = ClusterPKI(state.folder / "pki")
    starter = _Starter(state, bins, pki, on_step, tied)
    webhook_port = free_port()
    on_step("installing KServe's CRDs, inferenceservice-config and webhooks")
    kserve.install(objects.client(state.kubeconfig), bins["kserve"] / "share", webhook_port=webhook_port, ca=pki.ca.cert)
    kserve.start(
        lambda args, env: starter.start("kserve-manager", "kserve", args, env),
        lambda process, ready, what: _wait(process, ready, what),
        kubeconfig=state.kubeconfig,
        tmp=kserve.write_certs(state.folder / "kserve-manager", pki),
        ca=pki.ca.cert,
        webhook_port=webhook_port,
        free_port=free_port,
        status=lambda url: _get(url)[0],
    )


def _start_object_store(state: ClusterState, starter: _Starter) -> None:
    """versitygw serving S3 over a folder of the state, with fresh keys (in its environment, not its arguments)."""
    port = free_port()
    state.object_store = {
        "endpoint": f"http://127.0.0.1:{port}",
        "access_key": f"slipway{secrets.token_hex(6)}",
        "secret_key": secrets.token_urlsafe(30),
    }
    (state.folder / "objects").mkdir(mode=0o700)
    store = starter.start(
        "versitygw",
        "object-store",
        [
            f"--port=127.0.0.1:{port}",
            "--quiet",
            "posix",
            str(state.folder / "objects"),
        ],
        env={"ROOT_ACCESS_KEY_ID": state.object_store["access_key"], "ROOT_SECRET_ACCESS_KEY": state.object_store["secret_key"]},
    )
    # an anonymous GET of the service is refused (403): the S3 API answers
    _wait(store, lambda: _get(state.object_store["endpoint"])[0] == 403, "answering S3 requests")


def _start_node(state: ClusterState, bins: dict[str, Path], on_step: Callable[[str], None], tied: bool) -> None:
    """The real node, after everything else is up; a kernel that cannot run it leaves the reason in the state."""
    from localcluster.build import _module_dir, go_binary

    kubernetes = next(component for component in NODE_COMPONENTS if component.name == "kubelet")

    def kubernetes_source() -> Path:
        with open(component_dir(kubernetes).parent / "pause.build.log", "w") as log:
            return _module_dir(kubernetes, "k8s.io/kubernetes", go_binary(), log)

    starter = _Starter(state, bins, ClusterPKI(state.folder / "pki"), on_step, tied)
    try:
        node.start(
            folder=state.folder,
            server=state.server,
            pki=starter.pki,
            kubelet=bins["kubelet"] / "bin" / "kubelet",
            kube_proxy=bins["kube-proxy"] / "bin" / "kube-proxy",
            pause_archive=lambda: node.pause_image(cache_root(), kubernetes_source),
            launch=lambda name, binary, args: starter.launch(name, binary, args),
            record=state.node,
            save=state.save,
            free_port=free_port,
            api=objects.client(state.kubeconfig),
            on_step=on_step,
        )
    except node.NodeUnavailable as err:
        _stop_node(state)
        state.node = {"unavailable": str(err)}
        state.save()
        return
    _serve_store_to_pods(state, starter)
    _load_storage_initializer(state, bins, on_step)


def _load_storage_initializer(state: ClusterState, bins: dict[str, Path], on_step: Callable[[str], None]) -> None:
    """Seldon's storage initializer as the node can run it (storage_initializer.py): imported into the node's
    containerd and named in the operator's seldon-config, so that a graph without its own storageInitializerImage
    pulls its modelUri with it; with KServe's controller, its variant too, named in inferenceservice-config (KServe's
    own image cannot be pulled here)."""
    from localcluster import storage_initializer

    api = objects.client(state.kubeconfig)
    images: list[tuple[str, tuple[str, ...], Callable[[Any, str], None]]] = [
        (storage_initializer.NODE_IMAGE, (), storage_initializer.configure_operator)
    ]
    if any(process.name == "kserve-manager" for process in state.processes):
        images.append(
            (storage_initializer.KSERVE_NODE_IMAGE, storage_initializer.KSERVE_ENV, storage_initializer.configure_kserve)
        )
    for image, env, configure in images:
        on_step(f"importing the storage initializer {image} into the real node")
        archive = state.folder / "node" / "storage-initializer.tar"
        try:
            storage_initializer.archive(bins["rclone"] / "bin" / "rclone", archive, image, env=env)
            node.import_archive(state.node, archive)
        except storage_initializer.InitializerError as err:
            raise ClusterError(str(err)) from err
        finally:
            archive.unlink(missing_ok=True)
        configure(api, image)


def _serve_store_to_pods(state: ClusterState, starter: _Starter) -> None:
    """The object store where the node's pods reach it: a second versitygw over the same folder with the same keys, on
    the node's bridge address (a pod's 127.0.0.1 is its own). The storage Secret of namespace `slipway` names that
    address from now on, and so does `storage_environment` (this machine reaches the bridge's address too)."""
    port = free_port()
    endpoint = f"http://{state.node['address']}:{port}"
    store = starter.launch(
        "versitygw-pods",
        starter.bins["object-store"] / "bin" / "versitygw",
        [f"--port={state.node['address']}:{port}", "--quiet", "posix", str(state.folder / "objects")],
        env={"ROOT_ACCESS_KEY_ID": state.object_store["access_key"], "ROOT_SECRET_ACCESS_KEY": state.object_store["secret_key"]},
    )
    _wait(store, lambda: _get(endpoint)[0] == 403, "answering S3 requests on the node's address")
    state.object_store["pods_endpoint"] = endpoint
    state.save()
    objects.create_namespace(objects.client(state.kubeconfig), DEFAULT_NAMESPACE, state.storage_environment())


def _stop_node(state: ClusterState) -> list[str]:
    """Stop the real node's processes (its pods first) and undo what it made outside the folder."""
    if not state.node or "unavailable" in state.node:
        return []
    api = None
    if any(process.name == "kube-apiserver" for process in state.alive()):
        with contextlib.suppress(Exception):
            api = objects.client(state.kubeconfig)
    stopped = node.drain(state.node, api, state.processes)
    stopped += stop([process for process in state.processes if process.name in {"kube-proxy", "kubelet", "containerd"}])
    node.clean_up(state.node, state.folder)
    return stopped


def _stop_all(state: ClusterState) -> list[str]:
    stopped = _stop_node(state)
    return stopped + stop([process for process in state.processes if process.name not in stopped])


def down(folder: Path | None = None) -> list[str]:
    """Stop every process the cluster in `folder` recorded and remove the folder; the names stopped."""
    folder = folder or default_state_dir()
    state = ClusterState.load(folder)
    if state is None:
        return []
    stopped = _stop_all(state)
    shutil.rmtree(folder)
    return stopped
