"""KEDA in the local control plane: its operator, its metrics API server and its admission webhooks as processes.

What KEDA's own install (config/ in its module) makes in a cluster, pointed at loopback: the namespace `keda`, its
CRDs, the `v1beta1.external.metrics.k8s.io` APIService behind an ExternalName Service (the HPAs the operator writes
read their external metrics there), and the `keda-admission` ValidatingWebhookConfiguration called at a loopback
URL. One certificate (pki.py's `keda` pair) serves all three, as KEDA's cert rotation would make it; the operator
runs with that rotation off, so it patches nothing.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from pathlib import Path

from localcluster.objects import api_service_available, apply, documents, wait_established, webhook_answers
from localcluster.pki import ClusterPKI
from localcluster.processes import Process
from slipway import atomic

NAMESPACE = "keda"
API_SERVICE = "v1beta1.external.metrics.k8s.io"
METRICS_SERVICE = "keda-metrics-apiserver"
WEBHOOKS = "keda-admission"
CRD_FILES = tuple(
    f"crd-keda-{kind}.yaml"
    for kind in (
        "scaledobjects",
        "scaledjobs",
        "triggerauthentications",
        "clustertriggerauthentications",
        "cloudeventsources",
        "clustercloudeventsources",
    )
)
# What KEDA's manifests set in each container's environment: every namespace watched, its own namespace `keda`.
ENV = {"WATCH_NAMESPACE": "", "POD_NAMESPACE": NAMESPACE, "KEDA_CLUSTER_OBJECT_NAMESPACE": NAMESPACE}


def write_certs(folder: Path, pki: ClusterPKI) -> Path:
    """The folder KEDA's binaries read their certificate from (`--cert-dir`): ca.crt, tls.crt, tls.key."""
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    pair = pki.pair("keda")
    atomic.write_bytes(folder / "ca.crt", pki.ca.cert.read_bytes())
    atomic.write_bytes(folder / "tls.crt", pair.cert.read_bytes())
    atomic.write_bytes(folder / "tls.key", pair.key.read_bytes())
    (folder / "tls.key").chmod(0o600)
    return folder


def install(api, share: Path, *, adapter_port: int, webhook_port: int, ca: Path) -> None:
    """The namespace, the CRDs (waited on until served), the external metrics APIService and the webhooks."""
    apply(api, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    crds = [doc for name in CRD_FILES for doc in documents(share / name)]
    for doc in crds:
        apply(api, doc)
    wait_established(api, [doc["metadata"]["name"] for doc in crds])
    ca_bundle = base64.b64encode(ca.read_bytes()).decode()
    apply(
        api,
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": METRICS_SERVICE, "namespace": NAMESPACE},
            "spec": {"type": "ExternalName", "externalName": "localhost", "ports": [{"port": adapter_port}]},
        },
    )
    api_service = documents(share / "keda-api-service.yaml")[0]
    api_service["spec"]["service"]["port"] = adapter_port
    api_service["spec"]["caBundle"] = ca_bundle
    apply(api, api_service)
    for doc in documents(share / "keda-webhooks.yaml"):
        for webhook in doc["webhooks"]:
            path = webhook["clientConfig"]["service"]["path"]
            webhook["clientConfig"] = {"url": f"https://127.0.0.1:{webhook_port}{path}", "caBundle": ca_bundle}
        apply(api, doc)


def start(
    launch: Callable[[str, list[str], dict[str, str]], Process],
    wait: Callable[[Process, Callable[[], bool], str], None],
    *,
    api,
    kubeconfig: Path,
    certs: Path,
    ca: Path,
    adapter_port: int,
    webhook_port: int,
    free_port: Callable[[], int],
    status: Callable[[str], int],
) -> None:
    """The operator (its gRPC metrics service first), then the adapter that reads it, then the webhooks, each waited
    on; at the ports `install` registered. `launch(name, args, env)` starts one of KEDA's binaries; `status(url)` is
    the HTTP status of a GET."""
    env = {**ENV, "KUBECONFIG": str(kubeconfig)}
    grpc_port, probe_port = free_port(), free_port()
    operator = launch(
        "keda-operator",
        [
            f"--metrics-bind-address=127.0.0.1:{free_port()}",
            f"--health-probe-bind-address=127.0.0.1:{probe_port}",
            f"--metrics-service-bind-address=127.0.0.1:{grpc_port}",
            f"--cert-dir={certs}",
            f"--ca-dir={certs}",
            "--enable-cert-rotation=false",
            "--leader-elect=false",
            "--zap-encoder=console",
        ],
        env,
    )
    wait(operator, lambda: status(f"http://127.0.0.1:{probe_port}/readyz") == 200, "ready")

    adapter = launch(
        "keda-adapter",
        [
            f"--lister-kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={adapter_port}",
            f"--cert-dir={certs}",  # also the client certificate it presents to the operator's gRPC service
            f"--tls-cert-file={certs / 'tls.crt'}",
            f"--tls-private-key-file={certs / 'tls.key'}",
            f"--client-ca-file={ca}",
            f"--metrics-service-address=127.0.0.1:{grpc_port}",
            f"--port={free_port()}",  # its own /metrics, which KEDA binds on every interface (no flag for the host)
            "--zap-encoder=console",
        ],
        env,
    )
    wait(adapter, lambda: api_service_available(api, API_SERVICE), "Available")

    webhooks = launch(
        "keda-admission-webhooks",
        [
            f"--port={webhook_port}",  # on every interface too: KEDA sets no host for controller-runtime's server
            f"--cert-dir={certs}",
            f"--metrics-bind-address=127.0.0.1:{free_port()}",
            f"--health-probe-bind-address=127.0.0.1:{free_port()}",
            "--zap-encoder=console",
        ],
        env,
    )
    wait(webhooks, lambda: webhook_answers(webhook_port, ca), "serving its webhooks")
