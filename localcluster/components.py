"""What the local control plane is made of: each component's version, Go module and binaries.

Kubernetes 1.35: the oldest minor that upstream still supports (1.34 leaves support in
October 2026), and Seldon Core 1.17.1's operator only uses APIs that are GA there
(autoscaling/v2, policy/v1, admissionregistration/v1, apiextensions/v1). The operator's
source is vendored under third_party/ (the Go module proxy refuses its module path); every
other component comes from its module on the proxy, pinned by the go.sum beside its go.mod.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from deployments.kserve import api as kserve_api
from slipway.paths import PROJECT_ROOT

GO_DIR = Path(__file__).resolve().parent / "go"
SELDON_OPERATOR_DIR = PROJECT_ROOT / "localcluster" / "third_party" / "seldon-core-operator"

KUBERNETES_VERSION = "v1.35.4"
SELDON_OPERATOR_VERSION = "1.17.1"


@dataclass(frozen=True)
class GoBinary:
    """One `go build` of a main package into a named binary."""

    name: str
    package: str
    ldflags: tuple[str, ...] = ()


@dataclass(frozen=True)
class Component:
    """A Go module and the binaries built from it; `version` keys its folder in the cache."""

    name: str
    version: str
    module_dir: Path
    binaries: tuple[GoBinary, ...]
    # files the control plane reads at start, copied from a module into the cache: (module, path in it) -> name
    files: dict[tuple[str, str], str] = field(default_factory=dict)
    test_tool: bool = False  # run by the tests, not part of the running cluster: `make cluster` does not build it
    node: bool = False  # a real node's part: built by `make cluster-build` and `make cluster NODE=real`, not by kwok's
    optional: bool = False  # opt-in (`make cluster KEDA=1`): not built nor started unless asked for


def _kubernetes_ldflags() -> tuple[str, ...]:
    """What Kubernetes' own build stamps into its binaries: /version and `--version` report it."""
    major, minor = KUBERNETES_VERSION.removeprefix("v").split(".")[:2]
    return tuple(
        f"-X k8s.io/component-base/version.{key}={value}"
        for key, value in (
            ("gitVersion", KUBERNETES_VERSION),
            ("gitMajor", major),
            ("gitMinor", minor),
            ("gitTreeState", "clean"),
        )
    )


KWOK_MODULE = "sigs.k8s.io/kwok"
PROMETHEUS_VERSION = "v3.16.0"  # module github.com/prometheus/prometheus v0.316.0

COMPONENTS: tuple[Component, ...] = (
    Component("etcd", "v3.6.8", GO_DIR / "etcd", (GoBinary("etcd", "go.etcd.io/etcd/server/v3"),)),
    Component(
        "kubernetes",
        KUBERNETES_VERSION,
        GO_DIR / "kubernetes",
        tuple(
            GoBinary(name, f"k8s.io/kubernetes/cmd/{name}", _kubernetes_ldflags())
            for name in ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
        ),
    ),
    # The real node's kubelet (localcluster/node.py), from the same k8s.io/kubernetes module and go.sum as the
    # control plane's binaries, in a cache folder of its own: a kwok-only `make cluster` neither builds it nor
    # rebuilds the control plane's folder when it is added.
    Component(
        "kubelet",
        KUBERNETES_VERSION,
        GO_DIR / "kubernetes",
        (GoBinary("kubelet", "k8s.io/kubernetes/cmd/kubelet", _kubernetes_ldflags()),),
        node=True,
    ),
    # The real node's Service data path: kube-proxy from the same k8s.io/kubernetes v1.35.4, in a module folder of its
    # own (go/kube-proxy: the control plane's go.mod less what kube-proxy does not import, plus knftables, netlink and
    # ipvs, every shared module at the same version), so that adding it changes neither the control plane's nor the
    # kubelet's cache key, and Go's build cache serves the packages they share.
    Component(
        "kube-proxy",
        KUBERNETES_VERSION,
        GO_DIR / "kube-proxy",
        (GoBinary("kube-proxy", "k8s.io/kubernetes/cmd/kube-proxy", _kubernetes_ldflags()),),
        node=True,
    ),
    Component(
        "kwok",
        "v0.7.0",
        GO_DIR / "kwok",
        (GoBinary("kwok", "sigs.k8s.io/kwok/cmd/kwok"),),
        files={
            (KWOK_MODULE, "kustomize/stage/node/fast/node-initialize.yaml"): "kwok-node-initialize.yaml",
            (KWOK_MODULE, "kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml"): "kwok-node-heartbeat.yaml",
            (KWOK_MODULE, "kustomize/stage/pod/fast/pod-ready.yaml"): "kwok-pod-ready.yaml",
            (KWOK_MODULE, "kustomize/stage/pod/fast/pod-complete.yaml"): "kwok-pod-complete.yaml",
            (KWOK_MODULE, "kustomize/stage/pod/fast/pod-delete.yaml"): "kwok-pod-delete.yaml",
            (KWOK_MODULE, "kustomize/metrics/resource/metrics-resource.yaml"): "kwok-metrics-resource.yaml",
            (KWOK_MODULE, "kustomize/crd/bases/kwok.x-k8s.io_clusterresourceusages.yaml"): "crd-kwok-clusterresourceusages.yaml",
            (KWOK_MODULE, "kustomize/crd/bases/kwok.x-k8s.io_metrics.yaml"): "crd-kwok-metrics.yaml",
            (KWOK_MODULE, "kustomize/crd/bases/kwok.x-k8s.io_resourceusages.yaml"): "crd-kwok-resourceusages.yaml",
            (KWOK_MODULE, "kustomize/metrics/usage/usage-from-annotation.yaml"): "kwok-usage-from-annotation.yaml",
        },
    ),
    Component(
        "metrics-server",
        "v0.8.0",
        GO_DIR / "metrics-server",
        (GoBinary("metrics-server", "sigs.k8s.io/metrics-server/cmd/metrics-server"),),
    ),
    Component(
        "seldon-operator",
        SELDON_OPERATOR_VERSION,
        SELDON_OPERATOR_DIR,
        (GoBinary("seldon-operator", "github.com/seldonio/seldon-core/operator"),),
    ),
    # The object store `deploy` uploads to and the pods pull from: an S3 API over a folder.
    Component(
        "object-store",
        "versitygw-v1.8.0",
        GO_DIR / "object-store",
        (GoBinary("versitygw", "github.com/versity/versitygw/cmd/versitygw"),),
    ),
    # rclone as Seldon's storage initializer runs it: the tests pull what deploy uploaded with the Secret's settings, and
    # a real node runs it as the operator's storage initializer image (storage_initializer.py).
    Component(
        "rclone",
        "v1.76.0",
        GO_DIR / "rclone",
        (GoBinary("rclone", "slipway.local/cluster/rclone"),),
        test_tool=True,
        node=True,
    ),
    # An OCI registry (CNCF Distribution) and crane, which pushes images to it without Docker: the tests of
    # `deploy --check-image` resolve real pushed references (deployments/rollout/image_check.py).
    Component(
        "registry",
        "v3.1.2",
        GO_DIR / "registry",
        (GoBinary("registry", "github.com/distribution/distribution/v3/cmd/registry"),),
        test_tool=True,
    ),
    Component(
        "crane",
        "v0.22.1",
        GO_DIR / "crane",
        (GoBinary("crane", "github.com/google/go-containerregistry/cmd/crane"),),
        test_tool=True,
    ),
    # Prometheus 3.16.0 (its Go module numbers 3.x releases v0.3xx.y) and promtool: the canary judge's tests backfill
    # recorded series into a TSDB and query them over the real HTTP API. Built without the `builtinassets` tag: the
    # API is whole, the web UI is not embedded.
    Component(
        "prometheus",
        PROMETHEUS_VERSION,
        GO_DIR / "prometheus",
        tuple(
            GoBinary(
                name,
                f"github.com/prometheus/prometheus/cmd/{name}",
                (f"-X github.com/prometheus/common/version.Version={PROMETHEUS_VERSION.removeprefix('v')}",),
            )
            for name in ("prometheus", "promtool")
        ),
        test_tool=True,
    ),
    # CRDs only, nothing built: the kinds Slipway's overlays render beyond Seldon's, and the PrometheusRule
    # `alerts` writes (the version's `-rules` names the CRD set, so that caches of the set without it rebuild).
    Component(
        "crds",
        "prometheus-operator-v0.85.0-rules_keda-v2.21.0",
        GO_DIR / "crds",
        (),
        files={
            (
                "github.com/prometheus-operator/prometheus-operator",
                "example/prometheus-operator-crd/monitoring.coreos.com_podmonitors.yaml",
            ): "crd-podmonitors.yaml",
            (
                "github.com/prometheus-operator/prometheus-operator",
                "example/prometheus-operator-crd/monitoring.coreos.com_prometheusrules.yaml",
            ): "crd-prometheusrules.yaml",
            ("github.com/kedacore/keda/v2", "config/crd/bases/keda.sh_scaledobjects.yaml"): "crd-scaledobjects.yaml",
        },
    ),
)

# KEDA's operator, its metrics API server (the external metrics the HPAs it writes read) and its admission webhooks,
# built from the module at the release whose CRDs the `crds` component applies. Opt-in: a cold build compiles every
# scaler's client library (docs/local-cluster.md gives the time), so `make cluster KEDA=1` asks for it.
KEDA_VERSION = "v2.21.0"
KEDA = Component(
    "keda",
    KEDA_VERSION,
    GO_DIR / "keda",
    tuple(
        GoBinary(
            name,
            f"github.com/kedacore/keda/v2/cmd/{package}",
            (f"-X github.com/kedacore/keda/v2/version.Version={KEDA_VERSION.removeprefix('v')}",),
        )
        for name, package in (
            ("keda-operator", "operator"),
            ("keda-adapter", "adapter"),
            ("keda-admission-webhooks", "webhooks"),
        )
    ),
    files={
        # every kind the operator's controllers watch: it does not start while one is unknown to the API server
        ("github.com/kedacore/keda/v2", f"config/crd/bases/{group}_{kind}.yaml"): f"crd-keda-{kind}.yaml"
        for group, kind in (
            ("keda.sh", "scaledobjects"),
            ("keda.sh", "scaledjobs"),
            ("keda.sh", "triggerauthentications"),
            ("keda.sh", "clustertriggerauthentications"),
            ("eventing.keda.sh", "cloudeventsources"),
            ("eventing.keda.sh", "clustercloudeventsources"),
        )
    }
    | {
        ("github.com/kedacore/keda/v2", "config/webhooks/validation_webhooks.yaml"): "keda-webhooks.yaml",
        ("github.com/kedacore/keda/v2", "config/metrics-server/api_service.yaml"): "keda-api-service.yaml",
    },
    optional=True,
)
COMPONENTS += (KEDA,)

# KServe's own CRDs (files only, nothing built), at the release Slipway renders for: `render --engine kserve`
# validates its ServingRuntime and InferenceService against their openAPIV3Schema (deployments/kserve).
KSERVE_CRDS = Component(
    kserve_api.CRDS_COMPONENT,
    kserve_api.KSERVE_VERSION,
    GO_DIR / "kserve-crds",
    (),
    files={
        ("github.com/kserve/kserve", f"config/crd/full/serving.kserve.io_{kind}.yaml"): f"crd-{kind}.yaml"
        for kind in ("servingruntimes", "inferenceservices")
    },
)
COMPONENTS += (KSERVE_CRDS,)

# KServe's controller (cmd/manager: the InferenceService, TrainedModel and InferenceGraph controllers and the admission
# webhooks), from the module at the release whose CRDs KSERVE_CRDS holds, with every CRD it reads, its webhooks and its
# `inferenceservice-config` (localcluster/kserve.py). Opt-in (`make cluster KSERVE=1`): its cold build compiles
# Knative's, Istio's and the cloud SDKs' clients (docs/local-cluster.md gives the time).
KSERVE_MODULE = "github.com/kserve/kserve"
KSERVE_CRD_KINDS = (
    "inferenceservices",
    "servingruntimes",
    "clusterservingruntimes",
    "clusterstoragecontainers",
    "inferencegraphs",
    "trainedmodels",
    "localmodelcaches",
    "localmodelnodegroups",
    "localmodelnodes",
)
KSERVE = Component(
    "kserve",
    kserve_api.KSERVE_VERSION,
    GO_DIR / "kserve",
    (GoBinary("kserve-manager", f"{KSERVE_MODULE}/cmd/manager"),),
    files={
        (KSERVE_MODULE, f"config/crd/full/serving.kserve.io_{kind}.yaml"): f"crd-kserve-{kind}.yaml" for kind in KSERVE_CRD_KINDS
    }
    | {
        (KSERVE_MODULE, "config/webhook/manifests.yaml"): "kserve-webhooks.yaml",
        (KSERVE_MODULE, "config/configmap/inferenceservice.yaml"): "kserve-inferenceservice-config.yaml",
    },
    optional=True,
)
COMPONENTS += (KSERVE,)

CLUSTER_COMPONENTS = tuple(
    component for component in COMPONENTS if not component.test_tool and not component.node and not component.optional
)
NODE_COMPONENTS = tuple(component for component in COMPONENTS if component.node)

SELDON_FILES = {
    # the operator's own CRD install (`kustomize build config/crd`): the bases plus the patch that spells out
    # the graph's nested `children`, which API servers since 1.15 need for a structural schema
    "crd": SELDON_OPERATOR_DIR / "config/crd",
    "configmap": SELDON_OPERATOR_DIR / "config/manager/configmap.yaml",
    "webhooks": SELDON_OPERATOR_DIR / "config/webhook/manifests.yaml",
    "manager": SELDON_OPERATOR_DIR / "config/manager/manager.yaml",
}
