"""`deploy --check-image` against the local control plane: the preflight asks the image's registry (a real one, the
image pushed by crane) before the server dry run, the upload or the apply."""

from __future__ import annotations

import pytest

from tests.conftest import run_module
from tests.deployments.test_image_check import IMAGE, _push, _registry, tools  # noqa: F401 (tools: a fixture)
from tests.localcluster.conftest import make_namespace
from tests.localcluster.test_deploy import _nothing_of_ours, _one_line_error

pytestmark = pytest.mark.slow


def test_deploy_refuses_an_image_its_registry_lacks_and_passes_the_pushed_one(
    api,
    cluster_env,
    record_files,
    tools,  # noqa: F811
    tmp_path,
):
    namespace = make_namespace(api, "image-check")
    with _registry(tools["registry"], tmp_path / "registry") as host:
        _push(tools["crane"], f"{host}/{IMAGE}", tmp_path / "push")
        deploy = (
            "deployments",
            "deploy",
            "--namespace",
            namespace,
            "--version-record",
            str(record_files("3")),
            "--check-image",
            "--dry-run",
            "server",
        )

        refused = run_module(*deploy, "--image", f"{host}/team/mlserver-onnx:0.2.0", env=cluster_env, check=False)
        assert (
            f"image {host}/team/mlserver-onnx:0.2.0 is not in its registry: {host} has no team/mlserver-onnx:0.2.0 "
            f"(MANIFEST_UNKNOWN): push it first: make push IMAGE_REPO={host}/team"
        ) in _one_line_error(refused)
        assert "server dry run" not in refused.stderr and _nothing_of_ours(api, namespace) == []

        passed = run_module(*deploy, "--image", f"{host}/{IMAGE}", env=cluster_env, check=False)
        assert "is not in its registry" not in passed.stderr and "server dry run passed" in passed.stderr, passed.stderr
