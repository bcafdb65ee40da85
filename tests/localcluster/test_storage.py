"""The model's bytes on their way to the pods, on the local cluster: `make secret` writes the storage Secret,
`deploy` uploads the version to the cluster's real S3 store (versitygw) with that Secret's credentials and
verifies it, and rclone, run as Seldon's storage initializer runs it (and as the local cluster's initializer for
KServe runs with KServe's Secret), pulls back exactly the version.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from slipway.paths import PROJECT_ROOT
from tests.conftest import run_module
from tests.localcluster.conftest import MODEL, SECRET, STORAGE_ENV, digest_of, make_namespace, records
from tests.localcluster.test_deploy import _deploy, _nothing_of_ours, _one_line_error, _sdep

pytestmark = pytest.mark.slow


def _store():
    """The cluster's object store through s3fs, with its keys."""
    from fsspec.core import url_to_fs

    from deployments.rollout.storage_secret import fsspec_options, settings_from_environment

    return url_to_fs("s3://", **fsspec_options("s3", settings_from_environment("s3", STORAGE_ENV)[0]))[0]


def _initializer_pull(api, namespace: str, out: Path) -> Path:
    """Run what the operator put in the pod's storage-initializer container: rclone copy <args>, its environment
    the Secret its envFrom names, read back from the API server."""
    from kubernetes import client

    from deployments.rollout.storage_secret import read_settings
    from localcluster.build import build_all
    from localcluster.components import COMPONENTS

    deployment = client.AppsV1Api(api).list_namespaced_deployment(namespace).items[0]
    initializer = deployment.spec.template.spec.init_containers[0]
    source, target = initializer.args
    assert target == "/mnt/models" and initializer.image == "seldonio/rclone-storage-initializer:1.17.1"
    env = read_settings(api, initializer.env_from[0].secret_ref.name, namespace)
    rclone = build_all(tuple(c for c in COMPONENTS if c.name == "rclone"))["rclone"] / "bin" / "rclone"
    result = subprocess.run(
        [str(rclone), "copy", source, str(out)], env={**env, "HOME": str(out.parent)}, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return out


def _kserve_initializer_pull(api, namespace: str, uri: str, out: Path) -> Path:
    """Run the local cluster's storage initializer for KServe as KServe's pod mutator runs it: its image's
    environment, plus what KServe derives from its Secret (pkg/credentials/s3: the keys, and from the Secret's
    annotations AWS_ENDPOINT_URL, S3_ENDPOINT and S3_USE_HTTPS), read back from the API server; `rclone copy <uri>
    /mnt/models` as its entrypoint and KServe's arguments make it."""
    import base64
    import json
    import tarfile

    from kubernetes import client

    from deployments.kserve import api as kserve
    from deployments.kserve.render import STORAGE_SECRET
    from localcluster import storage_initializer
    from localcluster.build import build_all
    from localcluster.components import COMPONENTS

    secret = client.CoreV1Api(api).read_namespaced_secret(STORAGE_SECRET, namespace)
    env = {key: base64.b64decode(secret.data[key]).decode() for key in kserve.S3_KEYS}
    annotations = secret.metadata.annotations or {}
    endpoint, https = annotations[kserve.S3_ENDPOINT_ANNOTATION], annotations.get(kserve.S3_HTTPS_ANNOTATION, "1")
    env |= {"S3_ENDPOINT": endpoint, "S3_USE_HTTPS": https}
    env["AWS_ENDPOINT_URL"] = f"{'http' if https == '0' else 'https'}://{endpoint}"
    rclone = build_all(tuple(c for c in COMPONENTS if c.name == "rclone"))["rclone"] / "bin" / "rclone"
    archive = storage_initializer.archive(
        rclone, out.parent / "kserve-initializer.tar", storage_initializer.KSERVE_NODE_IMAGE, env=storage_initializer.KSERVE_ENV
    )
    with tarfile.open(archive) as image:
        (manifest,) = json.loads(image.extractfile("manifest.json").read())
        config = json.loads(image.extractfile(manifest["Config"]).read())["config"]
    image_env = dict(item.split("=", 1) for item in config["Env"])
    assert config["Entrypoint"] == ["rclone", "copy"]
    result = subprocess.run(
        [str(rclone), "copy", uri, str(out)],
        env={**image_env, **env, "HOME": str(out.parent)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return out


def test_make_secret_writes_the_environment_s_keys_and_never_shows_them(api, cluster_env):
    from deployments.rollout.storage_secret import read_settings

    namespace = make_namespace(api, "secret", secret=False)
    result = subprocess.run(
        ["make", "--no-print-directory", "secret", f"NAMESPACE={namespace}"],
        cwd=PROJECT_ROOT,
        env={**os.environ, **cluster_env, **STORAGE_ENV},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert STORAGE_ENV["AWS_SECRET_ACCESS_KEY"] not in result.stdout + result.stderr
    assert "from AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL" in result.stderr
    assert read_settings(api, SECRET, namespace) == {
        "RCLONE_CONFIG_S3_TYPE": "s3",
        "RCLONE_CONFIG_S3_PROVIDER": "Other",
        "RCLONE_CONFIG_S3_ENV_AUTH": "false",
        "RCLONE_CONFIG_S3_ACCESS_KEY_ID": STORAGE_ENV["AWS_ACCESS_KEY_ID"],
        "RCLONE_CONFIG_S3_SECRET_ACCESS_KEY": STORAGE_ENV["AWS_SECRET_ACCESS_KEY"],
        "RCLONE_CONFIG_S3_ENDPOINT": STORAGE_ENV["AWS_ENDPOINT_URL"],
    }

    # half a key pair: one line, nothing written
    other = make_namespace(api, "secret-half", secret=False)
    half = {key: value for key, value in STORAGE_ENV.items() if key != "AWS_SECRET_ACCESS_KEY"}
    line = _one_line_error(
        run_module(
            "deployments", "secret", "--namespace", other, env={**cluster_env, **half, "AWS_SECRET_ACCESS_KEY": ""}, check=False
        )
    )
    assert "AWS_SECRET_ACCESS_KEY is not set while its pair is" in line
    assert read_settings(api, SECRET, other) is None


def test_deploy_uploads_the_version_and_the_storage_initializer_pulls_exactly_it(api, cluster_env, digits_artifact, tmp_path):
    from slipway.artifact import verify_artifact

    namespace = make_namespace(api, "upload")
    (record,) = records(tmp_path, digits_artifact, "7")
    first = _deploy(cluster_env, namespace, "--version-record", str(record))
    assert f"uploaded {MODEL} v7 at s3://slipway-models/{MODEL}/7, verified" in first.stderr
    assert _sdep(api, namespace)["spec"]["predictors"][0]["graph"]["modelUri"] == f"s3://slipway-models/{MODEL}/7"

    pulled = _initializer_pull(api, namespace, tmp_path / "pod" / "models")
    assert f"sha256:{verify_artifact(pulled, digest_of(record).removeprefix('sha256:')).digest}" == digest_of(record)
    # the same bytes through KServe's contract: its Secret in the namespace, the initializer's KServe variant
    pulled = _kserve_initializer_pull(api, namespace, f"s3://slipway-models/{MODEL}/7", tmp_path / "kserve-pod" / "models")
    assert f"sha256:{verify_artifact(pulled, digest_of(record).removeprefix('sha256:')).digest}" == digest_of(record)

    again = _deploy(cluster_env, namespace, "--version-record", str(record))
    assert f"found {MODEL} v7 at s3://slipway-models/{MODEL}/7, verified" in again.stderr


def test_a_destination_holding_other_bytes_stops_deploy_before_anything_is_applied(api, cluster_env, digits_artifact, tmp_path):
    store = _store()
    namespace = make_namespace(api, "tampered")
    eight, nine = records(tmp_path, digits_artifact, "8", "9")
    uploaded = run_module("deployments", "upload", "--version-record", str(eight), "--namespace", namespace, env=cluster_env)
    assert uploaded.stdout.strip() == f"s3://slipway-models/{MODEL}/8"

    # another version under the same URI: versions are immutable
    line = _one_line_error(
        _deploy(
            cluster_env, namespace, "--version-record", str(nine), "--model-uri", f"s3://slipway-models/{MODEL}/8", check=False
        )
    )
    assert "a version is immutable" in line
    # one stored file changed behind the manifest's back
    store.pipe(f"slipway-models/{MODEL}/8/model-settings.json", b"{}")
    line = _one_line_error(_deploy(cluster_env, namespace, "--version-record", str(eight), check=False))
    assert f"s3://slipway-models/{MODEL}/8/model-settings.json is not the file the manifest lists" in line
    # a bucket that is not there is not made
    line = _one_line_error(
        _deploy(cluster_env, namespace, "--version-record", str(nine), "--model-uri", "s3://no-such-bucket/digits/9", check=False)
    )
    assert "bucket 'no-such-bucket' of s3://no-such-bucket/digits/9 does not exist" in line
    assert not store.exists("no-such-bucket")
    assert _nothing_of_ours(api, namespace) == []


def test_a_secret_that_cannot_write_the_bucket_stops_deploy_before_anything_is_applied(api, cluster_env, digits_artifact):
    from kubernetes import client

    from deployments.rollout.storage_secret import secret_manifest, settings_from_environment

    core = client.CoreV1Api(api)
    for name, env in (
        ("wrong-key", {**STORAGE_ENV, "AWS_SECRET_ACCESS_KEY": "not-the-key"}),
        ("no-keys", {"AWS_ENDPOINT_URL": STORAGE_ENV["AWS_ENDPOINT_URL"]}),
    ):
        namespace = make_namespace(api, name, secret=False)
        settings = settings_from_environment("s3", env)[0]
        if name == "no-keys":
            settings["RCLONE_CONFIG_S3_ENV_AUTH"] = "false"  # says "use these keys", and holds none
        core.create_namespaced_secret(namespace, secret_manifest(SECRET, namespace, settings))
        line = _one_line_error(_deploy(cluster_env, namespace, "--model-dir", str(digits_artifact), check=False))
        if name == "wrong-key":
            assert "cannot write or read s3://slipway-models/digits/" in line and "nothing was applied" in line
        else:
            assert (
                "has no RCLONE_CONFIG_S3_ACCESS_KEY_ID, RCLONE_CONFIG_S3_SECRET_ACCESS_KEY" in line
                and f"make secret NAMESPACE={namespace}" in line
            )
        assert _nothing_of_ours(api, namespace) == []


def test_a_canary_needs_an_operator_that_routes_traffic(api, cluster_env, digits_artifact, tmp_path):
    from kubernetes import client

    from localcluster.objects import OPERATOR_DEPLOYMENT, SELDON_NAMESPACE, register_operator

    apps = client.AppsV1Api(api)
    namespace = make_namespace(api, "no-ingress")
    main, canary = records(tmp_path, digits_artifact, "1", "2")
    operator = apps.read_namespaced_deployment(OPERATOR_DEPLOYMENT, SELDON_NAMESPACE)
    for item in operator.spec.template.spec.containers[0].env:
        if item.name == "AMBASSADOR_ENABLED":
            item.value = "false"
    apps.replace_namespaced_deployment(OPERATOR_DEPLOYMENT, SELDON_NAMESPACE, operator)
    try:
        line = _one_line_error(
            _deploy(
                cluster_env,
                namespace,
                "--overlay",
                "canary",
                "--version-record",
                str(main),
                "--canary-record",
                str(canary),
                check=False,
            )
        )
        single = _deploy(cluster_env, namespace, "--version-record", str(main), "--dry-run", "server")
    finally:
        register_operator(api)
    assert (
        f"a canary splits traffic through Istio or Ambassador, and the Seldon operator (Deployment "
        f"{SELDON_NAMESPACE}/{OPERATOR_DEPLOYMENT}) runs with neither (ISTIO_ENABLED=false and "
        "AMBASSADOR_ENABLED=false)"
    ) in line
    assert "server dry run passed" in single.stderr  # one predictor splits nothing: no ingress needed
    assert _nothing_of_ours(api, namespace) == []


def test_the_readme_s_path_make_deploy_on_a_fresh_local_cluster_ends_served_with_its_bytes_verified(
    api, cluster_env, digits_artifact
):
    """`make cluster` made namespace slipway with the store's Secret; `make deploy` with every default does the rest."""
    from deployments.rollout.storage_secret import read_settings

    assert read_settings(api, SECRET, "slipway")["RCLONE_CONFIG_S3_ENDPOINT"] == STORAGE_ENV["AWS_ENDPOINT_URL"]
    result = subprocess.run(
        ["make", "--no-print-directory", "deploy", f"MODEL_DIR={digits_artifact}", "WAIT=120"],
        cwd=PROJECT_ROOT,
        env={**os.environ, **cluster_env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert f"s3://slipway-models/{MODEL}/" in result.stderr and ", verified:" in result.stderr
    assert f"{MODEL} is Available" in result.stderr
    assert _sdep(api, "slipway")["spec"]["predictors"][0]["graph"]["modelUri"].startswith(f"s3://slipway-models/{MODEL}/")
