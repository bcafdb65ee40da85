"""KServe's controller in the local control plane: its manager as a process, with its CRDs, webhooks and settings.

What KServe's own install (config/ in its module) makes in a cluster, pointed at loopback: the namespace `kserve`,
every CRD the manager reads, its `inferenceservice-config` ConfigMap and its admission webhooks (the InferenceService
defaulter and validator, the pod mutator that adds the storage initializer, the runtime validators) called at a
loopback URL with the cluster CA's bundle. The manager serves them with pki.py's `kserve-webhook` pair from the folder
controller-runtime reads (`$TMPDIR/k8s-webhook-server/serving-certs`), as the Seldon operator does.

The ConfigMap is KServe's as shipped with four changes for a cluster without Knative, Istio or an ingress controller:
RawDeployment by default, no Istio VirtualService, no Ingress (the predictor's Service is the address), and the
images its `:latest` placeholders name pinned to the release, as KServe's release manifests pin them. The storage
initializer is KServe's own image; on a real node, which cannot pull it, control_plane names the rclone variant it
imports there instead (storage_initializer.py: KServe passes AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and
AWS_ENDPOINT_URL, pkg/credentials/s3, where Seldon passes RCLONE_CONFIG_S3_*).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path

from localcluster.components import KSERVE, KSERVE_CRD_KINDS
from localcluster.objects import apply, documents, wait_established, webhook_answers
from localcluster.pki import ClusterPKI
from localcluster.processes import Process
from slipway import atomic

NAMESPACE = "kserve"  # constants.KServeNamespace: the manager reads POD_NAMESPACE, its ConfigMap lives there
CONFIGMAP = "inferenceservice-config"
CRD_FILES = tuple(f"crd-kserve-{kind}.yaml" for kind in KSERVE_CRD_KINDS)
STORAGE_INITIALIZER_IMAGE = f"kserve/storage-initializer:{KSERVE.version}"
# What the local cluster changes in the shipped ConfigMap: key -> settings merged into its JSON
SETTINGS: dict[str, dict[str, object]] = {
    "deploy": {"defaultDeploymentMode": "RawDeployment"},
    "ingress": {"disableIstioVirtualHost": True, "disableIngressCreation": True},
    "storageInitializer": {"image": STORAGE_INITIALIZER_IMAGE},
}


def write_certs(folder: Path, pki: ClusterPKI) -> Path:
    """The manager's TMPDIR, holding its webhook certificate where controller-runtime looks for it."""
    serving = pki.pair("kserve-webhook")
    certs = folder / "k8s-webhook-server" / "serving-certs"
    certs.mkdir(parents=True, exist_ok=True, mode=0o700)
    atomic.write_bytes(certs / "tls.crt", serving.cert.read_bytes())
    atomic.write_bytes(certs / "tls.key", serving.key.read_bytes())
    (certs / "tls.key").chmod(0o600)
    return folder


def configmap(share: Path) -> dict:
    """`inferenceservice-config` as the module ships it, with SETTINGS merged in and every `:latest` image pinned."""
    doc = documents(share / "kserve-inferenceservice-config.yaml")[0]
    data = {key: value for key, value in doc["data"].items() if key != "_example"}
    for key, changes in SETTINGS.items():
        data[key] = json.dumps({**json.loads(data[key]), **changes}, indent=2)
    data = {key: value.replace(':latest"', f':{KSERVE.version}"') for key, value in data.items()}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": CONFIGMAP, "namespace": NAMESPACE}, "data": data}


def install(api, share: Path, *, webhook_port: int, ca: Path) -> None:
    """The namespace, the CRDs (waited on until served), the ConfigMap and the webhooks at `webhook_port`."""
    apply(api, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    crds = [doc for name in CRD_FILES for doc in documents(share / name)]
    for doc in crds:
        apply(api, doc)
    wait_established(api, [doc["metadata"]["name"] for doc in crds])
    apply(api, configmap(share))
    ca_bundle = base64.b64encode(ca.read_bytes()).decode()
    for doc in documents(share / "kserve-webhooks.yaml"):
        doc["metadata"].pop("creationTimestamp", None)
        for webhook in doc["webhooks"]:
            path = webhook["clientConfig"]["service"]["path"]
            webhook["clientConfig"] = {"url": f"https://127.0.0.1:{webhook_port}{path}", "caBundle": ca_bundle}
        apply(api, doc)


def start(
    launch: Callable[[list[str], dict[str, str]], Process],
    wait: Callable[[Process, Callable[[], bool], str], None],
    *,
    kubeconfig: Path,
    tmp: Path,
    ca: Path,
    webhook_port: int,
    free_port: Callable[[], int],
    status: Callable[[str], int],
) -> Process:
    """The manager, waited on until it is ready (its readiness is its webhook server's) and its webhooks answer TLS
    with the certificate in `tmp`. `launch(args, env)` starts the binary; `status(url)` is the HTTP status of a GET."""
    probe_port = free_port()
    manager = launch(
        [
            f"--metrics-addr=127.0.0.1:{free_port()}",
            f"--health-probe-addr=127.0.0.1:{probe_port}",
            f"--webhook-port={webhook_port}",  # on every interface: the manager sets no host for its webhook server
            "--leader-elect=false",
            "--zap-encoder=console",
        ],
        {"POD_NAMESPACE": NAMESPACE, "KUBECONFIG": str(kubeconfig), "TMPDIR": str(tmp)},
    )
    wait(manager, lambda: status(f"http://127.0.0.1:{probe_port}/readyz") == 200, "ready")
    wait(manager, lambda: webhook_answers(webhook_port, ca), "serving its webhooks")
    return manager
