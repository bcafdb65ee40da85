"""The storage Secret in KServe's form: AWS_* keys and `serving.kserve.io/s3-*` annotations.

KServe's storage initializer takes S3 credentials from the Secrets the predictor's ServiceAccount lists
(pkg/credentials, v0.15.2): the keys named by `inferenceservice-config`'s credentials.s3 (AWS_ACCESS_KEY_ID and
AWS_SECRET_ACCESS_KEY as shipped), the endpoint, https and region as annotations. A listed Secret that is missing
stops the InferenceService's reconcile, so `render --engine kserve` lists it only for s3:// URIs and `secret
--engine kserve` writes it from the same variables the Seldon Secret is made from.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlsplit

from deployments.kserve import api
from deployments.rollout.kube_api import present
from deployments.rollout.storage_secret import SecretError, secret_manifest


def s3_secret(name: str, namespace: str, environ: Mapping[str, str]) -> tuple[dict, list[str]]:
    """The Secret manifest from AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL[_S3] and AWS_REGION, and
    which variables it came from."""
    key, secret = environ.get("AWS_ACCESS_KEY_ID", ""), environ.get("AWS_SECRET_ACCESS_KEY", "")
    if not (key and secret):
        missing = " and ".join(name for name in api.S3_KEYS if not environ.get(name))
        raise SecretError(
            f"{missing} not set: KServe's Secret holds static keys; set both (for pods that authenticate through an "
            "IAM role, annotate their ServiceAccount instead and write no Secret)"
        )
    if environ.get("AWS_SESSION_TOKEN"):
        raise SecretError(
            "AWS_SESSION_TOKEN is set: KServe's Secret carries no session token, so these temporary keys would be "
            "refused; use a long-lived access key, or an IAM role on the ServiceAccount"
        )
    used = list(api.S3_KEYS)
    annotations = {}
    endpoint_variable = next((v for v in ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL") if environ.get(v)), None)
    if endpoint_variable:
        parts = urlsplit(environ[endpoint_variable])
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise SecretError(
                f"{endpoint_variable}={environ[endpoint_variable]!r} is not an http(s) URL: give one such as "
                "https://s3.example.com or http://minio.storage:9000"
            )
        annotations[api.S3_ENDPOINT_ANNOTATION] = parts.netloc
        annotations[api.S3_HTTPS_ANNOTATION] = "1" if parts.scheme == "https" else "0"
        used.append(endpoint_variable)
    region_variable = next((v for v in ("AWS_REGION", "AWS_DEFAULT_REGION") if environ.get(v)), None)
    if region_variable:
        annotations[api.S3_REGION_ANNOTATION] = environ[region_variable]
        used.append(region_variable)
    manifest = secret_manifest(name, namespace, {api.S3_KEYS[0]: key, api.S3_KEYS[1]: secret})
    if annotations:
        manifest["metadata"]["annotations"] = annotations
    return manifest, used


def upload_settings(cluster, name: str, namespace: str) -> dict[str, str] | None:
    """KServe's Secret `name` read back as the rclone settings `deploy`'s upload uses, so that it writes with the
    pods' keys to the endpoint they read from; None where it is missing, unreadable or not in KServe's form."""
    from deployments.rollout.storage_secret import decoded, read_secret, settings_from_environment

    secret = read_secret(cluster, name, namespace)
    if secret is None:
        return None
    keys = decoded(secret)
    if not all(keys.get(key) for key in api.S3_KEYS):
        return None
    annotations = present(secret.metadata).annotations or {}
    environ = {key: keys[key] for key in api.S3_KEYS}
    if endpoint := annotations.get(api.S3_ENDPOINT_ANNOTATION):
        scheme = "http" if annotations.get(api.S3_HTTPS_ANNOTATION) == "0" else "https"
        environ["AWS_ENDPOINT_URL"] = f"{scheme}://{endpoint}"
    if region := annotations.get(api.S3_REGION_ANNOTATION):
        environ["AWS_REGION"] = region
    return settings_from_environment("s3", environ)[0]
