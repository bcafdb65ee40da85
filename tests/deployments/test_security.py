"""checkov on the rendered manifests, on the Deployments Seldon makes from them, and on the Dockerfiles.

checkov knows Deployments, not SeldonDeployments, so the pod templates are also scanned as the
apps/v1 Deployments the operator would create (deployments.render.seldon.projected_deployments).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest
import yaml

from deployments.render import seldon
from deployments.render.overlay import DEPLOYMENTS_DIR, write_manifests
from slipway.paths import PROJECT_ROOT
from tests.deployments.rendering import rendering

CHECKOV = PROJECT_ROOT / ".venv-tools" / "bin" / "checkov"
IMAGES_DIR = DEPLOYMENTS_DIR / "images"
RENDERINGS = [("cpu", "cpu"), ("cpu", "behavior"), ("gpu", "rps"), ("canary", "keda")]
render = rendering()


def _scan_inputs(root, main_version, canary_version):
    for overlay, mode in RENDERINGS:
        rendered = render(
            overlay, model=main_version, canary=canary_version if overlay == "canary" else None, autoscaling_mode=mode
        )
        out = root / "good" / f"{overlay}-{mode}"
        write_manifests(rendered, out)
        (out / "all.yaml").unlink()  # the same resources again
        projected = seldon.projected_deployments(rendered.seldon_deployment)
        (out / "projected-deployments.yaml").write_text(yaml.safe_dump_all(projected))
    for dockerfile in IMAGES_DIR.glob("*.Dockerfile"):
        shutil.copy(dockerfile, root / "good" / dockerfile.name)
    # A check that cannot fail proves nothing: the same pod with a writable root filesystem must fail.
    bad = seldon.projected_deployments(render("cpu", model=main_version).seldon_deployment)
    bad[0]["spec"]["template"]["spec"]["containers"][0]["securityContext"]["readOnlyRootFilesystem"] = False
    (root / "bad").mkdir()
    (root / "bad" / "writable-root.yaml").write_text(yaml.safe_dump_all(bad))


@pytest.fixture(scope="module")
def checkov_results(tmp_path_factory, main_version, canary_version):
    if not CHECKOV.exists():
        pytest.skip(f"checkov is not installed at {CHECKOV}: run `make tools` (make test does)")
    root = tmp_path_factory.mktemp("checkov")
    _scan_inputs(root, main_version, canary_version)
    result = subprocess.run(
        [str(CHECKOV), "-d", str(root), "--framework", "kubernetes", "dockerfile", "--skip-download", "-o", "json"],
        capture_output=True,
        text=True,
        timeout=240,
    )
    reports = json.loads(result.stdout)
    return {report["check_type"]: report for report in (reports if isinstance(reports, list) else [reports])}


def test_checkov_passes_every_rendering_and_both_dockerfiles(checkov_results):
    assert set(checkov_results) == {"kubernetes", "dockerfile"}
    for check_type, report in checkov_results.items():
        assert report["summary"]["parsing_errors"] == 0, check_type
        failed = [
            (c["check_id"], c["file_path"]) for c in report["results"]["failed_checks"] if not c["file_path"].startswith("/bad/")
        ]
        assert failed == [], failed
        assert report["summary"]["passed"] > 50
    docker_files = {c["file_path"] for c in checkov_results["dockerfile"]["results"]["passed_checks"]}
    assert docker_files == {"/good/cpu.Dockerfile", "/good/gpu.Dockerfile"}
    scanned = {c["resource"] for c in checkov_results["kubernetes"]["results"]["passed_checks"]}
    assert any(r.startswith("Deployment.") for r in scanned) and any(r.startswith("ServiceAccount.") for r in scanned)


def test_checkov_catches_a_writable_root_filesystem(checkov_results):
    failed = {(c["check_id"], c["file_path"]) for c in checkov_results["kubernetes"]["results"]["failed_checks"]}
    assert ("CKV_K8S_22", "/bad/writable-root.yaml") in failed


def test_every_checkov_skip_is_declared_and_justified_beside_it(checkov_results):
    declared = {}
    for path in DEPLOYMENTS_DIR.rglob("*.yaml"):
        lines = path.read_text().splitlines()
        for number, line in enumerate(lines):
            match = re.search(r"checkov\.io/skip\d+:\s*(CKV\w+)=(.+)", line)
            if match:
                justification = lines[number - 1].strip()
                assert justification.startswith("# Justification:") and len(justification) > 30, f"{path}:{number + 1}"
                declared[match.group(1)] = path
    skipped = {c["check_id"] for c in checkov_results["kubernetes"]["results"]["skipped_checks"]}
    assert skipped <= set(declared), skipped - set(declared)
    assert checkov_results["dockerfile"]["summary"]["skipped"] == 0
