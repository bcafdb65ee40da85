"""`python -m deployments` and the Make targets, run as a user runs them, against no cluster at all."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest
import yaml

from slipway.artifact import write_manifest
from slipway.paths import PROJECT_ROOT
from slipway.ports import free_port
from tests.conftest import run_module


@pytest.fixture
def unreachable_kubeconfig(tmp_path) -> dict[str, str]:
    """A kubeconfig whose cluster is a loopback port nothing listens on: the API server is down."""
    port = free_port()
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "down",
        "clusters": [{"name": "down", "cluster": {"server": f"https://127.0.0.1:{port}", "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "not-a-secret"}}],
        "contexts": [{"name": "down", "context": {"cluster": "down", "user": "u", "namespace": "slipway"}}],
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return {"KUBECONFIG": str(path), "KUBERNETES_SERVICE_HOST": "", "SLIPWAY_TEST_API_PORT": str(port)}


def _one_line_error(result) -> str:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    return lines[0]


def test_deploy_without_a_cluster_is_one_line_and_applies_nothing(record_files, reports_env, unreachable_kubeconfig, tmp_path):
    out = tmp_path / "manifests"
    result = run_module(
        "deployments",
        "deploy",
        "--version-record",
        str(record_files("3")),
        "--out",
        str(out),
        env={**reports_env, **unreachable_kubeconfig},
        check=False,
        timeout=120,
    )
    line = _one_line_error(result)
    assert f"no Kubernetes cluster answers at https://127.0.0.1:{unreachable_kubeconfig['SLIPWAY_TEST_API_PORT']}" in line
    assert "nothing was applied" in line and "make manifests" in line
    assert not out.exists()  # stopped before rendering anything


def test_undeploy_without_a_cluster_is_one_line(reports_env, unreachable_kubeconfig):
    result = run_module(
        "deployments", "undeploy", "--name", "digits", env={**reports_env, **unreachable_kubeconfig}, check=False, timeout=120
    )
    line = _one_line_error(result)
    assert "no Kubernetes cluster answers" in line and "nothing was deleted" in line
    assert "where digits runs in namespace slipway" in line
    assert "nothing was applied" not in line and "make manifests" not in line  # deploy's words, not undeploy's


def test_alerts_and_recommend_without_a_model_or_a_cluster_say_to_name_it_and_write_nothing(
    reports_env, unreachable_kubeconfig, tmp_path
):
    """Unnamed, the model is the one deployed in the namespace; with no cluster to ask, one line says to name it."""
    import numpy as np

    from tests.deployments.traces import matrix, times, write

    env = {**reports_env, **unreachable_kubeconfig, "SLIPWAY_REPORTS_DIR": str(tmp_path / "reports")}
    slo = tmp_path / "slo.yaml"
    slo.write_text("p95_ms: 50\n")
    stamps = times(1)
    levels = {"cpu": 0.4, "memory": 200.0 * 2**20, "rps": 10.0}
    files = [
        arg
        for kind, level in levels.items()
        for arg in (f"--{kind}", str(write(tmp_path, kind, matrix({"a": (stamps, np.full(stamps.shape, level))}))))
    ]
    for command, out, asked in (
        (["alerts", "--slo", str(slo), "--out"], tmp_path / "alerts", "give --model (make alerts NAME=...)"),
        (["recommend", *files, "--capacity-rps", "40", "--out-dir"], tmp_path / "recommend", "give --model (make recommend"),
    ):
        line = _one_line_error(run_module("deployments", *command, str(out), env=env, check=False, timeout=120))
        assert "no Kubernetes cluster answers" in line and "cannot be looked up" in line and asked in line, line
        assert "namespace slipway" in line and not out.exists()
    assert not (tmp_path / "reports").exists()


def test_undeploy_refuses_a_negative_wait_before_it_reaches_a_cluster(reports_env, unreachable_kubeconfig):
    env = {**reports_env, **unreachable_kubeconfig}  # a cluster asked first would answer "no cluster" instead
    line = _one_line_error(run_module("deployments", "undeploy", "--wait", "-5", env=env, check=False, timeout=120))
    assert "--wait -5: give the seconds to wait, 0 or more (0: do not wait); nothing was deleted" in line


@pytest.mark.parametrize("command", [["render", "--model-dir", "nowhere"], ["deploy", "--dry-run", "client"], ["undeploy"]])
def test_a_namespace_kubernetes_refuses_is_one_line_before_anything(tmp_path, reports_env, command):
    out = [] if command[0] == "undeploy" else ["--out", str(tmp_path / "out")]
    result = run_module("deployments", *command, "--namespace", "Bad_NS", *out, env=reports_env, check=False)
    line = _one_line_error(result)
    assert "argument --namespace: namespace 'Bad_NS' is not a DNS-1123 label" in line and "(e.g. bad-ns)" in line
    assert not (tmp_path / "out").exists()


def test_deploy_with_no_kubeconfig_at_all_is_one_line(record_files, reports_env, tmp_path):
    env = {**reports_env, "KUBECONFIG": str(tmp_path / "none"), "KUBERNETES_SERVICE_HOST": ""}
    result = run_module("deployments", "deploy", "--version-record", str(record_files("3")), env=env, check=False)
    assert "no Kubernetes context is configured" in _one_line_error(result)


def test_client_dry_run_renders_and_validates_without_a_cluster(record_files, reports_env, unreachable_kubeconfig, tmp_path):
    out = tmp_path / "canary"
    result = run_module(
        "deployments",
        "deploy",
        "--overlay",
        "canary",
        "--version-record",
        str(record_files("3")),
        "--canary-record",
        str(record_files("4", "cd")),
        "--canary-percent",
        "20",
        "--dry-run",
        "client",
        "--out",
        str(out),
        env={**reports_env, **unreachable_kubeconfig},
    )
    assert "client dry run, nothing sent" in result.stderr and "SeldonDeployment/digits" in result.stderr
    sdep = yaml.safe_load((out / "seldondeployment-digits.yaml").read_text())
    assert [p["traffic"] for p in sdep["spec"]["predictors"]] == [80, 20]
    report = json.loads((PROJECT_ROOT / reports_env["SLIPWAY_REPORTS_DIR"] / "manifests.json").read_text())
    assert report["validation"]["ok"] and report["predictors"]["canary"]["version"] == "4"


def test_render_refuses_a_bad_record_in_one_line(tmp_path, reports_env):
    bad = tmp_path / "record.json"
    bad.write_text('{"name": "digits", "version": 1, "uri": "file:///store/digits/1", "digest": "' + "0" * 64 + '"}')
    result = run_module(
        "deployments", "render", "--version-record", str(bad), "--out", str(tmp_path / "out"), env=reports_env, check=False
    )
    assert "storage initializer cannot reach it" in _one_line_error(result)
    assert not (tmp_path / "out").exists()


@pytest.mark.slow  # needs the trained digits model (digits_artifact)
def test_render_warns_when_cpu_autoscaling_would_count_a_polling_event_loop(digits_artifact, reports_env, tmp_path):
    model_dir = tmp_path / "digits"
    shutil.copytree(digits_artifact, model_dir)
    settings = json.loads((model_dir / "model-settings.json").read_text())
    settings["parameters"]["extra"]["event_loop_spin_us"] = 1000
    (model_dir / "model-settings.json").write_text(json.dumps(settings))
    write_manifest(model_dir)
    report_path = PROJECT_ROOT / reports_env["SLIPWAY_REPORTS_DIR"] / "manifests.json"

    result = run_module("deployments", "render", "--model-dir", str(model_dir), "--out", str(tmp_path / "cpu"), env=reports_env)
    assert "warning: predictor default autoscales on CPU utilization" in " ".join(result.stderr.split())
    assert (tmp_path / "cpu" / "all.yaml").is_file()  # a warning, not a refusal
    assert "event_loop_spin_us: 1000" in json.loads(report_path.read_text())["warnings"][0]

    result = run_module(
        "deployments",
        "render",
        "--model-dir",
        str(model_dir),
        "--autoscaling",
        "rps",
        "--out",
        str(tmp_path / "rps"),
        env=reports_env,
    )
    assert "warning" not in result.stderr and json.loads(report_path.read_text())["warnings"] == []

    settings["parameters"]["extra"]["event_loop_spin_us"] = "often"
    (model_dir / "model-settings.json").write_text(json.dumps(settings))
    write_manifest(model_dir)
    result = run_module(
        "deployments", "render", "--model-dir", str(model_dir), "--out", str(tmp_path / "bad"), env=reports_env, check=False
    )
    assert "event_loop_spin_us" in _one_line_error(result) and not (tmp_path / "bad").exists()

    (model_dir / "model-settings.json").write_text("{broken")  # read through a local store record this time
    record = tmp_path / "record.json"
    record.write_text(json.dumps({"name": "digits", "version": "1", "uri": f"file://{model_dir}", "digest": "0" * 64}))
    result = run_module(
        "deployments",
        "render",
        "--version-record",
        str(record),
        "--model-uri",
        "s3://models/digits/1",
        "--out",
        str(tmp_path / "broken"),
        env=reports_env,
        check=False,
    )
    assert "model-settings.json is not JSON (Expecting property name" in _one_line_error(result)
    assert not (tmp_path / "broken").exists()


@pytest.mark.slow  # needs the trained digits model (digits_artifact)
def test_a_skipped_validation_layer_is_counted_where_the_result_is_summed_up(digits_artifact, reports_env, tmp_path):
    env = {**reports_env, "SLIPWAY_SELDON_CRD": str(tmp_path / "no-schemas" / "crd.yaml"), "COLUMNS": "250"}
    result = run_module("deployments", "render", "--model-dir", str(digits_artifact), "--out", str(tmp_path / "out"), env=env)
    assert "skipped: SeldonDeployment/digits: CRD schema not found" in result.stderr
    assert "valid (4 checked, 1 skipped)" in result.stderr  # the console writes to stderr
    assert "valid (4 checked, 1 skipped)" in run_module("slipway", "summary", env=env).stdout


@pytest.mark.slow  # needs the trained digits model (digits_artifact)
def test_overlay_folders_render_under_their_last_two_parts_so_they_do_not_collide(digits_artifact, reports_env, tmp_path):
    built = []
    for owner in ("tune", "recommend"):  # both write their overlay into a folder named `overlay`
        overlay = tmp_path / owner / "overlay"
        overlay.mkdir(parents=True)
        cpu = os.path.relpath(PROJECT_ROOT / "deployments" / "overlays" / "cpu", overlay)  # kustomize takes no absolute path
        (overlay / "kustomization.yaml").write_text(f"resources: [{cpu}]\n")
        run_module("deployments", "render", "--model-dir", str(digits_artifact), "--overlay", str(overlay), env=reports_env)
        built.append(PROJECT_ROOT / reports_env["SLIPWAY_BUILD_DIR"] / "manifests" / f"{owner}-overlay" / "all.yaml")
    assert all(path.is_file() for path in built), built


@pytest.mark.parametrize("command", [[], ["render"], ["deploy"], ["undeploy"]])
def test_every_command_has_help(command):
    result = run_module("deployments", *command, "--help")
    assert "usage: python -m deployments" in result.stdout


def _make(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["make", "--no-print-directory", *args],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
    )


def test_make_pins_versions_through_the_model_store_cli():
    """The glue, as make would run it: the store writes each record whole, render pins to both."""
    result = _make(
        "-n",
        "manifests",
        "OVERLAY=canary",
        "TAG=champion",
        "CANARY_VERSION=4",
        "CANARY_PERCENT=20",
        "AUTOSCALING=rps",
        "NAMESPACE=ml",
        "STORE=shelf",
    )
    assert result.returncode == 0, result.stderr
    commands = result.stdout
    assert "slipway versions show @champion --store shelf --json > build/model-version.json.tmp" in commands
    assert "slipway versions show :4 --store shelf --json > build/model-version-canary.json.tmp" in commands
    render_line = next(line for line in commands.splitlines() if "slipway render" in line)
    for expected in (
        "--overlay canary",
        "--version-record build/model-version.json",
        "--canary-record build/model-version-canary.json",
        "--canary-percent 20",
        "--autoscaling rps",
        "--namespace ml",
    ):
        assert expected in render_line, render_line
    unpinned = _make("-n", "deploy", "DRY_RUN=server")
    options = [word for word in unpinned.stdout.split("slipway deploy", 1)[1].split() if word != "\\"]
    assert options == ["--dry-run", "server"], options  # each other setting is the command's own default (its --help)


def test_make_push_without_a_registry_says_how_to_name_one():
    result = _make("push")
    assert result.returncode == 2
    assert "usage: make push IMAGE_REPO=registry.example.com/team" in result.stderr
