"""The local control plane the cluster tests share: started once for this folder's tests, stopped by PID after them
(package scope, so that it does not idle beside the rest of the suite)."""

from __future__ import annotations

import pytest

MODEL = "digits"
SECRET = "slipway-model-storage"


@pytest.fixture(scope="package")
def cluster(tmp_path_factory):
    """A local control plane of its own on a free port, stopped by PID afterwards."""
    from deployments.cluster.control_plane import down, up
    from deployments.cluster.processes import running
    from slipway.ports import free_port

    folder = tmp_path_factory.mktemp("cluster") / "state"
    state = up(folder, api_port=free_port(), tied=True)
    try:
        yield state
    finally:
        processes = list(state.processes)
        down(folder)
        assert not any(running(process) for process in processes) and not folder.exists()


@pytest.fixture(scope="package")
def api(cluster):
    from deployments.cluster.objects import client

    return client(cluster.kubeconfig)


@pytest.fixture(scope="package")
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
