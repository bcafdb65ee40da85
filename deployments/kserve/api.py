"""What KServe 0.15 does with an InferenceService in RawDeployment mode, as far as Slipway's manifests depend on it.

Read from the v0.15.2 source (pkg/constants, the raw Deployment, Service and HPA reconcilers, pkg/credentials/s3),
not guessed; kept in one place so rendering and validation agree.
"""

from __future__ import annotations

# The release Slipway renders for; the local cluster caches its CRDs (component CRDS_COMPONENT) for validation.
KSERVE_VERSION = "v0.15.2"
CRDS_COMPONENT = "kserve-crds"

GROUP = "serving.kserve.io"
RUNTIME_API_VERSION = f"{GROUP}/v1alpha1"
RUNTIME_KIND = "ServingRuntime"
ISVC_API_VERSION = f"{GROUP}/v1beta1"
ISVC_KIND = "InferenceService"
# The container a ServingRuntime must name for KServe to merge an InferenceService's model into it.
CONTAINER_NAME = "kserve-container"
DEPLOYMENT_MODE_ANNOTATION = f"{GROUP}/deploymentMode"
RAW_DEPLOYMENT = "RawDeployment"
# "external": KServe creates no HPA and leaves the Deployment's replicas to the one Slipway renders
# (the reconciler ignores spec.replicas on update for every class but "none").
AUTOSCALER_CLASS_ANNOTATION = f"{GROUP}/autoscalerClass"
EXTERNAL_AUTOSCALER = "external"
# KEDA's kind, for the KEDA autoscaling modes: Slipway renders the ScaledObject itself, under the `external` class too.
# (KServe's `keda` class would write its own ScaledObject, named `predictor_name`, from spec.predictor.autoScaling,
# which takes CPU, memory and one Prometheus query, not the kedaSpec's triggers and behaviour Slipway renders.)
KEDA_API_VERSION = "keda.sh/v1alpha1"
SCALED_OBJECT_KIND = "ScaledObject"
# Labels the controller puts on every predictor pod.
ISVC_POD_LABEL = f"{GROUP}/inferenceservice"
COMPONENT_LABEL = "component"
PREDICTOR_COMPONENT = "predictor"
PROTOCOL = "v2"
MODEL_FORMAT = "onnx"
# S3 credentials: a Secret listed by the predictor's ServiceAccount, with these keys and annotations.
S3_KEYS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
S3_ENDPOINT_ANNOTATION = f"{GROUP}/s3-endpoint"
S3_HTTPS_ANNOTATION = f"{GROUP}/s3-usehttps"
S3_REGION_ANNOTATION = f"{GROUP}/s3-region"
STORAGE_SCHEMES = ("s3", "gs", "pvc")
# The storage initializer copies storageUri here; Slipway's launcher serves from it.
MODEL_MOUNT = "/mnt/models"


def predictor_name(isvc_name: str) -> str:
    """The raw Deployment, Service and (KServe's own) HPA of the predictor: constants.PredictorServiceName."""
    return f"{isvc_name}-{PREDICTOR_COMPONENT}"


def hpa_name(isvc_name: str) -> str:
    """Slipway's HPA on the predictor Deployment. Not `predictor_name`: KServe's HPA reconciler gets the HPA of that
    name, updates one it does not own into its own, and deletes its own under the `external` class, so a rendered HPA
    of that name is gone within a reconcile (seen on the local cluster with KServe's controller)."""
    return f"{predictor_name(isvc_name)}-hpa"


def scaled_object_name(isvc_name: str) -> str:
    """Slipway's ScaledObject on the predictor Deployment (KEDA names the HPA it makes `keda-hpa-<this>`). Not
    `predictor_name`, the name of the ScaledObject KServe's `keda` class makes and would update into its own."""
    return f"{predictor_name(isvc_name)}-keda"


def runtime_name(model: str) -> str:
    return f"slipway-{model}"


def inference_url(namespace: str, name: str, model: str) -> str:
    """Inside the cluster: the predictor Service listens on port 80 and forwards to the first container port."""
    return f"http://{predictor_name(name)}.{namespace}.svc.cluster.local/v2/models/{model}/infer"
