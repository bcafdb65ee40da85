"""The storage Secret, both ways: made from the user's environment, and read back as fsspec options.

Seldon's storage initializer is rclone, configured by `RCLONE_CONFIG_<REMOTE>_<OPTION>` keys
in the Secret a model's `envSecretRefName` names; the remote is the `modelUri`'s scheme
(`s3://...` -> `RCLONE_CONFIG_S3_*`). `make secret` writes those keys from the variables the
cloud's own tools read (AWS_*, GOOGLE_APPLICATION_CREDENTIALS), straight to the cluster and
never to a file; `deploy` reads the same keys back to upload with the credentials the pods
will use, so a Secret that cannot read the bucket fails before anything is applied.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from pathlib import Path

DEFAULT_SECRET = "slipway-model-storage"
RCLONE_TYPES = {"s3": "s3", "gs": "google cloud storage"}  # a URI scheme's rclone backend, where the names differ
SCHEMES = tuple(RCLONE_TYPES)


class SecretError(ValueError):
    """The environment or the Secret cannot configure storage; the message says what to set instead."""


def prefix(scheme: str) -> str:
    return f"RCLONE_CONFIG_{scheme.upper()}_"


def _true(value: str | None) -> bool:
    return (value or "").strip().lower() in ("true", "1", "yes")


# ------------------------------------------------------------------ environment -> Secret


def settings_from_environment(scheme: str, environ: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """The rclone keys for `scheme` from the cloud's usual variables, and which variables they came from."""
    if scheme == "s3":
        return _s3_settings(environ)
    if scheme == "gs":
        return _gs_settings(environ)
    raise SecretError(
        f"no storage Secret for {scheme}:// URIs: `make secret` writes one for {', '.join(SCHEMES)}; "
        f"for pvc:// the pod mounts the claim and needs none"
    )


def _s3_settings(environ: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    key, secret = environ.get("AWS_ACCESS_KEY_ID", ""), environ.get("AWS_SECRET_ACCESS_KEY", "")
    if bool(key) != bool(secret):
        missing = "AWS_SECRET_ACCESS_KEY" if key else "AWS_ACCESS_KEY_ID"
        raise SecretError(
            f"{missing} is not set while its pair is: set both, or neither to let pods authenticate "
            "through their service account (IRSA / EKS Pod Identity)"
        )
    endpoint_variable = next((name for name in ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL") if environ.get(name)), None)
    region_variable = next((name for name in ("AWS_REGION", "AWS_DEFAULT_REGION") if environ.get(name)), None)
    settings = {"TYPE": "s3", "PROVIDER": "Other" if endpoint_variable else "AWS", "ENV_AUTH": "false" if key else "true"}
    used = []
    if key:
        settings.update(ACCESS_KEY_ID=key, SECRET_ACCESS_KEY=secret)
        used += ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"]
        if environ.get("AWS_SESSION_TOKEN"):
            settings["SESSION_TOKEN"] = environ["AWS_SESSION_TOKEN"]
            used.append("AWS_SESSION_TOKEN")
    if endpoint_variable:
        settings["ENDPOINT"] = environ[endpoint_variable]
        used.append(endpoint_variable)
    if region_variable:
        settings["REGION"] = environ[region_variable]
        used.append(region_variable)
    return {prefix("s3") + name: value for name, value in settings.items()}, used


def _gs_settings(environ: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    settings = {"TYPE": RCLONE_TYPES["gs"]}
    used = []
    if path := environ.get("GOOGLE_APPLICATION_CREDENTIALS"):
        try:
            text = Path(path).read_text()
            json.loads(text)
        except (OSError, ValueError) as err:
            raise SecretError(
                f"GOOGLE_APPLICATION_CREDENTIALS={path} is not a readable JSON key file ({err}): point it "
                "at a service account key, or unset it to use the pods' workload identity"
            ) from err
        settings.update(SERVICE_ACCOUNT_CREDENTIALS=text, ENV_AUTH="false")
        used.append("GOOGLE_APPLICATION_CREDENTIALS")
    else:
        settings["ENV_AUTH"] = "true"
    return {prefix("gs") + name: value for name, value in settings.items()}, used


def secret_manifest(name: str, namespace: str, settings: Mapping[str, str]) -> dict:
    """The Secret as the API server takes it (values base64 in `data`, so a re-apply replaces them whole)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app.kubernetes.io/part-of": "slipway"}},
        "data": {key: base64.b64encode(value.encode()).decode() for key, value in sorted(settings.items())},
    }


# ------------------------------------------------------------------ Secret -> what a client needs


def read_secret(api, name: str, namespace: str):
    """Secret `name` as the API gives it (a V1Secret); None where it is missing or this user may not read it."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    try:
        return client.CoreV1Api(api).read_namespaced_secret(name, namespace)
    except ApiException as err:
        if err.status in (403, 404):
            return None
        raise


def read_settings(api, name: str, namespace: str) -> dict[str, str] | None:
    """The Secret's keys and decoded values; None where it is missing or this user may not read it."""
    secret = read_secret(api, name, namespace)
    return None if secret is None else decoded(secret)


def decoded(secret) -> dict[str, str]:
    """A V1Secret's keys and values, `data` base64-decoded, `string_data` as it is."""
    return {**{key: base64.b64decode(value).decode() for key, value in (secret.data or {}).items()}, **(secret.string_data or {})}


def missing_keys(scheme: str, settings: Mapping[str, str]) -> list[str]:
    """The keys rclone needs for `scheme` that `settings` lacks (credentials unless ENV_AUTH is true)."""
    wanted = [prefix(scheme) + "TYPE"]
    if scheme == "s3" and not _true(settings.get(prefix(scheme) + "ENV_AUTH")):
        wanted += [prefix(scheme) + "ACCESS_KEY_ID", prefix(scheme) + "SECRET_ACCESS_KEY"]
    return [key for key in wanted if not settings.get(key)]


def fsspec_options(scheme: str, settings: Mapping[str, str], *, endpoint: str | None = None) -> dict:
    """The rclone settings for `scheme` as fsspec storage options (s3fs, gcsfs); `endpoint` replaces the
    Secret's where the pods reach the store at an address this machine cannot (a port-forward)."""

    def get(option: str) -> str:
        return settings.get(prefix(scheme) + option, "")

    if scheme == "s3":
        options: dict = {}
        if get("ACCESS_KEY_ID"):
            options.update(key=get("ACCESS_KEY_ID"), secret=get("SECRET_ACCESS_KEY"))
            if get("SESSION_TOKEN"):
                options["token"] = get("SESSION_TOKEN")
        elif not _true(get("ENV_AUTH")):
            options["anon"] = True
        if endpoint or get("ENDPOINT"):
            options["endpoint_url"] = endpoint or get("ENDPOINT")
        if get("REGION"):
            options["client_kwargs"] = {"region_name": get("REGION")}
        if get("PROVIDER") != "AWS" or _true(get("FORCE_PATH_STYLE")):
            options["config_kwargs"] = {"s3": {"addressing_style": "path"}}  # what S3-compatible stores expect
        return options
    if scheme == "gs":
        if get("SERVICE_ACCOUNT_CREDENTIALS"):
            return {"token": json.loads(get("SERVICE_ACCOUNT_CREDENTIALS"))}
        return {"token": "anon"} if _true(get("ANONYMOUS")) else {"token": "google_default"}
    return {}
