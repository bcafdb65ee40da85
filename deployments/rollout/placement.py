"""A model version's bytes where its pods pull them from: uploaded where missing, verified byte for byte, with the
credentials of the storage Secret those pods use (or this machine's, where the Secret cannot be read).

Shared by `deploy`, `upload`, `canary` and `shadow`: the same refusal for the same problem whichever way a
version reaches the cluster.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path

from slipway.cli import UserError, console


@dataclass(frozen=True)
class StorageAccess:
    """How this machine reaches the store the pods pull from: the namespace of their storage Secret, the store's
    address from here where it differs from theirs, the local mount of a pvc:// claim (`add_storage_arguments`)."""

    namespace: str
    storage_endpoint: str | None = None
    pvc_mount: Path | None = None


def add_storage_arguments(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--storage-endpoint",
        metavar="URL",
        help="reach the object store at URL for the upload (a "
        "port-forward, say) instead of the storage Secret's ENDPOINT, which is the pods' address",
    )
    command.add_argument(
        "--pvc-mount",
        type=Path,
        metavar="DIR",
        help="where the claim of a pvc:// modelUri is mounted on this machine, to upload into it",
    )


def _storage_settings(api, secret: str | None, namespace: str, scheme: str) -> dict[str, str]:
    """The storage Secret's rclone settings (Seldon's as they are, KServe's converted), so the upload uses the pods'
    credentials; where this user may not read it (or there is no cluster), the same settings made from this machine's
    environment."""
    from deployments.rollout.storage_secret import SecretError, read_settings, settings_from_environment

    settings = read_settings(api, secret, namespace) if api is not None and secret else None
    if secret and settings is not None and not any(key.startswith("RCLONE_CONFIG_") for key in settings):
        from deployments.kserve.storage import upload_settings

        settings = upload_settings(api, secret, namespace)  # KServe's form: AWS_* keys, s3-* annotations
    if settings is not None:
        return settings
    if scheme == "pvc":
        return {}
    console.print(
        f"storage credentials from this machine's environment"
        f"{f' (cannot read Secret {namespace}/{secret})' if secret and api is not None else ''}",
        soft_wrap=True,
    )
    try:
        return settings_from_environment(scheme, os.environ)[0]
    except SecretError as err:
        raise UserError(str(err)) from err


def place_models(api, placements: list[tuple], args: StorageAccess | argparse.Namespace, *, check_only: bool = False) -> None:
    """Upload each (version, Secret) to the version's modelUri where it is not there yet, and verify it byte for
    byte. `args`: a `StorageAccess`, or the arguments `add_storage_arguments` added with a --namespace. `check_only`
    (a dry run) uploads nothing and only says what it would do."""
    from rich.progress import DownloadColumn, Progress, SpinnerColumn, TextColumn, TransferSpeedColumn

    from deployments.rollout.upload import Destination, UploadError, place

    for version, secret in placements:
        scheme = version.uri.partition("://")[0]
        try:
            settings = _storage_settings(api, secret, args.namespace, scheme)
            destination = Destination(version.uri, settings, endpoint=args.storage_endpoint, pvc_mount=args.pvc_mount)
            if check_only:
                there = destination.manifest()
                console.print(
                    f"{version.uri}: "
                    + ("holds a version, verified when deployed" if there else "empty, the version would be uploaded"),
                    soft_wrap=True,
                )
                continue
            with Progress(
                SpinnerColumn(),
                TextColumn("{task.description}"),
                DownloadColumn(),
                TransferSpeedColumn(),
                console=console,
                transient=True,
            ) as progress:
                task = progress.add_task(f"{version.name} v{version.version} -> {version.uri}", total=None)
                placed = place(version, destination, on_bytes=lambda n: progress.advance(task, n))
        except (UploadError, OSError) as err:
            raise UserError(
                f"{err}" if isinstance(err, UploadError) else f"cannot reach {version.uri}: {err}; nothing was applied"
            ) from err
        console.print(
            f"{'uploaded' if placed.uploaded else 'found'} {version.name} v{version.version} at {placed.uri}, "
            f"verified: {placed.bytes} bytes, digest {placed.digest[:19]}...",
            soft_wrap=True,
        )
