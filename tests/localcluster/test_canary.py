"""`canary` and `shadow` on the local control plane: the real API server and Seldon 1.17.1 operator (its webhook
checks every weight the controller writes), judged from a real Prometheus serving recorded series for each
namespace (tests/deployments/canary/series.py) and a real model store whose tag the promotion moves.

A watch on each SeldonDeployment records every version of it the API server stored: at each one the weights of
the predictors that take traffic sum to 100.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from slipway.paths import PROJECT_ROOT
from tests.conftest import run_module
from tests.deployments.canary.series import (
    CANARY,
    SCRAPE_S,
    STABLE,
    STABLE_POD,
    Behaviour,
    backfill,
    prometheus_tools,  # noqa: F401 (fixture)
    serving,
)
from tests.localcluster.conftest import MODEL, make_namespace

pytestmark = pytest.mark.slow

SHADOW = "shadow"
# Versions 1-3 of digits here are other bytes than the other cluster tests' versions 1-2 under the default root:
# versions are immutable in the store, so these live under a root of their own.
STORAGE_ROOT = "s3://slipway-models/canary-tests"
SLO = "p50_ms: 20\np95_ms: 25\nmax_error_rate: 0.01\ncanary:\n  min_requests: 200\n  max_output_drift: 0.05\n"
UNIFORM = tuple([0.1] * 10)
SKEWED = (0.05, 0.05, 0.05, 0.4, 0.05, 0.1, 0.1, 0.05, 0.1, 0.05)  # class 3 wins far more often: drift 0.3
HEALTHY = Behaviour(rps=2.0)
SLOW = Behaviour(rps=2.0, latency=((0.88, 0.004, 0.3), (0.12, 0.040, 0.1)))
# the same slow tail around a run as fast as the stable's (decoding, queueing, processing): the request is judged
SLOW_AROUND_THE_RUN = Behaviour(rps=2.0, request=((0.88, 0.004, 0.3), (0.12, 0.040, 0.1)))
CLASSIFYING = Behaviour(rps=10.0, classes=UNIFORM)
LAYOUT = {
    "canary-promote": {STABLE: (STABLE_POD, 2), CANARY: (HEALTHY, 1)},
    "canary-rollback": {STABLE: (STABLE_POD, 2), CANARY: (SLOW, 1)},
    "canary-rollback-outside": {STABLE: (STABLE_POD, 2), CANARY: (SLOW_AROUND_THE_RUN, 1)},
    "canary-resume": {STABLE: (STABLE_POD, 2), CANARY: (HEALTHY, 1)},
    "canary-shadow": {STABLE: (CLASSIFYING, 2), SHADOW: (Behaviour(rps=20.0, classes=UNIFORM), 1), CANARY: (HEALTHY, 1)},
    "canary-drift": {STABLE: (CLASSIFYING, 2), SHADOW: (Behaviour(rps=20.0, classes=SKEWED), 1)},
}


# ------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def prometheus_url(prometheus_tools, tmp_path_factory):  # noqa: F811
    """Prometheus with each namespace's series from 20 minutes ago to 40 minutes ahead: the loop judges `now`."""
    end = float(math.floor(time.time() / SCRAPE_S) * SCRAPE_S + 40 * 60)
    recorded = backfill(prometheus_tools["promtool"], tmp_path_factory.mktemp("loop-series"), end, LAYOUT, recorded_s=60 * 60)
    with serving(prometheus_tools["prometheus"], recorded, tmp_path_factory.mktemp("loop-prometheus")) as url:
        yield url


def _copy(artifact: Path, folder: Path, note: str) -> Path:
    """The artifact with a settings field of its own, so that each copy is a version with its own digest."""
    from slipway.artifact import SETTINGS_FILE, write_manifest

    shutil.copytree(artifact, folder)
    settings = json.loads((folder / SETTINGS_FILE).read_text())
    settings["parameters"]["note"] = note
    (folder / SETTINGS_FILE).write_text(json.dumps(settings))
    write_manifest(folder)
    return folder


@pytest.fixture(scope="module")
def store(digits_artifact, tmp_path_factory) -> Path:
    """A model store holding digits v1-v3 (champion: v1) and a model `other` tagged `fraud`."""
    from export.store.store import ModelStore

    folder = tmp_path_factory.mktemp("canary-store")
    path = folder / "store"
    with ModelStore.open(path, create=True) as opened:
        for number in (1, 2, 3):
            opened.publish(
                _copy(digits_artifact, folder / f"digits-{number}", f"v{number}"), MODEL, tag="champion" if number == 1 else None
            )
        opened.publish(_copy(digits_artifact, folder / "other", "other"), "other", tag="fraud")
    return path


def _record(store: Path, ref: str, folder: Path) -> Path:
    from export.store.refs import parse_ref
    from export.store.store import ModelStore

    with ModelStore.open(store) as opened:
        record = opened.get(parse_ref(ref))
    path = folder / f"{ref.replace(':', '-').replace('@', '-')}.json"
    path.write_text(record.model_dump_json())
    return path


def _champion(store: Path) -> str:
    from export.store.refs import parse_ref
    from export.store.store import ModelStore

    with ModelStore.open(store) as opened:
        return opened.get(parse_ref(f"{MODEL}@champion")).version


@pytest.fixture
def namespaces(api):
    """Make namespaces (with the store's Secret) for one test; delete them after it, so that kwok does not keep
    their pods beside the next tests'."""
    from kubernetes import client

    made: list[str] = []

    def make(name: str) -> str:
        made.append(make_namespace(api, name))
        return name

    yield make
    for name in made:
        client.CoreV1Api(api).delete_namespace(name)


@pytest.fixture
def stable(cluster_env, store, tmp_path, namespaces):
    """Deploy digits v1 in a namespace of its own; its name."""

    def deploy(namespace: str) -> str:
        namespaces(namespace)
        run_module(
            "deployments",
            "deploy",
            "--namespace",
            namespace,
            "--wait",
            "120",
            "--storage-root",
            STORAGE_ROOT,
            "--version-record",
            str(_record(store, f"{MODEL}:1", tmp_path)),
            env=cluster_env,
        )
        return namespace

    return deploy


def _sdep(api, namespace: str) -> dict:
    from deployments.rollout.kube_api import dynamic_client

    resource = dynamic_client(api).resources.get(api_version="machinelearning.seldon.io/v1", kind="SeldonDeployment")
    return resource.get(name=MODEL, namespace=namespace).to_dict()


def _unchanged_view(sdep: dict) -> tuple:
    """What a refused command must leave as it was (the operator's status updates aside)."""
    return json.dumps(sdep["spec"], sort_keys=True), json.dumps(sdep["metadata"].get("annotations"), sort_keys=True)


class Watched:
    """Every version of one SeldonDeployment the API server stores, from a watch in a thread of its own."""

    def __init__(self, api, namespace: str) -> None:
        from kubernetes import client, watch

        self.seen: list[dict[str, int]] = []
        self._stopping = False
        self._watch = watch.Watch()
        custom = client.CustomObjectsApi(api)

        def follow() -> None:
            from urllib3.exceptions import ProtocolError

            try:
                for event in self._watch.stream(
                    custom.list_namespaced_custom_object,
                    "machinelearning.seldon.io",
                    "v1",
                    namespace,
                    "seldondeployments",
                    timeout_seconds=900,
                ):
                    predictors = event["object"]["spec"]["predictors"]
                    split = {p["name"]: p.get("traffic") for p in predictors if not p.get("shadow")}
                    if len(split) == 1 and None in split.values():
                        split = dict.fromkeys(split, 100)  # a single predictor without a weight takes it all
                    if not self.seen or self.seen[-1] != split:
                        self.seen.append(split)
            except ProtocolError:
                if not self._stopping:
                    raise

        self._thread = threading.Thread(target=follow, daemon=True)
        self._thread.start()
        time.sleep(0.5)

    def stop(self) -> list[dict[str, int]]:
        time.sleep(1.0)  # the last events reach the watch
        self._stopping = True
        self._watch.stop()
        return self.seen

    def canary_weights(self) -> list[int]:
        return [split[CANARY] for split in self.seen if CANARY in split]


def _assert_weights_always_100(seen: list[dict[str, int]]) -> None:
    assert seen, "the watch saw nothing"
    for split in seen:
        if len(split) > 1:
            assert sum(split.values()) == 100, seen


def _canary(env: dict, namespace: str, *args: str, check: bool = False) -> subprocess.CompletedProcess:
    return run_module("deployments", "canary", "--namespace", namespace, *args, env=env, check=check, timeout=600)


@pytest.fixture
def loop_env(cluster_env, prometheus_url, store, tmp_path) -> dict[str, str]:
    slo = tmp_path / "slo.yaml"
    slo.write_text(SLO)
    return {**cluster_env, "PROMETHEUS_URL": prometheus_url, "SLO_FILE": str(slo), "STORE": str(store)}


def _loop_args(env: dict, ref: str, *, steps: str = "10,50,100", interval: str = "2s") -> list[str]:
    return [
        "--ref",
        ref,
        "--store",
        env["STORE"],
        "--slo",
        env["SLO_FILE"],
        "--steps",
        steps,
        "--interval",
        interval,
        "--window",
        "5m",
        "--drain",
        "1s",
        "--settle",
        "0s",  # kwok's pods have no data path for kube-proxy to program: nothing to wait for
        "--wait",
        "120",
        "--storage-root",
        STORAGE_ROOT,
    ]


def _report(env: dict) -> dict:
    return json.loads((Path(env["SLIPWAY_REPORTS_DIR"]) / "canary.json").read_text())


# ------------------------------------------------------------------ the loop


def test_a_healthy_canary_steps_up_and_is_promoted(api, stable, loop_env, store):
    namespace = stable("canary-promote")
    watched = Watched(api, namespace)
    result = _canary(loop_env, namespace, *_loop_args(loop_env, f"{MODEL}:2"))
    seen = watched.stop()
    assert result.returncode == 0, result.stderr
    _assert_weights_always_100(seen)
    weights = watched.canary_weights()
    # 0: added, until its pods serve; 100: promoting; 0: drained, then removed
    assert weights[:4] == [0, 10, 50, 100] and weights[-1] == 0, seen
    assert seen[-1] == {STABLE: 100}
    sdep = _sdep(api, namespace)
    (predictor,) = sdep["spec"]["predictors"]
    assert predictor["name"] == STABLE and predictor["annotations"]["slipway.io/model-version"] == "2"
    assert sdep["metadata"]["annotations"]["slipway.io/model-version"] == "2"
    assert "slipway.io/canary" not in sdep["metadata"]["annotations"]
    assert json.loads(sdep["metadata"]["annotations"]["slipway.io/canary-last"])["outcome"] == "promoted"
    assert _champion(store) == "2"
    report = _report(loop_env)
    decisions = [event for event in report["events"] if event["kind"] == "decision"]
    assert [event["decision"] for event in decisions] == ["promote-step", "promote-step"]
    assert all(event["canary"]["requests"] >= 200 for event in decisions)
    assert report["outcome"] == "promoted" and any(event["kind"] == "tag" for event in report["events"])
    assert (Path(loop_env["SLIPWAY_REPORTS_DIR"]) / "canary.png").stat().st_size > 10_000
    # the stable predictor's pods serve v2; the canary's Deployment is gone
    from kubernetes import client

    deployments = client.AppsV1Api(api).list_namespaced_deployment(namespace, label_selector=f"seldon-deployment-id={MODEL}")
    assert {d.metadata.labels["slipway.io/predictor"] for d in deployments.items if d.metadata.deletion_timestamp is None} == {
        STABLE
    }


@pytest.mark.parametrize(
    "namespace, run_alone",
    [("canary-rollback", r"canary [3-5]\d\.\d\d ms"), ("canary-rollback-outside", r"canary \d\.\d\d ms")],
    ids=["slow-run", "slow-around-the-run"],
)
def test_a_slow_canary_is_rolled_back_naming_the_slo_line(api, stable, loop_env, store, namespace, run_alone):
    """Slower in ONNX Runtime's run or only around it, the canary's requests are slower: rolled back either way,
    the run's own p95 said beside (about 40 ms, or the stable's few ms)."""
    namespace = stable(namespace)
    champion = _champion(store)
    watched = Watched(api, namespace)
    result = _canary(loop_env, namespace, *_loop_args(loop_env, f"{MODEL}:2"))
    seen = watched.stop()
    assert result.returncode == 1, result.stderr
    assert "rolled back:" in result.stderr and "p95_ms: canary p95" in result.stderr
    assert re.search(r"ONNX Runtime's run alone: " + run_alone, result.stderr), result.stderr
    _assert_weights_always_100(seen)
    assert watched.canary_weights() == [0, 10, 0] and seen[-1] == {STABLE: 100}, seen
    sdep = _sdep(api, namespace)
    assert [p["name"] for p in sdep["spec"]["predictors"]] == [STABLE]
    assert sdep["spec"]["predictors"][0]["annotations"]["slipway.io/model-version"] == "1"
    last = json.loads(sdep["metadata"]["annotations"]["slipway.io/canary-last"])
    assert last["outcome"] == "rolled-back" and "p95_ms" in last["reason"]
    assert _champion(store) == champion  # the tag stays where it was
    assert _report(loop_env)["outcome"] == "rolled-back"


def test_a_killed_run_resumes_where_it_stopped_and_a_second_canary_is_refused_meanwhile(api, stable, loop_env):
    namespace = stable("canary-resume")
    watched = Watched(api, namespace)
    args = _loop_args(loop_env, f"{MODEL}:2", interval="8s")
    first = subprocess.Popen(
        [sys.executable, "-m", "deployments", "canary", "--namespace", namespace, *args],
        cwd=PROJECT_ROOT,
        env={**loop_env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 180
        while True:  # until it has stepped to 50%
            state = (_sdep(api, namespace)["metadata"].get("annotations") or {}).get("slipway.io/canary")
            if state and json.loads(state)["step"] == 1:
                break
            assert first.poll() is None, first.stderr.read()
            assert time.monotonic() < deadline, "the canary never reached its second step"
            time.sleep(0.5)
        before = _unchanged_view(_sdep(api, namespace))
        # while it runs: neither the same canary nor another is started beside it
        for ref, expected in ((f"{MODEL}:2", "is running"), (f"{MODEL}:3", "a canary of v2 is in progress")):
            refused = _canary(loop_env, namespace, *_loop_args(loop_env, ref))
            assert refused.returncode == 2 and expected in refused.stderr, refused.stderr
            assert len([line for line in refused.stderr.splitlines() if line.startswith("error:")]) == 1
        assert _unchanged_view(_sdep(api, namespace)) == before
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait(timeout=30)
    resumed = _canary(loop_env, namespace, *_loop_args(loop_env, f"{MODEL}:2", interval="2s"))
    seen = watched.stop()
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming the canary of v2 at step 2/3 at 50%" in resumed.stderr
    _assert_weights_always_100(seen)
    assert watched.canary_weights()[:4] == [0, 10, 50, 100], seen  # never back to the first step
    report = _report(loop_env)
    assert [event["kind"] for event in report["events"]].count("resume") == 1 and report["outcome"] == "promoted"


def test_a_shadow_then_a_canary_of_the_same_version_judges_its_outputs_first(api, stable, loop_env, store):
    namespace = stable("canary-shadow")
    shadow_args = [
        "--ref",
        f"{MODEL}:2",
        "--store",
        loop_env["STORE"],
        "--namespace",
        namespace,
        "--wait",
        "120",
        "--storage-root",
        STORAGE_ROOT,
    ]
    run_module("deployments", "shadow", *shadow_args, env=loop_env)
    sdep = _sdep(api, namespace)
    shadow = next(p for p in sdep["spec"]["predictors"] if p["name"] == SHADOW)
    assert shadow["shadow"] is True and shadow["annotations"]["slipway.io/model-version"] == "2"
    from kubernetes import client

    services = client.CoreV1Api(api).list_namespaced_service(namespace, label_selector=f"seldon-deployment-id={MODEL}").items
    mappings = " ".join((service.metadata.annotations or {}).get("getambassador.io/config", "") for service in services)
    assert "shadow: true" in mappings  # the operator mirrors traffic to it (Ambassador v1 here, Istio's mirror elsewhere)
    again = run_module("deployments", "shadow", *shadow_args, env=loop_env)
    assert "already runs as the shadow" in again.stderr

    watched = Watched(api, namespace)
    result = _canary(loop_env, namespace, *_loop_args(loop_env, f"{MODEL}:2", steps="50,100"))
    seen = watched.stop()
    assert result.returncode == 0, result.stderr
    assert "output drift 0.0" in result.stderr
    _assert_weights_always_100(seen)
    drift = [event for event in _report(loop_env)["events"] if event["kind"] == "drift"]
    assert [event["kind"] for event in _report(loop_env)["events"]][:3] == ["begin", "drift", "weights"]
    assert drift[0]["decision"] == "holds" and drift[0]["distance"] < 0.01
    final = _sdep(api, namespace)
    assert [p["name"] for p in final["spec"]["predictors"]] == [STABLE]
    assert "slipway.io/shadow" not in final["metadata"]["annotations"]


def test_a_shadow_whose_outputs_drift_never_takes_traffic(api, stable, loop_env, store):
    namespace = stable("canary-drift")
    run_module(
        "deployments",
        "shadow",
        "--ref",
        f"{MODEL}:2",
        "--store",
        loop_env["STORE"],
        "--namespace",
        namespace,
        "--wait",
        "120",
        "--storage-root",
        STORAGE_ROOT,
        env=loop_env,
    )
    champion = _champion(store)
    watched = Watched(api, namespace)
    result = _canary(loop_env, namespace, *_loop_args(loop_env, f"{MODEL}:2"))
    seen = watched.stop()
    assert result.returncode == 1 and "max_output_drift: the shadow's classes moved 0.3" in result.stderr, result.stderr
    assert watched.canary_weights() == [] and seen[-1] == {STABLE: 100}, seen
    final = _sdep(api, namespace)
    assert [p["name"] for p in final["spec"]["predictors"]] == [STABLE]
    assert _champion(store) == champion
    report = _report(loop_env)
    assert report["namespace"] == namespace and report["outcome"] == "rolled-back" and "max_output_drift" in report["reason"]


# ------------------------------------------------------------------ refused: one line, exit 2, nothing changed


def test_bad_input_is_refused_in_one_line_and_changes_nothing(api, stable, namespaces, loop_env, tmp_path):
    from deployments.rollout.kube_api import dynamic_client

    namespace = stable("canary-refused")
    bad_slo = tmp_path / "bad.yaml"
    bad_slo.write_text("p95_ms: 25\nmax_eror_rate: 0.01\n")
    foreign = namespaces("canary-foreign")
    sdep = _sdep(api, namespace)
    resource = dynamic_client(api).resources.get(api_version="machinelearning.seldon.io/v1", kind="SeldonDeployment")
    resource.create(
        body={
            "apiVersion": "machinelearning.seldon.io/v1",
            "kind": "SeldonDeployment",
            "metadata": {"name": MODEL, "namespace": foreign, "annotations": sdep["metadata"]["annotations"]},
            "spec": {
                "protocol": "v2",
                "predictors": [
                    {
                        key: value
                        for key, value in sdep["spec"]["predictors"][0].items()
                        if key in ("name", "graph", "componentSpecs", "annotations", "labels")
                    }
                ],
            },
        },
        namespace=foreign,
    )
    before = {name: _unchanged_view(_sdep(api, name)) for name in (namespace, foreign)}
    cases = [
        ((namespace, "--ref", f"{MODEL}:2", "--slo", str(bad_slo)), "max_eror_rate"),
        ((namespace, "--ref", f"{MODEL}:9"), "has no version 9"),
        ((namespace, "--ref", f"{MODEL}@fraud"), "has no tag 'fraud'"),
        ((namespace, "--ref", "other@fraud", "--deployment", MODEL), "is a version of model 'other'"),
        ((foreign, "--ref", f"{MODEL}:2"), "was not deployed by Slipway"),
        ((namespace, "--ref", f"{MODEL}:1"), "already serves digits v1"),
        ((namespace, "--ref", f"{MODEL}:2", "--steps", "10,50"), "before the last, 100"),
    ]
    for (target, *args), expected in cases:
        common = {
            "--store": loop_env["STORE"],
            "--slo": loop_env["SLO_FILE"],
            "--interval": "2s",
            "--wait": "30",
            "--storage-root": STORAGE_ROOT,
        }
        flags = [item for key, value in common.items() if key not in args for item in (key, value)]
        result = _canary(loop_env, target, *args, *flags)
        assert result.returncode == 2, (args, result.stderr)
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and expected in lines[0], (args, result.stderr)
    assert {name: _unchanged_view(_sdep(api, name)) for name in (namespace, foreign)} == before
    report = Path(loop_env["SLIPWAY_REPORTS_DIR"]) / "canary.json"
    assert not report.exists() or _report(loop_env)["namespace"] != namespace  # no report of a refused run
