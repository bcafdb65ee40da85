"""Seldon's rclone storage initializer image, made here from the rclone the cluster builds, and the operator told to use it
(and KServe's controller, with the variant of it that takes KServe's credentials).

Seldon Core 1.17.1's operator adds to every pod whose graph has a `modelUri` an init container of the image its
`seldon-config` ConfigMap names (`storageInitializer.image`, unless the graph's `storageInitializerImage` or the
operator's RELATED_IMAGE_STORAGE_INITIALIZER says otherwise), with the arguments `<modelUri> /mnt/models`, an emptyDir
mounted read-write at /mnt/models (read-only in the model container) and the environment of the Secret the graph's
`envSecretRefName` names (`RCLONE_CONFIG_<REMOTE>_*`). Seldon's own image (components/rclone-storage-initializer) is
rclone with `ENTRYPOINT ["rclone", "copy"]`, `USER 8888` and `RCLONE_VERBOSE=1`; this one is the same contract around
the rclone built from its Go module (component `rclone`: the S3 and local backends only, so it has no
`RCLONE_CONFIG_GS_*` defaults), with the machine's CA bundle for HTTPS stores. One layer, written as a docker-archive
without any daemon (node.docker_archive) and pushed with skopeo.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from pathlib import Path

from localcluster.components import COMPONENTS
from localcluster.node import docker_archive
from slipway import atomic

RCLONE = next(component for component in COMPONENTS if component.name == "rclone")
REPOSITORY = "slipway/rclone-storage-initializer"
TAG = RCLONE.version.removeprefix("v")  # the rclone inside: 1.76.0
# what `cluster up --real-node` imports into the node's containerd and names in seldon-config (no registry needed: the
# operator's init container pulls IfNotPresent)
NODE_IMAGE = f"localhost/{REPOSITORY}:{TAG}"
# KServe's contract for the same init container: its pod mutator gives it `<storageUri> /mnt/models` too, but the
# environment AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_ENDPOINT_URL (with S3_ENDPOINT and S3_USE_HTTPS) from
# the Secret its ServiceAccount lists (pkg/credentials/s3). An s3 remote named `s3` with env_auth reads those through
# the AWS SDK's own environment, and takes `s3://bucket/path` as bucket/path, as for Seldon. (rclone then signs for
# us-east-1 whatever AWS_DEFAULT_REGION says: enough for the local store, not for a bucket in another AWS region.)
KSERVE_NODE_IMAGE = f"localhost/{REPOSITORY}-kserve:{TAG}"
KSERVE_ENV = ("RCLONE_CONFIG_S3_TYPE=s3", "RCLONE_CONFIG_S3_PROVIDER=Other", "RCLONE_CONFIG_S3_ENV_AUTH=true")
USER = "8888"  # Seldon's image's; a pod's runAsUser (Slipway's base: 10001) overrides it
MOUNT_PATH = "/mnt/models"  # the operator's DefaultModelLocalMountPath
CA_BUNDLES = (Path("/etc/ssl/certs/ca-certificates.crt"), Path("/etc/pki/tls/certs/ca-bundle.crt"))
IMAGE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
PUSH_TIMEOUT_S = 300.0


class InitializerError(RuntimeError):
    """The image could not be built or pushed; one line naming what failed."""


def archive(rclone: Path, out: Path, reference: str = f"{REPOSITORY}:{TAG}", *, env: tuple[str, ...] = ()) -> Path:
    """Write the image as a docker-archive at `out`, tagged `reference`, with `env` besides its own (KSERVE_ENV for
    KServe's contract); `out`."""
    if not rclone.is_file():
        raise InitializerError(f"no rclone binary at {rclone}: `make cluster-build` builds it (component rclone)")
    files = {"/usr/local/bin/rclone": rclone.read_bytes()}
    bundle = next((path for path in CA_BUNDLES if path.is_file()), None)
    if bundle is not None:  # rclone (Go) reads it there for an https:// endpoint
        files["/etc/ssl/certs/ca-certificates.crt"] = bundle.read_bytes()
    atomic.write_bytes(
        out,
        docker_archive(
            reference,
            files,
            ["rclone", "copy"],
            USER,
            env=(f"PATH={IMAGE_PATH}", "RCLONE_VERBOSE=1", *env),  # verbose 1, not 2: that would log the Secret's values
            directories=("/tmp",),
            # the reference in the configuration, so that each reference is an image of its own ID: containerd 1.6's
            # CRI loses an imported reference (ImagePull of localhost/...) once it pulls another one with the same ID
            labels={"org.opencontainers.image.ref.name": reference},
        ),
    )
    return out


def push(archive_path: Path, destination: str) -> str:
    """Copy the archive to `destination` (registry/repository:tag), TLS verified except on loopback; its digest."""
    from deployments.rollout.image_build import LOOPBACK_HOSTS, ImageBuildError, check_destination

    try:
        registry = check_destination(destination).registry
    except ImageBuildError as err:
        raise InitializerError(f"storage initializer: {err}") from err
    skopeo = shutil.which("skopeo")
    if skopeo is None:
        raise InitializerError("skopeo is not installed: `make image-tools` installs it (as root)")
    loopback = registry.rsplit(":", 1)[0] in LOOPBACK_HOSTS
    with tempfile.TemporaryDirectory(prefix="slipway-initializer-") as folder:
        digest_file = Path(folder) / "digest"
        result = subprocess.run(
            [
                skopeo,
                "copy",
                "--quiet",
                f"--dest-tls-verify={str(not loopback).lower()}",
                "--digestfile",
                str(digest_file),
                f"docker-archive:{archive_path}",
                f"docker://{destination}",
            ],
            capture_output=True,
            text=True,
            timeout=PUSH_TIMEOUT_S,
        )
        if result.returncode != 0:
            last = (result.stderr.strip().splitlines() or [f"exit {result.returncode}"])[-1]
            raise InitializerError(f"push of the storage initializer to {destination} failed: {last}")
        return digest_file.read_text().strip()


def configure_operator(api, image: str) -> None:
    """Point the operator's `seldon-config` ConfigMap at `image` (keeping its resource defaults); it reads the
    ConfigMap at each reconcile, so SeldonDeployments applied from now on get it."""
    from kubernetes import client

    from localcluster.objects import SELDON_CONFIGMAP, SELDON_NAMESPACE

    core = client.CoreV1Api(api)
    configmap = core.read_namespaced_config_map(SELDON_CONFIGMAP, SELDON_NAMESPACE)
    settings = json.loads((configmap.data or {})["storageInitializer"])
    settings["image"] = image
    core.patch_namespaced_config_map(
        SELDON_CONFIGMAP, SELDON_NAMESPACE, {"data": {"storageInitializer": json.dumps(settings, indent=4)}}
    )


def configured_image(api) -> str:
    """The image the operator's `seldon-config` names for its storage initializer."""
    from kubernetes import client

    from localcluster.objects import SELDON_CONFIGMAP, SELDON_NAMESPACE

    configmap = client.CoreV1Api(api).read_namespaced_config_map(SELDON_CONFIGMAP, SELDON_NAMESPACE)
    return json.loads((configmap.data or {})["storageInitializer"])["image"]


def configure_kserve(api, image: str) -> None:
    """Point KServe's `inferenceservice-config` at `image` for its storage initializer; its pod mutator reads the
    ConfigMap at each pod it admits, so predictors made from now on get it."""
    from kubernetes import client

    from localcluster.kserve import CONFIGMAP, NAMESPACE

    core = client.CoreV1Api(api)
    configmap = core.read_namespaced_config_map(CONFIGMAP, NAMESPACE)
    settings = json.loads((configmap.data or {})["storageInitializer"])
    settings["image"] = image
    core.patch_namespaced_config_map(CONFIGMAP, NAMESPACE, {"data": {"storageInitializer": json.dumps(settings, indent=2)}})
