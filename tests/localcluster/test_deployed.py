"""The commands on a deployed model (undeploy, alerts, recommend, shadow --remove, canary --abort, canary-judge),
given no name, against the local control plane: they act on the one model Slipway deployed in the namespace, found
by its labels on the real API server, and refuse in one line, changing nothing, where there is none or several.

The models are rendered as deploy renders them and applied with deploy's own server-side apply (the Seldon webhook
answers its dry run); their bytes are never pulled, as kwok's pods run no container.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.conftest import run_module
from tests.deployments.conftest import record
from tests.deployments.traces import MIB, matrix, times, write
from tests.localcluster.conftest import make_namespace

pytestmark = pytest.mark.slow

SEVERAL = ("digits", "mnist")


def _deploy(api, namespace: str, *names: str) -> None:
    from deployments.render.overlay import RenderOptions, render
    from deployments.render.records import DEFAULT_STORAGE_ROOT, ModelVersion
    from deployments.rollout.apply import apply

    for name in names:
        version = ModelVersion.model_validate(record("1", name=name, uri=f"{DEFAULT_STORAGE_ROOT}/{name}/1"))
        apply(api, render("cpu", RenderOptions(model=version, namespace=namespace)).docs, namespace=namespace)


def _served(api, namespace: str) -> list[str]:
    from deployments.rollout.kube_api import dynamic_client

    resource = dynamic_client(api).resources.get(api_version="machinelearning.seldon.io/v1", kind="SeldonDeployment")
    return sorted(item.metadata.name for item in resource.get(namespace=namespace).items)


def _commands(tmp_path, namespace: str) -> dict[str, tuple[str, tuple[str, ...]]]:
    """Each command (by its make target) with everything but the model's name, and the option that would name it."""
    slo = tmp_path / "slo.yaml"
    slo.write_text("p95_ms: 50\n")
    stamps = times(1)
    levels = {"cpu": 0.4, "memory": 200.0 * MIB, "rps": 10.0}
    files = [
        arg
        for kind, level in levels.items()
        for arg in (f"--{kind}", str(write(tmp_path, kind, matrix({"a": (stamps, np.full(stamps.shape, level))}))))
    ]
    where = ("--namespace", namespace)
    return {
        "undeploy": ("--name", ("undeploy", *where)),
        "alerts": ("--model", ("alerts", "--slo", str(slo), "--out", str(tmp_path / "alerts"), *where)),
        "recommend": ("--model", ("recommend", *files, "--capacity-rps", "40", "--out-dir", str(tmp_path / "recommend"), *where)),
        "shadow-off": ("--deployment", ("shadow", "--remove", *where)),
        "canary-abort": ("--deployment", ("canary", "--abort", *where)),
    }


def _run(env: dict, tmp_path, *args: str, check: bool = True):
    return run_module(
        "deployments", *args, env={**env, "SLIPWAY_REPORTS_DIR": str(tmp_path / "reports")}, check=check, timeout=180
    )


def _refused(result) -> str:
    assert result.returncode == 2, result.stderr
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    return line


def test_each_command_acts_on_the_one_model_deployed_there(api, cluster_env, tmp_path):
    namespace = make_namespace(api, "unnamed-one", secret=False)
    _deploy(api, namespace, "mnist")
    commands = {target: args for target, (_, args) in _commands(tmp_path, namespace).items()}

    alerts = _run(cluster_env, tmp_path, *commands["alerts"])
    assert f"recording rules for mnist in namespace {namespace}" in alerts.stderr
    assert (tmp_path / "alerts" / "prometheusrule-mnist-slo.yaml").is_file()
    recommended = _run(cluster_env, tmp_path, *commands["recommend"])
    assert json.loads((tmp_path / "reports" / "recommend.json").read_text())["model"] == "mnist", recommended.stderr
    shadow = _run(cluster_env, tmp_path, *commands["shadow-off"])
    assert f"no shadow on {namespace}/mnist: nothing removed" in shadow.stderr
    abort = _refused(_run(cluster_env, tmp_path, *commands["canary-abort"], check=False))
    assert (
        f"no canary is in progress on SeldonDeployment {namespace}/mnist" in abort
    )  # SeldonDeployment mnist found, read, left alone
    # an engine that serves nothing there finds nothing: the model is not KServe's
    kserve = _run(cluster_env, tmp_path, *commands["alerts"], "--engine", "kserve", check=False)
    assert f"nothing Slipway deployed in namespace {namespace}" in _refused(kserve)

    done = _run(cluster_env, tmp_path, *commands["undeploy"])
    assert "deleting SeldonDeployment/mnist" in done.stderr and "gone after" in done.stderr
    assert _served(api, namespace) == []


def test_none_or_several_models_are_refused_in_one_line_and_nothing_changes(api, cluster_env, tmp_path):
    namespace = make_namespace(api, "unnamed-several", secret=False)
    commands = _commands(tmp_path, namespace)
    for _, command in commands.values():
        line = _refused(_run(cluster_env, tmp_path, *command, check=False))
        assert line == f"error: nothing Slipway deployed in namespace {namespace}; deploy first with `make deploy`", line

    _deploy(api, namespace, *SEVERAL)
    for target, (flag, command) in commands.items():
        line = _refused(_run(cluster_env, tmp_path, *command, check=False))
        assert line == (
            f"error: namespace {namespace} holds models {', '.join(SEVERAL)}: give {flag} (make {target} NAME=...), "
            f"e.g. {flag} {SEVERAL[0]}"
        ), line
    # canary-judge, which only reads Prometheus, has no make target to name
    judge = ("canary-judge", "--slo", str(tmp_path / "slo.yaml"), "--namespace", namespace)
    line = _refused(_run({**cluster_env, "PROMETHEUS_URL": "http://127.0.0.1:9"}, tmp_path, *judge, check=False))
    assert (
        line
        == f"error: namespace {namespace} holds models {', '.join(SEVERAL)}: give --deployment, e.g. --deployment {SEVERAL[0]}"
    )
    assert _served(api, namespace) == sorted(SEVERAL)
    assert not (tmp_path / "alerts").exists() and not (tmp_path / "recommend").exists()
    assert not (tmp_path / "reports").exists()

    named = _run(cluster_env, tmp_path, "undeploy", "--name", "mnist", "--namespace", namespace)  # a name picks one
    assert "deleting SeldonDeployment/mnist" in named.stderr and _served(api, namespace) == ["digits"]
