"""Shared pieces for the deployments tests: version records as the model store writes them, and the local cluster."""

from __future__ import annotations

import json

import pytest

from deployments.records import ModelVersion

MODEL = "digits"
SECRET = "slipway-model-storage"


def record(version: str, digest_byte: str = "ab", **extra) -> dict:
    """A version record shaped like `python -m export versions show REF --json`."""
    return {"name": "digits", "version": version, "uri": f"s3://slipway-models/digits/{version}",
            "digest": digest_byte * 32, "tags": [], "created_at": "2026-01-01T00:00:00Z", **extra}


@pytest.fixture(scope="session")
def main_version() -> ModelVersion:
    return ModelVersion.model_validate(record("3", "ab", tags=["champion"]))


@pytest.fixture(scope="session")
def canary_version() -> ModelVersion:
    return ModelVersion.model_validate(record("4", "cd"))


@pytest.fixture
def record_files(tmp_path):
    """Write records to files, as the Makefile glue does; returns a function version -> path."""

    def write(version: str, digest_byte: str = "ab", **extra):
        path = tmp_path / f"record-{version}.json"
        path.write_text(json.dumps(record(version, digest_byte, **extra)))
        return path

    return write


# ------------------------------------------------------------------ the local control plane (deployments/cluster)


@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
    """A local control plane of its own on a free port, stopped by PID afterwards."""
    from deployments.cluster.control_plane import down, up
    from deployments.cluster.processes import free_port, running

    folder = tmp_path_factory.mktemp("cluster") / "state"
    state = up(folder, api_port=free_port(), tied=True)
    try:
        yield state
    finally:
        processes = list(state.processes)
        down(folder)
        assert not any(running(process) for process in processes) and not folder.exists()


@pytest.fixture(scope="session")
def api(cluster):
    from deployments.cluster.objects import client

    return client(cluster.kubeconfig)


@pytest.fixture(scope="session")
def cluster_env(cluster, reports_env) -> dict[str, str]:
    return {**reports_env, "KUBECONFIG": str(cluster.kubeconfig), "COLUMNS": "400"}


def make_namespace(api, name: str, *, secret: bool = True) -> str:
    """Create namespace `name`, with the storage Secret the rendered models name unless `secret` is false."""
    from kubernetes import client

    client.CoreV1Api(api).create_namespace({"metadata": {"name": name}})
    if secret:
        data = {"RCLONE_CONFIG_S3_TYPE": "s3", "RCLONE_CONFIG_S3_PROVIDER": "Minio",
                "RCLONE_CONFIG_S3_ENDPOINT": "http://minio.minio.svc:9000"}
        client.CoreV1Api(api).create_namespaced_secret(name, {"metadata": {"name": SECRET}, "stringData": data})
    return name
